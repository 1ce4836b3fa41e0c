"""Reposition: every output slot points at an input token (EDITOR's first edit), then compaction."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxnat.edit_ops.compaction import Sides, compact, lengths, positions


class Repositioned(NamedTuple):
    tokens: jax.Array     # int32[B, L]
    sides: Sides          # side arrays, gathered with their tokens
    keep: jax.Array       # bool[B, L] over the *slots*: which slots survived
    num_deleted: jax.Array  # int32[B], slots that became empty (index 0)
    num_moved: jax.Array    # int32[B], surviving slots that hold a token other than their own


def reposition(tokens: jax.Array, index: jax.Array, pad_id: int, sides: Sides = None) -> Repositioned:
    """Slot i receives input token ``index[:, i]``; index 0 deletes the slot; then compaction.

    tokens: int32[B, L] right-padded ``[BOS … EOS]`` rows (length n); index: int32[B, L].
    BOS stays in slot 0 and EOS in slot n-1 whatever their index says. An interior slot survives only if it
    points at an interior token (1 ≤ index < n-1): pointing at BOS, EOS or padding deletes it, so an output
    never has a second BOS/EOS. The same token may be copied into several slots; a token nobody points at
    disappears. Slots at or beyond n are padding.
    """
    n = lengths(tokens, pad_id)[:, None]
    pos = positions(tokens)
    last = n - 1
    index = jnp.where(pos == 0, 0, jnp.where(pos == last, last, index))
    interior = (pos > 0) & (pos < last)
    keep = (pos < n) & ((pos == 0) | (pos == last) | (interior & (index >= 1) & (index < last)))
    src = jnp.clip(index, 0, tokens.shape[1] - 1)
    gathered = jnp.take_along_axis(tokens, src, axis=1)
    sides = jax.tree.map(lambda s: jnp.take_along_axis(s, src.reshape(src.shape + (1,) * (s.ndim - 2)),
                                                       axis=1), sides)
    out, sides = compact(gathered, keep, pad_id, sides)
    num_deleted = jnp.sum((pos < n) & ~keep, axis=1, dtype=jnp.int32)
    num_moved = jnp.sum(keep & (index != pos), axis=1, dtype=jnp.int32)
    return Repositioned(out, sides, keep, num_deleted, num_moved)


def reposition_phrases(tokens: jax.Array, index: jax.Array, anchor: jax.Array, phrase: jax.Array, pad_id: int,
                       sides: Sides = None) -> Repositioned:
    """`reposition` that keeps hard-constraint phrases whole: a phrase may move, but only as one block, and it
    is never dropped, split or duplicated, whatever ``index`` says.

    tokens, index: as in `reposition`; phrase: int32[B, L], the phrase id of each token (0 = free), every
    phrase contiguous; anchor: int32[B, L], read at each phrase's first token: the output slot the phrase
    moves to (clipped to 1 … n-1).

    Free tokens follow ``index`` as in `reposition`, except that an interior slot only takes a free token: a
    slot pointing at a phrase token, and a phrase's own slots, emit nothing (so no phrase token is copied, and
    the row never grows). Each phrase is then placed, in order, just before whatever slot ``anchor`` names
    emits; phrases sharing an anchor keep their input order. The output is a stable sort of the emitted
    elements by the key (slot, phrases first, input position), compacted.
    Returns a `Repositioned` whose ``keep`` marks the emitted *input positions* (free slots that emit a token,
    phrase tokens, BOS, EOS). Counts: num_deleted = free slots that emit nothing; num_moved = free slots
    holding a token other than their own plus the tokens of phrases that moved.
    """
    length = tokens.shape[1]
    n = lengths(tokens, pad_id)[:, None]
    pos = positions(tokens)
    last = n - 1
    interior = (pos > 0) & (pos < last)
    in_phrase = (phrase > 0) & interior
    src = jnp.clip(index, 0, length - 1)
    free_target = (index >= 1) & (index < last) & (jnp.take_along_axis(phrase, src, axis=1) == 0)
    emits_free = interior & ~in_phrase & free_target

    starts = in_phrase & (phrase != jnp.pad(phrase[:, :-1], ((0, 0), (1, 0))))
    first = jax.lax.cummax(jnp.where(starts, pos, 0), axis=1)          # each phrase token's phrase start
    slot = jnp.clip(jnp.take_along_axis(anchor, first, axis=1), 1, jnp.maximum(last, 1))
    key = jnp.where(in_phrase, 2 * slot * length + pos, (2 * pos + 1) * length + pos)
    key = jnp.where(pos == 0, -1, key)
    key = jnp.where((pos == last) & (pos > 0), (2 * length + 2) * length, key)
    emitted = (pos < n) & ((pos == 0) | (pos == last) | in_phrase | emits_free)
    key = jnp.where(emitted, key, (2 * length + 3) * length)
    source = jnp.where(emits_free, src, pos)
    order = jnp.argsort(key, axis=1, stable=True)
    picked = jnp.take_along_axis(source, order, axis=1)
    alive = pos < jnp.sum(emitted, axis=1, keepdims=True)
    out = jnp.where(alive, jnp.take_along_axis(tokens, picked, axis=1), pad_id)
    sides = jax.tree.map(
        lambda s: jnp.where(alive.reshape(alive.shape + (1,) * (s.ndim - 2)),
                            jnp.take_along_axis(s, picked.reshape(picked.shape + (1,) * (s.ndim - 2)), axis=1),
                            jnp.zeros((), s.dtype)),  # each side keeps its dtype (a bool side stays bool)
        sides)
    num_deleted = jnp.sum(interior & ~in_phrase & ~emits_free, axis=1, dtype=jnp.int32)
    num_moved = jnp.sum((emits_free & (src != pos)) | (in_phrase & (slot != first)), axis=1, dtype=jnp.int32)
    return Repositioned(out, sides, emitted, num_deleted, num_moved)
