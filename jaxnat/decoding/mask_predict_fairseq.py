"""fairseq's decoding of its length-predicting models (`eval.search_rules=fairseq`), as one jit'd program, so that
an imported fairseq CMLM or NAT gives fairseq's outputs token for token (docs/import.md).

fairseq 0.12's `IterativeRefinementGenerator` with `cmlm_transformer` / `nonautoregressive_transformer`, where it
differs from jaxnat's mask-predict (`jaxnat.decoding.mask_predict`):

* **length candidates**: the argmax length n* (at least 0), then n* + k − ⌊ℓ/2⌋ for k < ℓ, each at least 0
  (`candidates`): a candidate may be the empty sentence, and there is no cap but the canvas;
* **passes**: pass 0 predicts the masked positions (NAT: every position, BOS and EOS included: a fairseq NAT is
  trained to predict them); before pass t = 1 … T−1 the ``⌊(m − 2) · (1 − t/T)⌋`` lowest-scoring positions are
  masked again, m the canvas's non-PAD positions, the product in float32 as PyTorch computes it (so it may be 0,
  and 10 · 0.7 may be 6); a re-masked position's score is 0; the argmax runs over the whole vocabulary, and a
  predicted ``<unk>`` — the symbol fairseq masks with — is masked again at the next pass;
* **stopping** (``stop_early``, fairseq's default): a candidate stops at the first pass whose output, after the
  re-masking, equals its input, and is kept as it then is, masks included (written as UNK);
* **the pick**: each candidate's score is the mean over its m non-PAD positions (BOS and EOS at 0, masks at 0),
  and the best-scoring candidate (the first of equals) is the translation.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jax import lax

from jaxnat.argmax import argmax
from jaxnat.data.vocab import MASK_ID, PAD_ID, UNK_ID
from jaxnat.decoding.mask_predict import LENGTH_OFFSET, Options, canvases, repeats_of
from jaxnat.edit_ops.compaction import compact


def candidates(length_logits: jax.Array, src: jax.Array, capacity: int, options: Options) -> jax.Array:
    """int32[B, ℓ] candidate lengths (real tokens, 0 … capacity − 2): fairseq's argmax class as a length, at
    least 0, then the ℓ lengths around it (``regenerate_length_beam``), each at least 0. length_logits:
    float32[B, 256]; src: int32[B, S] [BOS … EOS] rows."""
    cls = jnp.argmax(length_logits, axis=-1)
    if options.length_offset:
        n = cls + jnp.sum(src != PAD_ID, axis=1) - 2 - LENGTH_OFFSET
    else:
        n = cls - 2 * options.length_with_ends
    beam = options.length_beam
    n = jnp.maximum(n, 0)[:, None] + jnp.arange(beam)[None, :] - beam // 2
    return jnp.clip(n, 0, capacity - 2).astype(jnp.int32)


def remask_fractions(iterations: int) -> jax.Array:
    """float32[T]: ``1 − t/T`` for t = 0 … T−1, computed in double precision as fairseq's Python does, then used
    in float32 as PyTorch multiplies a float32 tensor by a Python float."""
    return jnp.asarray([1.0 - t / iterations for t in range(iterations)], jnp.float32)


def lowest_positions(scores: jax.Array, count: jax.Array) -> jax.Array:
    """bool[R, L]: the ``count`` (int32[R]) positions of lowest score in each row, PAD, BOS and EOS (score 0)
    included as fairseq's sort includes them (ties: leftmost first). scores: float32[R, L]."""
    rank = jnp.argsort(jnp.argsort(scores, axis=1, stable=True), axis=1)
    return rank < count[:, None]


def decode(token_logits: Callable, lengths: jax.Array, capacity: int, options: Options,
           ends_predicted: bool = False) -> dict:
    """fairseq's iterative refinement of a batch's length candidates.

    token_logits(tokens int32[R, L], rows_of int32[R]) → float32[R, L, V] logits of canvases (MASK where to
    predict); lengths: int32[B, ℓ] (`candidates`); ``options``: iterations (T), stop_early, dedup;
    ends_predicted: every non-PAD position is predicted (fairseq's NAT) rather than the masked ones (CMLM).

    Returns per sentence, of its best candidate: ``tokens`` int32[B, capacity] (its non-PAD positions, in order),
    ``score`` float32[B] (mean over them), ``length`` int32[B] (real tokens of the canvas), ``iterations`` int32[B]
    (passes run), ``repeats`` int32[B], ``token_logp`` float32[B, capacity] and ``token_scored`` bool[B, capacity]
    (the positions the model predicted, with their log-probabilities).
    """
    b, beam = lengths.shape
    steps = options.iterations
    n = lengths.reshape(b * beam)
    rows_of = jnp.repeat(jnp.arange(b), beam)
    canvas = canvases(n, capacity)
    fractions = remask_fractions(steps)
    predictable = canvas != PAD_ID if ends_predicted else canvas == MASK_ID  # positions the model ever writes

    def body(s):
        t, tokens, scores, done = s["t"], s["tokens"], s["scores"], s["done"]
        masked = tokens != PAD_ID if ends_predicted else tokens == MASK_ID
        logits = token_logits(tokens, rows_of).astype(jnp.float32)
        best = argmax(logits).astype(tokens.dtype)
        best_logp = jnp.max(logits, axis=-1) - jax.nn.logsumexp(logits, axis=-1)
        new = jnp.where(masked, jnp.where(best == UNK_ID, MASK_ID, best), tokens)  # fairseq's <unk> is its mask
        new_scores = jnp.where(masked, best_logp, scores)
        if steps > 1:  # static
            m = jnp.sum(new != PAD_ID, axis=1) - 2
            fraction = jnp.where(t + 1 < steps, fractions[jnp.minimum(t + 1, steps - 1)], 0.0)
            count = jnp.floor(m.astype(jnp.float32) * fraction).astype(jnp.int32)
            again = lowest_positions(new_scores, jnp.maximum(count, 0))
            new, new_scores = jnp.where(again, MASK_ID, new), jnp.where(again, 0.0, new_scores)
        stop = (t + 1 >= steps) | (options.stop_early & jnp.all(new == tokens, axis=1))
        keep = done[:, None]
        return {"t": t + 1, "tokens": jnp.where(keep, tokens, new), "scores": jnp.where(keep, scores, new_scores),
                "done": done | stop, "iterations": s["iterations"] + ~done}

    init = {"t": jnp.zeros((), jnp.int32), "tokens": canvas, "scores": jnp.zeros(canvas.shape, jnp.float32),
            "done": jnp.zeros((b * beam,), bool), "iterations": jnp.zeros((b * beam,), jnp.int32)}
    final = lax.while_loop(lambda s: ~jnp.all(s["done"]), body, init)

    tokens = jnp.where(final["tokens"] == MASK_ID, UNK_ID, final["tokens"])
    kept = tokens != PAD_ID
    score = jnp.sum(jnp.where(kept, final["scores"], 0.0), axis=1) / jnp.maximum(jnp.sum(kept, axis=1), 1)
    scored = predictable & (final["tokens"] != MASK_ID)
    tokens, (token_logp, scored) = compact(tokens, kept, PAD_ID, (jnp.where(scored, final["scores"], 0.0), scored))
    repeat = repeats_of(tokens)
    if options.dedup:
        tokens, (token_logp, scored) = compact(tokens, ~repeat, PAD_ID, (token_logp, scored))
    pick = jnp.arange(b) * beam + jnp.argmax(score.reshape(b, beam), axis=1)
    return {"tokens": tokens[pick], "score": score[pick], "length": n[pick], "iterations": final["iterations"][pick],
            "repeats": jnp.sum(repeat, axis=1, dtype=jnp.int32)[pick], "token_logp": token_logp[pick],
            "token_scored": scored[pick]}
