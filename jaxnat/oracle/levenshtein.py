"""The LevT ("ed2") and EDITOR ("ed3") oracles as batched, bit-parallel XLA scans (docs/levt.md, docs/editor.md).

Both oracles share one dynamic programme over input ``x`` (rows i) and reference ``y`` (columns j):
``d[i][j] = min(d[i-1][j] + 1, d[i][j-1] + 1, d[i-1][j-1] + c)`` with ``c = 0`` on a match, ``1`` when the
column is *substitutable* and ``2`` otherwise. ed2 (LevT) has no substitutable column, so a substitution
never beats delete + insert; ed3 (EDITOR) makes column j substitutable when ``y_j`` occurs anywhere in ``x``.

**Forward pass.** Adjacent cells differ by -1, 0 or +1, so a row is stored as bit vectors of its horizontal
differences (one bit per column, 32 columns per word; `bitvec`). Row i follows from row i-1 in a few word
operations: the vertical difference ``a_j = d[i][j] - d[i-1][j]`` obeys a left-to-right recurrence that is
a carry chain ("is -1" and "is +1" are each generated / propagated / killed per column), and an addition
resolves a carry chain for 32 columns at a time (the Myers/Hyyrö bit-parallel trick, extended to
column-dependent substitution costs). With ``b_j = d[i-1][j] - d[i-1][j-1]`` and
``D_j = d[i][j] - d[i-1][j-1] = min(c_j, a_{j-1} + 1, b_j + 1)``:

* ``a_j = -1``  iff ``b_j = +1`` and (match or ``a_{j-1} = -1``)                     — chain 1, carry-in 0
* ``a_j = +1``  iff ``b_j = -1``, or ``b_j = 0``, no match and ``a_{j-1} ≠ -1``, or
  ``b_j = +1``, ``c_j = 2`` and ``a_{j-1} = +1``                                       — chain 2, carry-in 1
  (``a_0 = +1`` because ``d[i][0] = i``)
* the new horizontal difference is ``D_j - a_{j-1}``.

**Backtrace.** The reference walks back from ``(|x|, |y|)`` preferring insert (``d[i][j-1] < d[i][j]``, i.e.
a +1 horizontal difference), then delete (``d[i-1][j] < d[i][j]``: a +1 vertical difference), then substitute
(``d[i-1][j-1] < d[i][j]``: ``D_j > 0``), then keep. Every row is left by exactly one delete / substitute /
keep after a run of inserts, and that run is "the +1 bits just below the current column": one
highest-zero-bit search. So the backtrace is one scan step per input token, reading three stored bits.

No Python loop runs over the batch or the positions; everything runs on device inside a jit'd train step.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxnat.data.vocab import PAD_ID
from jaxnat.oracle import bitvec

MAX_INSERTIONS = 255  # placeholder-count classes are 0 … 255 (docs/levt.md)


class Ed2Labels(NamedTuple):
    deletion: jax.Array     # int32[B, Lx]: 1 = delete x[:, k]
    insertion: jax.Array    # int32[B, Lx-1]: tokens to insert between x[:, k] and x[:, k+1], ≤ 255
    insert_mask: jax.Array  # bool[B, Ly]: True where y holds an inserted token
    distance: jax.Array     # int32[B]: insertions + deletions


class Ed3Labels(NamedTuple):
    reposition: jax.Array   # int32[B, Lx]: 0 = delete, else the input index placed in that slot
    insertion: jax.Array    # int32[B, Lx-1]
    insert_mask: jax.Array  # bool[B, Ly]
    distance: jax.Array     # int32[B]: insertions + deletions + repositions (substitutions)


class EditPath(NamedTuple):
    """The backtrace, one entry per input token x[:, i] (all False / 0 on padding)."""
    consumed: jax.Array     # bool[B, Lx]: x_i is kept or substituted (not deleted)
    substituted: jax.Array  # bool[B, Lx]: x_i is overwritten by y_{column - 1}
    column: jax.Array       # int32[B, Lx]: 1-based y position that x_i becomes (if consumed)
    inserted: jax.Array     # int32[B, Lx]: y tokens inserted right after x_i (before x_{i+1})


def edit_path(x: jax.Array, y: jax.Array, substitutable: jax.Array, pad_id: int) -> EditPath:
    """The reference backtrace of the DP above.

    x: int32[B, Lx], y: int32[B, Ly] right-padded ``[BOS … EOS]`` rows; substitutable: bool[B, Ly].
    """
    b, lx = x.shape
    ly = y.shape[1]
    w = bitvec.num_words(ly)
    n = jnp.sum(x != pad_id, axis=1, dtype=jnp.int32)
    m = jnp.sum(y != pad_id, axis=1, dtype=jnp.int32)
    y_real = y != pad_id
    no_sub = ~bitvec.pack(substitutable & y_real)                                   # uint32[B, W]

    def dp_row(prev, x_i):
        """prev: (+1, -1) horizontal differences of row i-1 → the same for row i, plus backtrace bits."""
        plus_h, minus_h = prev
        eq = bitvec.pack((x_i[:, None] == y) & y_real)  # packed here, not up front: 4× faster on CPU
        minus_in = bitvec.carries_into(plus_h, plus_h & eq, 0)              # a_{j-1} = -1, at bit j
        zero_h = ~(plus_h | minus_h)
        generate = minus_h | (zero_h & ~eq & ~minus_in)
        plus_in = bitvec.carries_into(generate | (plus_h & ~eq & no_sub), generate, 1)  # a_{j-1} = +1
        diag0 = eq | minus_in | minus_h                                     # D_j = 0
        diag2 = ~eq & no_sub & plus_in & plus_h                             # D_j = 2
        diag1 = ~diag0 & ~diag2
        new_plus_h = (diag0 & minus_in) | (diag1 & ~minus_in & ~plus_in) | diag2
        new_minus_h = diag0 & plus_in
        plus_v = minus_h | (diag1 & zero_h) | diag2                         # a_j = +1
        return (new_plus_h, new_minus_h), (new_plus_h, plus_v, diag0)

    first_row = (jnp.full((b, w), 0xFFFFFFFF, jnp.uint32), jnp.zeros((b, w), jnp.uint32))  # d[0][j] = j
    _, (plus_h, plus_v, diag0) = lax.scan(dp_row, first_row, x.T)

    def back_row(col, inputs):
        """At row i (1-based i = step + 1), entering at column ``col``: inserts, then one x_i operation."""
        plus_h_i, plus_v_i, diag0_i, step = inputs
        active = step < n
        not_inserting = ~plus_h_i & bitvec.low_mask(col, w)
        first = bitvec.highest_set_bit(not_inserting) + 1                  # j' (0 if everything is inserted)
        delete = (first == 0) | bitvec.get_bit(plus_v_i, first - 1)
        substitute = ~delete & ~bitvec.get_bit(diag0_i, first - 1)
        consumed = active & ~delete
        new_col = jnp.where(active, first - consumed, col)
        # Inserts after the last token (none for [BOS … EOS] rows) have no slot: dropped, as in the reference.
        inserted = jnp.where(step < n - 1, col - first, 0)
        return new_col, (consumed, active & substitute, first, inserted)

    steps = jnp.arange(lx, dtype=jnp.int32)
    _, outs = lax.scan(back_row, m, (plus_h, plus_v, diag0, steps), reverse=True)
    return EditPath(*(jnp.swapaxes(o, 0, 1) for o in outs))


def _matched_mask(y: jax.Array, path: EditPath, pad_id: int) -> jax.Array:
    """bool[B, Ly]: True at reference positions produced by kept/substituted input tokens."""
    b, ly = y.shape
    target = jnp.where(path.consumed, path.column - 1, ly)
    hit = jnp.zeros((b, ly), bool).at[jnp.arange(b)[:, None], target].set(True, mode="drop")
    return hit & (y != pad_id)


def _slot_labels(path: EditPath) -> jax.Array:
    """Insertions right after x_k are the slot between x_k and x_{k+1}: int32[B, Lx-1], clamped to 255."""
    return jnp.minimum(path.inserted[:, :-1], MAX_INSERTIONS)


def ed2_labels(x: jax.Array, y: jax.Array, pad_id: int = PAD_ID) -> Ed2Labels:
    """LevT oracle labels turning ``x`` into ``y`` by deletions and insertions (libnat's ed2 path).

    x: int32[B, Lx], y: int32[B, Ly]; right-padded ``[BOS … EOS]`` rows. Padded outputs are 0 / False.
    Kept tokens align as far left as possible; insertions and deletions happen to the right.
    """
    path = edit_path(x, y, jnp.zeros(y.shape, bool), pad_id)
    deletion = ((x != pad_id) & ~path.consumed).astype(jnp.int32)
    insert_mask = (y != pad_id) & ~_matched_mask(y, path, pad_id)
    distance = jnp.sum(deletion, axis=1) + jnp.sum(insert_mask, axis=1, dtype=jnp.int32)
    return Ed2Labels(deletion, _slot_labels(path), insert_mask, distance)


def _first_occurrence(x: jax.Array, y: jax.Array, pad_id: int) -> jax.Array:
    """int32[B, Ly]: the first position of ``y[:, j]`` in ``x`` (Lx if absent), scanning x backwards."""
    lx = x.shape[1]

    def step(first, inputs):
        x_i, i = inputs
        return jnp.where((x_i[:, None] == y) & (x_i != pad_id)[:, None], i, first), None

    first, _ = lax.scan(step, jnp.full(y.shape, lx, jnp.int32), (x.T, jnp.arange(lx, dtype=jnp.int32)),
                        reverse=True)
    return first


def ed3_labels(x: jax.Array, y: jax.Array, pad_id: int = PAD_ID) -> Ed3Labels:
    """EDITOR oracle labels turning ``x`` into ``y`` by repositions (move/copy/delete) and insertions.

    A reference token that occurs anywhere in ``x`` can be produced by substitution at cost 1 (a reposition
    pointing at its **first** occurrence in ``x``); backtrace priority insert > delete > substitute > keep, so
    pure reorderings tie with delete + insert and are labelled delete + insert.
    x: int32[B, Lx], y: int32[B, Ly]; right-padded ``[BOS … EOS]`` rows. Padded outputs are 0 / False.
    """
    lx = x.shape[1]
    first_occurrence = _first_occurrence(x, y, pad_id)                              # int32[B, Ly]
    path = edit_path(x, y, first_occurrence < lx, pad_id)
    pointer = jnp.take_along_axis(first_occurrence, jnp.maximum(path.column - 1, 0), axis=1)
    own = jnp.broadcast_to(jnp.arange(lx, dtype=jnp.int32), x.shape)
    reposition = jnp.where(path.consumed, jnp.where(path.substituted, pointer, own), 0)
    insert_mask = (y != pad_id) & ~_matched_mask(y, path, pad_id)
    distance = (jnp.sum((x != pad_id) & ~path.consumed, axis=1, dtype=jnp.int32)
                + jnp.sum(path.substituted, axis=1, dtype=jnp.int32) + jnp.sum(insert_mask, axis=1, dtype=jnp.int32))
    return Ed3Labels(reposition, _slot_labels(path), insert_mask, distance)


ed2_labels = jax.jit(ed2_labels, static_argnames="pad_id")
ed3_labels = jax.jit(ed3_labels, static_argnames="pad_id")
