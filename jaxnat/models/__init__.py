"""The model families, by name: each a package `jaxnat/models/<name>/` whose `FAMILY` (`jaxnat.models.family.
Family`) declares its model, config section and hooks. Adding one = its package, one name in `FAMILIES` (or
`register` from outside jaxnat), its config folder and docs page (docs/design.md, "How to add a model family")."""

from __future__ import annotations

import importlib

# the packages under jaxnat/models that are model families, in the order the docs list them
FAMILIES = ("ar", "levt", "editor", "cmlm", "nat", "vecconst")
_registered: dict = {}


def register(family) -> None:
    """Adds a family defined outside jaxnat (a `Family`); its name must be new."""
    from jaxnat.errors import ConfigError

    if family.name in FAMILIES or family.name in _registered:
        raise ConfigError(f"a model family named {family.name!r} exists already")
    _registered[family.name] = family


def unregister(name: str) -> None:
    _registered.pop(name, None)


def names() -> tuple[str, ...]:
    """Every family's name: jaxnat's own, then the registered ones."""
    return FAMILIES + tuple(_registered)


def family_of(name: str):
    """The `Family` named ``name``; a one-line ConfigError for an unknown one."""
    from jaxnat.errors import ConfigError

    if name in _registered:
        return _registered[name]
    if name not in FAMILIES:
        raise ConfigError(f"unknown model.name {name!r}; available: {', '.join(sorted(names()))}")
    return importlib.import_module(f"jaxnat.models.{name}").FAMILY


def lineage(name: str) -> tuple:
    """The families whose config sections a run of ``name`` reads: those it extends, then itself."""
    family = family_of(name)
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
