"""Model registry: `build_model(config, src_vocab, tgt_vocab)` returns a `ModelSpec`, the small interface the
trainer, evaluator and translator rely on, so that adding a model means adding one file and one entry here.
"""

from __future__ import annotations

import dataclasses
import functools
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
    capacity(src_len) -> output length (BOS/EOS included) for sources padded to src_len; None: the AR rule
    refines: generate also takes an initial hypothesis (canvas=int32[B, T], phrase=int32[B, T], trace=bool,
      word_start=bool[V]: the target pieces that begin a word, to keep hard constraints whole words)
    """

    name: str
    cfg: TransformerConfig
    module: Any
    init: Callable
    loss: Callable
    generate: Callable
    capacity: Callable | None = None
    refines: bool = False


def _ar_spec(config, cfg: TransformerConfig, word_start=None) -> ModelSpec:
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


def _refining_spec(config, cfg: TransformerConfig, name: str, module, loss, first_head: str, first_edit,
                   count_names: tuple[str, ...]) -> ModelSpec:
    """The ModelSpec of an edit-based model: `refine` driven by its first edit and the shared insertion heads."""
    from jaxnat.decoding.refine import Heads, RefineOptions, initial_hypotheses, length_cap, refine
    from jaxnat.models.insertion import empty_canvas, forbid_reserved
    from jaxnat.models.transformer import token_mask

    e = config.eval
    options = RefineOptions(e.max_iter, e.placeholder_penalty, e.length_cap_min, e.length_cap_ratio,
                            e.run_all_iterations)

    def init(rng, batch):
        return module.init(rng, batch["src"][:1], batch["tgt"][:1])

    def generate(params, src, beam_size=1, max_out=None, canvas=None, phrase=None, trace=False, word_start=None):
        del beam_size  # greedy edits: the papers find no gain from search
        memory, src_mask = module.apply(params, src, method="encode"), token_mask(src)

        def head(method):
            return lambda tokens: module.apply(params, tokens, memory, src_mask, method=method)

        heads = Heads(head(first_head), head("placeholder_logits"),
                      lambda tokens: forbid_reserved(head("token_logits")(tokens)))
        if canvas is None:
            canvas = empty_canvas(jnp.zeros((src.shape[0], max_out or capacity(src.shape[1])), jnp.int32))
        cap = length_cap(src, canvas.shape[1], options)
        return refine(heads, first_edit, initial_hypotheses(canvas, phrase), cap, options._replace(trace=trace),
                      count_names, word_start)

    def capacity(src_len: int) -> int:
        return int(min(cfg.max_len, max(e.length_cap_min, int(e.length_cap_ratio * src_len))))

    return ModelSpec(name, cfg, module, init, loss, generate, capacity, refines=True)


def _levt_spec(config, cfg: TransformerConfig, word_start) -> ModelSpec:
    from jaxnat.config import early_exit
    from jaxnat.decoding.refine import levt_delete
    from jaxnat.models.levt import LevenshteinTransformer, levt_loss

    m, t = config.model, config.train
    module = LevenshteinTransformer(cfg, early_exit(m), m.separate_deletion, m.separate_placeholder)

    def loss(params, batch, rng, train=True):
        return levt_loss(module, params, batch, rng, label_smoothing=t.label_smoothing,
                         placeholder_smoothing=t.placeholder_smoothing, alpha=t.roll_in_alpha,
                         beta=t.roll_in_beta, sampling_for_deletion=t.sampling_for_deletion, train=train)

    return _refining_spec(config, cfg, "levt", module, loss, "deletion_logits", levt_delete, ("deletions",))


def _editor_spec(config, cfg: TransformerConfig, word_start) -> ModelSpec:
    from jaxnat.config import early_exit
    from jaxnat.decoding.refine import editor_reposition
    from jaxnat.models.editor import Editor, editor_loss

    m, t = config.model, config.train
    module = Editor(cfg, early_exit(m), m.separate_reposition, m.separate_placeholder, m.reposition_deletion)
    starts = None if word_start is None else jnp.asarray(word_start, bool)

    def loss(params, batch, rng, train=True):
        return editor_loss(module, params, batch, rng, word_start=starts, label_smoothing=t.label_smoothing,
                           placeholder_smoothing=t.placeholder_smoothing, dual_path=t.dual_path,
                           alpha=t.roll_in_alpha, beta=t.roll_in_beta, sampling=t.roll_in_sampling, train=train)

    first_edit = functools.partial(editor_reposition, deletion_reward=config.eval.deletion_reward)
    return _refining_spec(config, cfg, "editor", module, loss, "reposition_logits", first_edit,
                          ("repositions", "deletions"))


_BUILDERS = {"ar": _ar_spec, "levt": _levt_spec, "editor": _editor_spec}


def build_model(config, src_vocab_size: int, tgt_vocab_size: int, tgt_word_start=None) -> ModelSpec:
    """tgt_word_start: bool[V] (numpy), the target pieces that begin a word; EDITOR's training noise shuffles
    whole words with it (None: every piece counts as a word)."""
    name = config.model.name
    if name not in _BUILDERS:
        raise ConfigError(f"unknown model.name {name!r}; available: {', '.join(sorted(_BUILDERS))}")
    return _BUILDERS[name](config, config_from(config.model, src_vocab_size, tgt_vocab_size), tgt_word_start)


def count_params(params) -> int:
    return sum(int(jnp.size(x)) for x in jax.tree_util.tree_leaves(params))
