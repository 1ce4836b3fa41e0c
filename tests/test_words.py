"""`jaxnat.decoding.words` (hard constraints stay whole words in parallel passes) against the plain-Python
walk of tests/words_reference.py, on random rows, phrases and tables."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxnat.decoding import words
from tests import words_reference as ref

V, L = 8, 12  # ids 0-1: word starts, then continuing / trailing pieces as the test draws them


@jax.jit
def _repair(logits, tokens, written, in_phrase, last, continues, trails):
    """The pass: argmax of logits at the written positions; then `words.keep_whole`."""
    def choose(level):
        best = jnp.argmax(words.restrict(logits, level, continues, trails), axis=-1).astype(jnp.int32)
        return (jnp.where(written, best, tokens),)
    out = words.keep_whole(choose, choose(jnp.zeros(tokens.shape, jnp.int32)), written, in_phrase, last,
                           continues, trails)
    glued, _ = words.glued(out[0], in_phrase, last, continues, trails)
    return out[0], glued


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 3), st.floats(0.2, 0.8))
def test_repair_matches_the_walk_and_glues_nothing(seed, rows, p_written):
    rng = np.random.default_rng(seed)
    kind = rng.integers(0, 3, V)  # 0 starts a word, 1 continues one, 2 trails (punctuation)
    kind[:2] = 0  # some piece always closes a word
    continues, trails = kind == 1, kind == 2
    tokens = rng.integers(0, V, (rows, L)).astype(np.int32)
    phrase = np.zeros((rows, L), np.int32)
    for r in range(rows):  # one or two phrases of one to three pieces
        at = 0
        for pid in range(1, rng.integers(2, 4)):
            start = int(rng.integers(at, L - 3))
            size = int(rng.integers(1, 4))
            phrase[r, start:start + size] = pid
            at = start + size + 1
            if at >= L - 3:
                break
    in_phrase = phrase > 0
    last = in_phrase & (phrase != np.pad(phrase[:, 1:], ((0, 0), (0, 1))))
    written = (rng.random((rows, L)) < p_written) & ~in_phrase
    logits = rng.normal(size=(rows, L, V)).astype(np.float32)
    # the tokens the pass did not write glue nothing (what the previous pass left): make them so
    for r in range(rows):
        fixed = [int(t) if not w else 0 for t, w in zip(tokens[r], written[r])]
        for i, bad in enumerate(ref.glued(fixed, in_phrase[r], last[r], continues, trails)):
            if bad and not written[r, i]:
                tokens[r, i] = 0
    got, glued = jax.device_get(_repair(logits, tokens, written, in_phrase, last, continues, trails))

    for r in range(rows):
        def choose(levels, r=r):
            return [int(np.argmax(np.where(ref.allowed(levels[i], continues, trails), logits[r, i], -np.inf)))
                    if written[r, i] else int(tokens[r, i]) for i in range(L)]
        want, _ = ref.repair(choose, choose([0] * L), written[r], in_phrase[r], last[r], continues, trails)
        assert got[r].tolist() == want
        assert not glued[r].any(), (got[r], phrase[r])
        assert glued[r].tolist() == ref.glued(want, in_phrase[r], last[r], continues, trails)


def test_punctuation_then_a_continuing_piece_is_chosen_again():
    """[phrase 5] then "." (trails) and "n" (continues), both written: "n" gives way to the best word start;
    with "n" left by an earlier pass, the "." does."""
    continues, trails = np.isin(np.arange(V), [6]), np.isin(np.arange(V), [7])
    tokens = np.asarray([[0, 5, 1, 1, 0]], np.int32)
    in_phrase = np.asarray([[False, True, False, False, False]])
    logits = np.zeros((1, 5, V), np.float32)
    logits[0, 2, 7], logits[0, 3, 6], logits[0, 3, 3], logits[0, 2, 4] = 5.0, 5.0, 4.0, 1.0
    written = np.asarray([[False, False, True, True, False]])
    got, _ = _repair(logits, tokens, written, in_phrase, in_phrase, continues, trails)
    assert got[0].tolist() == [0, 5, 7, 3, 0]  # "Zaun." then a new word
    earlier = np.asarray([[0, 5, 1, 6, 0]], np.int32)
    got, _ = _repair(logits, earlier, np.asarray([[False, False, True, False, False]]), in_phrase, in_phrase,
                     continues, trails)
    assert got[0].tolist() == [0, 5, 4, 6, 0]  # the "." gives way to a word start: "Zaun ▁x n"
