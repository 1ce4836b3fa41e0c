"""The model families, by name: each package `jaxnat/models/<name>/` is one, whose `FAMILY` (`jaxnat.models.family.
Family`) declares its model, config section and hooks. They are found by listing the packages (`FAMILIES`, without
importing them), so adding one = its package, its config folder and docs page (docs/design.md, "How to add a model
family"), or `register` from outside jaxnat."""

from __future__ import annotations

import functools
import importlib
import pkgutil

DEFAULT = "ar"  # model.name of a config that names none
_registered: dict = {}


@functools.lru_cache(maxsize=None)
def _package_families() -> tuple[str, ...]:
    """The packages under jaxnat/models, by name (listed, not imported: a benchmark's driver names them without
    starting JAX)."""
    return tuple(sorted(info.name for info in pkgutil.iter_modules(__path__) if info.ispkg))


def __getattr__(name: str):
    if name == "FAMILIES":  # jaxnat's own families (`_package_families`)
        return _package_families()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(family) -> None:
    """Adds a family defined outside jaxnat (a `Family`); its name must be new."""
    from jaxnat.errors import ConfigError

    if family.name in _package_families() or family.name in _registered:
        raise ConfigError(f"a model family named {family.name!r} exists already")
    _registered[family.name] = family


def unregister(name: str) -> None:
    _registered.pop(name, None)


def names() -> tuple[str, ...]:
    """Every family's name: jaxnat's own, then the registered ones."""
    return _package_families() + tuple(_registered)


def family_of(name: str):
    """The `Family` named ``name``; a one-line ConfigError for an unknown one."""
    from jaxnat.errors import ConfigError

    if name in _registered:
        return _registered[name]
    if name not in _package_families():
        raise ConfigError(f"unknown model.name {name!r}; available: {', '.join(sorted(names()))}")
    family = getattr(importlib.import_module(f"jaxnat.models.{name}"), "FAMILY", None)
    if family is None or family.name != name:
        raise ConfigError(f"jaxnat/models/{name}/ is a model family's package: its FAMILY must be a Family named "
                          f"{name!r}")
    return family


def lineage(name: str) -> tuple:
    """The families whose config sections a run of ``name`` reads: those it extends, then itself."""
    from jaxnat.errors import ConfigError

    family = family_of(name)
    if family.extends and family.extends not in names():  # family_of's error would blame model.name
        raise ConfigError(f"model family {name!r} extends {family.extends!r}, which is no model family; available: "
                          f"{', '.join(sorted(names()))}")
    return (lineage(family.extends) if family.extends else ()) + (family,)


def build_model(config, src_vocab_size: int, tgt_vocab_size: int, pieces=None):
    """The `ModelSpec` of config.model.name. pieces: `PieceTables` of the target vocabulary (None: every piece
    a word of its own)."""
    from jaxnat.models.spec import PieceTables
    from jaxnat.models.transformer import config_from

    cfg = config_from(config.model, src_vocab_size, tgt_vocab_size)
    return family_of(config.model.name).build(config, cfg, pieces or PieceTables.every_piece_a_word(tgt_vocab_size))


def count_params(params) -> int:
    import jax

    return sum(int(x.size) for x in jax.tree_util.tree_leaves(params))
