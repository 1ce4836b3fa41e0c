"""jaxnat.argmax against a plain-Python argmax (first maximum, NaN the largest) on random arrays: ties,
-inf rows, NaN, empty batches, and axis widths that take each of its three paths; `masked_best` (a class known
empty as None) against the same."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxnat.argmax import SMALL, argmax, chunk_size, masked_best, top_k

SMALL_WIDTHS = (1, 2, 40)
CHUNKED_WIDTHS = (128, 192, 320, 640)
DIVISOR_WIDTHS = (174,)  # none of the preferred sizes divides it: its divisor 58
AWKWARD_WIDTHS = (131, 257)  # no chunk size divides them: lax.top_k
VALUES = st.sampled_from([-math.inf, -2.0, -1.0, 0.0, 0.5, 1.0, 3.0, math.nan])


def reference(row):
    """Index of the first maximum; a NaN beats every number (as jnp.argmax and np.argmax have it)."""
    best = 0
    for i, v in enumerate(row):
        if math.isnan(row[best]):
            break
        if math.isnan(v) or v > row[best]:
            best = i
    return best


@st.composite
def arrays(draw):
    lead = draw(st.sampled_from([(0,), (1,), (3,), (2, 2)]))
    width = draw(st.sampled_from(SMALL_WIDTHS + CHUNKED_WIDTHS + DIVISOR_WIDTHS + AWKWARD_WIDTHS))
    # mostly numbers from a small set (so ties are common), sometimes a constant row (all -inf, all NaN, ...)
    n = int(np.prod(lead))
    rows = []
    for _ in range(n):
        if draw(st.booleans()):
            rows.append([draw(VALUES)] * width)
        else:
            cells = draw(st.lists(st.tuples(st.integers(0, width - 1), VALUES), max_size=6))
            row = [-1.0] * width
            for i, v in cells:
                row[i] = v
            rows.append(row)
    return np.asarray(rows, np.float32).reshape(*lead, width)


_argmax = jax.jit(argmax)  # takes the NumPy array as it is: jnp.asarray would compile a program for each shape


@settings(max_examples=150, deadline=None)
@given(arrays())
def test_matches_plain_python(x):
    got = np.asarray(_argmax(x))
    assert got.dtype == np.int32 and got.shape == x.shape[:-1]
    want = np.asarray([reference(list(r)) for r in x.reshape(-1, x.shape[-1])], np.int32).reshape(x.shape[:-1])
    np.testing.assert_array_equal(got, want)


_masked_best = jax.jit(masked_best, static_argnums=2)


@settings(max_examples=30, deadline=None)
@given(arrays(), st.data())
def test_masked_best_is_the_best_member(x, data):
    """The maximum of x over the members, fill elsewhere, and its first index; None (a class known to be empty)
    gives what a mask with no member gives."""
    width = x.shape[-1]
    member = np.asarray(data.draw(st.lists(st.booleans(), min_size=width, max_size=width)))
    fill = -5.0
    for mask in (member, None):
        values, index = map(np.asarray, _masked_best(x, mask, fill))
        keep = mask if mask is not None else np.zeros(width, bool)
        rows = np.where(keep, x, fill).reshape(-1, width)
        want = np.asarray([reference(list(r)) for r in rows], np.int32)
        np.testing.assert_array_equal(index.reshape(-1), want)
        np.testing.assert_array_equal(values.reshape(-1), rows[np.arange(len(rows)), want])


def test_widths_cover_each_path():
    assert all(w < SMALL for w in SMALL_WIDTHS)
    assert all(w >= SMALL and chunk_size(w) for w in CHUNKED_WIDTHS)
    assert chunk_size(174) == 58 and chunk_size(9802) == 58  # fairseq's Multi30k dictionary: 58 · 169
    assert all(w >= SMALL and chunk_size(w) is None for w in AWKWARD_WIDTHS)
    assert chunk_size(8000) and chunk_size(32000)  # the vocabulary sizes of the shipped configs


def test_random_logits_like_jnp():
    x = jax.random.normal(jax.random.PRNGKey(0), (4, 7, 8000))
    np.testing.assert_array_equal(_argmax(x), jnp.argmax(x, axis=-1))


def top_k_reference(row, k):
    """The k largest entries of a row, largest first, ties to the lower index: (values, indices)."""
    order = sorted(range(len(row)), key=lambda i: (-row[i], i))[:k]
    return [row[i] for i in order], order


TOP_K_SHAPES = ((3, 200), (2, 320), (2, 333), (2, 1000), (2, 3, 100), (1, 4, 333), (2, 5, 300))  # 200, 100: lax.top_k


@st.composite
def top_k_cases(draw):
    shape = draw(st.sampled_from(TOP_K_SHAPES))
    axes = 2 if len(shape) == 3 else 1
    n, width = int(np.prod(shape[:-axes])), int(np.prod(shape[-axes:]))
    k = draw(st.sampled_from([1, 2, 8]))
    numbers = st.sampled_from([-math.inf, -2.0, -1.0, 0.0, 0.5, 3.0])  # few values: ties are common
    rows = []
    for _ in range(n):
        base = draw(st.sampled_from([-1.0, -math.inf]))
        row = [base] * width
        for i, v in draw(st.lists(st.tuples(st.integers(0, width - 1), numbers), max_size=12)):
            row[i] = v
        rows.append(row)
    return np.asarray(rows, np.float32).reshape(shape), k, axes


_top_k = jax.jit(top_k, static_argnums=(1, 2))


@settings(max_examples=120, deadline=None)
@given(top_k_cases())
def test_top_k_matches_plain_python(case):
    x, k, axes = case
    values, indices = (np.asarray(a) for a in _top_k(x, k, axes))
    rows = x.reshape(-1, int(np.prod(x.shape[-axes:])))
    want = [top_k_reference(list(r), k) for r in rows]
    lead = x.shape[:-axes]
    np.testing.assert_array_equal(values, np.asarray([v for v, _ in want], np.float32).reshape(*lead, k))
    np.testing.assert_array_equal(indices, np.asarray([i for _, i in want], np.int32).reshape(*lead, k))
    assert indices.dtype == np.int32


def test_top_k_chunks_the_searches_candidates():
    """The beam searches' candidates [B, K, V] (a fairseq vocabulary no chunk divides) take the chunked path and
    agree with lax.top_k, ties and -inf rows included."""
    x = jnp.round(jax.random.normal(jax.random.PRNGKey(1), (3, 4, 7034)) * 4) / 4
    x = x.at[1].set(-jnp.inf).at[2, 1:].set(-jnp.inf)
    for k in (4, 8):
        got, want = _top_k(x, k, 2), jax.lax.top_k(x.reshape(3, -1), k)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


def test_top_k_keeps_a_rows_short_last_chunk_inside_the_row():
    """Rows of 333 (64 does not divide it) taken as one axis: the last chunk of a row holds 13 entries. Its 51 slots
    past the row's end are never taken, not even before real -inf entries, and never read the next row's first."""
    x = np.full((1, 4, 333), -np.inf, np.float32)
    x[0, 0, 330] = 3.0  # one number, in row 0's short chunk: the second best is the first -inf, index 0
    values, indices = _top_k(x, 2, 2)
    assert values.tolist() == [[3.0, -np.inf]] and indices.tolist() == [[330, 0]]
    x = np.full((1, 4, 333), -1.0, np.float32)
    x[0, 0, 330], x[0, 1, 0] = 3.0, 5.0  # row 1's first entry follows row 0's short chunk
    values, indices = _top_k(x, 2, 2)
    assert values.tolist() == [[5.0, 3.0]] and indices.tolist() == [[333, 330]]
