"""Edit ops against their plain-Python references (tests/reference.py) on random rows, incl. empty rows,
length-1 rows, rows at full capacity and all-padding rows; plus jit/vmap use and shape preservation."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxnat import edit_ops
from tests import reference as ref

L = 8
PAD, PLH = 0, 4
FAST = settings(max_examples=200, deadline=None)


def _row(seq, length=L, pad=PAD):
    return list(seq) + [pad] * (length - len(seq))


def rows(size=5):
    """Right-padded rows of 0 … L non-pad tokens (1 = BOS-like, 2 = EOS-like, small ids repeat often)."""
    return st.lists(st.lists(st.integers(1, 9), max_size=L), min_size=size, max_size=size)


def flags(size=5):
    return st.lists(st.lists(st.booleans(), min_size=L, max_size=L), min_size=size, max_size=size)


def ints(lo, hi, width, size=5):
    return st.lists(st.lists(st.integers(lo, hi), min_size=width, max_size=width), min_size=size, max_size=size)


def _tokens(seqs):
    return jnp.array([_row(s) for s in seqs], jnp.int32)


# The ops under test run jit'd, one program a shape: eagerly, each of their ops compiles its own program. Their
# outputs come to the host once (jax.device_get): indexing a device array row by row dispatches an op per row.
_delete = jax.jit(lambda t, d, p, s: edit_ops.delete_tokens(t, d, PAD, protect=p, sides=s))
_insert = jax.jit(lambda t, c, cap, s: edit_ops.insert_placeholders(t, c, PAD, PLH, max_length=cap, sides=s))
_reposition = jax.jit(lambda t, i, s: edit_ops.reposition(t, i, PAD, sides=s))


@FAST
@given(rows(), flags(), flags())
def test_delete_matches_reference(seqs, delete, protect):
    tokens = _tokens(seqs)
    scores = tokens.astype(jnp.float32) * 0.5
    out = jax.device_get(_delete(tokens, jnp.array(delete), jnp.array(protect), {"score": scores}))
    for b, seq in enumerate(seqs):
        want = ref.delete(seq, delete[b], protect[b])
        assert out.tokens[b].tolist() == _row(want)
        assert out.sides["score"][b].tolist() == _row([t * 0.5 for t in want], pad=0.0)
        assert int(out.num_deleted[b]) == len(seq) - len(want)
        assert out.keep[b].tolist() == _row(ref.kept_after_delete(seq, delete[b], protect[b]), pad=False)


@FAST
@given(rows(), ints(-1, 4, L - 1), st.lists(st.integers(0, L + 2), min_size=5, max_size=5))
def test_insert_placeholders_matches_reference(seqs, counts, caps):
    tokens = _tokens(seqs)
    marks = tokens == 3
    out = jax.device_get(_insert(tokens, jnp.array(counts), jnp.array(caps), marks))
    for b, seq in enumerate(seqs):
        want, applied, dropped = ref.insert_placeholders(seq, counts[b], PLH, min(caps[b], L))
        assert out.tokens[b].tolist() == _row(want)
        assert out.counts[b].tolist() == _row(applied, L - 1, 0)
        assert int(out.dropped[b]) == dropped
        assert out.sides[b].tolist() == _row([t == 3 for t in want], pad=False)


@FAST
@given(rows(), ints(0, 9, L))
def test_fill_writes_placeholders_only(seqs, values):
    seqs = [[PLH if t == 5 else t for t in s] for s in seqs]
    out = jax.device_get(edit_ops.fill_placeholders(_tokens(seqs), jnp.array(values), PLH))
    for b, seq in enumerate(seqs):
        assert out[b].tolist() == _row(ref.fill(seq, values[b], PLH))


@FAST
@given(rows(), ints(-1, L + 1, L))
def test_reposition_matches_reference(seqs, index):
    tokens = _tokens(seqs)
    out = jax.device_get(_reposition(tokens, jnp.array(index), (tokens * 10,)))
    for b, seq in enumerate(seqs):
        want, keep = ref.reposition(seq, index[b])
        assert out.tokens[b].tolist() == _row(want)
        assert out.sides[0][b].tolist() == _row([t * 10 for t in want])
        assert out.keep[b].tolist() == _row(keep, pad=False)
        assert int(out.num_deleted[b]) == len(seq) - len(want)


_compact = jax.jit(lambda t, k, s: edit_ops.compact(t, k, PAD, s))


@FAST
@given(rows(), flags(), ints(1, 9, L))
def test_compact_matches_reference(seqs, keep, sides):
    """keep is ignored on padding, even where a side array holds a value there (callers pass e.g. ``~repeat``)."""
    out, out_sides = jax.device_get(_compact(_tokens(seqs), jnp.array(keep), jnp.array(sides)))
    for b, seq in enumerate(seqs):
        kept = [k for k in range(len(seq)) if keep[b][k]]
        assert out[b].tolist() == _row([seq[k] for k in kept])
        assert out_sides[b].tolist() == _row([sides[b][k] for k in kept])


_carry_slots = jax.jit(edit_ops.carry_slots)


@FAST
@given(ints(0, 5, L - 1), flags(), st.lists(st.integers(0, L), min_size=5, max_size=5))
def test_carry_slots_matches_reference(counts, keep, lengths):
    # keep a prefix-of-length-n row with BOS and EOS kept, as after a deletion
    keep = [[k < n and (k in (0, n - 1) or keep[b][k]) for k in range(L)] for b, n in enumerate(lengths)]
    counts = [[c if k < n - 1 else 0 for k, c in enumerate(row)] for row, n in zip(counts, lengths)]
    new_length = jnp.array([sum(k) for k in keep])
    out = jax.device_get(_carry_slots(jnp.array(counts), jnp.array(keep), new_length))
    for b in range(len(counts)):
        assert out[b].tolist() == _row(ref.carry_slots(counts[b], keep[b]), L - 1, 0)


@jax.jit
def _edge_ops(tokens):
    everything = jnp.ones((4, L), bool)
    return (edit_ops.delete_tokens(tokens, everything, PAD),
            edit_ops.insert_placeholders(tokens, jnp.full((4, L - 1), 3), PAD, PLH),
            edit_ops.reposition(tokens, jnp.zeros((4, L), jnp.int32), PAD))


def test_edge_rows():
    tokens = jnp.array([_row([]), _row([1]), _row([1, 2]), _row([1, 7, 7, 7, 7, 7, 7, 2])])
    deleted, grown, moved = _edge_ops(tokens)
    assert deleted.tokens.tolist() == [_row([]), _row([1]), _row([1, 2]), _row([1, 2])]
    assert grown.tokens.tolist()[:3] == [_row([]), _row([1]), _row([1, PLH, PLH, PLH, 2])]
    assert grown.tokens.tolist()[3] == [1, 7, 7, 7, 7, 7, 7, 2] and int(grown.dropped[3]) == 21
    assert moved.tokens.tolist() == [_row([]), _row([1]), _row([1, 2]), _row([1, 2])]


def test_ops_keep_shapes_and_vmap():
    tokens = jnp.array([_row([1, 7, 8, 2])] * 3)
    counts = jnp.ones((3, L - 1), jnp.int32)
    single = jax.jit(jax.vmap(lambda t, c: edit_ops.insert_placeholders(t[None], c[None], PAD, PLH).tokens[0]))
    batched = jax.jit(lambda t, c: edit_ops.insert_placeholders(t, c, PAD, PLH).tokens)(tokens, counts)
    np.testing.assert_array_equal(single(tokens, counts), batched)
    assert batched.shape == tokens.shape
    assert batched[0].tolist() == [1, PLH, 7, PLH, 8, PLH, 2, 0]


def _phrase_marks(seqs, runs):
    """Phrase ids for random rows: runs[b] is a list of (start, length) turned into contiguous phrases 1, 2, …"""
    marks = []
    for seq, row_runs in zip(seqs, runs):
        m = [0] * len(seq)
        k = 1
        for pid, (start, length) in enumerate(row_runs, 1):
            start = max(start, k)
            for j in range(start, min(start + length, len(seq) - 1)):
                m[j] = pid
            k = start + length  # phrases may touch (as in a canvas of several constraints)
        marks.append(m)
    return marks


_reposition_phrases = jax.jit(lambda t, i, a, p, s: edit_ops.reposition_phrases(t, i, a, p, PAD, sides=s))


@FAST
@given(rows(), ints(-1, L + 1, L), ints(-1, L + 1, L),
       st.lists(st.lists(st.tuples(st.integers(1, L), st.integers(1, 3)), max_size=3), min_size=5, max_size=5))
def test_reposition_phrases_matches_reference(seqs, index, anchor, runs):
    marks = _phrase_marks(seqs, runs)
    tokens = _tokens(seqs)
    phrase = jnp.array([_row(m) for m in marks], jnp.int32)
    out = jax.device_get(_reposition_phrases(tokens, jnp.array(index), jnp.array(anchor), phrase,
                                             (tokens * 10, phrase)))
    for b, seq in enumerate(seqs):
        want = [seq[k] for k in ref.reposition_phrases(seq, index[b], anchor[b], marks[b])]
        assert out.tokens[b].tolist() == _row(want), (seq, index[b], anchor[b], marks[b])
        assert out.sides[0][b].tolist() == _row([t * 10 for t in want])
        # every phrase token survives exactly once, phrases stay whole and in their own order
        got_marks = [int(m) for m in out.sides[1][b][:len(want)]]
        for pid in set(marks[b][1:-1]) - {0}:
            where = [k for k, m in enumerate(got_marks) if m == pid]
            assert where == list(range(where[0], where[0] + len(where)))
            assert [want[k] for k in where] == [t for t, m in zip(seq, marks[b]) if m == pid]
        keep, counts = _phrase_keep_and_counts(seq, index[b], anchor[b], marks[b])
        assert (out.keep[b].tolist(), int(out.num_deleted[b]), int(out.num_moved[b])) == (_row(keep, pad=False),
                                                                                           *counts)


def _phrase_keep_and_counts(seq, index, anchor, phrase):
    """keep and (num_deleted, num_moved) of `reposition_phrases`, by their definitions: keep marks BOS, EOS,
    phrase tokens and the free slots that emit a token; num_deleted counts the free interior slots that emit
    nothing, num_moved the free slots emitting another token plus the tokens of phrases whose anchor is not
    their start."""
    n = len(seq)
    free = [k for k in range(1, n - 1) if not phrase[k]]
    emits = [k for k in free if 1 <= index[k] < n - 1 and not phrase[index[k]]]
    keep = [k in (0, n - 1) or bool(phrase[k]) or k in emits for k in range(n)]
    start = {}
    for k in range(1, n - 1):
        if phrase[k] and phrase[k] != phrase[k - 1]:
            start[phrase[k]] = k
    moved = sum(index[k] != k for k in emits) + sum(
        1 for k in range(1, n - 1) if phrase[k] and min(max(anchor[start[phrase[k]]], 1), n - 1) != start[phrase[k]])
    return keep, (len(free) - len(emits), moved)


def test_reposition_phrases_without_phrases_is_reposition():
    tokens = jnp.array([_row([1, 5, 6, 7, 2]), _row([1, 2]), _row([])])
    index = jnp.array([[0, 3, 3, 0, 1, 0, 0, 0], [0] * L, [0] * L])
    plain = _reposition(tokens, index, None)
    kept = _reposition_phrases(tokens, index, jnp.zeros_like(index), jnp.zeros_like(index), None)
    assert kept.tokens.tolist() == plain.tokens.tolist()
    assert kept.num_deleted.tolist() == plain.num_deleted.tolist()
    assert kept.num_moved.tolist() == plain.num_moved.tolist()


def test_capped_insertions_reach_the_end_of_the_sentence():
    """An overflowing row (every slot asks for 3, room for 6) gives each slot its share, the last ones too,
    instead of serving the first slots and starving the rest."""
    tokens = jnp.array([_row([1, 5, 6, 7, 8, 9, 2], 16)], jnp.int32)
    insert = jax.jit(edit_ops.insert_placeholders, static_argnames=("pad_id", "plh_id", "max_length"))
    out = insert(tokens, jnp.full((1, 15), 3, jnp.int32), PAD, PLH, max_length=13)
    assert out.counts[0, :6].tolist() == [1, 1, 1, 1, 1, 1]
    assert int(out.dropped[0]) == 12
    big = insert(tokens, jnp.array([[9, 0, 0, 0, 0, 1] + [0] * 9], jnp.int32), PAD, PLH, max_length=10)
    assert big.counts[0, :6].tolist() == [2, 0, 0, 0, 0, 1]  # the big request is cut, the small one kept
