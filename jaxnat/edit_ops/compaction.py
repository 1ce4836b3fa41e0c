"""Fixed-shape compaction: the one primitive every edit operation ends with.

All arrays are right-padded ``[B, L]`` rows. Compaction moves the kept entries of each row to the front, in
order, and pads the rest, without changing the shape. It is a scatter to ``cumsum(keep) - 1``, so it runs
inside ``jit``/``vmap``/``lax.while_loop`` with no host synchronisation.

*Side arrays* are any pytree of arrays whose leading two dimensions are ``[B, L]`` (token scores, constraint
marks, word-start flags...). They travel with their tokens; positions that become padding hold 0 / False.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

Sides = Any  # a pytree of [B, L, ...] arrays, or None


def lengths(tokens: jax.Array, pad_id: int) -> jax.Array:
    """tokens: int32[B, L] → int32[B], the number of non-pad tokens (rows are right-padded)."""
    return jnp.sum(tokens != pad_id, axis=1, dtype=jnp.int32)


def positions(tokens: jax.Array) -> jax.Array:
    """int32[1, L]: column indices, broadcastable against ``tokens``."""
    return jnp.arange(tokens.shape[1], dtype=jnp.int32)[None, :]


def scatter_rows(values: jax.Array, target: jax.Array, fill) -> jax.Array:
    """out[b, target[b, i]] = values[b, i]; targets ≥ L are dropped; untouched cells hold ``fill``.

    values: [B, L, ...]; target: int32[B, L] (distinct per row among kept entries).
    """
    rows = jnp.arange(values.shape[0])[:, None]
    out = jnp.full_like(values, fill)
    return out.at[rows, target].set(values, mode="drop", unique_indices=True)


def compact(tokens: jax.Array, keep: jax.Array, pad_id: int, sides: Sides = None):
    """Keep the marked tokens of each row, in order, at the front; pad the rest.

    tokens: int32[B, L]; keep: bool[B, L] (ignored on padding). Returns ``(tokens, sides)``.
    """
    keep = keep & (tokens != pad_id)
    target = jnp.where(keep, jnp.cumsum(keep, axis=1, dtype=jnp.int32) - 1, tokens.shape[1])
    out = scatter_rows(tokens, target, pad_id)
    sides = jax.tree.map(lambda s: scatter_rows(s, target, 0), sides)
    return out, sides


def carry_slots(counts: jax.Array, keep: jax.Array, new_length: jax.Array) -> jax.Array:
    """Re-index per-slot insertion counts after a compaction.

    counts: int32[B, L-1], ``counts[:, k]`` belongs to the slot between tokens k and k+1, i.e. to the slot
    *closed* by token k+1. keep: bool[B, L], the tokens that survived; new_length: int32[B].
    Returns int32[B, L-1] over the surviving sequence: the slot closed by a surviving token collects its own
    count plus the counts of the slots closed by the deleted tokens just before it (so insertions around
    deleted tokens are not lost). This is how the oracles' insertion labels are applied after a deletion or
    reposition.
    """
    b, l1 = counts.shape
    closed_before = jnp.concatenate(
        [jnp.zeros((b, 1), counts.dtype), jnp.cumsum(counts, axis=1)], axis=1)          # [B, L]
    target = jnp.where(keep, jnp.cumsum(keep, axis=1, dtype=jnp.int32) - 1, l1 + 1)
    survivors = scatter_rows(closed_before, target, 0)
    merged = survivors[:, 1:] - survivors[:, :-1]
    slot = jnp.arange(l1, dtype=jnp.int32)[None, :]
    return jnp.where(slot < new_length[:, None] - 1, merged, 0)
