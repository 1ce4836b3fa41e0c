"""Insertion: open placeholder slots between adjacent tokens, then fill them (LevT's second and third edits)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxnat.edit_ops.compaction import Sides, lengths, positions, scatter_rows


class Inserted(NamedTuple):
    tokens: jax.Array    # int32[B, L], with ``plh_id`` in the new positions
    sides: Sides         # side arrays moved with their tokens; 0 / False at placeholders
    counts: jax.Array    # int32[B, L-1], the counts actually applied (after capping)
    dropped: jax.Array   # int32[B], requested insertions that did not fit


def insert_placeholders(tokens: jax.Array, counts: jax.Array, pad_id: int, plh_id: int,
                        max_length: jax.Array | int | None = None, sides: Sides = None) -> Inserted:
    """Insert ``counts[:, k]`` placeholders between token k and token k+1 of every row.

    tokens: int32[B, L] right-padded rows; counts: int32[B, L-1] (negative counts count as 0; slots at or
    beyond the last token are ignored); max_length: int32[B], an int, or None — a per-row length cap, never
    above the capacity L. A row never grows past ``min(L, max_length)``: when the requested insertions do not
    fit, `fair_share` cuts the largest requests first, so no part of the sentence is starved, and the cut is
    counted in ``dropped`` (a row already longer than its cap keeps its tokens and gets no insertions).
    """
    b, capacity = tokens.shape
    n = lengths(tokens, pad_id)
    slot = jnp.arange(capacity - 1, dtype=jnp.int32)[None, :]
    requested = jnp.where(slot < n[:, None] - 1, jnp.maximum(counts, 0), 0).astype(jnp.int32)
    cap = jnp.full((b,), capacity, jnp.int32) if max_length is None else jnp.minimum(
        jnp.broadcast_to(jnp.asarray(max_length, jnp.int32), (b,)), capacity)
    budget = jnp.maximum(cap - n, 0)[:, None]
    applied = fair_share(requested, budget[:, 0])
    shift = jnp.concatenate([jnp.zeros((b, 1), jnp.int32), jnp.cumsum(applied, axis=1)], axis=1)
    pos = positions(tokens)
    target = jnp.where(tokens != pad_id, pos + shift, capacity)
    new_length = n + shift[:, -1]
    canvas = jnp.where(pos < new_length[:, None], plh_id, pad_id).astype(tokens.dtype)
    rows = jnp.arange(b)[:, None]
    out = canvas.at[rows, target].set(tokens, mode="drop", unique_indices=True)
    sides = jax.tree.map(lambda s: scatter_rows(s, target, 0), sides)
    dropped = jnp.sum(requested, axis=1) - jnp.sum(applied, axis=1)
    return Inserted(out, sides, applied, dropped)


def fair_share(requested: jax.Array, budget: jax.Array) -> jax.Array:
    """Cut the per-slot counts ``requested`` (int32[B, K], >= 0) down to a row total of at most ``budget``
    (int32[B], >= 0) by lowering the largest counts first: every slot gets ``min(request, c)`` for the largest
    level ``c`` that fits, and the budget left over at that level goes one placeholder each to the first
    (leftmost) slots that asked for more. Rows that fit are unchanged. Returns int32[B, K].

    Needs ``budget <= K`` wherever a slot requests anything (the levels searched stop at K), which holds in
    `insert_placeholders`: a row of n >= 1 tokens in width L has at most L - n <= K = L - 1 free places, and an
    empty row requests nothing.

    Why not fairseq's rule: fairseq caps each slot at the length limit but lets the row grow past it; at a fixed
    capacity the row must fit, and serving slots left to right would give an undertrained model's many
    requests to the start of the sentence and none to its end.
    """
    k = requested.shape[1]
    levels = jnp.arange(k + 1, dtype=requested.dtype)  # a level above the largest budget (<= K) never fits
    totals = jnp.sum(jnp.minimum(requested[:, None, :], levels[None, :, None]), axis=2)  # [B, K+1], rising
    level = jnp.sum(totals[:, 1:] <= budget[:, None], axis=1)  # the highest level that fits (0 always does)
    base = jnp.minimum(requested, level[:, None])
    wants_more = requested > level[:, None]
    left = budget - jnp.sum(base, axis=1)
    extra = wants_more & (jnp.cumsum(wants_more, axis=1) <= left[:, None])
    return base + extra.astype(requested.dtype)


def fill_placeholders(tokens: jax.Array, values: jax.Array, plh_id: int) -> jax.Array:
    """Write ``values`` into placeholder positions only: ``where(tokens == plh_id, values, tokens)``.

    tokens, values: int32[B, L] (position-aligned, e.g. the token head's argmax, or the reference ``y``).
    Side arrays follow the same rule: ``where(tokens == plh_id, new_side, old_side)``.
    """
    return jnp.where(tokens == plh_id, values, tokens)
