"""Sequence packing: the packer, the per-segment kernels against plain Python, and the AR model's packed
loss against the same pairs unpacked (per-pair log-probabilities, loss, gradients; no pair sees another)."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxnat.data import batching
from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID
from jaxnat.errors import ConfigError, DataError
from jaxnat.models import packing
from jaxnat.models.ar.model import ARTransformer, ar_loss
from jaxnat.models.transformer import TransformerConfig
from tests.packing_helpers import (SEGMENT_WIDTH, assert_teacher_forced_pairs_match, pack_and_pad, random_pairs,
                                   rows_of_segments, segment_ids)

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------------------------------------ the packer

@FAST
@given(st.lists(st.integers(2, 16), min_size=1, max_size=60), st.integers(16, 40), st.integers(0, 5),
       st.sampled_from([None, 1, 3]))
def test_pack_rows_places_every_example_once_within_the_width(lengths, width, seed, most):
    lengths = np.asarray(lengths)
    rows = batching.pack_rows(lengths, width, np.random.default_rng(seed).permutation(len(lengths)), most)
    most = batching.max_segments(width) if most is None else most
    assert sorted(np.concatenate(rows).tolist()) == list(range(len(lengths)))
    assert all(lengths[r].sum() <= width and len(r) <= most for r in rows)
    # best fit leaves no two rows that could have been one: every pair of rows overflows together, in tokens
    # or in examples
    for a in range(len(rows)):
        for b in range(a + 1, len(rows)):
            assert lengths[rows[a]].sum() + lengths[rows[b]].sum() > width or len(rows[a]) + len(rows[b]) > most


@FAST
@given(st.lists(st.tuples(st.integers(2, 16), st.integers(0, 6)), min_size=1, max_size=60), st.integers(16, 40),
       st.integers(6, 12), st.integers(0, 5))
def test_pack_rows_keeps_every_row_within_its_budget(examples, width, capacity, seed):
    """`pack_rows` with a budget (a model's slots a row: `Family.pack_budget`) against its plain rule: every
    example once, no row past the width or the budget, and no two rows that could have been one."""
    lengths, sizes = (np.asarray(x) for x in zip(*examples))
    rows = batching.pack_rows(lengths, width, np.random.default_rng(seed).permutation(len(lengths)), 3,
                              budget=(sizes, capacity))
    assert sorted(np.concatenate(rows).tolist()) == list(range(len(lengths)))
    assert all(lengths[r].sum() <= width and sizes[r].sum() <= capacity and len(r) <= 3 for r in rows)
    for a in range(len(rows)):
        for b in range(a + 1, len(rows)):
            both = np.concatenate([rows[a], rows[b]])
            assert lengths[both].sum() > width or sizes[both].sum() > capacity or len(both) > 3


def test_pack_rows_puts_each_example_where_it_fits_best():
    """Best fit, not just any fit: the 6 closes the 18's row exactly, so the 16 takes both 4s; a worst fit (the 6
    into the 16's row) would leave a 4 for a third row."""
    assert [r.tolist() for r in batching.pack_rows(np.asarray([18, 16, 6, 4, 4]), 24, np.arange(5))] == [[0, 2],
                                                                                                       [1, 3, 4]]


def test_packed_batcher_refuses_an_example_over_the_budget():
    src, tgt = random_pairs(np.random.default_rng(0), 5)
    with pytest.raises(DataError, match="1 examples need more than the 4 slots a packed row has for them"):
        batching.PackedBatcher(src, tgt, 96, 24, seed=0, budget=(np.asarray([1, 2, 5, 0, 4]), 4))


def test_packed_batcher_covers_every_pair_once_per_epoch_and_resumes():
    rng = np.random.default_rng(0)
    src, tgt = random_pairs(rng, 70)
    extra = np.arange(70, dtype=np.int32)[:, None] + 3
    pb = batching.PackedBatcher(src, tgt, 96, 24, seed=4, extras={"tag": extra})
    assert pb.shapes == {(4, 24)} and pb.keys == ("src", "tgt", "src_seg", "tgt_seg", "tag")
    for epoch in range(2):
        seen, pads = [], 0
        for step in range(epoch * pb.steps_per_epoch, (epoch + 1) * pb.steps_per_epoch):
            batch, members = pb.batch(step), pb.batch_indices(step)
            pads += int((batch["src"] == PAD_ID).sum() + (batch["tgt"] == PAD_ID).sum())
            assert {k: v.shape for k, v in batch.items()} == pb.key_shapes((4, 24)) and pb.shape(step) == (4, 24)
            for r in range(4):
                for k, i in enumerate(members[r][members[r] >= 0]):
                    for side, seqs in (("src", src), ("tgt", tgt)):
                        np.testing.assert_array_equal(batch[side][r][batch[side + "_seg"][r] == k + 1], seqs[i])
                    assert batch["tag"][r, k, 0] == i + 3
                seen += members[r][members[r] >= 0].tolist()
                assert (batch["src"][r][batch["src_seg"][r] == 0] == PAD_ID).all()
        assert sorted(seen) == list(range(70))
        assert pb.padding == pytest.approx(pads / (2 * pb.steps_per_epoch * 4 * 24))  # the filler rows' too
    fresh = batching.PackedBatcher(src, tgt, 96, 24, seed=4, extras={"tag": extra})
    for step in (pb.steps_per_epoch + 1, 0, 3):
        for k, v in fresh.batch(step).items():
            np.testing.assert_array_equal(v, pb.batch(step)[k])
    assert pb.batch_indices(0).tolist() != batching.PackedBatcher(src, tgt, 96, 24, seed=5).batch_indices(0).tolist()


def test_the_packing_of_equal_lengths_depends_on_the_seed():
    """Ties are broken by a seeded order: another seed packs other examples together, the same seed the same."""
    same = [np.array([1, *[i + 10] * 6, 2], np.int32) for i in range(12)]
    rows = {seed: [r.tolist() for r in batching.PackedBatcher(same, same, 96, 24, seed=seed).rows] for seed in (0, 1)}
    assert all(len(r) == 3 for r in rows[0]) and rows[0] != rows[1]
    assert [r.tolist() for r in batching.PackedBatcher(same, same, 96, 24, seed=0).rows] == rows[0]


def test_packed_batcher_splits_rows_between_processes():
    rng = np.random.default_rng(1)
    src, tgt = random_pairs(rng, 50)
    whole = batching.PackedBatcher(src, tgt, 96, 24, seed=3, multiple_of=4)
    parts = [batching.PackedBatcher(src, tgt, 96, 24, seed=3, multiple_of=4, process=(i, 2)) for i in range(2)]
    for step in range(whole.steps_per_epoch):
        np.testing.assert_array_equal(np.concatenate([p.batch(step)["tgt"] for p in parts]), whole.batch(step)["tgt"])


def test_packed_batcher_errors():
    src, tgt = random_pairs(np.random.default_rng(2), 5, longest=30)
    with pytest.raises(DataError, match="longer than a packed row"):
        batching.PackedBatcher(src, tgt, 64, 16, seed=0)
    whole = [np.asarray([BOS_ID, *[7] * 14, EOS_ID], np.int32)]  # exactly a row: packed, not refused
    assert batching.PackedBatcher(whole, whole, 64, 16, seed=0).batch(0)["tgt"][0].tolist() == whole[0].tolist()
    with pytest.raises(ConfigError, match="at least one row"):
        batching.PackedBatcher(src, tgt, 8, 32, seed=0)
    with pytest.raises(DataError, match="no training examples"):
        batching.PackedBatcher([], [], 64, 32, seed=0)


# ------------------------------------------------------------------------------- per-segment kernels

@jax.jit  # one program a batch shape, where the kernels' ops one by one would compile dozens
def _segment_kernels(seg, values):
    lengths = packing.segment_lengths(seg)
    return (packing.segment_positions(seg), packing.segment_sum(values, seg), lengths, packing.next_in_segment(seg),
            packing.broadcast_segments(lengths, seg))


@FAST
@given(rows_of_segments, st.integers(0, 3))
def test_segment_kernels_match_plain_python(rows, seed):
    width = SEGMENT_WIDTH
    seg = segment_ids(rows, width)
    values = np.random.default_rng(seed).normal(size=seg.shape).astype(np.float32)
    pos, sums, lengths, nxt, back = map(np.asarray, _segment_kernels(seg, values))
    for r, row in enumerate(rows):
        at = 0
        for k, n in enumerate(row):
            assert pos[r, at:at + n].tolist() == list(range(n))
            np.testing.assert_allclose(sums[r, k], values[r, at:at + n].sum(), rtol=1e-5, atol=1e-5)
            assert lengths[r, k] == n
            assert nxt[r, at:at + n - 1].all() and (at + n - 1 >= width - 1 or not nxt[r, at + n - 1])
            at += n
        assert (lengths[r, len(row):] == 0).all() and not nxt[r, max(at - 1, 0):].any()
    assert ((back == lengths[np.arange(len(rows))[:, None], np.maximum(seg - 1, 0)]) | (seg == 0)).all()


# ---------------------------------------------------------------------------------------------- the AR model

CFG = TransformerConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=32, ffn_dim=64, num_heads=4, enc_layers=2,
                        dec_layers=2, dropout=0.0, positions="learned", max_len=32)


@functools.lru_cache(maxsize=None)
def _model(autoreg: str = "self_attention"):
    model = ARTransformer(dataclasses.replace(CFG, decoder_autoreg=autoreg))
    params = jax.jit(model.init)(jax.random.PRNGKey(0), jnp.ones((1, 4), jnp.int32), jnp.ones((1, 4), jnp.int32))
    logp = jax.jit(lambda p, b: jax.nn.log_softmax(model.apply(
        p, b["src"], b["tgt"][:, :-1], src_seg=b.get("src_seg"),
        tgt_seg=None if "tgt_seg" not in b else b["tgt_seg"][:, :-1])))
    return model, params, logp


@pytest.mark.slow
@pytest.mark.parametrize("autoreg", ["self_attention", "ssru"])  # Marian's SSRU: its state reset at each pair
def test_packed_ar_loss_and_gradients_equal_the_unpacked_ones(autoreg):
    model, params, logp_fn = _model(autoreg)
    src, tgt = random_pairs(np.random.default_rng(3), 9)
    packed, padded, members = pack_and_pad(src, tgt)
    assert int((np.asarray(packed["tgt_seg"]).max(axis=1) > 1).sum()) >= 2  # some rows do hold several pairs
    lp_packed, lp_padded = logp_fn(params, packed), logp_fn(params, padded)
    assert_teacher_forced_pairs_match(lp_packed, lp_padded, packed, members, tgt)
    loss = lambda p, b: ar_loss(model, p, b, jax.random.PRNGKey(0), 0.1, train=False)  # noqa: E731
    grad = jax.jit(jax.value_and_grad(loss, has_aux=True))
    (l1, aux1), g1 = grad(params, packed)
    (l2, aux2), g2 = grad(params, padded)
    assert float(aux1["count"]) == float(aux2["count"]) == sum(len(t) - 1 for t in tgt)
    np.testing.assert_allclose(float(l1), float(l2), rtol=1e-5)
    np.testing.assert_allclose(float(aux1["nll"]), float(aux2["nll"]), rtol=1e-5)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5), g1, g2)


@FAST
@given(st.integers(0, 10_000))
def test_changing_one_pair_leaves_the_others_in_its_row_unchanged(seed):
    """Other tokens in one pair of the fullest row: every other pair's log-probabilities stay. Nine short pairs
    packed as the test above packs its nine (rows of 28): the same batch shape, the same program."""
    _, params, logp_fn = _model()
    rng = np.random.default_rng(seed)
    src, tgt = random_pairs(rng, 9, longest=5)
    packed, _, members = pack_and_pad(src, tgt)
    packed = jax.device_get(packed)  # edited on the host: each eager op of a new shape compiles a program
    row = int(np.argmax((members >= 0).sum(axis=1)))
    victim = int(rng.integers((members[row] >= 0).sum())) + 1
    changed = {k: v.copy() for k, v in packed.items()}
    for side in ("src", "tgt"):
        at = np.flatnonzero(packed[side + "_seg"][row] == victim)[1:-1]  # BOS and EOS kept
        changed[side][row, at] = rng.integers(5, 40, len(at))
    before, after = np.asarray(logp_fn(params, packed)), np.asarray(logp_fn(params, changed))
    seg = packed["tgt_seg"][:, :-1]
    others = seg > 0
    others[row] &= seg[row] != victim
    np.testing.assert_allclose(after[others], before[others], rtol=1e-5, atol=2e-5)
