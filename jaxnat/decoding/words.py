"""Hard constraints stay whole words in the decoders that write many positions at once (mask-predict, the edit
models' fills).

The rule (`jaxnat.models.spec.word_glue`): after a hard phrase's last piece its word stays open over any
trailing pieces (punctuation) until a piece starts a new word, and no continuing piece may stand while it is
open: "Zaun." and 'Zaun",' keep the word "Zaun", "Zaun.n" does not. A left-to-right search carries that as a
state (`jaxnat.decoding.constrained`). A parallel pass cannot: the position right after a phrase may take "." in
the same pass as the next one takes "n". So a pass is repaired after the fact: a continuing piece it wrote into
an open word is chosen again among the pieces that continue no word (``NO_CONTINUING``); a continuing piece it
did not write (an earlier pass's) is closed off by choosing the last trailing piece this pass wrote before it
again among the pieces that start a word (``WORD_START``). Each repair only narrows what a position may take,
so at most 2 · L rounds run; a pass that glues nothing, nearly every pass, costs one check of its tokens.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jax import lax

NONE, NO_CONTINUING, WORD_START = 0, 1, 2  # what a position may take: anything; no continuing piece; a word start


def last_pieces(phrase: jax.Array) -> jax.Array:
    """bool[R, L]: each hard phrase's last piece, from the phrase number of every position (int32[R, L], 0 = no
    phrase; `refine.Hypotheses.phrase`)."""
    return (phrase > 0) & (phrase != jnp.pad(phrase[:, 1:], ((0, 0), (0, 1))))


def restrict(logits: jax.Array, level: jax.Array, continues: jax.Array, trails: jax.Array) -> jax.Array:
    """logits: float32[R, L, V] with what level (int32[R, L]) forbids at -inf: from ``NO_CONTINUING`` on the
    continuing pieces (continues: bool[V]), at ``WORD_START`` the trailing ones too (trails: bool[V])."""
    forbid = ((level[..., None] >= NO_CONTINUING) & continues) | ((level[..., None] >= WORD_START) & trails)
    return jnp.where(forbid, -jnp.inf, logits)


def open_words(passes: jax.Array, last: jax.Array) -> tuple:
    """Where a hard phrase's word is still open. passes: bool[R, L] the free pieces a word stays open over
    (trailing pieces); last: bool[R, L] each phrase's last piece. Returns (open bool[R, L]: every position
    between the position and a phrase's last piece passes; anchor int32[R, L]: the nearest position before it
    that does not pass, -1 if none)."""
    pos = jnp.arange(passes.shape[1])
    anchor = jnp.pad(lax.cummax(jnp.where(passes, -1, pos), axis=1)[:, :-1], ((0, 0), (1, 0)), constant_values=-1)
    return (anchor >= 0) & jnp.take_along_axis(last, jnp.maximum(anchor, 0), axis=1), anchor


def glued(tokens: jax.Array, in_phrase: jax.Array, last: jax.Array, continues: jax.Array,
          trails: jax.Array) -> tuple:
    """tokens: int32[R, L]; in_phrase: bool[R, L] the hard phrases' pieces; last: bool[R, L] their last pieces;
    continues, trails: bool[V]. Returns (bool[R, L]: the free continuing pieces that stand in an open word,
    anchor: `open_words`')."""
    is_open, anchor = open_words(trails[tokens] & ~in_phrase, last)
    return is_open & continues[tokens] & ~in_phrase, anchor


def needed(tokens: jax.Array, written: jax.Array, in_phrase: jax.Array, last: jax.Array, continues: jax.Array,
           trails: jax.Array) -> jax.Array:
    """int32[R, L]: the levels a pass that wrote ``written`` (bool[R, L]) into tokens (int32[R, L]) needs so that
    it glues nothing onto a phrase's word (module docstring)."""
    bad, anchor = glued(tokens, in_phrase, last, continues, trails)
    pos = jnp.arange(tokens.shape[1])
    level = jnp.where(bad & written, NO_CONTINUING, NONE)
    # an earlier pass's piece: close the word at the last piece this pass wrote into the open run before it
    wrote = jnp.pad(lax.cummax(jnp.where(written, pos, -1), axis=1)[:, :-1], ((0, 0), (1, 0)), constant_values=-1)
    closable = bad & ~written & (wrote > anchor)
    rows = jnp.arange(tokens.shape[0])[:, None]
    return level.at[rows, jnp.maximum(wrote, 0)].max(jnp.where(closable, WORD_START, NONE))


def keep_whole(choose: Callable, first, written: jax.Array, in_phrase: jax.Array, last: jax.Array,
               continues: jax.Array | None, trails: jax.Array | None):
    """A parallel pass repaired until it glues nothing onto a hard phrase's word. choose(level int32[R, L]) →
    (tokens int32[R, L], …): the pass's choice at the ``written`` positions (bool[R, L]) under ``restrict``'s
    levels, the rest as they were; first: choose's result with no level (the pass as it ran). in_phrase, last:
    bool[R, L] (`open_words`); continues, trails: bool[V] or None (None: no trailing run can glue, so the pass
    stands). Returns choose's result at the levels needed."""
    if continues is None or trails is None:
        return first

    def need(level, out):
        return jnp.maximum(level, needed(out[0], written, in_phrase, last, continues, trails))

    def body(state):
        _, _, level = state
        out = choose(level)
        return level, out, need(level, out)

    none = jnp.zeros(written.shape, jnp.int32)
    _, out, _ = lax.while_loop(lambda s: jnp.any(s[2] > s[0]), body, (none, first, need(none, first)))
    return out
