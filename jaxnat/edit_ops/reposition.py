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
