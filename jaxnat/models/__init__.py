"""The models, by name. Adding a model = one model file here with a `build_spec(config, cfg, pieces)` and a
`SUPPORTS`, one line in `MODELS`, one decoding file if it has its own loop, one config folder."""

from __future__ import annotations

import importlib

# model.name -> the module (under jaxnat.models) that builds it: the one list of model names
MODELS = {"ar": "ar", "levt": "levt", "editor": "editor", "cmlm": "cmlm", "nat": "nat", "vecconst": "vecconst"}


def _module(name: str):
    from jaxnat.errors import ConfigError

    if name not in MODELS:
        raise ConfigError(f"unknown model.name {name!r}; available: {', '.join(sorted(MODELS))}")
    return importlib.import_module(f"jaxnat.models.{MODELS[name]}")


def supports(name: str):
    """The `Supports` of a model, without building it (config validation uses it)."""
    return _module(name).SUPPORTS


def extends(name: str) -> tuple[str, tuple[str, ...]]:
    """(the model whose parameters this one keeps under the same names, the config keys only this one has):
    a run of that model can be this one's first training stage (train.init_from). ("", ()) for none."""
    module = _module(name)
    return getattr(module, "EXTENDS", ""), getattr(module, "OWN_KEYS", ())


def build_model(config, src_vocab_size: int, tgt_vocab_size: int, pieces=None):
    """The `ModelSpec` of config.model.name. pieces: `PieceTables` of the target vocabulary (None: every piece
    a word of its own)."""
    from jaxnat.models.spec import PieceTables
    from jaxnat.models.transformer import config_from

    module = _module(config.model.name)
    cfg = config_from(config.model, src_vocab_size, tgt_vocab_size)
    return module.build_spec(config, cfg, pieces or PieceTables.every_piece_a_word(tgt_vocab_size))


def count_params(params) -> int:
    import jax

    return sum(int(x.size) for x in jax.tree_util.tree_leaves(params))
