"""DA-Transformer (jaxnat/models/dat/): every dynamic program against tests/dat_reference.py's enumeration of
tiny graphs (hypothesis over graph sizes, λ, target lengths and padding), the glancing counts, the configuration's
one-line errors, and a tiny model trained and decoded through its ModelSpec. Shapes are fixed per test (B = 2
rows, graphs padded to L = 8 vertices; the constrained search's blocked maxima also at 3 and 13), so each kernel
compiles once or twice."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import example, given, settings, strategies as st

from jaxnat.config import build_config
from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID
from jaxnat.decoding.request import DecodeRequest
from jaxnat.decoding.search import Sampling, sample_keys
from jaxnat.errors import ConfigError
from jaxnat.models import build_model
from jaxnat.models.dat import dag, glancing
from jaxnat.models.dat import constrained
from jaxnat.models.dat.constrained import constrained_decode
from jaxnat.models.dat.model import (Decoding, allowed_tokens, decode_graph, graph_sizes, max_vertices, output_capacity,
                                     output_limits)
from tests import dat_reference as ref
from tests.packing_helpers import padded_pairs
from tests.sampling_reference import python_truncate

B, L, T, V = 2, 8, 6, 9          # V = 9: the inner vertices choose among UNK and ids 6, 7, 8
SETTINGS = settings(max_examples=12, deadline=None, derandomize=True)


def graph(seed: int, n_vertices, scale: float = 2.0, L: int = L):
    """Random (links float32[B, L, L], emit float32[B, L, V]) log-probabilities of graphs of n_vertices."""
    rng = np.random.default_rng(seed)
    raw = rng.normal(size=(B, L, L)) * scale
    i, j = np.arange(L)[:, None], np.arange(L)[None]
    edges = (j > i)[None] & (j[None] < np.asarray(n_vertices)[:, None, None])
    raw = np.where(edges, raw, -np.inf)
    top = np.max(raw, axis=2, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        links = raw - (np.log(np.sum(np.exp(raw - np.where(np.isfinite(top), top, 0)), axis=2, keepdims=True))
                       + np.where(np.isfinite(top), top, 0))
    links = np.where(edges, links, -np.inf).astype(np.float32)
    emit = np.asarray(jax.nn.log_softmax(jnp.asarray(rng.normal(size=(B, L, V)) * scale, jnp.float32)))
    return links, emit


sizes = st.lists(st.tuples(st.integers(1, 3), st.integers(2, 5)), min_size=B, max_size=B).filter(
    lambda rows: all(lam * (r - 2) + 2 <= L for lam, r in rows))


def n_of(rows):
    """n_vertices of each row (λ, source tokens with BOS/EOS), as the model computes them: `graph_sizes`."""
    out = []
    for lam, r in rows:
        src = jnp.asarray([[1] + [7] * (r - 2) + [2] + [0] * (5 - r)], jnp.int32)
        out.append(int(graph_sizes(src, lam)[1][0]))
    return np.asarray(out, np.int32)


@SETTINGS
@given(st.integers(1, 8), st.lists(st.integers(0, 6), min_size=1, max_size=4), st.sampled_from([1, 2]),
       st.sampled_from(["source", "source_old"]))
def test_graph_sizes_are_the_authors_codes(lam, words, ends, base):
    """`graph_sizes` against the authors' `initialize_output_tokens` written plainly: their source holds the
    words and its ends (EOS, and BOS where the task prepends one); "source" upsamples the words only, "source_old"
    all its tokens; jaxnat's graphs hold at least BOS's and EOS's vertices. The padded graph is the longest row's,
    and `max_vertices` that of a source as long as the padded one."""
    def theirs(w):
        n = w * lam + ends if base == "source" else (w + ends) * lam
        return max(n, 2)

    width = max(words) + 2
    src = jnp.asarray([[1] + [7] * w + [2] + [0] * (width - w - 2) for w in words], jnp.int32)
    length, n = graph_sizes(src, lam, ends, base)
    assert np.asarray(n).tolist() == [theirs(w) for w in words]
    assert length == max_vertices(width, lam, ends, base) == theirs(width - 2)


@functools.lru_cache(maxsize=None)
def _loss_fns():
    def ll(match, links, tgt_len, n):
        return dag.dag_log_likelihood(match, links, tgt_len, n)

    def total(match, links, tgt_len, n):
        value = ll(match, links, tgt_len, n)
        return jnp.sum(jnp.where(jnp.isfinite(value), value, 0.0))

    return jax.jit(ll), jax.jit(jax.grad(total, argnums=(0, 1))), jax.jit(dag.best_alignment)


@SETTINGS
@given(rows=sizes, tgt=st.lists(st.integers(0, T), min_size=B, max_size=B), seed=st.integers(0, 10**6))
def test_dag_loss_and_best_path_match_enumeration(rows, tgt, seed):
    """log P(y | x) is the log-sum over every path of |y| vertices; its gradient with respect to the emissions is
    each (position, vertex)'s posterior; the best alignment is a best path; rows no path fits (and empty rows) give
    −inf, no NaN and no vertex (padding: T and L beyond each row's lengths)."""
    n = n_of(rows)
    links, emit = graph(seed, n)
    rng = np.random.default_rng(seed + 1)
    match = rng.normal(size=(B, T, L)).astype(np.float32) - 2
    tgt_len = np.asarray(tgt, np.int32)
    ll_fn, grad_fn, align_fn = _loss_fns()
    got = np.asarray(ll_fn(match, links, tgt_len, n))
    g_match, g_links = (np.asarray(g) for g in grad_fn(match, links, tgt_len, n))
    assert np.all(np.isfinite(g_match)) and np.all(np.isfinite(g_links))
    path, score = (np.asarray(x) for x in align_fn(match, links, tgt_len, n))
    for b in range(B):
        want = ref.loglik(match[b], links[b], tgt_len[b], n[b])
        if want == -math.inf:
            assert got[b] == -np.inf and score[b] == -np.inf
            assert np.all(g_match[b] == 0) and np.all(path[b] == -1)
            continue
        np.testing.assert_allclose(got[b], want, rtol=1e-5, atol=1e-4)
        posterior = np.zeros((T, L))
        for p in ref.paths(n[b]):
            if len(p) == tgt_len[b]:
                w = math.exp(ref.edge_sum(links[b], p) + sum(match[b, t, v] for t, v in enumerate(p)) - want)
                for t, v in enumerate(p):
                    posterior[t, v] += w
        np.testing.assert_allclose(g_match[b], posterior, atol=1e-4)
        best, best_paths = ref.best_alignment(match[b], links[b], tgt_len[b], n[b])
        np.testing.assert_allclose(score[b], best, rtol=1e-5, atol=1e-4)
        assert tuple(path[b, :tgt_len[b]]) in best_paths and np.all(path[b, tgt_len[b]:] == -1)


def test_a_path_longer_than_the_capacity_jumps_to_the_end():
    """Pointers along every vertex (i → i + 1) of an 8-vertex graph, capacity 4: the path ends at vertex 7 in
    its last slot."""
    nxt = jnp.asarray([list(range(1, 8)) + [0]] * 2, jnp.int32)
    path = np.asarray(dag.follow(nxt, jnp.asarray([8, 3], jnp.int32), 4))
    assert path.tolist() == [[0, 1, 2, 7], [0, 1, 2, -1]]


W = 6  # output capacity of the decoding tests: shorter than the longest paths, so the cap is exercised


@pytest.mark.parametrize("strategy", ["lookahead", "viterbi", "beam", "hard", "sample"])
def test_a_rows_limit_decodes_it_as_a_request_of_that_width(strategy):
    """A row decoded at its own output capacity (``limit``) inside a wider request (a batch beside longer sources or
    constraint sets) gives what a request of that width gives it alone: its tokens, scores and counts. The graphs
    favour the next vertex, so their paths run past the narrower limit."""
    links, emit = graph(5, [L, L])
    links = np.where(np.isfinite(links), links - 2.0 * np.abs(np.arange(L)[None, :, None] + 1 - np.arange(L)), links)
    links = np.asarray(jax.nn.log_softmax(jnp.asarray(links), axis=2))
    n = np.asarray([L, L], np.int32)
    sampling = Sampling(1.5) if strategy == "sample" else None
    options = Decoding(strategy if strategy in ("lookahead", "viterbi", "beam") else "viterbi", 1.0, 1.0, 1.1, 3, True,
                       1.0, sampling=sampling)
    phrases = np.asarray([[[6, 8]]] * B, np.int32) if strategy == "hard" else None
    hard = np.ones(B, bool) if strategy == "hard" else None
    keys = sample_keys(jax.random.split(jax.random.PRNGKey(3), B), 2) if sampling else None

    @functools.partial(jax.jit, static_argnums=0)
    def decode(width, limit):
        return decode_graph(jnp.asarray(emit), jnp.asarray(links), jnp.asarray(n), width, options,
                            1 if strategy in ("lookahead", "viterbi", "hard") else 2, phrases, hard,
                            limit=jnp.asarray(limit, jnp.int32), nbest=2 if sampling else 1, keys=keys)

    width = 4
    wide, alone = jax.device_get((decode(W, [width] * B), decode(width, [width] * B)))
    if strategy in ("lookahead", "beam"):  # the limit binds (Viterbi's length penalty may stop short)
        assert np.all(alone["decoded"] == width - 2)
    for key, value in alone.items():
        np.testing.assert_array_equal(wide[key][..., :width] if np.ndim(value) > 1 else wide[key], value, err_msg=key)
    assert not np.any(wide["tokens"][:, width:])


def test_each_sentence_has_its_own_output_capacity_whatever_its_batch():
    """`output_limits`: a sentence's capacity is the model's capacity of its own source (and constraints), the
    same in a request padded to a longer source or widened by another row's constraints; a row's own constraints
    widen its own."""
    config = build_config(TINY, BASE)
    cfg = build_model(config, 40, 40).cfg
    capacity = output_capacity(cfg, config.eval)
    short = [BOS_ID, 7, 8, 9, 10, 11, EOS_ID]
    for padded, width, constraints in ((8, capacity(8), None), (40, capacity(40), None),
                                       (8, 48, np.asarray([[[PAD_ID] * 2], [[6] * 2]], np.int32))):
        src = np.zeros((2, padded), np.int32)
        src[0, :len(short)], src[1, :4] = short, [BOS_ID, 7, 8, EOS_ID]
        limits = np.asarray(output_limits(jnp.asarray(src), constraints, width, cfg, config.eval))
        assert limits[0] == capacity(len(short)), (padded, width)
    room = np.asarray([[[6] * 8] * 3, [[PAD_ID] * 8] * 3], np.int32)  # 24 constraint pieces, and none
    limits = np.asarray(output_limits(jnp.asarray(src), room, 48, cfg, config.eval))
    assert limits.tolist() == [26, capacity(4)]  # room for its own pieces and BOS/EOS


@functools.lru_cache(maxsize=None)
def _decoders():
    allowed = allowed_tokens(V)

    def walk(links, emit, n, beta):
        tok, scores, bos = dag.vertex_scores(emit, n, allowed)
        path = dag.follow(dag.pointers(links, scores, beta), n, W)
        return path, dag.path_score(path, links, scores, bos), scores, bos

    def viterbi(links, emit, n, joint, authors):
        tok, scores, bos = dag.vertex_scores(emit, n, allowed)
        return dag.viterbi(links, scores, bos, n, W, 0.7, joint=joint, authors=authors)

    return jax.jit(walk), jax.jit(viterbi, static_argnums=(3, 4))


@pytest.mark.parametrize("joint, authors", [(True, False), (False, False), (True, True), (False, True)])
@SETTINGS
@given(rows=sizes, seed=st.integers(0, 10**6), beta=st.sampled_from([0.0, 1.0]))
def test_greedy_lookahead_and_viterbi_match_brute_force(rows, seed, beta, joint, authors):
    """Greedy (β = 0) and lookahead follow the reference's pointers (within the capacity W); the Viterbi path (joint
    or the links alone, jaxnat's or the authors' convention) is a best one of all paths of ≤ W vertices under the
    length penalty, with its log P(y, a | x)."""
    n = n_of(rows)
    links, emit = graph(seed, n)
    walk, viterbi = _decoders()
    path, score, scores, bos = (np.asarray(x) for x in walk(links, emit, n, beta))
    vpath, vscore = (np.asarray(x) for x in viterbi(links, emit, n, joint, authors))
    allowed = np.asarray(allowed_tokens(V))
    for b in range(B):
        # what the decoders read: each vertex's best allowed token, EOS at the last vertex, BOS at vertex 0
        want_scores = np.where(allowed, emit[b], -np.inf).max(axis=1)
        want_scores[n[b] - 1] = emit[b, n[b] - 1, EOS_ID]
        np.testing.assert_allclose(scores[b], want_scores, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(bos[b], emit[b, 0, BOS_ID], rtol=1e-5, atol=1e-5)
        want = ref.follow(links[b], scores[b], n[b], W, beta)
        assert tuple(path[b, :len(want)]) == want and np.all(path[b, len(want):] == -1)
        raw = bos[b] + ref.edge_sum(links[b], want) + sum(scores[b][v] for v in want[1:])
        np.testing.assert_allclose(score[b], raw, rtol=1e-5, atol=1e-4)
        _, best = ref.viterbi(links[b], scores[b], bos[b], n[b], W, 0.7, joint, authors)
        got = tuple(int(v) for v in vpath[b] if v >= 0)
        assert got in best
        np.testing.assert_allclose(vscore[b], best[got], rtol=1e-5, atol=1e-4)


LONG = 16  # the prevention tests' graphs: paths long enough to repeat pairs ("a b a b")


def _repetitive_graph(n, seed):
    """(links, emit) of two graphs of n (int32[2]) ≤ LONG vertices whose paths run long (a trained model's links step
    a vertex or two) through vertices that mostly agree on their tokens (a sentence-wide preference), so that they
    run into repeats."""
    links, emit = graph(seed, n, scale=1.0, L=LONG)
    near = links - 1.5 * np.maximum(np.arange(LONG)[None, :] - np.arange(LONG)[:, None] - 1, 0)
    with np.errstate(invalid="ignore"):
        links = np.where(np.isfinite(links), np.asarray(jax.nn.log_softmax(jnp.asarray(near), axis=-1)), -np.inf)
    shared = np.random.default_rng(seed + 1).normal(size=(B, 1, V)) * 2.0
    return links, np.asarray(jax.nn.log_softmax(jnp.asarray(emit + shared, jnp.float32)))


@functools.lru_cache(maxsize=None)
def _unrepeated(no_repeat: int, no_consecutive: int):
    allowed = allowed_tokens(V)

    def run(links, emit, n, beta, top_p):
        _, _, bos = dag.vertex_scores(emit, n, allowed)
        top_lp, top_tok = jax.lax.top_k(jnp.where(allowed, emit, dag.NEG), 3)
        eos = jnp.take_along_axis(emit[..., EOS_ID], (n - 1)[:, None], 1)[:, 0]
        return dag.follow_unrepeated(links, top_tok.astype(jnp.int32), top_lp, bos, eos, n, LONG, beta, no_repeat,
                                     no_consecutive, top_p, jnp.asarray([LONG, 7], jnp.int32))

    return jax.jit(run)


def _check_unrepeated(n, seed, beta, bans, top_p) -> list:
    """follow_unrepeated against the reference's transcription of the authors' loop on two graphs of n (int32[2])
    vertices (the second row's capacity 7); returns the two outputs."""
    links, emit = _repetitive_graph(n, seed)
    tokens, score, token_lp = jax.device_get(_unrepeated(*bans)(links, emit, n, beta, top_p))
    allowed, outputs = np.asarray(allowed_tokens(V)), []
    for b, width in enumerate((LONG, 7)):
        want, want_score, want_lp = ref.follow_unrepeated(links[b], emit[b], allowed, n[b], width, beta, 3, *bans,
                                                          top_p)
        assert tokens[b, :len(want)].tolist() == want and np.all(tokens[b, len(want):] == PAD_ID), (b, want)
        np.testing.assert_allclose(score[b], want_score, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(token_lp[b, :len(want)], want_lp, atol=1e-5)
        outputs.append(want)
    return outputs


@settings(max_examples=24, deadline=None, derandomize=True)
@given(n=st.lists(st.integers(3, LONG), min_size=B, max_size=B), seed=st.integers(0, 10**6),
       beta=st.sampled_from([0.0, 1.0]), bans=st.sampled_from([(0, 0), (2, 0), (1, 3), (3, 2)]),
       top_p=st.sampled_from([0.1, 0.9, 1.0]))
def test_lookahead_steps_around_repeats_as_the_authors_loop(n, seed, beta, bans, top_p):
    """Greedy and lookahead with the authors' n-gram prevention (eval.no_consecutive_repeat, eval.no_repeat_ngram,
    dat.top_p): the same tokens, log P(y, a | x) and token scores as a transcription of their loop, rows of two
    capacities."""
    _check_unrepeated(np.asarray(n, np.int32), seed, beta, bans, top_p)


@functools.lru_cache(maxsize=None)
def _unrepeated_beam(bans):
    options = Decoding("beam", top_cand=3, remove_repeats=False, no_repeat=bans[0], no_consecutive=bans[1])
    return jax.jit(lambda links, emit, n: decode_graph(jnp.asarray(emit), links, n, LONG, options, beam=8, nbest=8))


def test_the_beams_outputs_repeat_nothing_the_rules_ban():
    """On the graphs whose paths run into repeats (`_repetitive_graph`), every output of the beam's n-best lists
    passes the rules asked (a plain-Python check of the whole string), where without them some do not."""
    n = np.asarray([LONG, 12], np.int32)
    for bans in ((2, 0), (0, 3), (3, 2)):
        failing = 0
        for seed in range(3):
            links, emit = _repetitive_graph(n, seed)
            for asked in (bans, (0, 0)):
                rows = np.asarray(_unrepeated_beam(asked)(links, emit, n)["nbest_tokens"]).reshape(-1, LONG)
                passed = [ref.unrepeated([int(t) for t in row if t not in (0, 1, 2)], *bans, beam=True)
                          for row in rows]
                if asked == bans:
                    assert all(passed), bans
                else:
                    failing += passed.count(False)
        assert failing >= 3, bans


def test_each_rule_changes_what_lookahead_outputs():
    """... on graphs where each rule changes the outputs (of 8 rows): the tests are not of the plain lookahead."""
    n = np.asarray([LONG, 12], np.int32)
    runs = {(bans, top_p): [row for seed in range(4) for row in _check_unrepeated(n, seed, 1.0, bans, top_p)]
            for bans, top_p in (((0, 0), 0.0), ((0, 0), 0.9), ((2, 0), 0.9), ((0, 3), 0.9), ((0, 3), 0.1))}
    plain = runs[((0, 0), 0.0)]    # the first candidate always: plain lookahead
    for asked, base in ((((0, 0), 0.9), plain), (((2, 0), 0.9), runs[((0, 0), 0.9)]),
                        (((0, 3), 0.9), runs[((0, 0), 0.9)]), (((0, 3), 0.1), runs[((0, 3), 0.9)])):
        assert sum(a != b for a, b in zip(runs[asked], base)) >= 2, asked


@SETTINGS
@given(rows=sizes, seed=st.integers(0, 10**6), bans=st.sampled_from([(0, 0), (2, 0), (0, 2)]))
def test_wide_beam_finds_the_most_probable_output(rows, seed, bans):
    """A beam wider than every prefix finds argmax_y log P(y | x) / |y|^α with P(y | x) summed over every path
    and token choice that emits y (the reference's exhaustive sum), and reports that log P(y | x); its n-best list
    holds the outputs of the next highest normalised scores, with their log P(y | x). (A hypothesis is a prefix at
    a vertex: 256 beams keep every such pair here, so that the lower outputs too sum all their paths; 64 kept the
    best output's, not always those of the next.) With the authors' n-gram prevention (eval.no_repeat_ngram=2 or
    eval.no_consecutive_repeat=2) the same over the outputs that repeat nothing so."""
    n = n_of(rows)
    links, emit = graph(seed, n, scale=1.0)
    options = Decoding("beam", beam_alpha=1.1, top_cand=2, remove_repeats=False, no_repeat=bans[0],
                       no_consecutive=bans[1])
    out = _beam(links, emit, n, options)
    allowed = np.asarray(allowed_tokens(V))
    keep = (lambda y: ref.unrepeated(y, *bans, beam=True)) if any(bans) else None
    for b in range(B):
        _, best = ref.beam_best(links[b], emit[b], allowed, n[b], W, 1.1, 2, keep=keep)
        toks = [int(t) for t in np.asarray(out["tokens"][b]) if t not in (0, 1, 2)]
        assert tuple(toks) in best
        np.testing.assert_allclose(float(out["score"][b]), best[tuple(toks)], rtol=1e-5, atol=1e-4)
        ranked = ref.beam_ranked(links[b], emit[b], allowed, n[b], W, 1.1, 2, keep=keep)[:NBEST]
        listed = [tuple(int(t) for t in row if t not in (0, 1, 2)) for row in np.asarray(out["nbest_tokens"][b])]
        assert listed[0] == tuple(toks)
        for (normed, y, total), got, score in zip(ranked, listed, np.asarray(out["nbest_score"][b])):
            if [r[0] for r in ranked].count(normed) == 1:  # (tied outputs may come in either order)
                assert got == y
            np.testing.assert_allclose(score, total, rtol=1e-5, atol=1e-4)
        assert np.all(np.asarray(out["nbest_score"][b][len(ranked):]) == -np.inf)


@settings(max_examples=6, deadline=None, derandomize=True)  # a 1024-hypothesis beam: half SETTINGS' examples
@given(rows=sizes, seed=st.integers(0, 10**6), order=st.integers(1, 3))
def test_a_wide_beam_with_an_lm_finds_the_best_sum_of_both(tmp_path_factory, rows, seed, order):
    """With an n-gram LM (γ = 0.7) a beam wide enough for every extension finds argmax_y [log P(y | x) + γ log10
    P_lm(y)] / |y|^α (the reference: every output's summed paths, its LM score from the plain-Python back-off rule)
    and reports its log P(y | x) alone."""
    from jaxnat.data.kneser_ney import estimate, write_arpa
    from jaxnat.decoding import ngram
    from tests import ngram_reference

    pieces = ["<pad>", "<s>", "</s>", "<unk>", "<plh>", "<mask>", "a", "b", "c"]  # c: a word the LM lacks
    rng = np.random.default_rng(seed)
    path = str(tmp_path_factory.mktemp("lm") / "lm.arpa")
    write_arpa(path, estimate([list(rng.choice(["a", "b"], size=rng.integers(0, 5))) for _ in range(20)], order))
    grams = ngram_reference.read(path)
    n = n_of(rows)
    links, emit = graph(seed, n, scale=1.0)
    out = _beam_lm(links, emit, n, ngram.read_arpa(path, pieces))
    allowed = np.asarray(allowed_tokens(V))
    bonus = lambda y: 0.7 * ngram_reference.sentence(grams, [pieces[t] for t in y])  # noqa: E731
    for b in range(B):
        _, best = ref.beam_best(links[b], emit[b], allowed, n[b], W, 1.1, 2, bonus)
        toks = tuple(int(t) for t in np.asarray(out["tokens"][b]) if t not in (0, 1, 2))
        assert toks in best
        np.testing.assert_allclose(float(out["score"][b]), best[toks], rtol=1e-5, atol=1e-4)


@functools.lru_cache(maxsize=None)
def _beam_lm_program():
    # 1024 hypotheses: the K · top_cand extensions the LM scores are every extension of these graphs'
    options = Decoding("beam", beam_alpha=1.1, top_cand=2, remove_repeats=False, lm_weight=0.7)
    return jax.jit(lambda links, emit, n, lm: decode_graph(jnp.asarray(emit), links, n, W, options, beam=1024, lm=lm))


def _beam_lm(links, emit, n, lm):
    return _beam_lm_program()(links, emit, n, lm)


def test_a_narrow_beam_never_extends_into_the_last_vertex():
    """n − 1 only ends a path (it emits EOS): a one-hypothesis beam that took it as an inner vertex for its likely
    token would die there and return BOS EOS instead of the better BOS 6 EOS (0 → 1 → 3)."""
    links = np.full((1, 4, 4), -np.inf, np.float32)
    links[0, 0, 1], links[0, 0, 3], links[0, 1, 3] = np.log(0.4), np.log(0.6), 0.0
    top_tok = np.full((1, 4, 1), 6, np.int32)
    top_lp = np.log(np.array([[[0.5], [0.9], [0.5], [0.99]]], np.float32))
    # jit'd: eagerly, each of the search's ops would compile its own program
    search = jax.jit(dag.beam_search, static_argnums=(6, 7, 8))
    tokens, _, _ = search(links, top_tok, top_lp, np.zeros(1, np.float32), np.log(np.full(1, 0.01, np.float32)),
                          np.asarray([4], np.int32), 4, 1, 1.1)
    assert np.asarray(tokens).tolist() == [[[BOS_ID, 6, EOS_ID, 0]]]


@functools.lru_cache(maxsize=None)
def _sampler(sampling: Sampling, top: int, k: int, bans=(0, 0)):
    allowed = allowed_tokens(V)

    def run(links, emit, n, limit, seed):
        tok, scores, bos = dag.vertex_scores(emit, n, allowed)
        top_lp, top_tok = jax.lax.top_k(jnp.where(allowed, emit, dag.NEG), top)
        eos = jnp.take_along_axis(emit[..., EOS_ID], (n - 1)[:, None], 1)[:, 0]
        keys = sample_keys(jax.random.split(jax.random.PRNGKey(seed), B), k)
        return dag.sample_paths(links, top_tok.astype(jnp.int32), top_lp, bos, eos, n, W, keys, sampling, limit,
                                *bans, V)

    return jax.jit(run)


@SETTINGS
@given(rows=sizes, seed=st.integers(0, 10**6),
       sampling=st.sampled_from([Sampling(), Sampling(0.7, 3, 0.9, 0.02), Sampling(top_k=1)]))
def test_sampled_paths_step_inside_the_cut_and_are_scored_by_the_model(rows, seed, sampling):
    """Every sampled path runs 0 → n − 1 within its row's limit (the second row's 4: forced to n − 1 at its last
    slot), each (vertex, token) step one the reference's cut keeps (its candidates: the tempered transitions plus
    the vertex's 2 best tokens, n − 1 emitting EOS); the tokens are BOS, the vertices' tokens, EOS, then PAD, each
    scored by log P(token | vertex), the sample by the model's own untempered log P(y, a | x). With top_k = 1 every
    sample is the reference's most probable step at each vertex, whatever the key."""
    n = n_of(rows)
    links, emit = graph(seed, n)
    limit = np.asarray([W, 4], np.int32)
    tokens, score, token_lp, path = jax.device_get(_sampler(sampling, 2, 3)(links, emit, n, limit, seed))
    allowed = np.asarray(allowed_tokens(V))
    for b in range(B):
        for k in range(3):
            p = [int(v) for v in path[b, k] if v >= 0]
            assert p[0] == 0 and p[-1] == n[b] - 1 and len(p) <= limit[b] and np.all(path[b, k, len(p):] == -1)
            toks = [int(t) for t in tokens[b, k, :len(p)]]
            assert toks[0] == BOS_ID and toks[-1] == EOS_ID and np.all(tokens[b, k, len(p):] == PAD_ID)
            want = float(emit[b, 0, BOS_ID])
            for slot, (i, j, t) in enumerate(zip(p, p[1:], toks[1:]), start=1):
                cands = ref.sample_candidates(links[b], emit[b], allowed, n[b], 2, sampling.temperature, i,
                                              slot == limit[b] - 1)
                order = list(cands)
                kept = python_truncate(np.array([cands[c] for c in order]), 1.0, sampling.top_k, sampling.top_p,
                                       sampling.epsilon)
                assert kept[order.index((j, t))], (b, k, p, toks)
                if sampling.top_k == 1:
                    assert (j, t) == max(cands, key=cands.get)
                want += float(links[b, i, j]) + float(emit[b, j, t])
                np.testing.assert_allclose(token_lp[b, k, slot], 0.0 if t == EOS_ID else emit[b, j, t], atol=1e-5)
            np.testing.assert_allclose(score[b, k], want, rtol=1e-5, atol=1e-4)


def test_paths_are_drawn_in_proportion_to_their_probabilities():
    """4096 samples of one graph (5 vertices, each inner one's 2 best tokens): every (path, tokens) outcome's share
    within 0.03 of its probability by the reference's enumeration (about 4 standard deviations at p = 1/2; the keys
    are fixed, so the test is deterministic), at temperatures 1 and 3 (the transitions tempered, not the tokens),
    and with the authors' n-gram prevention (eval.no_consecutive_repeat=1: a token equal to the one before it at
    1e-5), where outcomes that repeat a token have probability but no longer."""
    n = np.asarray([5, 5], np.int32)
    links, emit = graph(11, n, scale=1.0)
    allowed = np.asarray(allowed_tokens(V))
    limit = np.asarray([W, W], np.int32)
    for temperature, bans in ((1.0, (0, 0)), (3.0, (0, 0)), (1.0, (0, 1))):
        tokens, _, _, path = jax.device_get(_sampler(Sampling(temperature), 2, 4096, bans)(links, emit, n, limit, 0))
        repeat = (lambda so_far, t: t == ([BOS_ID] + so_far)[-1]) if any(bans) else None
        want = ref.sample_distribution(links[0], emit[0], allowed, 5, W, 2, temperature,
                                       lambda x: np.isfinite(x), repeat)
        if any(bans):  # the graph has outcomes prevention makes improbable
            plain = ref.sample_distribution(links[0], emit[0], allowed, 5, W, 2, temperature, lambda x: np.isfinite(x))
            assert sum(q for (p, y), q in plain.items() if any(a == b for a, b in zip(y, y[1:]))) > 0.1
        got: dict = {}
        for p, t in zip(path[0], tokens[0]):
            key = (tuple(int(v) for v in p if v >= 0), tuple(int(x) for x in t if x not in (PAD_ID, BOS_ID, EOS_ID)))
            got[key] = got.get(key, 0) + 1 / 4096
        assert set(got) <= set(want) and max(abs(got.get(o, 0.0) - q) for o, q in want.items()) < 0.03, temperature


@functools.lru_cache(maxsize=None)
def _beam_program(options):
    return jax.jit(lambda links, emit, n: decode_graph(jnp.asarray(emit), links, n, W, options, beam=256, nbest=NBEST))


NBEST = 3  # the n-best lists the wide beam's test compares


def _beam(links, emit, n, options):
    return _beam_program(options)(links, emit, n)


CONTINUES = np.zeros(V, bool)
CONTINUES[7] = True                   # 7 would extend the word before it
JOINS = np.zeros(V, bool)
JOINS[8] = True                       # 8 glues the next piece onto its word ("@@")
TRAILABLE = (3, 6, 8)                 # the ids a test's trails table (punctuation) may hold: none continues


def trails_of(ids) -> np.ndarray:
    """bool[V]: the trails table holding ``ids``."""
    out = np.zeros(V, bool)
    out[list(ids)] = True
    return out


@functools.lru_cache(maxsize=None)
def _constrained(glue: bool):
    """The constrained search at W + 1 slots, β = 1, reward 0.5: with the word tables (the trails table an
    argument, so one program serves every table) and the emissions as logits with their log-normalisers (as the
    model decodes), or without any and a row at a time (chunks of rows, as a large batch is searched)."""
    allowed = allowed_tokens(V)
    if glue:
        shift = jnp.linspace(-3.0, 5.0, L)                                    # each vertex's logits off by its own
        return jax.jit(lambda links, emit, n, phrases, hard, trails: constrained_decode(
            links, emit + shift[:, None], n, phrases, hard, allowed, W + 1, 1.0, 0.5, jnp.asarray(CONTINUES),
            jnp.asarray(JOINS), trails, log_norm=jnp.broadcast_to(shift, emit.shape[:2])))
    plain = jax.jit(lambda links, emit, n, phrases, hard: constrained_decode(
        links, emit, n, phrases, hard, allowed, W + 1, 1.0, 0.5, rows=1))
    return lambda links, emit, n, phrases, hard, trails=None: plain(links, emit, n, phrases, hard)


best_predecessor = jax.jit(constrained._best_predecessor)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(n_vertices=st.sampled_from([3, 13]), seed=st.integers(0, 10**6), unreached=st.floats(0, 0.7))
def test_best_predecessor_is_the_maximum_over_earlier_vertices(n_vertices, seed, unreached):
    """`constrained._best_predecessor`'s blocks of successors (3 and 13 vertices: fewer vertices than blocks, and
    blocks of unequal sizes) against the maximum over every predecessor, written out; some scores −inf."""
    rng = np.random.default_rng(seed)
    n, q = n_vertices, 3
    scores = np.where(rng.random((B, n, q)) < unreached, -np.inf, rng.normal(size=(B, n, q))).astype(np.float32)
    links = np.where(np.arange(n)[None, :, None] < np.arange(n)[None, None, :], rng.normal(size=(B, n, n)),
                     -np.inf).astype(np.float32)
    got = np.asarray(best_predecessor(jnp.asarray(scores), jnp.asarray(links).swapaxes(1, 2)))
    for b in range(B):
        for j in range(n):
            for s in range(q):
                assert got[b, j, s] == max(float(scores[b, i, s] + links[b, i, j]) for i in range(n)), (b, j, s)


phrase_sets = st.lists(st.lists(st.sampled_from([6, 7, 8]), min_size=1, max_size=3), min_size=0, max_size=2)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(rows=sizes, seed=st.integers(0, 10**6), phrases=st.lists(phrase_sets, min_size=B, max_size=B),
       hard=st.lists(st.booleans(), min_size=B, max_size=B), glue=st.booleans(),
       trailing=st.sets(st.sampled_from(TRAILABLE)))
# three pieces of three different tokens, emitted by the best paths: a phrase's middle piece is scored and read out
# as its own (a phrase of two pieces has no middle, and drawn phrases often repeat a token)
@example(rows=[(2, 5), (2, 4)], seed=5, phrases=[[[6, 7, 8]], [[8, 7, 6], [7]]], hard=[True, True], glue=False,
         trailing=set())
@example(rows=[(2, 5), (2, 4)], seed=5, phrases=[[[6, 7, 8]], [[8, 7, 6], [7]]], hard=[True, False], glue=True,
         trailing={3})
def test_constrained_best_path_matches_enumeration(rows, seed, phrases, hard, glue, trailing):
    """The constrained search against Control-DAG's semantics by enumeration (every path of ≤ W + 1 vertices,
    every string of allowed tokens on it: the best holding every phrase as disjoint whole-word runs, or, soft, the
    best with a reward per phrase held): the same best value, an output among the best, every phrase of a
    feasible hard row in it (CPR 100%) and its tokens the ones flagged, an infeasible hard row flagged. The word
    tables: 7 continues, 8 joins, a random set of the others trails (8 then both). Phrases of up to three pieces,
    so that a phrase has inner states after its first and after its second piece."""
    n = n_of(rows)
    links, emit = graph(seed, n, scale=1.0)
    ids = np.zeros((B, 2, 3), np.int32)
    for b, ps in enumerate(phrases):
        for c, ph in enumerate(ps):
            ids[b, c, :len(ph)] = ph
    trails = trails_of(trailing)
    out = {k: np.asarray(v) for k, v in _constrained(glue)(links, emit, n, ids, np.asarray(hard), trails).items()}
    allowed = np.asarray(allowed_tokens(V))
    tables = (CONTINUES, JOINS, trails) if glue else (None, None, None)
    for b in range(B):
        best, found = ref.constrained_best(links[b], emit[b], allowed, n[b], W + 1, 1.0, phrases[b], hard[b], 0.5,
                                           *tables)
        if hard[b] and best == -math.inf:  # nothing fits: decoded as soft, and flagged
            assert out["infeasible"][b] == 1
            best, found = ref.constrained_best(links[b], emit[b], allowed, n[b], W + 1, 1.0, phrases[b], False,
                                               0.5, *tables)
        else:
            assert out["infeasible"][b] == 0
        path = tuple(int(v) for v in out["path"][b] if v >= 0)
        toks = tuple(int(t) for t in out["tokens"][b][1:len(path) - 1])
        assert (path, toks) in found, (path, toks, found)
        np.testing.assert_allclose(out["score"][b], found[(path, toks)], rtol=1e-5, atol=1e-4)
        if hard[b] and not out["infeasible"][b]:
            assert ref.placeable(toks, phrases[b], *tables) == len(phrases[b])
            assert out["phrase"][b].sum() == sum(len(ph) for ph in phrases[b])


def test_the_search_takes_up_to_max_phrases():
    """`MAX_PHRASES` phrases are searched (traced only: no compile), one more is refused in one line."""
    links, emit = map(jnp.asarray, graph(0, np.full(B, 4, np.int32)))

    def shapes(count):
        phrases = np.full((B, count, 1), 6, np.int32)
        return jax.eval_shape(lambda: constrained_decode(links, emit, np.full(B, 4, np.int32), phrases,
                                                         np.ones(B, bool), allowed_tokens(V), W + 1, 1.0, 0.5))

    assert shapes(constrained.MAX_PHRASES)["tokens"].shape == (B, W + 1)
    with pytest.raises(ValueError, match=f"at most {constrained.MAX_PHRASES} constraint phrases"):
        shapes(constrained.MAX_PHRASES + 1)


def test_an_infeasible_hard_row_decodes_as_a_soft_one_with_its_reward():
    """Graphs of 3 vertices (one inner) cannot hold 3 constraint tokens: both hard rows are flagged and decoded as
    soft rows (docs/dat.md), with the reward per phrase they keep — on this graph the second row's best soft output
    keeps the phrase [6] for the reward, where a search without the reward would emit nothing."""
    n = n_of([(1, 3), (1, 3)])
    links, emit = graph(3, n, scale=1.0)
    phrases = [[[6, 7], [8]], [[8, 8], [6]]]
    ids = np.zeros((B, 2, 2), np.int32)
    for b, ps in enumerate(phrases):
        for c, ph in enumerate(ps):
            ids[b, c, :len(ph)] = ph
    out = {k: np.asarray(v) for k, v in _constrained(False)(links, emit, n, ids, np.ones(B, bool)).items()}
    allowed = np.asarray(allowed_tokens(V))
    for b in range(B):
        _, found = ref.constrained_best(links[b], emit[b], allowed, n[b], W + 1, 1.0, phrases[b], False, 0.5)
        path = tuple(int(v) for v in out["path"][b] if v >= 0)
        toks = tuple(int(t) for t in out["tokens"][b][1:len(path) - 1])
        assert out["infeasible"][b] == 1 and (path, toks) in found, (path, toks, found)
        np.testing.assert_allclose(out["score"][b], found[(path, toks)], rtol=1e-5, atol=1e-4)


@settings(max_examples=12, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10**6), phrases=st.lists(st.sampled_from([6, 8]), min_size=B, max_size=B),
       trailing=st.sets(st.sampled_from([6, 8])))
def test_constrained_trailing_pieces_match_enumeration(seed, phrases, trailing):
    """The rule of trailing pieces where it binds: a one-token hard phrase on 6-vertex graphs (room after it),
    the continuing piece 7 and the trailing ones (3 and a random set of 6 and 8) made likely, so that about a
    third of the rows' best outputs differ from those of the rule of the next token only. The same checks as the
    test above."""
    n = np.full(B, 6, np.int32)
    links, emit = graph(seed, n, scale=1.0)
    trails = trails_of({3} | trailing)
    emit = np.asarray(jax.nn.log_softmax(jnp.asarray(emit) + 2.0 * (trails | CONTINUES), -1))
    ids = np.zeros((B, 2, 2), np.int32)
    ids[:, 0, 0] = phrases
    out = {k: np.asarray(v) for k, v in _constrained(True)(links, emit, n, ids, np.ones(B, bool), trails).items()}
    allowed = np.asarray(allowed_tokens(V))
    for b in range(B):
        _, found = ref.constrained_best(links[b], emit[b], allowed, n[b], W + 1, 1.0, [[phrases[b]]], True, 0.5,
                                        CONTINUES, JOINS, trails)
        assert out["infeasible"][b] == 0
        path = tuple(int(v) for v in out["path"][b] if v >= 0)
        toks = tuple(int(t) for t in out["tokens"][b][1:len(path) - 1])
        assert (path, toks) in found, (path, toks, found)
        np.testing.assert_allclose(out["score"][b], found[(path, toks)], rtol=1e-5, atol=1e-4)
        assert out["phrase"][b].sum() == 1


def test_no_continuing_piece_after_a_phrase_and_its_punctuation():
    """The hard phrase [6] with 3 trailing (punctuation, "."), 7 continuing: both rows' best output is 6 3 7
    ("lan.n", one word: the phrase lost). Row 0 then takes 6 3 8 (a word starts after the "."), row 1, where its
    third vertex says little but 7, 6 3 and EOS; the trailing 3 is no phrase token. Without the trails table (the
    rule of the token right after the phrase only) 6 3 7 passes."""
    links = np.full((B, L, L), -np.inf, np.float32)
    for i, j, p in ((0, 1, 1.0), (1, 2, 1.0), (2, 3, 0.9), (2, 5, 0.1), (3, 5, 1.0), (4, 5, 1.0)):
        links[:, i, j] = np.log(p)
    probs = np.full((B, L, V), 0.01)
    for v, t in ((0, 1), (1, 6), (2, 3), (3, 7), (5, 2)):
        probs[:, v, t] = 0.9
    probs[0, 3, 8] = 0.3                      # row 0: a word-start piece is the third vertex's second choice
    emit = np.log(probs / probs.sum(-1, keepdims=True)).astype(np.float32)
    n = np.asarray([6, 6], np.int32)
    phrases = np.zeros((B, 2, 2), np.int32)
    phrases[:, 0, 0] = 6
    hard = np.asarray([True, True])
    inner = lambda out, b: [int(t) for t in np.asarray(out["tokens"][b]) if t > 2]  # noqa: E731
    free = _constrained(False)(links, emit, n, phrases, np.asarray([False, False]))
    assert [inner(free, b) for b in range(B)] == [[6, 3, 7], [6, 3, 7]]
    old = _constrained(True)(links, emit, n, phrases, hard, trails_of(()))
    assert [inner(old, b) for b in range(B)] == [[6, 3, 7], [6, 3, 7]]
    trails = trails_of((3,))
    out = _constrained(True)(links, emit, n, phrases, hard, trails)
    assert [inner(out, b) for b in range(B)] == [[6, 3, 8], [6, 3]]
    assert np.asarray(out["phrase"][:, :3]).tolist() == [[False, True, False]] * B
    assert np.asarray(out["infeasible"]).tolist() == [0, 0]
    allowed = np.asarray(allowed_tokens(V))
    for b in range(B):
        _, found = ref.constrained_best(links[b], emit[b], allowed, 6, W + 1, 1.0, [[6]], True, 0.5, CONTINUES,
                                        JOINS, trails)
        assert {toks for _, toks in found} == {tuple(inner(out, b))}


def python_glancing(path, predicted, tgt, aligned, ratio, u, match, count):
    """Plain-Python glancing of one row (path: its vertices, −1 after the target's last position): (tokens right
    along the path, the number to reveal, the chosen positions, the second pass's inputs over the predicted row's
    vertices, the forced match)."""
    on = [t for t, v in enumerate(path) if v >= 0 and aligned]
    right = sum(1 for t, v in enumerate(path) if v >= 0 and predicted[v] == tgt[t])
    wrong = sum(1 for v in path if v >= 0) - right if aligned else 0
    number = int(np.floor(np.float32(ratio) * np.float32(wrong) + np.float32(0.5)))
    if count == "number":  # the lowest u first, ties by position
        chosen = set(sorted(on, key=lambda t: (u[t], t))[:number])
    else:  # each with probability number / tokens
        p = np.float32(number) / np.float32(max(sum(1 for v in path if v >= 0), 1))
        chosen = {t for t in on if u[t] < p}
    inputs = [PAD_ID] * len(predicted)
    for t in chosen:
        inputs[path[t]] = int(tgt[t])
    forced = [[(0.0 if path[t] == j else -np.inf) if t in chosen else match[t][j] for j in range(len(predicted))]
              for t in range(len(path))]
    return right, number, chosen, inputs, forced


@SETTINGS
@given(st.integers(0, 10**6), st.sampled_from([0.0, 0.1, 0.3, 0.5, 1.0]), st.sampled_from(["number", "bernoulli"]))
def test_glancing_equals_python_reference(seed, ratio, count):
    """The first pass's mistakes along the best path (BOS and EOS count) and round(ratio · mistakes), halves up;
    that many positions chosen uniformly (GLAT's subset) or each with probability number / length (the authors'
    Bernoulli), none on a row without a path; the glanced tokens at their vertices in the second pass's input; the
    forced emission (`fix_alignment`); the ratio's linear schedule: all against plain Python on 16 random rows an
    example (paths of 0 to T positions, a fifth of the rows without one)."""
    rng = np.random.default_rng(seed)
    rows = 16
    lengths = rng.integers(0, T + 1, size=rows)
    aligned = (rng.random(rows) < 0.8).tolist()
    path = np.full((rows, T), -1, np.int32)
    for b, n in enumerate(lengths):
        path[b, :n] = np.sort(rng.choice(L, size=n, replace=False))
    predicted = rng.integers(5, 8, size=(rows, L)).astype(np.int32)  # few tokens: many right, many wrong
    tgt = np.where(path >= 0, rng.integers(5, 8, size=(rows, T)), PAD_ID).astype(np.int32)
    u = rng.choice([0.0, 0.25, 0.5, 0.75], size=(rows, T)).astype(np.float32)  # ties included
    match = rng.normal(size=(rows, T, L)).astype(np.float32)
    tgt_len = jnp.asarray(lengths, jnp.int32)
    number, right = glancing.glance_counts(jnp.asarray(path), jnp.asarray(predicted), jnp.asarray(tgt), tgt_len,
                                           jnp.asarray(aligned), jnp.float32(ratio))
    choose = (functools.partial(glancing.choose_glanced, jnp.asarray(path), number) if count == "number" else
              functools.partial(glancing.choose_bernoulli, jnp.asarray(path), number, tgt_len))
    chosen = np.asarray(choose(jnp.asarray(u), jnp.asarray(aligned)))
    inputs = np.asarray(glancing.glanced_inputs(jnp.asarray(path), jnp.asarray(chosen), jnp.asarray(tgt), L))
    forced = np.asarray(glancing.fix_alignment(jnp.asarray(match), jnp.asarray(path), jnp.asarray(chosen)))
    for b in range(rows):
        want = python_glancing(path[b], predicted[b], tgt[b], aligned[b], ratio, u[b], match[b], count)
        assert (int(right[b]), int(number[b])) == want[:2]
        assert set(np.flatnonzero(chosen[b]).tolist()) == want[2]
        assert inputs[b].tolist() == want[3]
        np.testing.assert_array_equal(forced[b], np.asarray(want[4], np.float32))
    step, steps = int(rng.integers(0, 300)), int(rng.integers(-1, 200))
    expected = 0.1 if steps <= 0 else 0.5 + (0.1 - 0.5) * min(step / steps, 1.0)
    assert float(glancing.glance_ratio(jnp.int32(step), 0.5, 0.1, steps)) == pytest.approx(expected, abs=1e-6)
    assert float(glancing.glance_ratio(None, 0.5, 0.1, steps)) == pytest.approx(0.1)


@SETTINGS
@given(st.integers(0, 10**6), st.booleans())
def test_repeats_removed_and_rows_closed_up_as_in_python(seed, remove):
    """`dag.drop_repeats` (a free token equal to the free token before it goes; a constraint's never, nor a free
    token after one), `dag.compact` and the model's `_kept` (PAD never kept): against plain Python on random rows
    of few tokens (repeats everywhere), PAD tails and constraint runs."""
    from jaxnat.models.dat.model import _kept

    W = 9
    rng = np.random.default_rng(seed)
    tokens = rng.integers(5, 8, size=(B, W)).astype(np.int32)
    for b in range(B):
        tokens[b, rng.integers(1, W + 1):] = PAD_ID
    free = (rng.random((B, W)) < 0.7) & (tokens != PAD_ID)  # as the decoders mark them
    keep, dropped = _kept(jnp.asarray(tokens), jnp.asarray(free), remove)
    closed = np.asarray(dag.compact(jnp.asarray(tokens), keep, PAD_ID))
    for b in range(B):
        drop = [remove and j > 0 and free[b, j] and free[b, j - 1] and tokens[b, j] == tokens[b, j - 1]
                for j in range(W)]
        want = [not d and t != PAD_ID for d, t in zip(drop, tokens[b])]
        assert np.asarray(keep[b]).tolist() == want and int(dropped[b]) == sum(drop)
        kept = [int(t) for t, k in zip(tokens[b], want) if k]
        assert closed[b].tolist() == kept + [PAD_ID] * (W - len(kept))


TINY = "tests/configs/tiny.py"
BASE = ["--config.model.name=dat", "--config.dat.upsample=2", "--config.eval.beam_size=1"]


@functools.cache
def _validation_loss():
    """A tiny DAT (λ = 2, no dropout) at its initial weights: (params, the jit'd validation loss, the jit'd graph)."""
    spec = build_model(build_config(TINY, BASE + ["--config.model.dropout=0"]), 24, 24)
    params = spec.init(jax.random.PRNGKey(0), {"src": jnp.full((1, 6), 7, jnp.int32), "tgt": jnp.full((1, 7), 7)})
    return params, jax.jit(lambda p, b: spec.loss(p, b, jax.random.PRNGKey(2), False)), jax.jit(spec.module.apply)


@SETTINGS
@given(st.integers(0, 10**6))
def test_the_loss_is_the_mean_over_sentences_of_their_per_token_nll(seed):
    """The validation loss and its terms against plain Python over the model's own graphs (paths enumerated,
    `dat_reference.loglik`): the mean over the batch's real sentences of −log P(y | x) / |y| (|y| with BOS and
    EOS), a sentence no path emits (|y| > its graph's vertices) adding nothing but counted in 'unaligned'; 'nll'
    per token over the sentences with a path; 'count' the target tokens; 'glance_accuracy' the tokens the argmax
    gets right along each best path; an all-PAD filler row changes nothing."""
    params, loss_fn, graph_fn = _validation_loss()
    src, tgt = padded_pairs(np.random.default_rng(seed), 4, 6, 7, (6, 24), (6, 24))
    value, aux = jax.device_get(loss_fn(params, {"src": jnp.asarray(src), "tgt": jnp.asarray(tgt)}))
    logits, links, n = jax.device_get(graph_fn(params, jnp.asarray(src)))
    emit = np.asarray(jax.nn.log_softmax(jnp.asarray(logits)))
    total, nll, counted, real, unaligned, right = 0.0, 0.0, 0, 0, 0, 0
    for b in range(4):
        length = int(np.sum(tgt[b] != PAD_ID))
        if not length:
            continue
        real += 1
        match = emit[b][:, tgt[b, :length]].T                     # [|y|, L]: log P(y_t | v)
        ll = ref.loglik(match, links[b], length, int(n[b]))
        if ll == -math.inf:
            unaligned += 1
            continue
        total += -ll / length
        nll, counted = nll - ll, counted + length
        path = sorted(ref.best_alignment(match, links[b], length, int(n[b]))[1])[0]
        right += sum(int(emit[b, v].argmax() == tgt[b, t]) for t, v in enumerate(path))
    tokens = int(np.sum(tgt != PAD_ID))
    assert float(aux["count"]) == tokens
    np.testing.assert_allclose(value, total / max(real, 1) * tokens, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(aux["nll"], nll / max(counted, 1) * tokens, rtol=1e-4, atol=1e-4)
    assert float(aux["unaligned"]) == pytest.approx(unaligned / max(real, 1))
    assert float(aux["glance_accuracy"]) == pytest.approx(right / max(tokens, 1))


def test_config_errors_are_one_line():
    for overrides, message in ((["--config.dat.decode_upsample=3"], "at most dat.upsample"),
                               (["--config.eval.beam_size=4"], "width of dat.decode=beam"),
                               (["--config.eval.valid_beam_size=4"], r"eval.valid_beam_size=4 \(the width"),
                               (["--config.eval.iteration_sweep=1,3"], r"eval.iteration_sweep \(3\) must be at most"),
                               (["--config.train.label_smoothing=0.1"], "no label smoothing"),
                               (["--config.eval.lm=lm.arpa"], "eval.lm is fused into the beam search"),
                               (["--config.dat.glance_end=0.9"], "must not exceed dat.glance_start"),
                               (["--config.dat.links=heads"], "links"),
                               # a graph of 1 vertex decoded rows without EOS; of 2, empty ones
                               (["--config.dat.max_vertices=2"], "no vertex between BOS's and EOS's"),
                               (["--config.eval.no_repeat_ngram=3", "--config.dat.decode=viterbi"],
                                "eval.no_repeat_ngram=3 steps around repeats .* not 'viterbi'"),
                               (["--config.eval.no_consecutive_repeat=1", "--config.dat.decode=path_viterbi"],
                                "steps around repeats .* not 'path_viterbi'"),
                               (["--config.dat.viterbi_convention=authors"],
                                r"dat.decode='lookahead' reads none of dat.viterbi_convention=authors \(an imported "
                                r"Viterbi decoding's: read by dat.decode=viterbi and path_viterbi .*jaxnat otherwise"),
                               # an imported beam search's keys, another decoder chosen: every one in the same line
                               (["--config.eval.beam_size=20", "--config.dat.beam_per_length=5",
                                 "--config.dat.top_p=0.8"], r"reads none of eval.beam_size=20 \(.*1 otherwise\); "
                                r"dat.top_p=0.8 \(.*0.9 otherwise\); dat.beam_per_length=5 \(.*10 otherwise\): "
                                r"choose the decoding that reads them, or reset them$"),
                               (["--config.dat.viterbi_convention=theirs"], "viterbi_convention"),
                               (["--config.dat.top_p=0.5"], r"dat.top_p=0.5 \(acts only in dat.decode=dagsearch"),
                               (["--config.dat.top_p=0.5", "--config.eval.no_repeat_ngram=2",
                                 "--config.dat.decode=beam"], r"dat.top_p=0.5 \(acts only in"),
                               (["--config.dat.beam_per_length=3", "--config.dat.decode=beam"],
                                r"dat.beam_per_length=3 \(acts only in dat.decode=dagsearch"),
                               (["--config.dat.sampler=authors"], "dat.sampler=authors is the cut of eval.sampling"),
                               (["--config.dat.sampler=authors", "--config.eval.sampling=true",
                                 "--config.eval.top_k=5"], "dat.sampler=authors cuts to dat.top_cand pairs")):
        with pytest.raises(ConfigError, match=message):
            build_config(TINY, BASE + overrides)
    # the family's default of eval.beam_size: 1, where neither the config file nor the command line sets it
    demo = build_config("configs/dat/demo.py", [])
    assert demo.eval.beam_size == 1 and demo.train.label_smoothing == 0  # the DAG loss takes none
    # eval.beam_size is the samples a sentence draws with eval.sampling=true, whatever dat.decode
    assert build_config(TINY, BASE + ["--config.eval.sampling=true", "--config.eval.beam_size=4"]).eval.beam_size == 4
    # the authors' beam search reads the width, its per-length beam, top-p and the LM
    build_config(TINY, BASE + ["--config.dat.decode=dagsearch", "--config.eval.beam_size=4", "--config.dat.top_p=0.5",
                               "--config.dat.beam_per_length=3", "--config.eval.lm=lm.arpa"])
    # the Viterbi decodings their convention
    build_config(TINY, BASE + ["--config.dat.decode=path_viterbi", "--config.dat.viterbi_convention=authors"])
    # and the authors' sampling its top-p
    build_config(TINY, BASE + ["--config.eval.sampling=true", "--config.dat.sampler=authors", "--config.dat.top_p=0.5"])


@pytest.mark.slow  # a whole model's programs
def test_the_authors_viterbi_stops_where_theirs_does_alone():
    """dat.viterbi_convention=authors: their Viterbi's cap, int(2 · n / λ) inner vertices of the sentence's own graph
    (theirs at batch 1), in place of the output capacity (here twice as wide): a random model's path of the links
    alone runs into it, and no output passes it."""
    src = jnp.asarray([[1, 7, 8, 9, 10, 2, 0, 0], [1, 7, 8, 2, 0, 0, 0, 0], [1, 11, 12, 13, 14, 15, 16, 2]], jnp.int32)
    config = build_config(TINY, ["--config.model.name=dat", "--config.dat.upsample=8", "--config.eval.beam_size=1",
                                 "--config.dat.decode=path_viterbi", "--config.dat.viterbi_convention=authors",
                                 "--config.eval.length_cap_ratio=4"])
    spec = build_model(config, 24, 24)
    out = jax.jit(spec.generate)(spec.init(jax.random.PRNGKey(0), {"src": src}),
                                 DecodeRequest(src, max_out=spec.capacity(src.shape[1])))
    cap = 2 * np.asarray(graph_sizes(src, 8)[1]) // 8
    decoded = np.asarray(out["decoded"])
    assert np.all(decoded <= cap) and np.any(decoded == cap), (decoded, cap)


@pytest.mark.slow
def test_a_run_whose_graphs_hold_no_target_stops_with_one_line(tmp_path):
    """Graphs of at most 4 vertices align no target: the first log window says so and the run stops (it would
    train on a zero loss), instead of finishing as if it had learned."""
    from jaxnat.training.trainer import Trainer, TrainingError

    config = build_config(TINY, BASE + ["--config.dat.max_vertices=4", "--config.train.log_every=1",
                                        "--config.data.max_buckets=1", "--config.data.synthetic_train=200"])
    with pytest.raises(TrainingError, match=r"steps 1-1 left every pair out of the loss \(unaligned 1.000\)"):
        Trainer(config, str(tmp_path / "run")).train()


@pytest.mark.slow
def test_tiny_model_trains_glances_and_decodes_through_its_spec(tmp_path):
    """Train a tiny DA-Transformer on two pairs through ModelSpec.loss (the update's number anneals the glancing
    ratio; the first pass's alignment is a best path of its graph; the glanced count is as specified); the loss
    falls; every strategy decodes the pairs learned from the graph, and through ModelSpec.generate so do sampling's
    most probable steps and the beam with an n-gram LM of the targets in the request's extras; a constrained
    request holds its hard phrases."""
    config = build_config(TINY, BASE + ["--config.dat.glance_steps=20", "--config.model.dropout=0"])
    spec = build_model(config, 24, 24)
    # host arrays: the checks index them in Python loops, and an eager index of a device array compiles a program
    src = np.asarray([[1, 7, 8, 9, 10, 2], [1, 11, 12, 13, 2, 0]], np.int32)
    tgt = np.asarray([[1, 17, 18, 19, 2], [1, 21, 22, 2, 0]], np.int32)
    batch = {"src": jnp.asarray(src), "tgt": jnp.asarray(tgt)}
    log_softmax = jax.jit(jax.nn.log_softmax)  # eagerly, each of its ops would compile its own program
    params = first = spec.init(jax.random.PRNGKey(0), batch)
    opt = optax.adam(1e-2)
    state = opt.init(params)

    @jax.jit
    def update(params, state, step):
        (value, aux), grads = jax.value_and_grad(
            lambda p: spec.loss(p, batch, jax.random.fold_in(jax.random.PRNGKey(1), step), True, step=step),
            has_aux=True)(params)
        updates, state = opt.update(grads, state)
        return optax.apply_updates(params, updates), state, value / aux["count"], aux

    losses, ratios = [], []
    for step in range(50):
        params, state, value, aux = update(params, state, jnp.int32(step))
        losses.append(float(value))
        ratios.append(float(aux["glance_ratio"]))
    assert losses[-1] < 0.5 * losses[0], losses
    assert ratios[0] == pytest.approx(0.5) and ratios[10] == pytest.approx(0.3) and ratios[-1] == pytest.approx(0.1)
    from jaxnat.models.dat.model import Glancing, dat_loss
    # glancing at the untrained parameters (mistakes to count): a best path, the count as specified, read by pass 2
    _, aux = jax.jit(lambda p: dat_loss(spec.module, p, batch, jax.random.PRNGKey(3), glance=Glancing(0.5, 0.5, 1),
                                        keep=True))(first)
    aux = jax.tree.map(np.asarray, aux)
    emit = np.asarray(log_softmax(aux["first_logits"]))
    links, n = aux["first_links"], aux["n_vertices"]
    pred = emit.argmax(-1)
    for b in range(2):
        t = int(np.sum(tgt[b] > 0))
        match = emit[b][:, tgt[b]].T
        _, best = ref.best_alignment(match, links[b], t, n[b])
        path = tuple(int(v) for v in aux["path"][b][:t])
        assert path in best
        wrong = sum(pred[b][v] != int(tgt[b][i]) for i, v in enumerate(path))
        assert int(aux["number"][b]) == math.floor(0.5 * wrong + 0.5) == int(np.sum(aux["chosen"][b]))
    assert int(np.sum(aux["chosen"])) > 0
    assert not np.allclose(aux["logits"], aux["first_logits"], atol=1e-4)

    learned = [[1, 17, 18, 19, 2, 0, 0, 0], [1, 21, 22, 2, 0, 0, 0, 0]]
    # each strategy on the trained graph (its program alone: the graph's was compiled above), as generate decodes it
    graph = jax.jit(spec.module.apply)(params, batch["src"])
    for decode, beam in (("greedy", 1), ("lookahead", 1), ("viterbi", 1), ("beam", 4), ("dagsearch", 4)):
        s = build_model(build_config(TINY, BASE + [f"--config.dat.decode={decode}", f"--config.eval.beam_size={beam}"]),
                        24, 24)
        assert s.supports.beam == s.supports.nbest == (beam > 1)  # what a Translator and bench/decode_speed.py ask
        out = jax.jit(decode_graph, static_argnums=(3, 4, 5))(*graph, 8, Decoding(decode), beam)
        assert np.asarray(out["tokens"]).tolist() == learned, decode
    # lookahead stepping around repeats, through ModelSpec.generate: the pairs hold none
    prevent = ["--config.eval.no_repeat_ngram=2", "--config.eval.no_consecutive_repeat=2"]
    s = build_model(build_config(TINY, BASE + prevent), 24, 24)
    out = jax.jit(s.generate)(params, DecodeRequest(batch["src"], max_out=8))
    assert np.asarray(out["tokens"]).tolist() == learned
    # through ModelSpec.generate: sampling's most probable step at each vertex (top_k = 1), each of the 2 samples the
    # pairs learned
    s = build_model(build_config(TINY, BASE + ["--config.eval.sampling=true", "--config.eval.top_k=1",
                                               "--config.eval.beam_size=2"]), 24, 24)
    assert s.supports.beam and s.supports.nbest and not s.supports.hard_constraints
    out = jax.jit(s.generate)(params, DecodeRequest(batch["src"], max_out=8, beam_size=2, nbest=2))
    assert np.asarray(out["tokens"]).tolist() == learned
    assert np.asarray(out["nbest_tokens"]).tolist() == [[row] * 2 for row in learned]
    # the authors' sampling with its top-p below the best pair's probability: that pair at every step
    s = build_model(build_config(TINY, BASE + ["--config.eval.sampling=true", "--config.dat.sampler=authors",
                                               "--config.dat.top_p=0.01"]), 24, 24)
    out = jax.jit(s.generate)(params, DecodeRequest(batch["src"], max_out=8))
    assert np.asarray(out["tokens"]).tolist() == learned
    s = build_model(build_config(TINY, BASE + ["--config.dat.decode=beam", "--config.eval.beam_size=4"]), 24, 24)
    from jaxnat.data.kneser_ney import estimate, write_arpa
    from jaxnat.decoding import ngram

    write_arpa(str(tmp_path / "lm.arpa"), estimate([["t17", "t18", "t19"], ["t21", "t22"]], 3))
    lm = ngram.read_arpa(str(tmp_path / "lm.arpa"), ["<pad>", "<s>", "</s>", "<unk>"] + [f"t{i}" for i in range(4, 24)])
    out = jax.jit(s.generate)(params, DecodeRequest(batch["src"], max_out=8, beam_size=4, extras={"lm": lm}))
    assert np.asarray(out["tokens"]).tolist() == learned
    phrases = jnp.asarray([[[21, 22], [0, 0]], [[17, 0], [19, 0]]], jnp.int32)
    out = jax.jit(spec.generate)(params, DecodeRequest(batch["src"], constraints=phrases,
                                                       hard=jnp.asarray([True, True]), max_out=8))
    rows = np.asarray(out["tokens"]).tolist()
    assert any(rows[0][i:i + 2] == [21, 22] for i in range(7)) and 17 in rows[1] and 19 in rows[1], rows
    assert np.asarray(out["infeasible"]).tolist() == [0, 0]


@pytest.mark.parametrize("form", [("paper", "positions"), ("multihead", "tokens")])
def test_links_are_distributions_over_the_forward_edges(form):
    """Both link forms (the paper's, the authors' code's gated heads) with both vertex inputs: each vertex i < n − 1
    of a sentence's graph has a distribution over the vertices j with i < j < n, the last vertex and the padding
    none; λ · (|x| − 2) + 2 vertices a sentence."""
    links_form, inputs = form
    spec = build_model(build_config(TINY, BASE + [f"--config.dat.links={links_form}",
                                                  f"--config.dat.vertex_inputs={inputs}"]), 24, 24)
    src = jnp.asarray([[1, 7, 8, 9, 2], [1, 11, 2, 0, 0]], jnp.int32)
    params = spec.init(jax.random.PRNGKey(0), {"src": src, "tgt": src})
    _, links, n = jax.jit(lambda p: spec.module.apply(p, src))(params)
    assert np.asarray(n).tolist() == [8, 4] and links.shape == (2, 8, 8)
    probs = np.exp(np.asarray(links))
    for b, size in enumerate(np.asarray(n)):
        i, j = np.arange(8)[:, None], np.arange(8)[None]
        edges = (j > i) & (j < size)
        assert np.all(probs[b][~edges] == 0)
        np.testing.assert_allclose(probs[b].sum(1)[:size - 1], 1.0, rtol=1e-5)
