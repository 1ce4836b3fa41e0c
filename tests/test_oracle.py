"""The ed2/ed3 oracles: the worked examples of docs/levt.md and docs/editor.md, agreement with the plain-Python
DP/backtrace on random inputs (small vocabularies so ties are frequent), and the round-trip invariants through the
edit ops."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxnat import edit_ops
from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID, PLH_ID
from jaxnat.oracle import ed2_labels, ed3_labels
from tests import reference as ref

# The docs' tables use BOS=0, EOS=2; pad those rows with -1.
ED2_VECTORS = [
    ([0, 5, 6, 2], [0, 4, 5, 7, 6, 8, 2], [0, 0, 0, 0], [1, 1, 1], [0, 1, 0, 1, 0, 1, 0]),
    ([0, 5, 2], [0, 5, 5, 2], [0, 0, 0], [0, 1], [0, 0, 1, 0]),
    ([0, 5, 5, 2], [0, 5, 2], [0, 0, 1, 0], None, None),
    ([0, 5, 7, 7, 2], [0, 5, 6, 7, 2], [0, 0, 0, 1, 0], None, None),
    ([0, 7, 5, 2], [0, 5, 7, 2], [0, 1, 0, 0], None, None),
]
ED3_VECTORS = [
    ([0, 5, 9, 2], [0, 5, 5, 2], 1, [0, 1, 1, 3], [0, 0, 0], [0, 0, 0, 0]),
    ([0, 5, 9, 6, 2], [0, 5, 6, 6, 2], 1, [0, 1, 3, 3, 4], [0, 0, 0, 0], [0, 0, 0, 0, 0]),
    ([0, 5, 6, 2], [0, 6, 5, 2], 2, [0, 0, 2, 3], [0, 0, 1], [0, 0, 1, 0]),
    ([0, 5, 6, 7, 2], [0, 7, 5, 6, 2], 2, [0, 1, 2, 0, 4], [1, 0, 0, 0], [0, 1, 0, 0, 0]),
    ([0, 5, 6, 2], [0, 4, 5, 7, 6, 8, 2], 3, [0, 1, 2, 3], [1, 1, 1], [0, 1, 0, 1, 0, 1, 0]),
]


def _row(seq, length, pad=PAD_ID):
    return list(seq) + [pad] * (length - len(seq))


def _unpad(row, pad=PAD_ID):
    return [int(t) for t in row if t != pad]


@pytest.mark.parametrize("x, y, deletion, slots, mask", ED2_VECTORS)
def test_ed2_reference_vectors(x, y, deletion, slots, mask):
    out = ed2_labels(jnp.array([x]), jnp.array([y]), pad_id=-1)
    assert out.deletion[0].tolist() == deletion
    if slots is not None:
        assert out.insertion[0].tolist() == slots
        assert out.insert_mask[0].astype(int).tolist() == mask
    assert ref.ed2_labels(x, y)[0] == deletion


@pytest.mark.parametrize("x, y, distance, repos, slots, mask", ED3_VECTORS)
def test_ed3_reference_vectors(x, y, distance, repos, slots, mask):
    out = ed3_labels(jnp.array([x]), jnp.array([y]), pad_id=-1)
    assert int(out.distance[0]) == distance
    assert out.reposition[0].tolist() == repos
    assert out.insertion[0].tolist() == slots
    assert out.insert_mask[0].astype(int).tolist() == mask
    assert ref.ed3_labels(x, y) == (repos, slots, [bool(v) for v in mask], distance)


# ------------------------------------------------------------------------------------------ random pairs

def sentences(max_len, vocab):
    """[BOS, …, EOS] with 0 … max_len-2 real tokens from a small vocabulary, or an all-padding row."""
    real = st.lists(st.integers(6, 5 + vocab), max_size=max_len - 2).map(lambda m: [BOS_ID, *m, EOS_ID])
    return st.one_of(real, real, real, st.just([]))


def batches(lx, ly, vocab, size=6):
    return st.lists(st.tuples(sentences(lx, vocab), sentences(ly, vocab)), min_size=size, max_size=size)


def _arrays(pairs, lx, ly):
    x = jnp.array([_row(a, lx) for a, _ in pairs], jnp.int32)
    y = jnp.array([_row(b, ly) for _, b in pairs], jnp.int32)
    return x, y


def _check_against_reference(pairs, lx, ly):
    x, y = _arrays(pairs, lx, ly)
    # on the host once: indexing the device arrays row by row dispatches (and first compiles) an op per row
    e2, e3 = jax.device_get((ed2_labels(x, y), ed3_labels(x, y)))
    for b, (xs, ys) in enumerate(pairs):
        deletion, slots, mask, dist = ref.ed2_labels(xs, ys)
        assert e2.deletion[b].tolist() == _row(deletion, lx, 0), (xs, ys)
        assert e2.insertion[b].tolist() == _row(slots, lx - 1, 0), (xs, ys)
        assert e2.insert_mask[b].tolist() == _row(mask, ly, False), (xs, ys)
        assert int(e2.distance[b]) == dist
        repos, slots, mask, dist = ref.ed3_labels(xs, ys)
        assert e3.reposition[b].tolist() == _row(repos, lx, 0), (xs, ys)
        assert e3.insertion[b].tolist() == _row(slots, lx - 1, 0), (xs, ys)
        assert e3.insert_mask[b].tolist() == _row(mask, ly, False), (xs, ys)
        assert int(e3.distance[b]) == dist


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(batches(9, 12, vocab=3))
def test_oracles_match_reference_small_vocab(pairs):
    _check_against_reference(pairs, 9, 12)


@settings(max_examples=40, deadline=None)
@given(batches(40, 70, vocab=4, size=4))
def test_oracles_match_reference_multiword(pairs):
    """Ly = 70 spans three 32-bit words: carries and bit searches cross word boundaries."""
    _check_against_reference(pairs, 40, 70)


@pytest.mark.parametrize("xs, ys", [
    ([BOS_ID, 7, 8, EOS_ID], [BOS_ID, EOS_ID]),                 # empty target
    ([BOS_ID, EOS_ID], [BOS_ID, 7, 7, 8, EOS_ID]),              # empty input
    ([BOS_ID, 7, 8, 7, EOS_ID], [BOS_ID, 7, 8, 7, EOS_ID]),     # identical
    ([BOS_ID, 9, EOS_ID], [BOS_ID, 9, EOS_ID]),                 # one real token
    ([BOS_ID, 7, 7, 7, 7, 7, 7, EOS_ID], [BOS_ID, 7, 7, EOS_ID]),  # full capacity, repeated tokens
    ([], [BOS_ID, 7, EOS_ID]),                                   # all-padding input row
    ([BOS_ID, 7, EOS_ID], []),                                   # all-padding target row
    ([], []),
    ([BOS_ID, 7], [BOS_ID, 7, 8]),  # no final EOS: an insertion after the last input token has no slot
])
def test_edge_cases(xs, ys):
    _check_against_reference([(xs, ys)], 8, 8)


def test_identical_rows_need_no_edits():
    x = jnp.array([_row([BOS_ID, 7, 8, 7, EOS_ID], 8)])
    assert int(ed2_labels(x, x).distance[0]) == 0
    assert ed3_labels(x, x).reposition[0].tolist() == [0, 1, 2, 3, 4, 0, 0, 0]


def test_insertion_counts_are_clamped():
    y = jnp.array([[BOS_ID] + [7] * 300 + [EOS_ID]])
    x = jnp.array([_row([BOS_ID, EOS_ID], 302)])
    assert int(ed2_labels(x, y).insertion[0, 0]) == 255
    assert int(ed3_labels(x, y).insertion[0, 0]) == 255


def test_labels_inside_jit_and_vmap_shapes():
    x = jnp.array([_row([BOS_ID, 7, EOS_ID], 6)] * 3)
    y = jnp.array([_row([BOS_ID, 8, 7, EOS_ID], 9)] * 3)
    out = jax.jit(lambda a, b: ed3_labels(a, b).insertion.sum())(x, y)
    assert int(out) == 3
    labels = ed2_labels(x, y)
    assert labels.deletion.shape == (3, 6) and labels.insertion.shape == (3, 5)
    assert labels.insert_mask.shape == (3, 9) and labels.distance.shape == (3,)


# ------------------------------------------------------------------------------------------ invariants

# jit'd, one program for the tests' one shape: eagerly, each op of the edit ops compiles its own
@jax.jit
def _apply_ed2(x, y, labels):
    deleted = edit_ops.delete_tokens(x, labels.deletion, PAD_ID)
    counts = edit_ops.carry_slots(labels.insertion, deleted.keep, edit_ops.lengths(deleted.tokens, PAD_ID))
    inserted = edit_ops.insert_placeholders(deleted.tokens, counts, PAD_ID, PLH_ID)
    return edit_ops.fill_placeholders(inserted.tokens, y, PLH_ID), inserted


@jax.jit
def _apply_ed3(x, y, labels):
    moved = edit_ops.reposition(x, labels.reposition, PAD_ID)
    counts = edit_ops.carry_slots(labels.insertion, moved.keep, edit_ops.lengths(moved.tokens, PAD_ID))
    inserted = edit_ops.insert_placeholders(moved.tokens, counts, PAD_ID, PLH_ID)
    return edit_ops.fill_placeholders(inserted.tokens, y, PLH_ID), inserted, moved


def framed(max_len, vocab):
    return st.lists(st.integers(6, 5 + vocab), max_size=max_len - 2).map(lambda m: [BOS_ID, *m, EOS_ID])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(framed(12, 3), framed(12, 3)), min_size=6, max_size=6))
def test_applying_labels_reproduces_the_target(pairs):
    x, y = _arrays(pairs, 12, 12)
    e2 = ed2_labels(x, y)
    e2, (out, inserted) = jax.device_get((e2, _apply_ed2(x, y, e2)))  # the checks below in numpy
    np.testing.assert_array_equal(out, y)
    assert (inserted.dropped == 0).all()
    np.testing.assert_array_equal(e2.distance, e2.deletion.sum(1) + e2.insertion.sum(1))
    np.testing.assert_array_equal(e2.distance, e2.deletion.sum(1) + e2.insert_mask.sum(1))

    e3 = ed3_labels(x, y)
    e3, (out, inserted, moved) = jax.device_get((e3, _apply_ed3(x, y, e3)))
    np.testing.assert_array_equal(out, y)
    assert (inserted.dropped == 0).all()
    substitutions = moved.num_moved
    np.testing.assert_array_equal(e3.distance, moved.num_deleted + substitutions + e3.insertion.sum(1))
    for b, (xs, ys) in enumerate(pairs):
        assert int(e3.distance[b]) == ref.dp_table(xs, ys, True)[-1][-1]
        assert int(e2.distance[b]) == ref.dp_table(xs, ys, False)[-1][-1]
