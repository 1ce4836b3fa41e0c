"""The repeat bans (`jaxnat.decoding.repeats`) against plain-Python transcriptions of fairseq's NGramRepeatBlock and
of the DA-Transformer authors' consecutive-repeat rule."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from jaxnat.decoding import repeats


def fairseq_ngram_bans(tokens: list[int], n: int) -> set[int]:
    """fairseq's SequenceGenerator with --no-repeat-ngram-size n at step len(tokens) − 1 (tokens: what it fed so
    far, its first the sentence start): every n-gram of the row indexed by its first n − 1 tokens; those following
    the row's last n − 1 tokens are banned."""
    step = len(tokens) - 1
    if step + 2 - n < 0:
        return set()
    following = {}
    for gram in zip(*[tokens[i:] for i in range(n)]):
        following.setdefault(tuple(gram[:-1]), []).append(gram[-1])
    return set(following.get(tuple(tokens[step + 2 - n: step + 1]), []))


def authors_consecutive_bans(res: list[int], n: int) -> set[int]:
    """The DA-Transformer authors' lookahead with decode_no_consecutive_repeated_ngram n: the last token, and for k
    = 2 … n the token k back where the last k − 1 equal the k − 1 before them."""
    bans = {res[-1]} if res else set()
    for k in range(2, min(n, (len(res) + 1) // 2) + 1):
        if all(res[-m] == res[-k - m] for m in range(1, k)):
            bans.add(res[-k])
    return bans


ROWS = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=12), min_size=1, max_size=4)
# one program a rule and n: every example's rows padded to 4 × 12 (eagerly, each shape compiled its ops anew)
ngram_bans = jax.jit(repeats.ngram_bans, static_argnums=2)
consecutive_bans = jax.jit(repeats.consecutive_bans, static_argnums=2)


def _padded(rows, width=12):
    history = np.full((4, width), 9, np.int32)  # what lies past a row's last token is never read
    for r, row in enumerate(rows):
        history[r, :len(row)] = row
    return history, np.array([len(row) - 1 for row in rows] + [0] * (4 - len(rows)), np.int32)


def _sets(bans, rows):
    return [set(int(t) for t in row if t >= 0) for row in np.asarray(bans)[:len(rows)]]


@settings(max_examples=80, deadline=None)
@given(ROWS, st.integers(1, 5))
@example([[2, 1, 2, 1, 2]], 2)   # "1 2" follows "2 1" … : 1 banned after the last 2
@example([[2, 2, 2]], 1)         # n = 1: every token of the row
def test_ngram_bans_are_fairseqs(rows, n):
    history, last = _padded(rows)
    assert _sets(ngram_bans(history, last, n), rows) == [fairseq_ngram_bans(row, n) for row in rows]
    # a scalar last reads every row at the same position: the first row's
    same = [fairseq_ngram_bans(row[:len(rows[0])], n) if len(row) >= len(rows[0]) else None for row in rows]
    got = _sets(ngram_bans(history, np.int32(len(rows[0]) - 1), n), rows)
    assert [g for g, s in zip(got, same) if s is not None] == [s for s in same if s is not None]


@settings(max_examples=80, deadline=None)
@given(ROWS, st.integers(0, 5))
@example([[1, 2, 3, 1, 2]], 3)   # "1 2 3 1 2" + "3" would repeat "1 2 3"
@example([[1, 2, 1]], 2)         # + "2" would repeat "1 2"
def test_consecutive_bans_are_the_authors(rows, n):
    history, last = _padded(rows)
    assert _sets(consecutive_bans(history, last, n), rows) == [authors_consecutive_bans(row, n) for row in rows]


def test_bans_reach_the_scores_and_the_candidates():
    logp = jnp.zeros((2, 6))
    bans = jnp.array([[4, -1, 1], [-1, -1, -1]])
    out = np.asarray(repeats.without(logp, bans))
    assert np.isneginf(out[0, [1, 4]]).all() and np.isfinite(np.delete(out[0], [1, 4])).all()
    assert np.isfinite(out[1]).all()
    hit = np.asarray(repeats.banned(jnp.array([[[4, 0], [1, 5]], [[4, 1], [0, 0]]]), bans))
    assert hit.tolist() == [[[True, False], [True, False]], [[False, False], [False, False]]]
