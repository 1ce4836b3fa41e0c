"""Greedy and beam search (`jaxnat/decoding/search.py`) against plain-Python references on a tiny model."""

import itertools
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from jaxnat.data.vocab import BOS_ID, EOS_ID, MASK_ID, PAD_ID, PLH_ID, UNK_ID
from jaxnat.decoding.search import Sampling, cumulative, decode_length, draw, follow_parents, truncate
from jaxnat.errors import ConfigError
from jaxnat.models.ar.model import ARTransformer, ar_generate
from jaxnat.models.transformer import TransformerConfig
from tests.sampling_reference import python_truncate

V = 8  # ids 0..5 reserved: UNK (3), 6 and 7 can be generated besides EOS
GENERABLE = (UNK_ID, 6, 7)
FORBIDDEN = (PAD_ID, BOS_ID, PLH_ID, MASK_ID)
CFG = TransformerConfig(
    src_vocab_size=V, tgt_vocab_size=V, d_model=16, ffn_dim=32, num_heads=2, enc_layers=1, dec_layers=1,
    max_len=16, dropout=0.0,
)
MODEL = ARTransformer(CFG)
MAX_OUT = 8
NBEST = 5  # the n-best lists the exactness tests compare


@partial(jax.jit, static_argnames="scale")  # one program: eagerly, each op would compile its own
def _init(key, scale):
    params = MODEL.init(key, jnp.ones((1, 4), jnp.int32), jnp.ones((1, 3), jnp.int32))
    return jax.tree_util.tree_map(lambda x: x * scale, params)


def make_params(seed, scale=3.0):
    """Random parameters scaled up, so that the next-token distributions are peaky and varied."""
    return _init(jax.random.PRNGKey(seed), scale)


def make_src(rng, lengths, width=None):
    """[BOS w .. EOS] rows with `lengths` real tokens each, right-padded with PAD."""
    width = width or max(lengths)
    out = np.full((len(lengths), width), PAD_ID, np.int32)
    for row, n in enumerate(lengths):
        out[row, :n] = [BOS_ID, *rng.integers(3, V, n - 2), EOS_ID]
    return out


@partial(jax.jit, static_argnames=("beam_size", "max_out", "nbest", "no_repeat", "no_consecutive"))
def search(params, src, length_penalty, max_len_a, max_len_b, beam_size, max_out=MAX_OUT, prefix=None, nbest=1,
           no_repeat=0, no_consecutive=0):
    return ar_generate(MODEL, params, src, beam_size=beam_size, length_penalty=length_penalty,
                       max_len_a=max_len_a, max_len_b=max_len_b, max_out=max_out, prefix=prefix, nbest=nbest,
                       no_repeat_ngram=no_repeat, no_consecutive_repeat=no_consecutive)


@jax.jit
def _sequence_logprobs(params, src, tgt):
    """src: int32[N, S]; tgt: int32[N, T] full rows -> float32[N] summed log-probs of tgt[:, 1:] (non-PAD)."""
    logp = jax.nn.log_softmax(MODEL.apply(params, src, tgt[:, :-1]))
    gold = jnp.take_along_axis(logp, tgt[:, 1:, None], axis=-1)[..., 0]
    return jnp.where(tgt[:, 1:] != PAD_ID, gold, 0.0).sum(axis=1)


def rescore(params, src_row, rows, length_penalty, forced=()):
    """Teacher-forced normalised scores of `rows` (lists [BOS .. EOS]) for one source row; the ``forced`` tokens
    that start every row score 0."""
    width = MAX_OUT  # one width whatever the rows: one program to compile
    tgt = np.array([r + [PAD_ID] * (width - len(r)) for r in rows], np.int32)
    src = np.repeat(np.asarray(src_row)[None], len(rows), axis=0)
    sums = np.asarray(_sequence_logprobs(params, src, tgt), np.float64)
    if forced:
        sums -= np.asarray(_sequence_logprobs(params, src, tgt[:, :1 + len(forced)]), np.float64)
    n = np.array([len(r) - 1 for r in rows], np.float64)
    return sums / n**length_penalty


def as_list(row):
    row = list(np.asarray(row))
    return row[: row.index(EOS_ID) + 1]


def check_well_formed(out, limits):
    for row, length, limit in zip(np.asarray(out["tokens"]), np.asarray(out["length"]), np.asarray(limits)):
        assert row[0] == BOS_ID
        assert (row == EOS_ID).sum() == 1
        eos = int(np.argmax(row == EOS_ID))
        assert (row[eos + 1 :] == PAD_ID).all() and (row[1:eos] != PAD_ID).all()
        assert not np.isin(row[1:eos], FORBIDDEN).any()
        assert length == eos + 1 and length <= limit + 2


# --- decode_length -------------------------------------------------------------------------------------


def test_decode_length_edges():
    src_len = jnp.array([0, 3, 10, 100], jnp.int32)
    np.testing.assert_array_equal(decode_length(src_len, 1.2, 10, 50), [10, 13, 22, 50])
    np.testing.assert_array_equal(decode_length(src_len, 0.0, 0, 50), [0, 0, 0, 0])
    np.testing.assert_array_equal(decode_length(src_len, 0.7, 0, 1000), [0, 2, 7, 70])  # 0.7 * 10 is 7, not 6
    np.testing.assert_array_equal(decode_length(src_len, 0.5, -3, 9), [0, 0, 2, 9])  # clipped at 0 and at cap
    assert decode_length(src_len, 1.0, 0, 5).dtype == jnp.int32


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 300), st.integers(0, 30), st.integers(0, 40), st.integers(0, 200))
def test_decode_length_formula(src_len, a_tenths, b, cap):
    got = int(decode_length(jnp.array([src_len]), a_tenths / 10, b, cap)[0])
    assert got == min(cap, (a_tenths * src_len) // 10 + b)


def test_rejects_bad_static_args():
    params, src = make_params(0), make_src(np.random.default_rng(0), [4])
    with pytest.raises(ConfigError):
        ar_generate(MODEL, params, src, beam_size=0, max_out=8)
    with pytest.raises(ConfigError):
        ar_generate(MODEL, params, src, max_out=CFG.max_len + 2)


# --- exactness ------------------------------------------------------------------------------------------


def repeats_an_ngram(row, n, forced):
    """Whether a generated token of ``row`` ([BOS, forced …, generated …, EOS]) completes an n-gram the row already
    holds (fairseq's --no-repeat-ngram-size: the forced tokens count among the n-grams, and are never banned)."""
    grams = [tuple(row[t - n + 1:t + 1]) for t in range(n - 1, len(row))]  # the n-gram ending at t = n − 1 + i
    return any(grams[i] in grams[:i] for i in range(len(grams)) if i + n - 1 > len(forced))


def repeats_consecutively(row, k, forced):
    """Whether a generated token of ``row`` repeats the token before it, or makes the last m tokens repeat the m
    before them, m ≤ k (eval.no_consecutive_repeat)."""
    return any(row[t - m + 1:t + 1] == row[t - 2 * m + 1:t - m + 1] for t in range(1 + len(forced), len(row))
               for m in range(1, k + 1) if t - 2 * m + 1 >= 0)


CASES = (((), 0, 0), ((), 2, 0), ((7, 7), 1, 0), ((), 0, 2))  # (forced prefix, no_repeat, no_consecutive)


@settings(max_examples=4, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(CASES), st.sampled_from([0.0, 1.0, 2.0]))
@example(0, CASES[0], 1.0)
@example(1, CASES[1], 0.0)
@example(2, CASES[2], 2.0)
@example(3, CASES[3], 1.0)
def test_beam_equals_exhaustive_search(seed, case, lp):
    """Exact search over every output; with a forced prefix (`force_prefix`: a multilingual model's language token)
    over the outputs that start with it, the prefix adding nothing to their log-probabilities; an all-PAD prefix
    forces nothing; with eval.no_repeat_ngram n over the outputs that repeat no n-gram, with
    eval.no_consecutive_repeat k over those that repeat no run of m ≤ k tokens right after itself. The n-best list
    is the exhaustive ranking's first outputs. Random models (hypothesis over seeds; each case once explicitly)."""
    forced, no_repeat, no_consecutive = case
    params = make_params(seed)
    max_len = 3  # content tokens; 3 ** 3 = 27 distinct alive prefixes at most, so K = 27 is exact search
    src = make_src(np.random.default_rng(seed), [5, 3, 7], width=7)
    candidates = [[BOS_ID, *forced, *body, EOS_ID] for m in range(max_len + 1 - len(forced))
                  for body in itertools.product(GENERABLE, repeat=m)]
    candidates = [row for row in candidates if not (no_repeat and repeats_an_ngram(row, no_repeat, forced))
                  and not repeats_consecutively(row, no_consecutive, forced)]
    # every case with a prefix array (all PAD: none), so that they share one compiled program a no_repeat
    prefix = np.tile(np.asarray(forced or (PAD_ID,), np.int32), (3, 1))
    out = jax.device_get(search(params, src, lp, 0.0, max_len, beam_size=27, prefix=prefix, nbest=NBEST,
                                no_repeat=no_repeat, no_consecutive=no_consecutive))
    check_well_formed(out, [max_len] * 3)
    for b in range(src.shape[0]):
        scores = rescore(params, src[b], candidates, lp, forced)
        ranked = np.argsort(-scores, kind="stable")
        assume(np.all(-np.diff(scores[ranked[:NBEST + 1]]) > 1e-5))  # no near-ties in the reference's n-best
        assert as_list(out["tokens"][b]) == candidates[ranked[0]], (seed, lp, b)
        # (float32 sums in another order than the teacher-forced pass's: scores of −20 differ by up to ~2e-4)
        np.testing.assert_allclose(float(out["score"][b]), scores[ranked[0]], atol=1e-4, rtol=3e-5)
        listed = min(NBEST, len(candidates))  # the rest of the list empty (-inf)
        assert [as_list(row) for row in out["nbest_tokens"][b][:listed]] == [candidates[i] for i in ranked[:listed]]
        np.testing.assert_allclose(out["nbest_score"][b], np.pad(scores[ranked[:listed]], (0, NBEST - listed),
                                                                 constant_values=-np.inf), atol=1e-4, rtol=3e-5)


@jax.jit
def _forward_logprobs(params, src, tgt_in):
    return jax.nn.log_softmax(MODEL.apply(params, src, tgt_in))


def python_greedy(params, src_row, max_len, length_penalty, forced=()):
    """Plain-Python greedy decoding with a full teacher-forced forward pass per step; the ``forced`` tokens first,
    each with log-probability 0 (`search.force_prefix`).

    The prefix is right-padded to MAX_OUT (one compilation); the causal decoder ignores what follows it.
    """
    tokens, total, steps = [BOS_ID], 0.0, [0.0]
    while tokens[-1] != EOS_ID:
        tgt_in = np.full((1, MAX_OUT), PAD_ID, np.int32)
        tgt_in[0, : len(tokens)] = tokens
        logp = np.array(_forward_logprobs(params, np.asarray(src_row)[None], tgt_in)[0, len(tokens) - 1], np.float64)
        if len(tokens) - 1 < len(forced):
            logp = np.where(np.arange(V) == forced[len(tokens) - 1], 0.0, -np.inf)
        logp[list(FORBIDDEN)] = -np.inf
        if len(tokens) - 1 >= max_len:
            logp[np.arange(V) != EOS_ID] = -np.inf
        nxt = int(np.argmax(logp))
        tokens.append(nxt)
        steps.append(logp[nxt])
        total += logp[nxt]
    return tokens, total / (len(tokens) - 1) ** length_penalty, steps


NO_PREFIX = [[PAD_ID, PAD_ID]] * 4


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 20), st.lists(st.lists(st.sampled_from([PAD_ID, UNK_ID, 6, 7]), min_size=2, max_size=2),
                                    min_size=4, max_size=4), st.sampled_from([(0.5, 2), (0.0, 0), (0.0, 1)]))
@example(0, NO_PREFIX, (0.5, 2))
@example(3, NO_PREFIX, (0.5, 2))
def test_greedy_equals_python_loop(seed, rows, limit):
    """Greedy decoding as the Python loop does it, each row's prefix (PAD-padded; all PAD: none) forced first at
    log-probability 0; each token's log-probability at its step, BOS and PAD unscored. The length limit
    (max_len_a, max_len_b) always leaves room for the prefix, even where it allows no token (0, 0)."""
    params = make_params(seed % 4)
    src = make_src(np.random.default_rng(seed), [6, 4, 3, 5])
    prefix = np.asarray([[t for t in r if t != PAD_ID] + [PAD_ID] * r.count(PAD_ID) for r in rows], np.int32)
    limits = np.maximum(np.asarray(decode_length((src != PAD_ID).sum(1), *limit, MAX_OUT - 2)),
                        (prefix != PAD_ID).sum(1))
    out = jax.device_get(search(params, src, 1.0, *limit, beam_size=1, prefix=prefix))  # indexed on the host
    check_well_formed(out, limits)
    for b in range(src.shape[0]):
        forced = [int(t) for t in prefix[b] if t != PAD_ID]
        tokens, score, steps = python_greedy(params, src[b], limits[b], 1.0, forced)
        assert as_list(out["tokens"][b]) == tokens and tokens[1:1 + len(forced)] == forced
        # float32 both ways (cached steps against full passes), over the scaled parameters' large logits: an
        # unlikely token's -15.7 came out 1.9e-4 apart (hypothesis seed=15, UNK forced), 1.2e-5 relative
        np.testing.assert_allclose(float(out["score"][b]), score, rtol=2e-5, atol=1e-4)
        n = len(tokens)
        assert np.asarray(out["token_scored"][b]).tolist() == [False] + [True] * (n - 1) + [False] * (MAX_OUT - n)
        np.testing.assert_allclose(np.asarray(out["token_logp"][b]), steps + [0.0] * (MAX_OUT - n), rtol=2e-5,
                                   atol=1e-4)


# --- batching, well-formedness, jit ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("beam_size", [1, 3])
def test_batch_equals_single(beam_size):
    params = make_params(4)
    src = make_src(np.random.default_rng(4), [7, 3, 5])
    lengths = (src != PAD_ID).sum(1)
    batched = jax.device_get(search(params, src, 1.0, 1.0, 1, beam_size=beam_size))  # indexed on the host
    for b in range(src.shape[0]):
        alone = jax.device_get(search(params, src[b : b + 1, : lengths[b]], 1.0, 1.0, 1, beam_size=beam_size))
        np.testing.assert_array_equal(alone["tokens"][0], batched["tokens"][b])
        np.testing.assert_array_equal(alone["length"][0], batched["length"][b])
        np.testing.assert_allclose(alone["score"][0], batched["score"][b], atol=1e-5)


@pytest.mark.slow
def test_beam4_jit_well_formed_and_scored():
    params = make_params(5)
    src = make_src(np.random.default_rng(5), [3, 8, 5, 4, 6, 7])
    run = jax.jit(partial(ar_generate, MODEL, beam_size=4, max_out=MAX_OUT))
    for a, b, lp in [(1.2, 10, 1.0), (0.5, 0, 0.0), (0.0, 0, 1.0)]:
        out = jax.device_get(run(params, src, length_penalty=lp, max_len_a=a, max_len_b=b))  # indexed on the host
        assert out["tokens"].shape == (6, MAX_OUT) and out["tokens"].dtype == jnp.int32
        assert out["score"].shape == (6,) and out["length"].dtype == jnp.int32
        limits = decode_length((src != PAD_ID).sum(1), a, b, MAX_OUT - 2)
        check_well_formed(out, limits)
        for row in range(src.shape[0]):
            want = rescore(params, src[row], [as_list(out["tokens"][row])], lp)[0]
            np.testing.assert_allclose(float(out["score"][row]), want, atol=1e-4)
        check_token_logp(params, src, out, lp)


def check_token_logp(params, src, out, length_penalty):
    """Each output token's log-probability is the teacher-forced log-softmax at its position (a plain
    recomputation: every generated token, EOS included, is scored; BOS and PAD are 0.0 and unscored), and the
    scored ones sum to the score before the length penalty."""
    tokens, token_logp, scored = (np.asarray(out[k]) for k in ("tokens", "token_logp", "token_scored"))
    generated = (tokens != PAD_ID) & (np.arange(tokens.shape[1]) > 0)
    np.testing.assert_array_equal(scored, generated)
    assert (token_logp[~scored] == 0.0).all() and (token_logp[scored] <= 0.0).all()
    logp = np.asarray(_forward_logprobs(params, src, tokens[:, :-1]))
    forced = np.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
    np.testing.assert_allclose(token_logp[:, 1:][scored[:, 1:]], forced[scored[:, 1:]], atol=1e-4)
    n = scored.sum(axis=1)
    np.testing.assert_allclose(token_logp.sum(axis=1) / n**length_penalty, np.asarray(out["score"]), atol=1e-4)


# --- fairseq's rules (eval.search_rules=fairseq) ------------------------------------------------------------

@partial(jax.jit, static_argnames=("beam_size", "max_out"))
def fairseq_search(params, src, length_penalty, max_len_a, max_len_b, beam_size, max_out=MAX_OUT):
    return ar_generate(MODEL, params, src, beam_size=beam_size, length_penalty=length_penalty,
                       max_len_a=max_len_a, max_len_b=max_len_b, max_out=max_out, rules="fairseq", nbest=beam_size)


def python_fairseq_beam(params, src_row, max_len, beam, length_penalty):
    """fairseq's SequenceGenerator with its BeamSearch, as plain Python: only PAD (and jaxnat's PLH, MASK)
    banned, EOS banned at the first step and forced at max_len; at each step the 2K best extensions (cumulative
    log-prob) of the live beams (step 0: the first only), the EOS ones among the first K finished while fewer
    than K are, the first K others kept; stop at K finished; the finished ones by normalised score, best first
    (fairseq's sort; the first is the output, the list its --nbest)."""
    def logprobs(prefix):
        tgt_in = np.full((1, MAX_OUT), PAD_ID, np.int32)
        tgt_in[0, : len(prefix)] = prefix
        logp = np.array(_forward_logprobs(params, np.asarray(src_row)[None], tgt_in)[0, len(prefix) - 1], np.float64)
        logp[[PAD_ID, PLH_ID, MASK_ID]] = -np.inf
        if len(prefix) == 1:
            logp[EOS_ID] = -np.inf
        if len(prefix) - 1 >= max_len:
            logp[np.arange(V) != EOS_ID] = -np.inf
        return logp

    alive, finished = [([BOS_ID], 0.0)], []
    while len(finished) < beam and alive:
        step = len(alive[0][0])
        cands = sorted(((total + lp, prefix + [t]) for prefix, total in alive
                        for t, lp in enumerate(logprobs(prefix))), key=lambda c: -c[0])[: 2 * beam]
        for rank, (total, row) in enumerate(cands):
            if rank < beam and row[-1] == EOS_ID and total > -np.inf and len(finished) < beam:
                finished.append((total / step**length_penalty, row))
        alive = [(row, total) for total, row in cands if row[-1] != EOS_ID and total > -np.inf][:beam]
        if step > max_len:
            break
    return sorted(finished, key=lambda f: -f[0])


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 50), st.sampled_from([2, 3]), st.sampled_from([0.5, 1.0]))
def test_fairseq_beam_equals_python_reference(seed, beam, length_penalty):
    params = make_params(seed % 4)
    src = make_src(np.random.default_rng(seed), [6, 3])
    # fairseq's length limit reads the batch's longest source
    limits = np.asarray(decode_length(np.full(src.shape[0], (src != PAD_ID).sum(1).max()), 0.5, 2, MAX_OUT - 2))
    out = jax.device_get(fairseq_search(params, src, length_penalty, 0.5, 2, beam_size=beam))
    for b in range(src.shape[0]):
        finished = python_fairseq_beam(params, src[b], limits[b], beam, length_penalty)
        score, tokens = finished[0]
        assert as_list(out["tokens"][b]) == tokens
        np.testing.assert_allclose(float(out["score"][b]), score, atol=1e-4)
        listed = [(as_list(t), float(s)) for t, s in zip(out["nbest_tokens"][b], out["nbest_score"][b])
                  if s > -np.inf]
        assert [t for t, _ in listed] == [t for _, t in finished]
        np.testing.assert_allclose([s for _, s in listed], [s for s, _ in finished], atol=1e-4)


def python_follow_parents(parent, live, index):
    """Plain-Python `follow_parents`: (the slot each ranked hypothesis takes, per sentence; the cache row each slot
    reads from afterwards)."""
    k = len(parent[0])
    slots, reads = [], []
    for b, par in enumerate(parent):
        claimed, slot, waiting = set(), [None] * k, []
        for j, p in enumerate(par):
            if p in claimed:
                waiting.append(j)
            else:
                claimed.add(p)
                slot[j] = p
        for j, s in zip(waiting, sorted(set(range(k)) - claimed)):
            slot[j] = s
        row = list(range(k))  # a sentence that stopped, or step 0 (identical beams), keeps its rows
        if live[b] and index > 0:
            for j, s in enumerate(slot):
                row[s] = par[j]
        slots.append(slot)
        reads.append([b * k + r for r in row])
    return slots, reads


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([6, 2]), st.lists(st.lists(st.integers(0, 3), min_size=4, max_size=4), min_size=6, max_size=6),
       st.lists(st.booleans(), min_size=6, max_size=6), st.integers(0, 2))
def test_follow_parents_equals_python_reference(batch, parent, live, index):
    # 6 sentences of 4 beams: 24 rows, two chunks of copies; 2 sentences: 8 rows, gathered
    parent, live, rows = parent[:batch], live[:batch], batch * 4
    cache = {"k": jnp.arange(rows * 3, dtype=jnp.float32).reshape(rows, 3), "ids": jnp.arange(rows, dtype=jnp.int32)}
    out, in_slot = _follow_parents(cache, jnp.asarray(parent, jnp.int32), jnp.asarray(live), index)
    slots, reads = python_follow_parents(parent, live, index)
    for b in range(batch):
        assert [slots[b].index(s) for s in range(4)] == list(np.asarray(in_slot[b]))
    assert list(np.asarray(out["ids"])) == [r for row in reads for r in row]
    np.testing.assert_array_equal(out["k"], np.asarray(cache["k"])[np.ravel(reads)])


_follow_parents = jax.jit(follow_parents)


# --- sampling ---------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([0.5, 1.0, 2.0]), st.sampled_from([0, 1, 2, 4, 9]),
       st.sampled_from([1.0, 0.9, 0.5, 0.1]), st.sampled_from([0.0, 0.02, 0.1]))
def test_truncation_equals_python_reference(seed, temperature, top_k, top_p, epsilon):
    rng = np.random.default_rng(seed)
    logp = np.array(jax.nn.log_softmax(rng.normal(size=(4, V)) * 2.0), np.float32)
    logp[:, list(FORBIDDEN)] = -np.inf
    logp[1, 6] = logp[1, 7]  # a tie
    # eagerly: a program per op and shape, where jit compiled one per setting
    got = np.isfinite(np.asarray(truncate(jnp.asarray(logp), Sampling(temperature, top_k, top_p, epsilon))))
    for row, kept in zip(logp, got):
        want = python_truncate(row, temperature, top_k, top_p, epsilon)
        x = row[np.isfinite(row)] / temperature
        p = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
        near = np.min(np.abs(np.concatenate([np.cumsum(np.sort(p)[::-1]) - top_p, p - epsilon]))) < 1e-5
        assert list(kept) == list(want) or near  # (a mass on a cut's edge may round either way in float32)


_draws = jax.jit(lambda x, seed: jax.vmap(lambda k: draw(cumulative(x), k))(
    jax.random.split(jax.random.PRNGKey(seed), 512)))


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.lists(st.one_of(st.just(-np.inf), st.floats(-30, 5)), min_size=1, max_size=9).filter(
    lambda x: np.isfinite(x).any()), st.integers(0, 10**6))
def test_inverse_transform_draws_only_what_the_cut_kept(logits, seed):
    """`draw` from `cumulative` (what DA-Transformer's and CTC's samples use): 512 draws never take a cut entry
    (-inf), first or last included, nor one past the end; with one entry kept, always it; the most probable of
    entries at least 1/4 likely is drawn (a plain-Python reading of the probabilities)."""
    x = np.full(9, -np.inf, np.float32)
    x[:len(logits)] = logits
    got = np.asarray(_draws(jnp.asarray(x), seed))
    assert np.all((got >= 0) & (got < 9)) and np.all(np.isfinite(x[got]))
    p = np.exp(x.astype(np.float64) - x[np.isfinite(x)].max())
    p /= p.sum()
    if p.max() >= 0.25:
        assert int(np.argmax(p)) in got


@partial(jax.jit, static_argnames=("beam_size", "sampling", "nbest"))
def sample(params, src, beam_size, sampling, nbest=1, length_penalty=1.0):
    return ar_generate(MODEL, params, src, beam_size=beam_size, length_penalty=length_penalty, max_len_a=0.0,
                       max_len_b=5, max_out=MAX_OUT, sampling=sampling, nbest=nbest)


def _limits(src, max_len_b=5):
    return np.asarray(decode_length(jnp.asarray((np.asarray(src) != PAD_ID).sum(1)), 0.0, max_len_b, MAX_OUT - 2))


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([Sampling(), Sampling(0.7, 3, 0.9, 0.02)]))
def test_each_sample_draws_from_the_truncated_distribution_and_is_scored_by_the_model(seed, sampling):
    """Every sampled token is one the truncation keeps after its prefix (the plain-Python one); each sample's score
    is the model's own (untempered, untruncated) normalised log-probability of it; the list is ranked, the output
    its first. (Every cut at once, and none: each setting compiles a program; the cuts' combinations are
    test_truncation_equals_python_reference's.)"""
    params = make_params(seed % 3)  # (the sampling's own seed stays: a static argument, each compiles a program)
    src = make_src(np.random.default_rng(seed), [5, 3, 7])
    out = jax.device_get(sample(params, src, 4, sampling, nbest=4, length_penalty=0.5))
    limits = _limits(src)
    for b in range(src.shape[0]):
        rows = [as_list(r) for r in out["nbest_tokens"][b]]
        assert rows[0] == as_list(out["tokens"][b]) and list(out["nbest_score"][b]) == sorted(
            out["nbest_score"][b], reverse=True)
        # (float32 sums of up to 7 log-probabilities against float64: 1.5e-4 apart at a score of -14.8, seed 1676)
        np.testing.assert_allclose(out["nbest_score"][b], rescore(params, src[b], rows, 0.5), rtol=2e-5, atol=1e-4)
        for row in rows:
            tgt_in = np.full((1, MAX_OUT), PAD_ID, np.int32)
            tgt_in[0, :len(row)] = row
            every = np.array(_forward_logprobs(params, src[b][None], tgt_in)[0], np.float32)  # causal: each prefix's
            for i in range(1, len(row)):
                logp = every[i - 1].copy()
                logp[list(FORBIDDEN)] = -np.inf
                if i - 1 >= limits[b]:
                    logp[np.arange(V) != EOS_ID] = -np.inf
                kept = python_truncate(logp, sampling.temperature, sampling.top_k, sampling.top_p, sampling.epsilon)
                assert kept[row[i]], (b, row, i)


def test_samples_depend_on_the_sentence_and_the_seed_alone():
    """A sentence samples the same alone as in a batch, at another padded width; another seed draws others; top_k=1
    leaves one token a step: greedy search's output, whatever the seed (not the default one here)."""
    params, src = make_params(1), make_src(np.random.default_rng(3), [5, 3, 7])
    batch = jax.device_get(sample(params, src, 3, Sampling(1.5), nbest=3))
    alone = jax.device_get(sample(params, src[1:2, :4], 3, Sampling(1.5), nbest=3))
    np.testing.assert_array_equal(alone["nbest_tokens"][0, :, :], batch["nbest_tokens"][1])
    other = jax.device_get(sample(params, src, 3, Sampling(1.5, seed=7), nbest=3))
    assert not np.array_equal(other["nbest_tokens"], batch["nbest_tokens"])
    greedy = jax.device_get(search(params, src, 1.0, 0.0, 5, beam_size=1))
    top1 = jax.device_get(sample(params, src, 3, Sampling(top_k=1, seed=5), nbest=3))
    for j in range(3):
        np.testing.assert_array_equal(top1["nbest_tokens"][:, j], greedy["tokens"])


def test_first_tokens_are_drawn_in_proportion_to_their_probabilities():
    """512 samples of one sentence: each first token's share within 0.08 of its probability (about 3.5 standard
    deviations at p = 1/2; the seed is fixed, so the test is deterministic)."""
    params, src = make_params(2, scale=1.0), make_src(np.random.default_rng(0), [5])
    out = jax.device_get(sample(params, src, 512, Sampling(), nbest=512))
    first = np.array([[BOS_ID] + [PAD_ID] * (MAX_OUT - 1)], np.int32)
    logp = np.array(_forward_logprobs(params, src, first)[0, 0], np.float64)
    logp[list(FORBIDDEN)] = -np.inf
    p = np.exp(logp) / np.exp(logp).sum()
    shares = np.bincount(out["nbest_tokens"][0, :, 1], minlength=V) / 512
    assert np.max(np.abs(shares - p)) < 0.08 and len(set(shares.nonzero()[0])) > 1
