"""Token-budget batching: shapes, coverage, resumability, filtering, eval order, prefetch."""

import gc
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxnat.data import batching
from jaxnat.data.vocab import BOS_ID, EOS_ID
from jaxnat.errors import ConfigError, DataError


def _examples(lengths_src, lengths_tgt, offset=10):
    """Distinct example i: [BOS, i+offset, ..., EOS] so rows can be traced back to examples."""
    src = [np.array([BOS_ID] + [i + offset] * (n - 2) + [EOS_ID], np.int32) for i, n in enumerate(lengths_src)]
    tgt = [np.array([BOS_ID] + [i + offset] * (n - 2) + [EOS_ID], np.int32) for i, n in enumerate(lengths_tgt)]
    return src, tgt


def _row_ids(arr, offset=10):
    """Example index of each row (from the token after BOS), -1 for all-PAD rows."""
    out = []
    for row in arr:
        if not row.any():
            out.append(-1)
        else:
            assert row[0] == BOS_ID
            out.append(int(row[1]) - offset)
    return out


def test_bucket_lengths():
    assert batching.bucket_lengths(256) == [8, 16, 24, 40, 56, 80, 112, 160, 224, 256]
    # a max_len within a tenth (a quarter of growth - 1) above the last bucket replaces it: one compilation fewer
    assert batching.bucket_lengths(230)[-2:] == [160, 230] and batching.bucket_lengths(250)[-2:] == [224, 250]
    assert batching.bucket_lengths(88)[-2:] == [80, 88]  # exactly a tenth above: kept
    for max_len in (3, 8, 9, 50, 100, 115, 513, 1024):
        b = batching.bucket_lengths(max_len)
        assert b[-1] == max_len and b == sorted(set(b)) and len(b) <= 16
    with pytest.raises(ConfigError):
        batching.bucket_lengths(0)


def test_prepare_examples_filter_and_truncate():
    src = [[7, 8], [], [7] * 10, [7, 8, 9], [7] * 3]
    tgt = [[9], [9], [9], [], [9] * 8]
    s, t, counts = batching.prepare_examples(src, tgt, max_len=6, truncate=False)
    assert counts == {"kept": 1, "too_long": 2, "truncated": 0, "empty": 2}
    assert s[0].tolist() == [BOS_ID, 7, 8, EOS_ID] and t[0].tolist() == [BOS_ID, 9, EOS_ID]
    assert s[0].dtype == np.int32

    s, t, counts = batching.prepare_examples(src, tgt, max_len=6, truncate=True)
    assert counts == {"kept": 3, "too_long": 0, "truncated": 2, "empty": 2}
    assert s[1].tolist() == [BOS_ID, 7, 7, 7, 7, EOS_ID] and t[2].tolist() == [BOS_ID, 9, 9, 9, 9, EOS_ID]

    s, t, counts = batching.prepare_examples(src, tgt, max_len=6, truncate=True, drop_empty=False)
    assert counts["kept"] == 5 and len(s) == len(t) == 5 and t[3].tolist() == [BOS_ID, EOS_ID]

    s, t, counts = batching.prepare_examples(src, None, max_len=6, truncate=False)
    assert t is None and counts == {"kept": 3, "too_long": 1, "truncated": 0, "empty": 1}
    with pytest.raises(ConfigError):
        batching.prepare_examples(src, tgt, max_len=2, truncate=True)
    # exactly max_len tokens with BOS and EOS: kept whole, neither dropped nor cut
    for truncate in (False, True):
        s, t, counts = batching.prepare_examples([[7] * 4], [[9] * 4], max_len=6, truncate=truncate)
        assert counts == {"kept": 1, "too_long": 0, "truncated": 0, "empty": 0} and len(s[0]) == len(t[0]) == 6


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.lists(st.tuples(st.integers(3, 40), st.integers(3, 40)), min_size=1, max_size=60),
    batch_tokens=st.integers(1, 300),
    multiple_of=st.sampled_from([1, 2, 4]),
    seed=st.integers(0, 2**32),
    epoch=st.integers(0, 3),
)
def test_every_example_once_per_epoch_and_shapes(data, batch_tokens, multiple_of, seed, epoch):
    src, tgt = _examples([a for a, _ in data], [b for _, b in data])
    buckets = batching.bucket_lengths(40)
    tb = batching.TrainBatcher(src, tgt, batch_tokens, buckets, seed, multiple_of=multiple_of)
    shapes = tb.shapes
    for bsz, length in shapes:
        assert length in buckets and bsz % multiple_of == 0
        assert bsz == max(multiple_of, (batch_tokens // length) // multiple_of * multiple_of)
    seen = []
    start = epoch * tb.steps_per_epoch
    length_of = lambda i: min(L for L in buckets if L >= max(len(src[i]), len(tgt[i])))  # noqa: E731
    for step in range(start, start + tb.steps_per_epoch):
        b = tb.batch(step)
        assert b["src"].dtype == np.int32 and b["tgt"].dtype == np.int32
        assert b["src"].shape == b["tgt"].shape and b["src"].shape in shapes
        rows_s, rows_t = _row_ids(b["src"]), _row_ids(b["tgt"])
        assert rows_s == rows_t
        assert rows_s == tb.batch_indices(step).tolist()
        length = b["src"].shape[1]
        for r, i in enumerate(rows_s):  # no row of padding alone
            assert i >= 0 and length == length_of(i)  # the smallest bucket that fits, content intact, then PAD
            assert b["src"][r, : len(src[i])].tolist() == src[i].tolist()
            assert not b["src"][r, len(src[i]) :].any() and not b["tgt"][r, len(tgt[i]) :].any()
        seen += rows_s
    # Every example once, and a bucket's last batch completed with the first pairs of the bucket's order again.
    counts = np.bincount(seen, minlength=len(src))
    assert counts.min() >= 1
    for bsz, length in shapes:
        members = [i for i in range(len(src)) if length_of(i) == length]
        extra = -len(members) % bsz
        assert sum(counts[members]) == len(members) + extra
        assert max(counts[members]) - 1 == -(-extra // len(members))  # wrapped around as often as needed
    assert tb.steps_per_epoch == sum(-(-sum(1 for i in range(len(src)) if length_of(i) == length) // bsz)
                                     for bsz, length in shapes)


def test_resume_gives_same_batches():
    rng = np.random.default_rng(0)
    src, tgt = _examples(rng.integers(3, 60, 300), rng.integers(3, 60, 300))
    buckets = batching.bucket_lengths(64)
    a = batching.TrainBatcher(src, tgt, 256, buckets, seed=5)
    in_order = [a.batch(s) for s in range(3 * a.steps_per_epoch + 3)]
    steps = [2 * a.steps_per_epoch + 1, 7, 0, 3 * a.steps_per_epoch + 2, a.steps_per_epoch]
    for s in steps:  # a fresh batcher (a resumed run), jumping straight to step s
        b = batching.TrainBatcher(src, tgt, 256, buckets, seed=5)
        got = b.batch(s)
        np.testing.assert_array_equal(got["src"], in_order[s]["src"])
        np.testing.assert_array_equal(got["tgt"], in_order[s]["tgt"])
    # Epochs differ from each other, and another seed gives another order.
    e0 = [a.batch_indices(s).tolist() for s in range(a.steps_per_epoch)]
    e1 = [a.batch_indices(s + a.steps_per_epoch).tolist() for s in range(a.steps_per_epoch)]
    c = batching.TrainBatcher(src, tgt, 256, buckets, seed=6)
    assert e0 != e1 and e0 != [c.batch_indices(s).tolist() for s in range(c.steps_per_epoch)]


def test_first_batch_of_shape():
    rng = np.random.default_rng(1)
    src, tgt = _examples(rng.integers(3, 60, 300), rng.integers(3, 60, 300))
    tb = batching.TrainBatcher(src, tgt, 256, batching.bucket_lengths(64), seed=2)
    first = {}  # shape -> the step of its first batch, by walking the steps
    for step in range(tb.steps_per_epoch + 3):  # into the next epoch
        assert tb.shape(step) == tb.batch(step)["src"].shape  # the shape without building the batch
        first.setdefault(tb.batch(step)["src"].shape, step)
    assert set(first) == tb.shapes
    for shape, step in first.items():
        np.testing.assert_array_equal(tb.first_batch_of_shape(shape)["tgt"], tb.batch(step)["tgt"])
    with pytest.raises(ValueError, match="no batch of shape"):
        tb.first_batch_of_shape((3, 5))


def test_train_batcher_errors():
    src, tgt = _examples([5, 30], [5, 5])
    with pytest.raises(DataError):
        batching.TrainBatcher(src, tgt, 100, [8, 16], seed=0)  # 30 > largest bucket
    with pytest.raises(DataError):
        batching.TrainBatcher([], [], 100, [8], seed=0)
    with pytest.raises(ConfigError):
        batching.TrainBatcher(src, tgt, 0, [8, 32], seed=0)
    for buckets in ([32, 8], [8, 8, 32]):  # unsorted: an example would go to a bucket too short for it
        with pytest.raises(ConfigError, match="strictly increasing"):
            batching.TrainBatcher(src, tgt, 100, buckets, seed=0)
    with pytest.raises(ConfigError, match="count dividing multiple_of=1"):  # 2 processes cannot split 1 row
        batching.TrainBatcher(src, tgt, 100, [8, 32], seed=0, process=(0, 2))


def test_num_tokens():
    src, tgt = _examples([3, 5], [4, 6])
    tb = batching.TrainBatcher(src, tgt, 16, [8], seed=0)  # a batch of 2 rows of 8
    assert batching.num_tokens(tb.batch(0)) == 10 and batching.num_tokens(tb.batch(0), "src") == 8


@pytest.mark.parametrize("with_tgt", [True, False])
def test_eval_batches_restore_order(with_tgt):
    rng = np.random.default_rng(1)
    n = 53
    src, tgt = _examples(rng.integers(3, 40, n), rng.integers(3, 40, n))
    buckets = batching.bucket_lengths(40)
    out = [None] * n
    shapes = set()
    batches = list(batching.eval_batches(src, tgt if with_tgt else None, 8, buckets))
    # the examples fill one batch after another: PAD rows in the last batch only
    assert len(batches) == -(-n // 8) and all((idx >= 0).all() for idx, _ in batches[:-1])
    for idx, batch in batches:
        assert set(batch) == ({"src", "tgt"} if with_tgt else {"src"})
        assert batch["src"].shape[0] == 8 and batch["src"].shape[1] in buckets
        # as wide as the smallest bucket that holds its longest example
        longest = max(len(src[i]) for i in idx if i >= 0)
        longest = max([longest, *(len(tgt[i]) for i in idx if i >= 0 and with_tgt)])
        assert batch["src"].shape[1] == min(b for b in buckets if b >= longest)
        shapes.add(batch["src"].shape)
        assert _row_ids(batch["src"]) == idx.tolist()
        for r, i in enumerate(idx):
            if i >= 0:
                assert out[i] is None
                out[i] = batch["src"][r]
    assert all(out[i][: len(src[i])].tolist() == src[i].tolist() for i in range(n))
    assert len(shapes) <= len(buckets)
    assert list(batching.eval_batches([], None, 8, buckets)) == []
    # an example exactly as long as a bucket fits it
    assert next(batching.eval_batches(*_examples([8, 3], [5, 16]), 8, buckets))[1]["src"].shape == (8, 16)
    # fitted rows (a server's few sentences): the last batch as a power of two that holds its examples
    for count, rows in ((1, [1]), (3, [4]), (8, [8]), (11, [8, 4])):
        src, tgt = _examples([5] * count, [5] * count)
        batches = list(batching.eval_batches(src, tgt, 8, buckets, fit_rows=True))
        assert [b["src"].shape[0] for _, b in batches] == rows
        assert sorted(i for idx, _ in batches for i in idx if i >= 0) == list(range(count))


def test_prefetch_matches_direct_calls():
    rng = np.random.default_rng(2)
    src, tgt = _examples(rng.integers(3, 30, 100), rng.integers(3, 30, 100))
    tb = batching.TrainBatcher(src, tgt, 128, batching.bucket_lengths(32), seed=3)
    direct = [tb.batch(s) for s in range(10, 10 + 2 * tb.steps_per_epoch)]
    fresh = batching.TrainBatcher(src, tgt, 128, batching.bucket_lengths(32), seed=3)
    with batching.prefetch(fresh.batch, 10, size=3) as it:
        for want, got in zip(direct, it):
            np.testing.assert_array_equal(want["src"], got["src"])
            np.testing.assert_array_equal(want["tgt"], got["tgt"])


def test_prefetch_propagates_errors_and_stops():
    def fn(step):
        if step == 3:
            raise ValueError("boom")
        return step

    it = batching.prefetch(fn, 0)
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="boom"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)

    before = threading.active_count()
    it = batching.prefetch(lambda s: s, 0, size=2)
    assert next(it) == 0
    it.close()
    del it
    gc.collect()
    deadline = time.time() + 2
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.02)
    assert threading.active_count() <= before


def test_extras_travel_with_their_examples():
    """Fixed-shape side data (constraint pairs) rides along in train and eval batches: each row carries its own
    example's, an eval batch's filler rows all PAD, and the shapes do not depend on the bucket."""
    rng = np.random.default_rng(2)
    n = 70
    src, tgt = _examples(rng.integers(3, 40, n), rng.integers(3, 40, n))
    pairs = np.stack([np.full((3, 4), i + 10, np.int32) for i in range(n)])  # example i: all i + 10
    buckets = batching.bucket_lengths(40)
    tb = batching.TrainBatcher(src, tgt, 128, buckets, seed=0, extras={"pairs": pairs})
    assert tb.keys == ("src", "tgt", "pairs")
    for step in range(tb.steps_per_epoch):
        batch = tb.batch(step)
        assert batch["pairs"].shape == tb.key_shapes(batch["src"].shape)["pairs"] == (batch["src"].shape[0], 3, 4)
        for row, i in zip(batch["pairs"], tb.batch_indices(step)):
            assert (row == i + 10).all()
    for idx, batch in batching.eval_batches(src, tgt, 8, buckets, extras={"pairs": pairs}):
        for row, i in zip(batch["pairs"], idx):
            assert (row == (i + 10 if i >= 0 else 0)).all()
    with pytest.raises(DataError, match="70 examples but 2 rows of 'pairs'"):
        batching.TrainBatcher(src, tgt, 128, buckets, seed=0, extras={"pairs": pairs[:2]})


def test_prepare_drops_the_same_examples_from_the_extras():
    src = [[7], [8] * 10, [], [9, 9]]
    tgt = [[7], [8], [8], [9]]
    extras = {"pairs": np.arange(4 * 2, dtype=np.int32).reshape(4, 2)}
    prepared = batching.prepare_with_init(src, tgt, None, max_len=6, truncate=False, extras=extras)
    assert prepared.counts["kept"] == 2 and [x.tolist() for x in prepared.src] == [[1, 7, 2], [1, 9, 9, 2]]
    assert prepared.extras["pairs"].tolist() == [[0, 1], [6, 7]]
    assert batching.prepare_with_init(src, tgt, None, 6, False).extras == {}
