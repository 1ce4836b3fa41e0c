"""Sequence packing on the model side: several pairs in one row, told apart by segment ids.

A packed batch (`jaxnat.data.batching.PackedBatcher`) carries, beside 'src' and 'tgt', 'src_seg' and
'tgt_seg': int32[B, L] segment ids, 1, 2, … for the pairs of a row and 0 on padding; pair k of a row is
segment k on both sides. The Transformer layers take such ids wherever they take a padding mask: an integer
mask means segments, and then no position attends across segments (encoder and decoder self-attention,
cross-attention) and positions restart at 0 with each segment. The functions here turn per-position
quantities into per-segment ones, so that every per-sentence quantity of a loss (a length, a count of masked
tokens, a mean) is computed per pair, and a pair's loss does not depend on the pairs it shares a row with.

Per-segment arrays are [B, K] with K = `max_segments(L)`; slot k − 1 holds segment k.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxnat.data.batching import max_segments  # noqa: F401  (the static K of per-segment arrays)


def is_segments(mask: jax.Array) -> bool:
    """Whether a mask is segment ids (integer: a packed batch) rather than a padding mask (bool)."""
    return jnp.issubdtype(mask.dtype, jnp.integer)


def segment_positions(segments: jax.Array) -> jax.Array:
    """segments: int32[B, L] → int32[B, L], each position's index within its segment (0 at its first token).

    Segments are contiguous runs; padding (0) gets its offset from the last segment's start (never read)."""
    index = jnp.arange(segments.shape[1], dtype=jnp.int32)[None]
    return index - jax.lax.cummax(jnp.where(segment_starts(segments), index, 0), axis=1)


def segment_starts(segments: jax.Array) -> jax.Array:
    """bool[B, L]: whether position l is its segment's first (padding: where it begins)."""
    return segments != jnp.pad(segments, ((0, 0), (1, 0)), constant_values=-1)[:, :-1]


def segment_interior(segments: jax.Array) -> jax.Array:
    """bool[B, L]: the positions strictly inside their segment, neither its first nor its last (a packed row's
    real tokens: its pairs' BOS and EOS excluded, as `jaxnat.oracle.real_mask` excludes a row's)."""
    same = lambda a, b: (a == b) & (a > 0)  # noqa: E731
    before = jnp.pad(segments, ((0, 0), (1, 0)))[:, :-1]
    after = jnp.pad(segments, ((0, 0), (0, 1)))[:, 1:]
    return same(segments, before) & same(segments, after)


def one_hot_segments(segments: jax.Array, k: int | None = None) -> jax.Array:
    """segments: int32[B, L] → float32[B, L, K]: 1 where position l belongs to segment k + 1 (padding: none)."""
    k = max_segments(segments.shape[1]) if k is None else k
    return jax.nn.one_hot(segments - 1, k, dtype=jnp.float32)


def segment_sum(values: jax.Array, segments: jax.Array, k: int | None = None) -> jax.Array:
    """values: float[B, L, ...] → float32[B, K, ...], the sum of each segment's values."""
    onehot = one_hot_segments(segments, k)
    return jnp.einsum("blk,bl...->bk...", onehot, values.astype(jnp.float32))


def segment_lengths(segments: jax.Array, where: jax.Array | None = None, k: int | None = None) -> jax.Array:
    """int32[B, K]: how many positions of each segment (of those ``where`` bool[B, L] holds, if given)."""
    w = jnp.ones(segments.shape, jnp.float32) if where is None else where.astype(jnp.float32)
    return jnp.round(segment_sum(w, segments, k)).astype(jnp.int32)


def broadcast_segments(per_segment: jax.Array, segments: jax.Array) -> jax.Array:
    """per_segment: [B, K, ...] → [B, L, ...], each position given its segment's value (padding: slot 0's)."""
    index = jnp.maximum(segments - 1, 0)
    return jnp.take_along_axis(per_segment, index.reshape(index.shape + (1,) * (per_segment.ndim - 2)), axis=1)


def next_in_segment(segments: jax.Array) -> jax.Array:
    """bool[B, L − 1]: whether position l + 1 continues position l's segment (teacher forcing's targets: the
    token after a segment's EOS is the next pair's BOS, not a target)."""
    return (segments[:, 1:] == segments[:, :-1]) & (segments[:, 1:] > 0)


def segment_mean(values: jax.Array, segments: jax.Array, where: jax.Array) -> jax.Array:
    """values: float[B, L, ...] → float32[B, K, ...], each segment's mean over its positions ``where`` (bool[B, L])
    holds (0 for a segment with none)."""
    sums = segment_sum(jnp.where(where.reshape(where.shape + (1,) * (values.ndim - 2)), values, 0), segments)
    counts = segment_lengths(segments, where).astype(jnp.float32)
    return sums / jnp.maximum(counts, 1.0).reshape(counts.shape + (1,) * (sums.ndim - 2))


def segment_ranks(scores: jax.Array, segments: jax.Array, first: jax.Array) -> jax.Array:
    """int32[B, L]: each position's rank within its segment (0, 1, …): the positions where ``first`` (bool[B, L])
    holds before the others, each group by ``scores`` (float[B, L]) ascending, ties by position — for one
    segment, the order `jnp.lexsort((scores, ~first))` gives a whole row. Padding's ranks mean nothing."""
    rank = jnp.argsort(jnp.lexsort((scores, ~first, segments), axis=1), axis=1).astype(jnp.int32)
    # sorted by id first, segment k's positions come as one run after every position of a lower id (padding: 0)
    lengths = segment_lengths(segments)
    before = jnp.sum(segments == 0, axis=1, keepdims=True, dtype=jnp.int32) + jnp.cumsum(lengths, axis=1) - lengths
    return rank - broadcast_segments(before, segments)


def segment_lowest(where: jax.Array, fraction, scores: jax.Array, segments: jax.Array, offset: int = 0) -> jax.Array:
    """bool[B, L]: in each segment, the c = ⌊n·f⌋ + offset of its n positions where ``where`` (bool[B, L]) holds
    that have the lowest ``scores`` (float[B, L]; ties: leftmost) — `jaxnat.oracle.noise`'s random subsets (n·f in
    float32, as there), drawn per segment. fraction f: f32[B, K], one per segment slot, or a scalar."""
    n = segment_lengths(segments, where)
    count = jnp.floor(n.astype(jnp.float32) * fraction).astype(jnp.int32) + offset
    return where & (segment_ranks(scores, segments, where) < broadcast_segments(count, segments))


def segment_cumsum(values: jax.Array, segments: jax.Array) -> jax.Array:
    """values: float[B, L, ...] → the same shape: the running sum along L, restarting at each segment's first
    position (so no segment's sum reads another's values)."""
    starts = jnp.broadcast_to(segment_starts(segments).reshape(segments.shape + (1,) * (values.ndim - 2)),
                              values.shape)

    def combine(a, b):
        return jnp.where(b[1], b[0], a[0] + b[0]), a[1] | b[1]

    return jax.lax.associative_scan(combine, (values, starts), axis=1)[0]
