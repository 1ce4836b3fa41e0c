"""Deletion: drop the tokens marked for deletion and compact the rest (LevT's first edit)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxnat.edit_ops.compaction import Sides, compact, lengths, positions


class Deleted(NamedTuple):
    tokens: jax.Array     # int32[B, L], the surviving tokens, compacted
    sides: Sides          # side arrays, moved with their tokens
    keep: jax.Array       # bool[B, L] over the *input*: which tokens survived
    num_deleted: jax.Array  # int32[B]


def boundary_mask(tokens: jax.Array, pad_id: int) -> jax.Array:
    """bool[B, L]: True at BOS (position 0) and EOS (the last non-pad position) of every row."""
    pos = positions(tokens)
    n = lengths(tokens, pad_id)[:, None]
    return (pos == 0) | (pos == n - 1)


def delete_tokens(tokens: jax.Array, delete: jax.Array, pad_id: int, protect: jax.Array | None = None,
                  sides: Sides = None) -> Deleted:
    """Remove ``delete``-marked tokens; BOS, EOS and ``protect``-marked tokens are never removed.

    tokens: int32[B, L] right-padded ``[BOS … EOS]`` rows; delete: bool[B, L] (or 0/1 ints);
    protect: bool[B, L] or None (e.g. hard-constraint tokens). Shape is preserved.
    """
    valid = tokens != pad_id
    protected = boundary_mask(tokens, pad_id)
    if protect is not None:
        protected = protected | protect.astype(bool)
    keep = valid & ~(delete.astype(bool) & ~protected)
    out, sides = compact(tokens, keep, pad_id, sides)
    return Deleted(out, sides, keep, jnp.sum(valid & ~keep, axis=1, dtype=jnp.int32))
