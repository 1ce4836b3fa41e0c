"""Test helpers for batches: random pairs, their packed and padded batches (with filler rows), segment ids by hand."""

import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

from jaxnat.data import batching
from jaxnat.data.vocab import BOS_ID, EOS_ID


def random_pairs(rng, n, vocab=40, longest=9):
    """n random pairs of [BOS … EOS] int32 arrays, 1 … longest pieces a side."""
    side = lambda: np.r_[BOS_ID, rng.integers(5, vocab, rng.integers(1, longest + 1)), EOS_ID].astype(np.int32)  # noqa: E731
    return [side() for _ in range(n)], [side() for _ in range(n)]


def padded_pairs(rng, rows: int, src_width: int, tgt_width: int, src_ids=(6, 40), tgt_ids=(6, 40)):
    """(src int32[rows, src_width], tgt int32[rows, tgt_width]): random [BOS … EOS] pairs, PAD after; a source of
    0 … src_width − 2 words (0: an all-PAD filler row, its target too) from ids [src_ids), a target of
    0 … tgt_width − 2 from [tgt_ids)."""
    src, tgt = np.zeros((rows, src_width), np.int32), np.zeros((rows, tgt_width), np.int32)
    for b in range(rows):
        words = int(rng.integers(0, src_width - 1))
        if words:
            src[b, :words + 2] = [BOS_ID, *rng.integers(*src_ids, words), EOS_ID]
            m = int(rng.integers(0, tgt_width - 1))
            tgt[b, :m + 2] = [BOS_ID, *rng.integers(*tgt_ids, m), EOS_ID]
    return src, tgt


def pack_and_pad(src, tgt, width=28, extras=None):
    """(the packed batch of every pair, the padded one-pair-a-row batch, the packing's example indices
    int64[B, K], -1 for none). extras: per-example side data {key: int32[N, ...]} (constraint pairs), in both."""
    pb = batching.PackedBatcher(src, tgt, width * len(src), width, seed=0, extras=extras)
    packed = {k: jnp.asarray(v) for k, v in pb.batch(0).items()}
    pad = lambda seqs: jnp.asarray(np.stack([np.pad(x, (0, 12 - len(x))) for x in seqs]))  # noqa: E731
    padded = {"src": pad(src), "tgt": pad(tgt), **{k: jnp.asarray(v) for k, v in (extras or {}).items()}}
    return packed, padded, pb.batch_indices(0)


def assert_teacher_forced_pairs_match(lp_packed, lp_padded, packed, members, tgt):
    """Each pair's teacher-forced outputs [B, L − 1, ...] in its packed row equal those of its padded row (the tokens
    after BOS are predicted from the positions before them). Compared on the host: indexing device arrays would
    compile a program for each shape of slice."""
    lp_packed, lp_padded, segments = np.asarray(lp_packed), np.asarray(lp_padded), np.asarray(packed["tgt_seg"])
    for r in range(len(members)):
        seg = segments[r]
        for k, i in enumerate(members[r][members[r] >= 0]):
            at, n = np.flatnonzero(seg == k + 1), len(tgt[i]) - 1
            np.testing.assert_allclose(lp_packed[r, at[:n]], lp_padded[i, :n], atol=2e-5)


def segment_ids(lengths_per_row, width):
    """int32[R, width] segment ids: row r holds segments of lengths_per_row[r] back to back, then padding (0)."""
    seg = np.zeros((len(lengths_per_row), width), np.int32)
    for r, lengths in enumerate(lengths_per_row):
        at = 0
        for k, n in enumerate(lengths):
            seg[r, at:at + n] = k + 1
            at += n
    return seg


# up to three rows of up to four segments of 2 … 6 positions: they fit rows of SEGMENT_WIDTH (4 segment slots)
rows_of_segments = st.lists(st.lists(st.integers(2, 6), min_size=0, max_size=4), min_size=1, max_size=3)
SEGMENT_WIDTH = 32
