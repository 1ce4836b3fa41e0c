"""Tests of the roll-in noise functions (jaxnat.oracle.noise): the kernels against plain-Python references,
exact invariants of the random functions, and their distributions with a fixed seed."""

import itertools
import math
from collections import Counter
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as npst

from jaxnat.data.vocab import MASK_ID, PAD_ID
from jaxnat.oracle import noise as N

B, L = 8, 10            # every property test uses this shape, so each function compiles once
SEVERAL = settings(max_examples=200, deadline=None)

apply_delete = jax.jit(partial(N.apply_random_delete, pad_id=PAD_ID))
apply_mask = jax.jit(partial(N.apply_random_mask, pad_id=PAD_ID, mask_id=MASK_ID))
full_mask = jax.jit(partial(N.full_mask, pad_id=PAD_ID, mask_id=MASK_ID))
apply_shuffle = jax.jit(partial(N.apply_word_shuffle, pad_id=PAD_ID))
apply_delete_shuffle = jax.jit(partial(N.apply_delete_shuffle, pad_id=PAD_ID))
random_delete = jax.jit(partial(N.random_delete, pad_id=PAD_ID))
random_mask = jax.jit(partial(N.random_mask, pad_id=PAD_ID, mask_id=MASK_ID))


# ---------------------------------------------------------------------------------------------- strategies

ALMOST_ONE = float(np.nextafter(np.float32(1), np.float32(0)))
# float32 uniforms, with frequent ties and the top edge (k must stay ≤ n − 1 there). No subnormals:
# XLA on CPU flushes them to zero (so 1e-45 ties with 0), and jax.random.uniform never draws them.
UNIT = st.one_of(st.floats(0.0, 1.0, exclude_max=True, width=32, allow_subnormal=False),
                 st.sampled_from([0.0, 0.5, ALMOST_ONE]))
SHIFT = st.one_of(st.floats(0.0, 3.0, exclude_max=True, width=32, allow_subnormal=False),
                  st.sampled_from([0.0, 1.0, 2.5]))
GLOBAL_SHIFT = st.floats(0.0, N.GLOBAL_DISTANCE, exclude_max=True, width=32, allow_subnormal=False)  # p_global rows
ROW_LENGTH = st.one_of(st.sampled_from([0, 1, 2, 3, L]), st.integers(0, L))


@st.composite
def batches(draw):
    """int32[B, L] right-padded rows of random lengths; ids 1..6 include BOS/EOS/MASK ids as real tokens, to
    check that boundaries are found by position, and repeat often."""
    tokens = draw(npst.arrays(np.int32, (B, L), elements=st.integers(1, 6)))
    lengths = draw(npst.arrays(np.int32, (B,), elements=ROW_LENGTH))
    return np.where(np.arange(L) < lengths[:, None], tokens, PAD_ID).astype(np.int32)


def floats(draw, elements, shape):
    return draw(npst.arrays(np.float32, shape, elements=elements))


def bools(draw, shape):
    # every element drawn (no fill): a filled array is mostly one value, e.g. word starts all True or all False
    return draw(npst.arrays(np.bool_, shape, fill=st.nothing()))


# ------------------------------------------------------------------------------------ plain-Python references

def ref_real(row):
    """(length, real positions) of one row."""
    n = sum(t != PAD_ID for t in row)
    return n, list(range(1, n - 1))


def ref_lowest(real, scores, count):
    """The ``count`` real positions of lowest score, ties broken by position."""
    return set(sorted(real, key=lambda i: (scores[i], i))[:max(count, 0)])


def ref_floor(n, v):
    """⌊n·v⌋ with the product rounded to float32, as the kernel computes it; still < n for every v < 1."""
    k = int(np.floor(np.float32(n) * np.float32(v)))
    assert k < n or n == 0
    return k


def padded(seq, fill=PAD_ID):
    seq = list(seq)
    return seq + [fill] * (L - len(seq))


def ref_delete(row, v, scores):
    n, real = ref_real(row)
    kept = ref_lowest(real, scores, ref_floor(len(real), v))
    keep = [i < n and (i not in real or i in kept) for i in range(L)]
    return padded(row[i] for i in range(L) if keep[i]), keep


def ref_mask(row, v, scores):
    _, real = ref_real(row)
    masked = ref_lowest(real, scores, ref_floor(len(real), v) + 1 if real else 0)
    return [MASK_ID if i in masked else t for i, t in enumerate(row)], [i in masked for i in range(L)]


def ref_shuffle(row, word_start, shift):
    n, real = ref_real(row)
    if not real:
        return list(row)
    words = []
    for i in real:
        if i == 1 or word_start[i]:
            words.append([])
        words[-1].append(row[i])
    key = [np.float32(w) + np.float32(shift[w]) for w in range(len(words))]
    order = sorted(range(len(words)), key=lambda w: (key[w], w))
    return padded([row[0]] + [t for w in order for t in words[w]] + [row[n - 1]])


def ref_delete_shuffle(row, word_start, v, scores, shuffle, shift):
    out, keep = ref_delete(row, v, scores)
    starts = padded((word_start[i] for i in range(L) if keep[i]), False)
    return ref_shuffle(out, starts, shift) if shuffle else out


def rows(array):
    return np.asarray(array).tolist()


# ------------------------------------------------------------------------------- kernels against references

@SEVERAL
@given(st.data())
def test_apply_random_delete_matches_reference(data):
    tokens = data.draw(batches())
    v, scores = floats(data.draw, UNIT, (B,)), floats(data.draw, UNIT, (B, L))
    out, keep = map(np.asarray, apply_delete(tokens, v, scores))
    for b in range(B):
        want_out, want_keep = ref_delete(tokens[b].tolist(), v[b], scores[b].tolist())
        assert rows(out[b]) == want_out
        assert rows(keep[b]) == want_keep


@SEVERAL
@given(st.data())
def test_apply_random_mask_matches_reference(data):
    tokens = data.draw(batches())
    v, scores = floats(data.draw, UNIT, (B,)), floats(data.draw, UNIT, (B, L))
    out, masked = map(np.asarray, apply_mask(tokens, v, scores))
    for b in range(B):
        want_out, want_masked = ref_mask(tokens[b].tolist(), v[b], scores[b].tolist())
        assert rows(out[b]) == want_out
        assert rows(masked[b]) == want_masked


@SEVERAL
@given(batches())
def test_full_mask_matches_reference(tokens):
    out, masked = map(np.asarray, full_mask(tokens))
    for b in range(B):
        _, real = ref_real(tokens[b].tolist())
        assert rows(masked[b]) == [i in real for i in range(L)]
        assert rows(out[b]) == [MASK_ID if i in real else t for i, t in enumerate(tokens[b].tolist())]


@SEVERAL
@given(st.data())
def test_apply_word_shuffle_matches_reference(data):
    tokens = data.draw(batches())
    word_start, shift = bools(data.draw, (B, L)), floats(data.draw, SHIFT, (B, L))
    out = np.asarray(apply_shuffle(tokens, word_start, shift))
    for b in range(B):
        assert rows(out[b]) == ref_shuffle(tokens[b].tolist(), word_start[b].tolist(), shift[b].tolist())


def test_a_long_row_keeps_the_pieces_of_each_word_in_order():
    """Twelve words of three pieces each (a row of 40, where XLA:CPU's unstable sort reorders equal keys; the
    property tests' rows of 10 are sorted stably either way), with shifts that reverse the words."""
    words = [[10 + 3 * w, 11 + 3 * w, 12 + 3 * w] for w in range(12)]
    tokens = np.array([[1, *itertools.chain(*words), 2, PAD_ID, PAD_ID]], np.int32)
    word_start = np.zeros((1, 40), bool)
    word_start[0, 1:37:3] = True
    shift = np.zeros((1, 40), np.float32)
    shift[0, :12] = 2 * (11 - np.arange(12))  # key w + 2 (11 - w) = 22 - w
    out = np.asarray(N.apply_word_shuffle(tokens, word_start, shift, PAD_ID))
    assert rows(out[0]) == [1, *itertools.chain(*words[::-1]), 2, PAD_ID, PAD_ID]


def test_pieces_before_the_first_word_start_form_the_first_word():
    """Real pieces 5 6 7 8 with a word start only at 7: 5 6 is word 0 (key 0 + 2.9), 7 8 word 1 (key 1 + 0)."""
    tokens = np.array([padded([1, 5, 6, 7, 8, 2])] * B, np.int32)
    word_start = np.zeros((B, L), bool)
    word_start[:, 3] = True
    shift = np.zeros((B, L), np.float32)
    shift[:, 0] = 2.9
    out = np.asarray(apply_shuffle(tokens, word_start, shift))
    assert rows(out[0]) == ref_shuffle(tokens[0].tolist(), word_start[0].tolist(), shift[0].tolist()) == padded(
        [1, 7, 8, 5, 6, 2])


@pytest.mark.slow
@SEVERAL
@given(st.data())
def test_apply_delete_shuffle_matches_reference(data):
    tokens = data.draw(batches())
    word_start, shift = bools(data.draw, (B, L)), floats(data.draw, st.one_of(SHIFT, GLOBAL_SHIFT), (B, L))
    v, scores = floats(data.draw, UNIT, (B,)), floats(data.draw, UNIT, (B, L))
    shuffle = bools(data.draw, (B,))
    out = np.asarray(apply_delete_shuffle(tokens, word_start, v, scores, shuffle, shift))
    for b in range(B):
        assert rows(out[b]) == ref_delete_shuffle(tokens[b].tolist(), word_start[b].tolist(), v[b],
                                                  scores[b].tolist(), shuffle[b], shift[b].tolist())


# ---------------------------------------------------------------------------------------------- invariants

@SEVERAL
@given(batches(), st.integers(0, 2**32 - 1))
def test_random_delete_keeps_an_ordered_subsequence_with_its_sides(tokens, seed):
    index = np.broadcast_to(np.arange(L, dtype=np.int32), (B, L))
    sides = {"index": index, "flag": tokens % 2 == 1}
    out, moved = random_delete(jax.random.key(seed), tokens, sides=sides)
    out, source, flag = np.asarray(out), np.asarray(moved["index"]), np.asarray(moved["flag"])
    for b in range(B):
        n, m = (tokens[b] != PAD_ID).sum(), (out[b] != PAD_ID).sum()
        assert m == n if n <= 2 else 2 <= m <= n - 1          # ≥ 1 real token deleted whenever there is one
        src = source[b, :m]
        assert (np.diff(src) > 0).all()                        # a subsequence, in order
        assert (out[b, :m] == tokens[b, src]).all() and (flag[b, :m] == sides["flag"][b, src]).all()
        assert (out[b, m:] == PAD_ID).all() and (source[b, m:] == 0).all() and not flag[b, m:].any()
        if n:
            assert src[0] == 0 and src[-1] == n - 1            # BOS and EOS kept


@SEVERAL
@given(batches(), st.integers(0, 2**32 - 1))
def test_random_mask_touches_only_real_tokens(tokens, seed):
    out, masked = map(np.asarray, random_mask(jax.random.key(seed), tokens))
    for b in range(B):
        n_real = max((tokens[b] != PAD_ID).sum() - 2, 0)
        assert not masked[b, 0] and not masked[b, n_real + 1:].any()     # BOS, EOS, padding
        assert 1 <= masked[b].sum() <= n_real if n_real else not masked[b].any()
        assert (out[b][masked[b]] == MASK_ID).all() and (out[b][~masked[b]] == tokens[b][~masked[b]]).all()


@SEVERAL
@given(st.data())
def test_word_shuffle_moves_whole_words_less_than_max_distance(data):
    # distinct ids 1..n reveal the permutation; shifts up to 3.0 inclusive, the closed end of the interval
    lengths = data.draw(npst.arrays(np.int32, (B,), elements=ROW_LENGTH)).tolist()
    tokens = np.array([padded(range(1, n + 1)) for n in lengths], np.int32)
    word_start = bools(data.draw, (B, L))
    shift = floats(data.draw, st.one_of(SHIFT, st.just(3.0)), (B, L))
    out = np.asarray(apply_shuffle(tokens, word_start, shift))
    for b, n in enumerate(lengths):
        if n <= 2:
            assert (out[b] == tokens[b]).all()
            continue
        assert out[b, 0] == 1 and out[b, n - 1] == n and (out[b, n:] == PAD_ID).all()
        words = []                                             # each word: its pieces' ids (= input positions + 1)
        for i in range(1, n - 1):
            if i == 1 or word_start[b, i]:
                words.append([])
            words[-1].append(i + 1)
        placed = out[b, 1:n - 1].tolist()
        new_place = {}
        for w, pieces in enumerate(words):
            at = placed.index(pieces[0])
            assert placed[at:at + len(pieces)] == pieces       # contiguous, internal order kept
            new_place[at] = w
        for new_rank, (_, w) in enumerate(sorted(new_place.items())):
            assert abs(new_rank - w) < 3                       # i.e. at most 2 words for max_distance 3


@jax.jit
def random_and_kernel_outputs(key, tokens, word_start):
    """Each random function, and its kernel applied to the numbers its draw function gives for the same key."""
    v, scores = N.draw_subset(key, tokens.shape)
    draws = N.draw_delete_shuffle(key, tokens.shape)
    return ((N.random_delete(key, tokens), N.apply_random_delete(tokens, v, scores)[0]),
            (N.random_mask(key, tokens)[0], N.apply_random_mask(tokens, v, scores)[0]),
            (N.random_delete_shuffle(key, tokens, word_start), N.apply_delete_shuffle(tokens, word_start, *draws)),
            draws[3])


@jax.jit  # one program: eagerly, each of their ops compiles its own
def global_shuffle_outputs(key, tokens, word_start):
    """With p_global = 0.5: the random function's output, its kernel's on its draws, the draws; and the draws of
    p_global = 0."""
    draws = N.draw_delete_shuffle(key, tokens.shape, p_global=0.5)
    return (N.random_delete_shuffle(key, tokens, word_start, p_global=0.5),
            N.apply_delete_shuffle(tokens, word_start, *draws), draws, N.draw_delete_shuffle(key, tokens.shape))


@SEVERAL
@given(batches(), st.integers(0, 2**32 - 1))
def test_global_shuffle_is_its_kernel_on_its_draws(tokens, seed):
    out, kernel_out, draws, paper = global_shuffle_outputs(jax.random.key(seed), tokens, tokens % 2 == 0)
    assert rows(out) == rows(kernel_out)
    # p_global = 0 draws the paper's numbers, whatever else
    np.testing.assert_array_equal(draws[0], paper[0])
    np.testing.assert_array_equal(draws[1], paper[1])


@SEVERAL
@given(batches(), st.integers(0, 2**32 - 1))
def test_random_functions_are_their_kernels_on_their_draws(tokens, seed):
    *pairs, shift = random_and_kernel_outputs(jax.random.key(seed), tokens, tokens % 2 == 0)
    for random_output, kernel_output in pairs:
        assert rows(random_output) == rows(kernel_output)
    assert 0 <= float(shift.min()) and float(shift.max()) < 3.0


# ----------------------------------------------------------------------------------------- distributions

ROWS, N_REAL = 20_000, 7
CHI2_999 = {6: 22.458, 126: 180.799}      # chi-square critical values at p = 0.001


def chi_square(observed: Counter, expected: dict) -> float:
    assert set(observed) <= set(expected)
    return sum((observed[k] - e) ** 2 / e for k, e in expected.items())


def one_length_batch(n_real, width=12):
    """ROWS identical rows [BOS, 10 … 10+n_real−1, EOS, PAD …]: the ids name the real positions."""
    row = [1] + list(range(10, 10 + n_real)) + [2]
    row += [PAD_ID] * (width - len(row))
    return jnp.asarray(np.tile(np.array(row, np.int32), (ROWS, 1)))


def subset_check(subsets, sizes):
    """Each subset of the real positions must have probability P(size) / C(n, size), sizes uniform."""
    size_counts = Counter(len(s) for s in subsets)
    assert chi_square(size_counts, {k: ROWS / len(sizes) for k in sizes}) < CHI2_999[6]
    expected = {frozenset(c): ROWS / len(sizes) / math.comb(N_REAL, k)
                for k in sizes for c in itertools.combinations(range(N_REAL), k)}
    assert chi_square(Counter(subsets), expected) < CHI2_999[126]


def position_rates_check(hits, p):
    """hits: bool[ROWS, N_REAL]. Each position is hit with probability p (4.5 standard errors)."""
    rates = hits.mean(axis=0)
    assert np.abs(rates - p).max() < 4.5 * math.sqrt(p * (1 - p) / ROWS), rates


def test_random_delete_distribution():
    tokens = one_length_batch(N_REAL)
    out = np.asarray(jax.jit(N.random_delete)(jax.random.key(0), tokens))
    kept = np.stack([(out == 10 + i).any(axis=1) for i in range(N_REAL)], axis=1)
    subset_check([frozenset(np.flatnonzero(r).tolist()) for r in kept], range(N_REAL))
    # kept count k uniform on 0..n−1: a position survives with probability E[k]/n = (n−1)/(2n)
    position_rates_check(~kept, 1 - (N_REAL - 1) / (2 * N_REAL))


def test_random_mask_distribution():
    tokens = one_length_batch(N_REAL)
    out, masked = map(np.asarray, jax.jit(N.random_mask)(jax.random.key(1), tokens))
    hits = masked[:, 1:N_REAL + 1]
    assert not masked[:, N_REAL + 1:].any() and not masked[:, 0].any() and (out[masked] == MASK_ID).all()
    subset_check([frozenset(np.flatnonzero(r).tolist()) for r in hits], range(1, N_REAL + 1))
    position_rates_check(hits, (N_REAL + 1) / (2 * N_REAL))  # E[m]/n with m uniform on 1..n


def test_random_delete_shuffle_rates():
    # Three one-piece words: a row ends with two real words in reverse order iff two survive the deletion
    # (prob 1/3), the coin says shuffle (1/2) and the keys 0 + u0, 1 + u1 swap, i.e. u0 − u1 > 1 with
    # u ~ U[0, 3) i.i.d. (prob 2/9): 1/27 in all.
    tokens = one_length_batch(3)
    word_start = jnp.ones(tokens.shape, bool)
    key = jax.random.key(2)
    out = np.asarray(jax.jit(N.random_delete_shuffle)(key, tokens, word_start))
    shuffle = np.asarray(jax.jit(N.draw_delete_shuffle, static_argnums=1)(key, tokens.shape)[2])
    assert abs(shuffle.mean() - 0.5) < 4.5 * math.sqrt(0.25 / ROWS)
    two_kept = out[:, 3] == 2                                  # EOS at position 3
    reversed_pair = two_kept & (out[:, 1] > out[:, 2])
    p = 1 / 27
    assert abs(reversed_pair.mean() - p) < 4.5 * math.sqrt(p * (1 - p) / ROWS)
    assert not reversed_pair[~shuffle].any()


def test_a_share_of_global_shuffles_keeps_the_local_ones():
    """0 < p_global < 1: a row is shuffled when its local coin or its global coin says so (p_shuffle = 1: all)."""
    draws = N.draw_delete_shuffle(jax.random.key(0), (64, L), p_shuffle=1.0, p_global=0.5)
    assert np.asarray(draws[2]).all()


def test_global_shuffle_gives_a_uniform_order():
    """p_global = 1: every row is shuffled globally, so the kept words come out in a uniformly random order (the
    24 orders of 4 kept words equally likely: no trace of the local shuffle's bias to stay near home)."""
    tokens = one_length_batch(5)
    word_start = jnp.ones(tokens.shape, bool)
    shuffle = jax.jit(partial(N.random_delete_shuffle, p_shuffle=0.0, p_global=1.0))
    out = np.asarray(shuffle(jax.random.key(3), tokens, word_start))
    four_kept = out[out[:, 5] == 2, 1:5]                      # EOS at position 5: 4 of the 5 words kept
    orders = Counter(tuple(np.argsort(r).tolist()) for r in four_kept)
    assert len(orders) == 24
    assert chi_square(orders, {o: len(four_kept) / 24 for o in itertools.permutations(range(4))}) < 49.728
