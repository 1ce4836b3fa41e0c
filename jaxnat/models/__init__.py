"""Model registry: `build_model(config, src_vocab, tgt_vocab)` returns a `ModelSpec`, the small interface the
trainer, evaluator and translator rely on, so that adding a model means adding one file and one entry here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp

from jaxnat.errors import ConfigError
from jaxnat.models.transformer import TransformerConfig, config_from


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """What the training loop and the decoders need to know about one model.

    init(rng, batch) -> params
    loss(params, batch, rng, train) -> (loss_sum: float32[], aux: {'nll': float32[], 'count': float32[], ...})
    generate(params, src: int32[B, S], **options) -> {'tokens': int32[B, T], 'score': float32[B], ...}
    """

    name: str
    cfg: TransformerConfig
    module: Any
    init: Callable
    loss: Callable
    generate: Callable


def _ar_spec(config, cfg: TransformerConfig) -> ModelSpec:
    from jaxnat.decoding.search import ar_search
    from jaxnat.models.ar import ARTransformer, ar_loss

    module = ARTransformer(cfg)

    def init(rng, batch):
        return module.init(rng, batch["src"][:1], batch["tgt"][:1, :-1])

    def generate(params, src, beam_size=1, max_out=None):
        e = config.eval
        max_out = max_out or cfg.max_len
        return ar_search(module, params, src, beam_size=beam_size, length_penalty=e.length_penalty,
                         max_len_a=e.max_len_a, max_len_b=e.max_len_b, max_out=max_out)

    def loss(params, batch, rng, train=True):
        return ar_loss(module, params, batch, rng, config.train.label_smoothing, train)

    return ModelSpec("ar", cfg, module, init, loss, generate)


_BUILDERS = {"ar": _ar_spec}


def build_model(config, src_vocab_size: int, tgt_vocab_size: int) -> ModelSpec:
    name = config.model.name
    if name not in _BUILDERS:
        raise ConfigError(f"unknown model.name {name!r}; available: {', '.join(sorted(_BUILDERS))}")
    return _BUILDERS[name](config, config_from(config.model, src_vocab_size, tgt_vocab_size))


def count_params(params) -> int:
    return sum(int(jnp.size(x)) for x in jax.tree_util.tree_leaves(params))
