"""`jaxnat.decoding.constrained_fairseq` against fairseq's rules in plain Python
(tests/constrained_fairseq_reference.py): the progress through the phrases after every token, and the candidates
a step keeps. Its search as a whole is checked against the real fairseq's outputs in tests/test_import.py."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxnat.data.vocab import PAD_ID
from jaxnat.decoding import constrained_fairseq as cf
from tests import constrained_fairseq_reference as ref

C, P = 3, 3


@functools.lru_cache(maxsize=None)
def _walk(ordered: bool):
    def run(phrases, tokens):
        ph = cf.prepare(phrases)

        def step(s, token):
            s = cf.advance(ph, s, token, ordered)
            nxt, ok = cf.next_tokens(ph, s, ordered)
            return s, (cf.bank(ph, s, ordered), cf.finished(ph, s, ordered), nxt, ok)

        return jax.lax.scan(step, cf.start(ph, ordered), tokens)[1]
    return jax.jit(run)


phrase = st.lists(st.integers(6, 9), min_size=1, max_size=P)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(phrases=st.lists(phrase, min_size=1, max_size=C), tokens=st.lists(st.integers(6, 10), min_size=1,
                                                                          max_size=12), ordered=st.booleans())
def test_progress_is_fairseqs(phrases, tokens, ordered):
    """Few distinct tokens, so that phrases share prefixes, repeat and overlap, and tokens break them. (The walk
    scans 12 tokens whatever their number, those after ``tokens`` unread: one compiled program, not one a length.)"""
    table = np.full((C, P), PAD_ID, np.int32)
    for c, p in enumerate(phrases):
        table[c, :len(p)] = p
    padded = jnp.asarray(tokens + [10] * (12 - len(tokens)), jnp.int32)
    banks, done, nxt, ok = _walk(ordered)(jnp.asarray(table), padded)
    state = ref.start(phrases, ordered)
    for t, token in enumerate(tokens):
        state = state.advance(token)
        assert int(banks[t]) == state.bank, (t, token)
        assert bool(done[t]) == state.finished, (t, token)
        assert set(np.asarray(nxt[t])[np.asarray(ok[t])].tolist()) == state.next_tokens(), (t, token)


_order = jax.jit(cf.order_candidates, static_argnums=6)


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), m=st.integers(4, 14), spread=st.sampled_from([1.0, 150.0]))
def test_the_kept_candidates_are_fairseqs(seed, m, spread):
    """Repeated pairs, offered and not, banks that interleave where scores span more than 100 (``spread``). (14
    candidates whatever ``m``, those after the m-th not offered: one compiled program, not one an m.)"""
    rng = np.random.default_rng(seed)
    parents, tokens = rng.integers(0, 2, m), rng.integers(6, 9, m)
    banks = rng.integers(0, 4, m)
    scores = (-spread * rng.random(m)).astype(np.float32)
    for i in range(1, m):  # a repeated pair has the same score and bank, as a step's repeats do
        j = rng.integers(0, i)
        if (parents[i], tokens[i]) == (parents[j], tokens[j]):
            scores[i], banks[i] = scores[j], banks[j]
    valid = rng.random(m) < 0.8
    keep = 4

    def padded(x, fill):
        return jnp.asarray(np.concatenate([x, np.full(14 - m, fill, x.dtype)]))
    ours = np.asarray(_order(padded(scores, 0.0), padded(parents, 0), padded(tokens, 6), padded(banks, 0),
                             padded(valid, False), jnp.int32(3), keep))
    live = np.flatnonzero(valid)
    theirs = ref.keep_candidates(scores[live], parents[live], tokens[live], banks[live], 3, keep)
    assert ours[:len(theirs)].tolist() == live[theirs].tolist()
