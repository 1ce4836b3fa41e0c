"""jaxnat.argmax against a plain-Python argmax (first maximum, NaN the largest) on random arrays: ties,
-inf rows, NaN, empty batches, and axis widths that take each of its three paths."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxnat.argmax import SMALL, argmax, chunk_size

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


def test_widths_cover_each_path():
    assert all(w < SMALL for w in SMALL_WIDTHS)
    assert all(w >= SMALL and chunk_size(w) for w in CHUNKED_WIDTHS)
    assert chunk_size(174) == 58 and chunk_size(9802) == 58  # fairseq's Multi30k dictionary: 58 · 169
    assert all(w >= SMALL and chunk_size(w) is None for w in AWKWARD_WIDTHS)
    assert chunk_size(8000) and chunk_size(32000)  # the vocabulary sizes of the shipped configs


def test_random_logits_like_jnp():
    x = jax.random.normal(jax.random.PRNGKey(0), (4, 7, 8000))
    np.testing.assert_array_equal(_argmax(x), jnp.argmax(x, axis=-1))
