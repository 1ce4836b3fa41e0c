"""Outputs that do not repeat themselves: the tokens a decoder may not generate next, given what it generated.

Two rules, both read off a row's tokens so far (``history``: int32[N, T], positions 0 … ``last`` filled, BOS
first), each giving the tokens it bans as a fixed-shape list (−1 = none), so that a search's loop stays one
program:

* `ngram_bans` (fairseq's ``--no-repeat-ngram-size``, Hugging Face's ``no_repeat_ngram_size``, the
  DA-Transformer authors' ``decode_no_repeated_ngram``): a token that would complete an n-gram the row already
  holds, anywhere. With n = 1 no token appears twice.
* `consecutive_bans` (the DA-Transformer authors' ``decode_no_consecutive_repeated_ngram``): the token equal to the
  one before it, and, for each k from 2 to n, the token that would make the last k tokens repeat the k right before
  them ("a b a" + "b").

`bans` is both, as eval.no_repeat_ngram and eval.no_consecutive_repeat ask. `block_repeats` wraps a left-to-right
search's callback (`search.ar_search`) with them: the callback's cache then carries each row's history, which a beam
search reorders with the rest of the cache. A banned token gets log-probability −inf; the others keep the model's,
so an output's score is the model's. tests/test_repeats.py checks both rules against plain-Python transcriptions of
fairseq's and the authors' loops.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxnat.data.vocab import PAD_ID


def ngram_bans(history: jnp.ndarray, last, n: int, xp=jnp) -> jnp.ndarray:
    """int32[N, T − n + 1]: at p, the token history[p + n − 1] if history[p : p + n − 1] equals the row's last
    n − 1 tokens (history[last − n + 2 : last + 1]) and p + n − 1 ≤ last, −1 elsewhere: the tokens that would
    complete a repeat of an n-gram of the row. history: int32[N, T]; last: int32 (scalar or [N]), the position of
    each row's newest token; n ≥ 1 static (n ≤ T)."""
    width = history.shape[1]
    last = xp.broadcast_to(xp.asarray(last, xp.int32), history.shape[:1])[:, None]
    starts = xp.arange(width - n + 1)[None]
    same = starts + n - 1 <= last                                               # the n-gram at p lies in the row
    for j in range(n - 1):  # the n-gram's j-th token against the row's (n − 1 − j)-th last
        key = xp.take_along_axis(history, xp.maximum(last - (n - 2) + j, 0), axis=1)
        same = same & (history[:, j:width - n + 1 + j] == key)
    return xp.where(same, history[:, n - 1:], -1)


def consecutive_bans(history: jnp.ndarray, last, n: int, xp=jnp) -> jnp.ndarray:
    """int32[N, max(n, 1)]: entry k − 1 the token that would make the last k tokens repeat the k before them
    (history[last + 1 − k], if the last k − 1 tokens equal the k − 1 before those and the row holds at least
    2k − 1 tokens), −1 elsewhere; k = 1 (the last token itself) is always banned. history: int32[N, T]; last:
    int32 (scalar or [N]); n static (0 or 1: the last token alone)."""
    last = xp.broadcast_to(xp.asarray(last, xp.int32), history.shape[:1])
    at = lambda pos: xp.take_along_axis(history, xp.maximum(pos, 0)[:, None], axis=1)[:, 0]  # noqa: E731
    bans = []
    for k in range(1, max(n, 1) + 1):
        fits = 2 * k - 1 <= last + 1
        for m in range(1, k):
            fits = fits & (at(last + 1 - m) == at(last + 1 - m - k))
        bans.append(xp.where(fits, at(last + 1 - k), -1))
    return xp.stack(bans, axis=1)


def bans(history: jnp.ndarray, last, no_repeat: int, no_consecutive: int, xp=jnp) -> jnp.ndarray:
    """int32[N, M]: what both rules ban after each row (`ngram_bans` with n = ``no_repeat``, `consecutive_bans` with
    n = ``no_consecutive``; 0: the rule off, both static), −1 = none; M ≥ 1. ``xp``: jax.numpy, or NumPy (a
    search on the host, `dat.dag_search`)."""
    parts = [xp.full(history.shape[:1] + (1,), -1, xp.int32)]
    if no_repeat:
        parts.append(ngram_bans(history, last, min(no_repeat, history.shape[1]), xp))
    if no_consecutive:  # (a repeat of m tokens right after themselves needs 2m − 1 of the row's T before it)
        parts.append(consecutive_bans(history, last, min(no_consecutive, (history.shape[1] + 1) // 2), xp))
    return xp.concatenate(parts, axis=1)


def banned(tokens: jnp.ndarray, bans: jnp.ndarray, xp=jnp) -> jnp.ndarray:
    """bool[N, ...]: whether each of ``tokens`` (int32[N, ...]) is among its row's ``bans`` (int32[N, M], −1 =
    none), by comparing each with each: for a few candidates a row, where `ban_mask` would cost more (``xp``: as
    `bans`'s)."""
    flat = tokens.reshape(tokens.shape[0], -1)
    hit = xp.any(flat[:, :, None] == xp.where(bans < 0, -2, bans)[:, None, :], axis=2)
    return hit.reshape(tokens.shape)


def ban_mask(bans: jnp.ndarray, vocab: int) -> jnp.ndarray:
    """bool[N, V]: each row's ``bans`` (int32[N, M], −1 = none) as a mask over the vocabulary (a scatter: the cost
    is the vocabulary's once, not once per ban and candidate), for many candidates a row."""
    rows = jnp.arange(bans.shape[0])[:, None]
    return jnp.zeros((bans.shape[0], vocab), bool).at[rows, jnp.where(bans < 0, vocab, bans)].set(True, mode="drop")


def without(logp: jnp.ndarray, bans: jnp.ndarray) -> jnp.ndarray:
    """logp float[N, V] with each row's ``bans`` (int32[N, M], −1 = none) at −inf (`ban_mask`)."""
    return jnp.where(ban_mask(bans, logp.shape[1]), -jnp.inf, logp)


def block_repeats(tokens_to_logprobs, cache, width: int, no_repeat: int, no_consecutive: int = 0, free=0):
    """A search callback (and its cache, which then also carries each row's tokens, int32[N, width]) that bans what
    `bans` bans: with ``no_repeat`` n the tokens completing a repeated n-gram (fairseq's SequenceGenerator with
    --no-repeat-ngram-size n), with ``no_consecutive`` k the consecutive repeats of up to k tokens; the history is
    the tokens fed so far, BOS included. Banning starts after a row's first ``free`` (int32[N] or an int) generated
    tokens, those a caller forces (a given prefix), so that a forced token is never banned; they count among the
    n-grams. width (the output rows' capacity), no_repeat and no_consecutive static."""
    rows = jax.tree_util.tree_leaves(cache)[0].shape[0]

    def step(tokens, carry, index):
        inner, history = carry
        logp, inner = tokens_to_logprobs(tokens, inner, index)
        history = history.at[:, index].set(tokens)
        ruled = jnp.where((index >= jnp.asarray(free))[..., None], bans(history, index, no_repeat, no_consecutive), -1)
        return without(logp, ruled), (inner, history)

    return step, (cache, jnp.full((rows, width), PAD_ID, jnp.int32))
