"""The DA-Transformer authors' beam search (`jaxnat.models.dat.dag_search`, dat.decode=dagsearch): their extension's
outputs on the fixture's graphs (tests/data/dag_search/, tools/make_dag_search_fixture.py), a transcription of their
C++ loop (tests/dat_reference.py) on random graphs, and the jit'd decoder that calls it."""

from __future__ import annotations

import functools
import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings, strategies as st

from jaxnat.decoding import ngram
from jaxnat.models.dat import dag, dag_search as ds
from jaxnat.models.dat.model import Decoding, decode_graph
from tests import dat_reference as ref

FIXTURE = os.path.join(os.path.dirname(__file__), "data", "dag_search", "dag_search.npz")
NGRAM = os.path.join(os.path.dirname(__file__), "data", "ngram")
PAD, BOS, EOS = 0, 1, 2


@functools.cache
def _lm():
    """The n-gram fixture's LM over its pieces (V = 19), NumPy tables (the host search's)."""
    with open(os.path.join(NGRAM, "kenlm_scores.json"), encoding="utf-8") as f:
        pieces = json.load(f)["pieces"]
    return jax.tree_util.tree_map(np.asarray, ngram.read_arpa(os.path.join(NGRAM, "lm.arpa"), pieces))


def _printed(words) -> list:
    """An output as fairseq prints the authors' (BOS, EOS, PAD dropped), in jaxnat's [BOS … EOS] form."""
    return [BOS, *(int(w) for w in words if w not in (PAD, BOS, EOS)), EOS]


def _reference(links, logp, n, top, beta, lm=None, **kw):
    cands = ref.authors_candidates(links, logp, n, top, beta)
    step = None if lm is None else lambda state, token: ngram.advance(lm, state, np.int32(token), xp=np)
    start = None if lm is None else ngram.start(lm, (), xp=np)
    return ref.dag_search(cands, n, lm_step=step, lm_start=start, **kw)


@functools.cache
def _candidates(top: int, beta: float):
    return jax.jit(lambda links, logp: dag.candidates(links, logp, top, beta))


def test_the_authors_extension_decodes_the_fixture_graphs_as_jaxnat_does():
    """Their DAG-Search (C++, one thread) on 16 random graphs under 9 settings (beam, per-length beam, candidate
    pairs, top-p, α, β, the LM's γ, both n-gram rules, their n = 1): jaxnat's search outputs what it output, and
    their score of each, [log-sum of its paths + γ · log10 P_lm] / m^α, is the transcription's."""
    f = np.load(FIXTURE)
    links, logp, n = f["links"], f["logp"], f["n"]
    B, L, V = logp.shape
    changed = 0
    for k, (beam, per_length, top, top_p, alpha, beta, gamma, consecutive, repeat) in enumerate(f["settings"]):
        beam, per_length, top, consecutive, repeat = (int(v) for v in (beam, per_length, top, consecutive, repeat))
        lm = _lm() if gamma else None
        cands = (np.asarray(a) for a in _candidates(top, float(beta))(jnp.asarray(links), jnp.asarray(logp)))
        tokens, _, _ = ds.search(*cands, n, np.full(B, L + 1), L + 1, V, beam, per_length, top_p, alpha, gamma, lm,
                                 repeat, consecutive)
        for b in range(B):
            theirs = [int(t) for t in f[f"tokens{k}"][b] if t != PAD]
            assert [int(t) for t in tokens[b, 0] if t != PAD] == _printed(theirs[1:]), (k, b)
            [(words, dag)] = _reference(links[b], logp[b], int(n[b]), top, float(beta), lm, beam=beam,
                                        per_length=per_length, top_p=top_p, alpha=alpha, gamma=gamma,
                                        no_repeat=repeat, no_consecutive=consecutive)
            assert words == theirs, (k, b)
            lm10 = 0.0
            if lm is not None:
                state = ngram.start(lm, (), xp=np)
                for w in words[1:]:
                    lp, state = ngram.advance(lm, state, np.int32(w), xp=np)
                    lm10 += float(lp)
            np.testing.assert_allclose(f[f"scores{k}"][b], (dag + gamma * lm10) / (len(words) - 1) ** alpha,
                                       rtol=1e-5, atol=1e-5)
        changed += sum(f[f"tokens{k}"][b].tolist() != f["tokens0"][b].tolist() for b in range(B))
    assert changed >= 10  # the settings change outputs


def _graphs(rng, batch: int, width: int, vocab: int):
    n = rng.integers(3, width + 1, size=batch)
    links = np.full((batch, width, width), -np.inf, np.float32)
    for b in range(batch):
        for i in range(n[b] - 1):
            row = rng.normal(size=n[b] - i - 1) * 1.5 - 0.5 * np.arange(n[b] - i - 1)
            links[b, i, i + 1:n[b]] = row - np.logaddexp.reduce(row)
    logp = rng.normal(size=(batch, width, vocab)) * 1.5
    return links, (logp - np.logaddexp.reduce(logp, axis=-1, keepdims=True)).astype(np.float32), n


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1), beam=st.integers(1, 6), per_length=st.integers(1, 4),
       top=st.integers(1, 4), top_p=st.sampled_from([0.3, 0.9, 1.0]), alpha=st.sampled_from([0.0, 1.1]),
       bans=st.sampled_from([(0, 0), (1, 0), (2, 0), (0, 1), (0, 3), (2, 2)]), gamma=st.sampled_from([0.0, 1.0]),
       capped=st.booleans(), nbest=st.integers(1, 3))
def test_the_search_is_the_authors_loop(seed, beam, per_length, top, top_p, alpha, bans, gamma, capped, nbest):
    """Rows of random graphs (up to 12 vertices, mostly short jumps so that outputs run long enough to repeat):
    jaxnat's batched search outputs what the transcription of their C++ loop outputs, each row as it would alone,
    with the log-sum of its paths; an output capacity (jaxnat's only departure) caps the prefixes; an n-best list
    (jaxnat's addition) holds the N best prefixes at the last vertex, the output first."""
    rng = np.random.default_rng(seed)
    B, L, V = 3, 12, 19
    links, logp, n = _graphs(rng, B, L, V)
    limit = rng.integers(3, L + 2, size=B) if capped else np.full(B, L + 1)
    lm = _lm() if gamma else None
    cands = (np.asarray(a) for a in _candidates(top, 1.0)(jnp.asarray(links), jnp.asarray(logp)))
    tokens, score, shares = ds.search(*cands, n, limit, L + 1, V, beam, per_length, top_p, alpha, gamma, lm, *bans,
                                      nbest)
    for b in range(B):
        listed = _reference(links[b], logp[b], int(n[b]), top, 1.0, lm, beam=beam, per_length=per_length,
                            top_p=top_p, alpha=alpha, gamma=gamma, no_repeat=bans[0], no_consecutive=bans[1],
                            limit=int(limit[b]), nbest=nbest)
        for k in range(nbest):
            row = [int(t) for t in tokens[b, k] if t != PAD]
            if k >= len(listed):                  # none (the output empty, the list short)
                assert row == [BOS, EOS] and score[b, k] == -np.inf
                continue
            words, dag = listed[k]
            assert row == _printed(words[1:]) and len(row) <= limit[b], (b, k)
            np.testing.assert_allclose(score[b, k], dag, rtol=1e-5, atol=1e-5)
            assert np.all(shares[b, k, len(row) - 1:] == 0)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1), size=st.integers(0, 3000), spread=st.sampled_from([3, 1000, 2 ** 16]))
def test_the_searchs_sorts_and_tables_are_their_plain_python(seed, size, spread):
    """The host search's bookkeeping at the sizes a batch of beam 100 reaches, against plain Python: its stable
    orders of integers (narrowed to int16 for a radix sort where they fit and outnumber 512) and of scores best first
    (a quicksort from 1024, the stable sort where two are equal or one is NaN) are Python's stable sort's; its
    grouping of prefix ids lists each prefix's items in order, the prefixes in the order of their first; its table
    of keys (a large and a small sorted run) answers as a dict, over insertions that merge the runs."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, spread, size)
    assert ds._stable_order(keys).tolist() == sorted(range(size), key=lambda i: keys[i])
    scores = rng.integers(0, spread, size) / 7.0          # equal scores where the spread is small
    if spread == 3 and size:
        scores[rng.integers(0, size, 3)] = np.nan
    assert ds._best_first(scores).tolist() == sorted(range(size), key=lambda i: (np.isnan(scores[i]), -scores[i]))
    prefixes = ds._Prefixes(1, None, None)
    prefixes._grow(spread)
    order, starts = prefixes.groups(keys)
    items: dict = {}                                     # each id's items, the ids in the order of their first
    for i, k in enumerate(keys.tolist()):
        items.setdefault(k, []).append(i)
    assert [keys[order[a]] for a in starts] == list(items)
    assert order.tolist() == [i for group in items.values() for i in group]
    table, plain = ds._Keys(), {}
    for chunk in np.array_split(rng.permutation(keys.max() + 1 if size else 0)[:size], max(1, size // 97)):
        ask = np.concatenate([chunk, rng.integers(0, spread + 5, 8)])
        assert table.find(ask).tolist() == [plain.get(k, -1) for k in ask.tolist()]
        chunk = np.sort(chunk)
        table.add(chunk, chunk * 3 + 1)
        plain.update((k, 3 * k + 1) for k in chunk.tolist())
    assert prefixes.first.min() == ds._NONE                  # the scratch left as it was found


def test_the_jitted_decoder_calls_the_host_search():
    """dat.decode=dagsearch through `decode_graph` under jit (the candidates on the device, the search by
    `jax.pure_callback`): the outputs, scores and token shares of `search` on the same candidates, each row within
    its own capacity, and its n-best lists; twice the same."""
    rng = np.random.default_rng(0)
    B, L, V = 3, 10, 12
    links, logp, n = _graphs(rng, B, L, V)
    links = np.where(np.isfinite(links), links, -1e9).astype(np.float32)
    limit = np.asarray([L + 1, 5, L + 1], np.int32)
    options = Decoding("dagsearch", top_cand=3, remove_repeats=False, per_length=2)
    run = jax.jit(lambda lg, lk, nv, lim: decode_graph(lg, lk, nv, L + 1, options, 4, limit=lim, nbest=3))
    out = jax.device_get(run(jnp.asarray(logp), jnp.asarray(links), jnp.asarray(n, jnp.int32), jnp.asarray(limit)))
    cands = (np.asarray(a) for a in dag.candidates(jnp.asarray(links), jax.nn.log_softmax(jnp.asarray(logp)), 3, 1.0))
    tokens, score, shares = ds.search(*cands, n, limit, L + 1, V, 4, 2, 0.9, 1.1, nbest=3)
    np.testing.assert_array_equal(out["tokens"], tokens[:, 0])
    np.testing.assert_allclose(out["score"], score[:, 0], rtol=1e-6)
    np.testing.assert_allclose(out["token_logp"], shares[:, 0], rtol=1e-6)
    np.testing.assert_array_equal(out["nbest_tokens"], tokens)
    np.testing.assert_allclose(out["nbest_score"], score, rtol=1e-6)
    assert np.isfinite(score[:, 1]).any() and (np.asarray(out["nbest_tokens"][:, 0]) == out["tokens"]).all()
    assert np.all(np.sum(tokens != PAD, axis=2) <= limit[:, None]) and np.sum(tokens[1, 0] != PAD) <= 5
    again = jax.device_get(run(jnp.asarray(logp), jnp.asarray(links), jnp.asarray(n, jnp.int32), jnp.asarray(limit)))
    np.testing.assert_array_equal(again["tokens"], tokens[:, 0])


@functools.cache
def _authors_sampler(temperature: float, top_p: float, bans: tuple, samples: int):
    keys = jax.random.split(jax.random.PRNGKey(5), samples)[None]
    return jax.jit(lambda links, logp, n, limit: dag.authors_samples(links, logp, n, 12, keys, temperature, 2, 1.0,
                                                                     top_p, limit, *bans))


# (temperature, top_p, (no_repeat, no_consecutive)): both n-gram rules, and their n = 1 (which bans only the
# token before)
_SAMPLER_CASES = ((1.0, 1.0, (0, 0)), (2.0, 0.5, (0, 0)), (1.0, 1.0, (2, 2)), (1.0, 1.0, (1, 0)), (1.0, 0.7, (0, 1)))


@settings(max_examples=10, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2 ** 31 - 1), case=st.sampled_from(_SAMPLER_CASES), limit=st.sampled_from([4, 6, 12]),
       sure=st.booleans())
def test_the_authors_samples_are_drawn_as_their_loop_draws_them(seed, case, limit, sure):
    """4096 samples of a random graph (6 vertices, 2 candidate pairs a vertex): every (path, printed tokens)
    outcome's share within 5 standard deviations (of its own probability, fixed keys) of its probability under a
    transcription of their sampling loop, enumerated: at temperatures 1 and 2, with top-p cutting the pairs, with
    the n-gram rules, with a capacity that ends samples early, and (``sure``) where every inner vertex is sure of
    one token, so that after it a step's pairs are often all banned (drawn evenly, 1e-5 each); each sample's score
    its path's untempered log P(y, a | x), vertex 0's token aside."""
    temperature, top_p, bans = case
    rng = np.random.default_rng(seed)
    links, logp, _ = _graphs(rng, 1, 6, 7)
    links[0] = -np.inf   # every vertex reaches every later one: six vertices in each graph
    for i in range(5):
        row = rng.normal(size=5 - i) * 1.5
        links[0, i, i + 1:] = row - np.logaddexp.reduce(row)
    logp[..., (PAD, BOS)] = -np.inf
    logp[0, :5, EOS], logp[0, 5], logp[0, 5, EOS] = -np.inf, -np.inf, 0.0   # EOS at the last vertex alone
    if sure:
        logp[0, 1:5] = np.where(np.isfinite(logp[0, 1:5]), -20.0, -np.inf)
        logp[0, 1:5, 3] = 0.0
    logp[0, :5] -= np.logaddexp.reduce(logp[0, :5], -1, keepdims=True)
    n = np.asarray([6], np.int32)
    samples = 4096
    tokens, score, _, path = jax.device_get(_authors_sampler(temperature, top_p, bans, samples)(
        jnp.asarray(links), jnp.asarray(logp), jnp.asarray(n), jnp.asarray([limit], np.int32)))
    tempered = np.where(np.isfinite(links[0]), links[0] / temperature, -np.inf)
    with np.errstate(invalid="ignore"):  # the last vertex's row: no edge
        tempered = np.where(np.isfinite(tempered), tempered - np.logaddexp.reduce(tempered, -1, keepdims=True),
                            -np.inf)
    cands = ref.authors_candidates(tempered, logp[0], 6, 2, 1.0)
    want: dict = {}
    for (p, res), q in ref.authors_sample_distribution(cands, 6, top_p, *bans, limit=limit).items():
        key = (p, tuple(_printed(res)))
        want[key] = want.get(key, 0.0) + q
    got: dict = {}
    for k in range(samples):
        p = tuple(int(v) for v in path[0, k] if v >= 0)
        key = (p, tuple(int(t) for t in tokens[0, k] if t != PAD))
        got[key] = got.get(key, 0) + 1 / samples
        if k < 64:  # the score: the path's links and its tokens' log-probabilities (EOS only at n − 1)
            drawn = [int(t) for t in tokens[0, k, 1:] if t not in (PAD, EOS)] + [EOS] * (p[-1] == 5)
            want_score = sum(float(links[0, a, b]) + float(logp[0, b, t]) for (a, b), t in zip(zip((0,) + p, p), drawn))
            assert len(drawn) == len(p)
            np.testing.assert_allclose(score[0, k], want_score, rtol=1e-5)
    assert set(got) <= set(want), set(got) - set(want)
    for outcome, q in want.items():
        assert abs(got.get(outcome, 0.0) - q) <= 5 * math.sqrt(q * (1 - q) / samples) + 2 / samples, (outcome, q)
    assert np.all(np.sum(tokens[0] != PAD, axis=1) <= limit)
