"""The CTC family (jaxnat/models/ctc/): every dynamic program against a plain-Python enumeration of the alignments
of tiny lattices (tests/ctc_reference.py) — the CTC loss (both kernels, padded batches), the best alignment,
the prefix beam search (a wide beam finds the most probable collapsed string), the constrained best path (hard,
with the subword rules, and soft) —, the collapse, the glancing choice and its schedule, the decoder's upsampled
inputs, pairs that do not fit their canvas (left out and counted, never inf or nan), finite gradients with
glancing, and a tiny model trained and decoded through its ModelSpec (greedy, beam, hard constraints: CPR 100%,
an impossible request reported)."""

import functools
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxnat.config import build_config
from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID
from jaxnat.decoding.request import DecodeRequest
from jaxnat.decoding.search import Sampling, sample_keys
from jaxnat.errors import ConfigError
from jaxnat.models import build_model
from jaxnat.models.ctc import constrained, lattice, search
from jaxnat.models.ctc.model import (BLANK_ID, copy_positions, ctc_targets, frame_counts, glance_choice, glance_ratio,
                                     soft_weights)
from tests import ctc_reference as ref
from tests.packing_helpers import padded_pairs
from tests.refine_reference import fit_briefly
from tests.sampling_reference import python_truncate

TINY = "tests/configs/tiny.py"
SOME = settings(max_examples=25, deadline=None)
NEG = lattice.NEG
# tiny lattices: the blank and three tokens of a vocabulary of 9 (the other ids impossible, as forbidden ids are)
V, LABELS = 9, (BLANK_ID, 6, 7, 8)
B, T, N = 3, 5, 3  # every kernel below runs on this one padded shape (one compiled program each)


@functools.lru_cache(maxsize=None)
def _spec(*overrides):
    return build_model(build_config(TINY, ["--config.model.name=ctc", "--config.model.dropout=0", *overrides]),
                       40, 40)


def _log_probs(rng, shape=(B, T), concentration=1.0):
    """float32[..., V]: random distributions over LABELS, NEG elsewhere."""
    lp = np.full(shape + (V,), NEG, np.float32)
    lp[..., list(LABELS)] = np.log(rng.dirichlet(np.full(len(LABELS), concentration), shape))
    return lp


def _rows(rng, frames_low=1):
    """A padded batch: frames int32[B], targets int32[B, N] (PAD after their lengths), lengths int32[B]."""
    frames = rng.integers(frames_low, T + 1, B)
    lengths = rng.integers(0, N + 1, B)
    targets = np.where(np.arange(N)[None] < lengths[:, None], rng.choice(LABELS[1:], (B, N)), PAD_ID)
    return frames.astype(np.int32), targets.astype(np.int32), lengths.astype(np.int32)


_nll = jax.jit(lattice.ctc_nll, static_argnums=4)
_nll_optax = jax.jit(lattice.ctc_nll_optax, static_argnums=4)
_align = jax.jit(lattice.best_alignment, static_argnums=4)
_min_frames = jax.jit(lattice.min_frames)


# ------------------------------------------------------------------------------------------------ the lattice

@SOME
@given(seed=st.integers(0, 2**31 - 1))
def test_ctc_loss_is_the_sum_over_every_alignment(seed):
    """Both kernels against the enumeration of every path of each row's frames (padding frames and labels of a
    batch ignored); a row whose target cannot fit is reported by `min_frames`, and only those have no path. The
    scan on logits with their log-normaliser (as the loss calls it) is the scan on the log-probabilities."""
    rng = np.random.default_rng(seed)
    lp = _log_probs(rng)
    frames, targets, lengths = _rows(rng)
    got, by_optax = np.asarray(_nll(lp, frames, targets, lengths, BLANK_ID)), np.asarray(
        _nll_optax(lp, frames, targets, lengths, BLANK_ID))
    logits = lp + rng.normal(size=lp.shape[:2] + (1,)).astype(np.float32) * 5
    on_logits = _nll(logits, frames, targets, lengths, BLANK_ID, jax.nn.logsumexp(logits, axis=-1))
    np.testing.assert_allclose(on_logits, got, rtol=1e-5, atol=1e-4)
    fits = np.asarray(_min_frames(targets, lengths)) <= frames
    for b in range(B):
        want = ref.ctc_nll(lp[b], frames[b], targets[b, :lengths[b]], LABELS)
        assert fits[b] == math.isfinite(want), (b, frames[b], targets[b])
        assert math.isclose(ref.forward_nll(lp[b], frames[b], targets[b, :lengths[b]]), want, rel_tol=1e-9)
        if fits[b]:
            np.testing.assert_allclose(got[b], want, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(by_optax[b], want, rtol=1e-4, atol=1e-4)
        else:
            assert np.isfinite(got[b]) and got[b] > 1e29  # NEG's magnitude: never inf or nan


@SOME
@given(seed=st.integers(0, 2**31 - 1))
def test_best_alignment_is_the_best_path_to_the_target(seed):
    """Viterbi: the returned frame labels collapse to the target, score what the enumeration's best path
    scores, and are one of the best paths; PAD after the row's frames. On logits with their log-normaliser, the
    same path."""
    rng = np.random.default_rng(seed)
    lp = _log_probs(rng, concentration=0.5)
    frames, targets, lengths = _rows(rng)
    fits = np.asarray(_min_frames(targets, lengths)) <= frames
    path, score = (np.asarray(x) for x in _align(lp, frames, targets, lengths, BLANK_ID))
    logits = lp + rng.normal(size=lp.shape[:2] + (1,)).astype(np.float32) * 5
    on_logits = _align(logits, frames, targets, lengths, BLANK_ID, 0, jax.nn.logsumexp(logits, axis=-1))
    np.testing.assert_allclose(on_logits[1], score, rtol=1e-5, atol=1e-4)
    for b in np.flatnonzero(fits):
        best, argbest = ref.best_alignment(lp[b], frames[b], targets[b, :lengths[b]], LABELS)
        assert tuple(path[b, :frames[b]]) in argbest
        np.testing.assert_allclose(score[b], best, rtol=1e-5, atol=1e-5)
        assert np.all(path[b, frames[b]:] == PAD_ID)


def test_best_alignment_breaks_ties_as_documented():
    """Every path equally likely: the end state 2n before 2n − 1, then stay before s − 1 before s − 2, reading
    back, gives target 6 over 3 frames as [6, ∅, ∅] (one row; the others are too short to matter)."""
    lp = np.full((B, T, V), NEG, np.float32)
    lp[..., list(LABELS)] = np.log(1 / len(LABELS))
    frames, targets, lengths = (np.asarray(a, np.int32) for a in ([3, 1, 1], [[6, 0, 0]] * B, [1, 0, 0]))
    path, _ = _align(lp, frames, targets, lengths, BLANK_ID)
    assert np.asarray(path)[0].tolist() == [6, BLANK_ID, BLANK_ID, PAD_ID, PAD_ID]


def test_min_frames_counts_the_blanks_repeats_need():
    targets = np.asarray([[6, 6, 7], [6, 7, 6], [7, 7, 7]], np.int32)
    lengths = np.asarray([3, 3, 2], np.int32)
    np.testing.assert_array_equal(np.asarray(_min_frames(targets, lengths)), [4, 3, 3])


# ------------------------------------------------------------------------------------------------ decoding

@SOME
@given(seed=st.integers(0, 2**31 - 1))
def test_collapse_merges_repeats_then_drops_blanks(seed):
    """`search.collapse` against the plain rule, with the token_logp of each token's first frame, rows cut to
    the output width."""
    rng = np.random.default_rng(seed)
    labels = rng.choice(LABELS, (B, T)).astype(np.int32)
    frames = rng.integers(0, T + 1, B).astype(np.int32)
    logp = -rng.random((B, T)).astype(np.float32)
    width = 5  # room for 3 tokens: longer outputs are cut
    tokens, token_logp, scored = (np.asarray(x) for x in jax.jit(search.collapse, static_argnums=(3, 4))(
        labels, frames, logp, width, BLANK_ID))
    for b in range(B):
        want = ref.collapse(labels[b, :frames[b]])[:width - 2]
        firsts = [t for t in range(frames[b]) if labels[b, t] != BLANK_ID
                  and (t == 0 or labels[b, t] != labels[b, t - 1])][:width - 2]
        assert list(tokens[b]) == [BOS_ID, *want, EOS_ID] + [PAD_ID] * (width - 2 - len(want))
        np.testing.assert_allclose(token_logp[b, 1:len(want) + 1], logp[b, firsts])
        assert scored[b].sum() == len(want) and np.all(token_logp[b, len(want) + 1:] == 0)


_beam = jax.jit(search.prefix_beam, static_argnums=(2, 3, 4, 5), static_argnames=("no_repeat", "no_consecutive"))


@SOME
@given(seed=st.integers(0, 2**31 - 1), bans=st.sampled_from([(0, 0), (1, 0), (2, 0), (0, 1), (0, 2)]))
def test_a_wide_prefix_beam_finds_the_most_probable_collapsed_string(seed, bans):
    """With more beams than prefixes, the prefix beam search is exact: its output is the collapsed string of
    highest probability summed over its alignments (which the best single path need not be), its score that
    probability; its n-best list, the strings of the next highest. With eval.no_repeat_ngram n or
    eval.no_consecutive_repeat k, the same among the strings that repeat no n-gram, or no run of m ≤ k tokens right
    after itself."""
    rng = np.random.default_rng(seed)
    lp = _log_probs(rng, concentration=0.7)
    frames = rng.integers(1, T + 1, B).astype(np.int32)
    out = jax.device_get(_beam(lp, frames, 64, T + 2, BLANK_ID, 4, no_repeat=bans[0], no_consecutive=bans[1]))
    tokens, score, token_logp, scored = out["tokens"], out["score"], out["token_logp"], out["token_scored"]
    for b in range(B):
        totals = {y: total for y, total in ref.string_totals(lp[b], frames[b], LABELS).items()
                  if not ref.repeats(y, *bans)}
        got = tuple(int(x) for x in tokens[b] if x not in (BOS_ID, EOS_ID, PAD_ID))
        best = max(totals.values())
        np.testing.assert_allclose(totals[got], best, rtol=1e-5, atol=1e-5)  # the best string (or one tied)
        np.testing.assert_allclose(score[b], best, rtol=1e-5, atol=1e-5)
        assert scored[b].sum() == len(got) and np.all(token_logp[b][scored[b]] <= 0)
        ranked = sorted(totals.values(), reverse=True)[:4]  # fewer where fewer strings have a path
        listed = [tuple(int(x) for x in row if x not in (BOS_ID, EOS_ID, PAD_ID)) for row in out["nbest_tokens"][b]]
        np.testing.assert_allclose(out["nbest_score"][b][:len(ranked)], ranked, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose([totals[s] for s in listed[:len(ranked)]], ranked, rtol=1e-5, atol=1e-5)
        assert listed[0] == got and np.all(out["nbest_score"][b][len(ranked):] == -np.inf)


_sample = jax.jit(search.sample_paths, static_argnums=3)


def _keys(seed: int, k: int, rows: int = B):
    return sample_keys(jax.random.split(jax.random.PRNGKey(seed), rows), k)


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**31 - 1),
       sampling=st.sampled_from([Sampling(), Sampling(0.7, 2, 0.9, 0.02), Sampling(top_k=1)]))
def test_sampled_paths_draw_each_frame_inside_its_cut(seed, sampling):
    """Every sampled frame's label is one the plain-Python cut of its frame keeps, its log-probability the model's;
    a path's score is the sum over its row's frames; with top_k = 1 every sample is the greedy best path."""
    rng = np.random.default_rng(seed)
    lp = _log_probs(rng, concentration=0.7)
    frames = rng.integers(1, T + 1, B).astype(np.int32)
    labels, picked, score = jax.device_get(_sample(lp, frames, _keys(seed, 3), sampling))
    for b in range(B):
        for k in range(3):
            for t in range(T):
                kept = python_truncate(lp[b, t], sampling.temperature, sampling.top_k, sampling.top_p,
                                       sampling.epsilon)
                assert kept[labels[b, k, t]] and picked[b, k, t] == lp[b, t, labels[b, k, t]]
                if sampling.top_k == 1:
                    assert labels[b, k, t] == np.argmax(lp[b, t])
            np.testing.assert_allclose(score[b, k], picked[b, k, :frames[b]].sum(), rtol=1e-5, atol=1e-5)


def test_collapsed_samples_are_drawn_in_proportion_to_each_strings_probability():
    """4096 sampled paths of one row of 3 frames, collapsed: each string's share within 0.03 of its probability
    summed over its alignments (the reference's enumeration; about 4 standard deviations at p = 1/2, the keys
    fixed, so the test is deterministic)."""
    lp = _log_probs(np.random.default_rng(5), shape=(1, 3), concentration=1.0)
    frames = np.asarray([3], np.int32)
    labels, _, _ = jax.device_get(_sample(lp, frames, _keys(0, 4096, rows=1), Sampling()))
    got: dict = {}
    for path in labels[0]:
        y = tuple(ref.collapse([int(x) for x in path]))
        got[y] = got.get(y, 0) + 1 / 4096
    want = {y: math.exp(total) for y, total in ref.string_totals(lp[0], 3, LABELS).items()}
    assert set(got) <= set(want) and max(abs(got.get(y, 0.0) - p) for y, p in want.items()) < 0.03


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), order=st.integers(1, 3))
def test_a_wide_prefix_beam_with_an_lm_ranks_by_the_fused_score(tmp_path_factory, seed, order):
    """With an n-gram LM and more beams than prefixes, the output is the collapsed string of highest log P(y | x)
    + α ln P_lm(y) + β |y| (α 0.8, β 0.3; the LM's </s> counted), reported with its log P(y | x) alone."""
    from jaxnat.data.kneser_ney import estimate, write_arpa
    from jaxnat.decoding import ngram
    from tests import ngram_reference

    pieces = ["<pad>", "<s>", "</s>", "<unk>", "<plh>", "<mask>", "a", "b", "c"]  # c: a word the LM lacks
    rng = np.random.default_rng(seed)
    path = str(tmp_path_factory.mktemp("lm") / "lm.arpa")
    write_arpa(path, estimate([list(rng.choice(["a", "b"], size=rng.integers(0, 5))) for _ in range(20)], order))
    grams = ngram_reference.read(path)
    lp = _log_probs(rng, concentration=0.7)
    frames = rng.integers(1, T + 1, B).astype(np.int32)
    out = jax.device_get(_beam_lm(lp, frames, ngram.read_arpa(path, pieces)))
    for b in range(B):
        totals = ref.string_totals(lp[b], frames[b], LABELS)
        fused = {y: total + 0.8 * math.log(10) * ngram_reference.sentence(grams, [pieces[t] for t in y]) + 0.3 * len(y)
                 for y, total in totals.items()}
        got = tuple(int(x) for x in out["tokens"][b] if x not in (BOS_ID, EOS_ID, PAD_ID))
        np.testing.assert_allclose(fused[got], max(fused.values()), rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(out["score"][b], totals[got], rtol=1e-5, atol=1e-5)


@functools.partial(jax.jit, static_argnums=())
def _beam_lm(lp, frames, lm):
    return search.prefix_beam(lp, frames, 64, T + 2, BLANK_ID, 1, lm, 0.8, 0.3)


def test_a_beam_of_one_prefix_is_not_the_best_path_but_a_wide_one_beats_it():
    """Two frames, p(a) = 0.4 in each, p(∅) = 0.35, p(b) = 0.25: the best path is "a a" → "a" (0.16), but "a"
    summed over its alignments (a∅, ∅a, aa: 0.44) and the beam keeps that total."""
    lp = np.full((1, 2, V), NEG, np.float32)
    lp[0, :, [6, BLANK_ID, 7]] = np.log([[0.4, 0.4], [0.35, 0.35], [0.25, 0.25]])
    out = _beam(np.repeat(lp, B, 0).repeat(3, 1)[:, :T], np.full(B, 2, np.int32), 4, T + 2, BLANK_ID)
    tokens, score = out["tokens"], out["score"]
    assert list(np.asarray(tokens[0, :3])) == [BOS_ID, 6, EOS_ID]
    np.testing.assert_allclose(float(score[0]), math.log(0.4 * 0.4 + 2 * 0.4 * 0.35), rtol=1e-5)


def test_the_prefix_beam_keeps_only_prefixes_that_fit_the_output():
    """Room for one token (width 3): "6 7" (0.49) does not fit, so the answer is the best one-token string, "7"
    (0.035 + 0.175 + 0.015 = 0.225, above "6": 0.21), not "6 7" cut to "6"."""
    lp = np.full((B, T, V), NEG, np.float32)
    lp[:, 0, [6, 7, BLANK_ID]] = np.log([0.7, 0.05, 0.25])
    lp[:, 1, [7, BLANK_ID]] = np.log([0.7, 0.3])
    out = _beam(lp, np.full(B, 2, np.int32), 4, 3, BLANK_ID)
    tokens, score = out["tokens"], out["score"]
    assert np.asarray(tokens[0]).tolist() == [BOS_ID, 7, EOS_ID]
    np.testing.assert_allclose(float(score[0]), math.log(0.225), rtol=1e-5)


C, P = 2, 2
_constrained = jax.jit(constrained.constrained_paths, static_argnums=(4, 8))


def _phrases(rng):
    ph = np.zeros((B, C, P), np.int32)
    for b in range(B):
        for j in range(C):
            n = rng.integers(0, P + 1)
            ph[b, j, :n] = rng.choice(LABELS[1:], n)
    return ph


def _lured(rng, lp, frames, phrases, continues, trails, boost=3.0):
    """(lp, frames) with about 3/4 of the rows drawn toward the path the trails rule forbids — the longer phrase, a
    trails token, the continuing token, the other phrase —, frames enough for it: random frames rarely make it the
    best path of their own (without this, ignoring trails failed about 1 in 14 examples; with it, about 1 in 3)."""
    punct = [t for t in LABELS[1:] if trails[t]]
    if not punct:
        return lp, frames
    lp, frames = lp.copy(), frames.copy()
    for b in np.flatnonzero(rng.random(B) < 0.75):
        first, second = sorted(([t for t in ph if t] for ph in phrases[b]), key=len, reverse=True)
        # a trails token other than the phrase's last piece, where there is one (the same would merge into it)
        other = [t for t in punct if t not in first[-1:]] or punct
        path = (first + [rng.choice(other), np.flatnonzero(continues)[0]] + second)[:T]
        frames[b] = max(frames[b], len(path))
        lp[b, np.arange(len(path)), path] += boost
    return lp, frames


@SOME
@given(seed=st.integers(0, 2**31 - 1), rules=st.booleans())
def test_the_constrained_best_path_is_the_best_path_that_holds_every_phrase(seed, rules):
    """Hard rows: the DP's path holds every phrase (placed whole, non-overlapping, in any order; with the word
    tables, as words: no continuing token in the run of trails tokens after a phrase) and scores what the best
    such path of the enumeration scores, or the DP reports none when the enumeration finds none. Soft rows: the
    best path score + the bonus of the phrases it places."""
    rng = np.random.default_rng(seed)
    lp = _log_probs(rng, concentration=0.5)
    frames = rng.integers(1, T + 1, B).astype(np.int32)
    phrases = _phrases(rng)
    hard = rng.random(B) < 0.7
    continues = joins = trails = None
    if rules:
        continues, joins = np.zeros(V, bool), np.zeros(V, bool)
        continues[rng.choice(LABELS[1:])] = True
        joins[rng.choice(LABELS[1:])] = True
        trails = (rng.random(V) < 0.6) & ~continues  # punctuation: any other token, a joining one too
        lp, frames = _lured(rng, lp, frames, phrases, continues, trails)
    bonus = 0.7
    labels, placed, ok = (np.asarray(x) for x in _constrained(
        lp, frames, phrases, hard, BLANK_ID, *(None if x is None else jnp.asarray(x) for x in (continues, joins,
                                                                                             trails)), bonus))
    for b in range(B):
        wanted = [list(p[p > 0]) for p in phrases[b] if (p > 0).any()]
        want = ref.constrained_best(lp[b], frames[b], LABELS, wanted, hard[b], continues, joins, trails, bonus)
        path = labels[b, :frames[b]]
        assert np.all(labels[b, frames[b]:] == PAD_ID) and not placed[b, frames[b]:].any()
        if not hard[b]:
            y = ref.collapse(path)
            got = ref.path_score(lp[b], path) + ref.soft_gain(y, wanted, bonus)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
            continue
        assert ok[b] == math.isfinite(want)
        if ok[b]:
            assert ref.satisfies(ref.collapse(path), wanted, continues, joins, trails)
            np.testing.assert_allclose(ref.path_score(lp[b], path), want, rtol=1e-5, atol=1e-4)
            # the placed frames emit phrase pieces only
            assert set(path[placed[b, :frames[b]]]) <= {t for p in wanted for t in p}


def test_a_phrase_stays_a_word_through_the_repeats_of_its_last_piece():
    """Frames "a a c" with the phrase "a" and a piece c that continues a word: the repeated a merges into the
    phrase, so c would follow it directly; the search takes the best path that keeps the phrase a word."""
    lp = np.full((B, T, V), NEG, np.float32)
    lp[:, :, [6, 7, 8, BLANK_ID]] = np.log([0.1, 0.1, 0.1, 0.7])
    lp[:, 0, [6, 7, 8, BLANK_ID]] = np.log([0.7, 0.1, 0.1, 0.1])
    lp[:, 1, [6, 7, 8, BLANK_ID]] = np.log([0.7, 0.1, 0.1, 0.1])
    lp[:, 2, [6, 7, 8, BLANK_ID]] = np.log([0.1, 0.7, 0.1, 0.1])
    continues = np.zeros(V, bool)
    continues[7] = True
    phrases = np.zeros((B, C, P), np.int32)
    phrases[:, 0, 0] = 6
    frames = np.full(B, 3, np.int32)
    labels, _, ok = _constrained(lp, frames, phrases, np.ones(B, bool), BLANK_ID, jnp.asarray(continues), None, None,
                                 0.0)
    want = ref.constrained_best(lp[0], 3, LABELS, [[6]], True, continues, None)
    path = np.asarray(labels[0, :3])
    assert bool(ok[0]) and ref.satisfies(ref.collapse(path), [[6]], continues, None)
    np.testing.assert_allclose(ref.path_score(lp[0], path), want, rtol=1e-5)


def test_punctuation_after_a_phrase_keeps_its_word_open():
    """Pieces "▁lan" (6, the phrase), "." (7, trails), "n" (8, continues), "▁x" (5, a word start): "lan . n"
    detokenizes to "lan.n", one word without "lan", so the hard rows avoid the model's best "lan . n ▁x" for
    "lan . ▁x" (4 frames) and "lan ." (3 frames: the end closes the word); a soft row keeps the model's path; and
    without the trails table the search would take "lan . n ▁x" (the rule's old hole)."""
    lp = np.full((B, T, V), NEG, np.float32)
    ids = [5, 6, 7, 8, BLANK_ID]
    lp[:, :, ids] = np.log([0.2] * 5)
    for t, top in enumerate((6, 7, 8, 5)):
        lp[:, t, ids] = np.log([0.6 if i == top else 0.1 for i in ids])
    lp[:, 2, [5, 6, 7, 8, BLANK_ID]] = np.log([0.05, 0.05, 0.05, 0.6, 0.25])
    continues, trails = np.zeros(V, bool), np.zeros(V, bool)
    continues[8], trails[7] = True, True
    phrases = np.zeros((B, C, P), np.int32)
    phrases[:, 0, 0] = 6
    frames, hard = np.asarray([4, 3, 4], np.int32), np.asarray([True, True, False])
    labels, _, ok = _constrained(lp, frames, phrases, hard, BLANK_ID, jnp.asarray(continues), None,
                                 jnp.asarray(trails), 0.0)
    got = [ref.collapse(np.asarray(labels[b, :frames[b]])) for b in range(B)]
    assert np.all(np.asarray(ok)) and got == [[6, 7, 5], [6, 7], [6, 7, 8, 5]]
    for b in range(2):
        want = ref.constrained_best(lp[b], frames[b], (BLANK_ID, 5, 6, 7, 8), [[6]], True, continues, None, trails)
        np.testing.assert_allclose(ref.path_score(lp[b], np.asarray(labels[b, :frames[b]])), want, rtol=1e-5)
    old, _, _ = _constrained(lp, frames, phrases, hard, BLANK_ID, jnp.asarray(continues), None, None, 0.0)
    assert ref.collapse(np.asarray(old[0, :4])) == [6, 7, 8, 5]


def test_constraint_frames_hold_the_phrases():
    phrases = np.asarray([[[6, 6], [7, 0]], [[0, 0], [0, 0]], [[8, 0], [0, 0]]], np.int32)
    np.testing.assert_array_equal(np.asarray(constrained.constraint_frames(phrases)), [3 + 1 + 2, 0, 1])


# ------------------------------------------------------------------------------------------------ training

@settings(max_examples=12, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 20)), min_size=3, max_size=3), st.integers(1, 4))
def test_the_canvas_copies_the_source_uniformly(rows, upsample):
    """A row's frames: λ × its source tokens, at least a request's need, within the canvas (0 for an all-PAD row);
    frame t reads source position ⌊t·S/T⌋ (each of λ frames per token when T = λS, spread evenly when constraints
    enlarge the canvas); the authors' soft weights, frame t against block centres (s + ½)·T/S (t itself not
    centred), a softmax over the real positions: all against plain Python."""
    width, src_width = 16, 6
    src = np.full((3, src_width), PAD_ID, np.int32)
    for b, (n, _) in enumerate(rows):
        src[b, :n] = 7
    least = jnp.asarray([need for _, need in rows], jnp.int32)
    frames = np.asarray(frame_counts(jnp.asarray(src), upsample, width, least))
    src_len = np.asarray([n for n, _ in rows], np.int32)
    got = np.asarray(copy_positions(jnp.asarray(src_len), jnp.asarray(frames), width))
    weights = np.asarray(soft_weights(jnp.asarray(src_len), jnp.asarray(frames), width, src_width))
    for b, (n, need) in enumerate(rows):
        assert frames[b] == (min(max(upsample * n, need), width) if n else 0)
        assert got[b].tolist() == [(t * n) // frames[b] if t < frames[b] else 0 for t in range(width)]
        logits = np.asarray([[-(t - (s + 0.5) * frames[b] / max(n, 1)) ** 2 / 0.3 if s < n else -1e9
                              for s in range(src_width)] for t in range(width)])
        want = np.exp(logits - logits.max(-1, keepdims=True))
        np.testing.assert_allclose(weights[b], want / want.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)


def test_ctc_targets_are_the_real_tokens_or_with_ends():
    tgt = np.asarray([[BOS_ID, 6, 7, EOS_ID, PAD_ID], [BOS_ID, EOS_ID, PAD_ID, PAD_ID, PAD_ID]], np.int32)
    labels, lengths = ctc_targets(jnp.asarray(tgt), False)
    assert np.asarray(labels)[0, :2].tolist() == [6, 7] and np.asarray(lengths).tolist() == [2, 0]
    labels, lengths = ctc_targets(jnp.asarray(tgt), True)
    assert np.asarray(lengths).tolist() == [4, 2]


@SOME
@given(seed=st.integers(0, 2**31 - 1), ratio=st.sampled_from([0.0, 0.3, 0.5, 1.0]))
def test_glancing_takes_ratio_times_the_mismatches_of_the_alignment(seed, ratio):
    """⌊ratio × (frames where the argmax differs from the aligned label, blank included)⌋ frames, at most all
    but one, those of lowest draw, each given its aligned label; rows that do not glance glance nothing."""
    rng = np.random.default_rng(seed)
    frames = rng.integers(1, T + 1, B).astype(np.int32)
    aligned = np.where(np.arange(T)[None] < frames[:, None], rng.choice(LABELS, (B, T)), PAD_ID).astype(np.int32)
    predicted = rng.choice(LABELS, (B, T)).astype(np.int32)
    live = rng.random(B) < 0.8
    key = jax.random.PRNGKey(seed % 1000)
    glanced, mismatches, count = (np.asarray(x) for x in jax.jit(glance_choice, static_argnums=6)(
        aligned, predicted, frames, live, jnp.float32(ratio), key, False))
    draws = np.asarray(jax.random.uniform(jax.random.split(key)[1], (B, T)))
    for b in range(B):
        m, n, frames_glanced = ref.glance(aligned[b], predicted[b], frames[b], np.float32(ratio), draws[b])
        assert mismatches[b] == m and count[b] == (n if live[b] else 0)
        assert list(np.flatnonzero(glanced[b] >= 0)) == (frames_glanced if live[b] else [])
        assert np.all(glanced[b][glanced[b] >= 0] == aligned[b][glanced[b] >= 0])


def test_poisson_counts_draw_the_same_mean_within_the_same_bounds():
    """--poisson-mask: the count is a Poisson draw of mean ratio × mismatches, clipped to frames − 1: over 400
    rows of 4 mismatches in 8 frames at ratio 0.5, a mean near 2 (below it: the clip at 7), never above 7."""
    rows, width = 400, 8
    aligned = np.full((rows, width), 6, np.int32)
    predicted = np.where(np.arange(width) < 4, 7, 6)[None].repeat(rows, 0).astype(np.int32)
    frames = np.full(rows, width, np.int32)
    _, mismatches, count = (np.asarray(x) for x in jax.jit(glance_choice, static_argnums=6)(
        aligned, predicted, frames, np.ones(rows, bool), jnp.float32(0.5), jax.random.PRNGKey(0), True))
    assert np.all(mismatches == 4) and count.max() <= width - 1 and count.min() >= 0
    assert 1.8 < count.mean() < 2.2 and len(set(count.tolist())) > 3


def test_the_glancing_ratio_anneals_linearly_and_validation_reads_its_end():
    assert float(glance_ratio(None, 0.5, 0.3, 100)) == pytest.approx(0.3)
    assert [float(glance_ratio(s, 0.5, 0.3, 100)) for s in (0, 50, 100, 400)] == pytest.approx([0.5, 0.4, 0.3, 0.3])
    with pytest.raises(ConfigError, match="must not exceed"):
        build_config(TINY, ["--config.model.name=ctc", "--config.ctc.glance_end=0.9"])
    with pytest.raises(ConfigError, match="ctc.decoder_input"):
        build_config(TINY, ["--config.model.name=ctc", "--config.ctc.decoder_input=fertility"])
    with pytest.raises(ConfigError, match="eval.lm is fused into the prefix beam search"):
        build_config(TINY, ["--config.model.name=ctc", "--config.eval.lm=lm.arpa", "--config.eval.beam_size=1"])
    with pytest.raises(ConfigError, match="eval.no_repeat_ngram=2 bans repeats in the prefix beam search, and "):
        build_config(TINY, ["--config.model.name=ctc", "--config.eval.no_repeat_ngram=2",
                            "--config.eval.sampling=true"])


def _batch(long_target=False):
    """Sources of 2–4 pieces (canvases of 3 × 4–6 frames) and targets of 1–5 pieces; a filler row; with
    ``long_target`` a pair whose 14 target pieces cannot fit its 12 frames."""
    rng = np.random.default_rng(0)
    src, tgt = np.zeros((5, 6), np.int32), np.zeros((5, 16), np.int32)
    for b in range(4):
        n, m = rng.integers(2, 5), rng.integers(1, 6)
        src[b, :n + 2] = [BOS_ID, *rng.integers(6, 40, n), EOS_ID]
        tgt[b, :m + 2] = [BOS_ID, *rng.integers(6, 40, m), EOS_ID]
    if long_target:
        src[3] = [BOS_ID, 9, 10, EOS_ID, 0, 0]
        tgt[3] = [BOS_ID, *range(10, 24), EOS_ID]
    return {"src": jnp.asarray(src), "tgt": jnp.asarray(tgt)}


@functools.lru_cache(maxsize=None)
def _validation_loss(mean: str):
    """A tiny CTC model (λ = 1, so that targets often outgrow their frames) at its initial weights: (params, the
    jit'd validation loss and gradient, the jit'd frame logits (B, frames, width), ``mean``: ctc.loss_mean)."""
    from jaxnat.models.ctc.model import frame_counts

    spec = _spec("--config.ctc.glancing=false", "--config.ctc.upsample=1", f"--config.ctc.loss_mean={mean}")
    params = spec.init(jax.random.PRNGKey(0), _batch())
    grad = jax.jit(jax.value_and_grad(lambda p, b: spec.loss(p, b, jax.random.PRNGKey(1), False), has_aux=True))

    @jax.jit
    def frame_log_probs(p, src):
        frames = frame_counts(src, 1, src.shape[1])
        memory = spec.module.apply(p, src, method="encode")
        logits = spec.module.apply(p, src, memory, frames, src.shape[1], method="frame_logits")
        return jax.nn.log_softmax(logits.astype(jnp.float32)), frames

    return params, grad, frame_log_probs


@SOME
@given(seed=st.integers(0, 2**31 - 1), mean=st.sampled_from(["token", "sentence"]))
def test_the_loss_is_plain_pythons_over_the_frame_distributions(seed, mean):
    """The validation loss and its terms against plain Python over the model's frame distributions (the CTC sum
    by `ctc_reference.forward_nll`): the CTC term averaged over the fitting pairs' target tokens
    (ctc.loss_mean=token) or over those pairs of their per-token values (sentence), mixed with label smoothing's
    mean over their real frames of −(the mean log-probability over the vocabulary), 0.1; a pair that cannot fit its
    frames left out and counted in 'unfit' (finite loss and gradients), an all-PAD filler row nowhere."""
    params, grad, frame_log_probs = _validation_loss(mean)
    # few target tokens: repeats, which need their blanks
    src, tgt = padded_pairs(np.random.default_rng(seed), 4, 8, 8, tgt_ids=(6, 9))
    (value, aux), grads = jax.device_get(grad(params, {"src": jnp.asarray(src), "tgt": jnp.asarray(tgt)}))
    log_probs, frames = jax.device_get(frame_log_probs(params, jnp.asarray(src)))
    terms, labels, smooth, frames_in, pairs, unfit = [], 0, 0.0, 0, 0, 0
    for b in range(4):
        if not frames[b]:
            continue
        pairs += 1
        target = [int(t) for t in tgt[b] if t not in (PAD_ID, BOS_ID, EOS_ID)]
        nll = ref.forward_nll(log_probs[b], int(frames[b]), target, BLANK_ID)
        if nll == math.inf:
            unfit += 1
            continue
        terms.append((nll, len(target)))
        labels += len(target)
        smooth -= float(np.sum(np.mean(log_probs[b, :frames[b]], axis=-1)))
        frames_in += int(frames[b])
    if mean == "token":
        nll = sum(t for t, _ in terms) / max(labels, 1)
    else:
        nll = sum(t / max(n, 1) for t, n in terms) / max(len(terms), 1)
    tokens = int(np.sum(tgt != PAD_ID))
    assert float(aux["count"]) == tokens
    np.testing.assert_allclose(aux["nll"], nll * tokens, rtol=2e-5, atol=1e-3)
    np.testing.assert_allclose(value, (0.9 * nll + 0.1 * smooth / max(frames_in, 1)) * tokens, rtol=2e-5, atol=1e-3)
    assert float(aux["unfit"]) == pytest.approx(unfit / max(pairs, 1))
    assert all(np.all(np.isfinite(g)) for g in jax.tree_util.tree_leaves(grads))


@pytest.mark.slow
def test_glancing_training_has_finite_gradients_and_glances_the_alignment():
    """Update 3 of a 1.0 → 0.5 schedule over 6 updates: a finite loss and gradients, frames glanced, and the
    'glance_ratio' term the history logs is the schedule's value there, 0.75."""
    spec = _spec("--config.ctc.glancing=true", "--config.ctc.glance_start=1.0", "--config.ctc.glance_end=0.5",
                 "--config.ctc.glance_steps=6")
    batch = _batch(long_target=True)
    params = spec.init(jax.random.PRNGKey(0), batch)
    (loss, aux), grads = jax.jit(jax.value_and_grad(
        lambda p: spec.loss(p, batch, jax.random.PRNGKey(1), True, step=jnp.int32(3)), has_aux=True))(params)
    assert np.isfinite(float(loss)) and float(aux["glanced"]) > 0
    assert "glance_ratio" in spec.terms and float(aux["glance_ratio"]) == pytest.approx(0.75)
    assert all(np.all(np.isfinite(g)) for g in jax.tree_util.tree_leaves(grads))


def test_the_glanced_labels_are_the_first_passs_best_alignment():
    """Through the loss (keep_inputs): the aligned labels collapse to each fitting pair's target, and the glanced
    frames carry them — ratio 1: every mismatch but at most frames − 1."""
    from jaxnat.models.ctc.model import ctc_loss

    spec = _spec()
    batch = _batch(long_target=True)
    params = spec.init(jax.random.PRNGKey(0), batch)
    _, aux = jax.jit(lambda p: ctc_loss(spec.module, p, batch, jax.random.PRNGKey(2), upsample=3,
                                        label_smoothing=0.1, glancing=True, ratio=1.0, keep_inputs=True))(params)
    aligned, glanced, count = (np.asarray(aux[k]) for k in ("aligned", "glanced_labels", "glance_count"))
    mismatches = np.asarray(aux["mismatches"])
    for b in range(3):  # the fitting pairs (row 3 does not fit, row 4 is filler)
        target = [int(x) for x in np.asarray(batch["tgt"][b]) if x not in (BOS_ID, EOS_ID, PAD_ID)]
        frames = 3 * int(np.sum(np.asarray(batch["src"][b]) != PAD_ID))
        assert ref.collapse(aligned[b, :frames]) == target
        assert count[b] == min(mismatches[b], frames - 1) and np.sum(glanced[b] >= 0) == count[b]
    assert count[3] == 0 and count[4] == 0


# ------------------------------------------------------------------------------------------------ end to end

def _tiny_lm(vocab: int):
    """An n-gram LM (order 2) over pieces "t6", "t7", … of a vocabulary of ``vocab`` ids, of a few sentences."""
    import tempfile

    from jaxnat.data.kneser_ney import estimate, write_arpa
    from jaxnat.decoding import ngram

    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "lm.arpa")
        write_arpa(path, estimate([["t11", "t12", "t13"], ["t12", "t13"], ["t14"]], 2))
        return ngram.read_arpa(path, ["<pad>", "<s>", "</s>", "<unk>", "<plh>", "<mask>"]
                               + [f"t{i}" for i in range(6, vocab)])


@pytest.mark.slow
def test_a_tiny_model_learns_and_decodes_through_its_spec():
    """A few Adam steps on one batch lower the loss; generate decodes greedily, with a prefix beam (its score at
    least the greedy path's; without repeated tokens with eval.no_repeat_ngram=1), by sampling (at top_k = 1 each
    sample the greedy output), and with hard constraints: every phrase in every output (CPR 100%), the phrases'
    tokens not scored; a request whose phrases cannot fit is answered unconstrained and reported."""
    spec = _spec("--config.ctc.glancing=false")
    batch = _batch()
    history = fit_briefly(spec, batch, steps=25)
    assert history[-1][0] < 0.7 * history[0][0]
    params = spec.init(jax.random.PRNGKey(0), batch)
    src = batch["src"][:4]
    generate = jax.jit(spec.generate)
    width = spec.capacity(src.shape[1])
    greedy = generate(params, DecodeRequest(src, max_out=width))
    beam = generate(params, DecodeRequest(src, max_out=width, beam_size=4))
    assert np.all(np.asarray(beam["score"]) >= np.asarray(greedy["score"]) - 1e-4)
    lm = _tiny_lm(spec.cfg.tgt_vocab_size)  # the prefix beam with an n-gram LM in the request's extras
    fused = generate(params, DecodeRequest(src, max_out=width, beam_size=4, extras={"lm": lm}))
    assert fused["tokens"].shape == beam["tokens"].shape and np.all(np.isfinite(np.asarray(fused["score"])))
    # eval.no_repeat_ngram=1: a prefix beam (of 1 here) whose outputs hold no token twice, where greedy's do
    once = jax.jit(_spec("--config.ctc.glancing=false", "--config.eval.no_repeat_ngram=1").generate)(
        params, DecodeRequest(src, max_out=width))
    words = lambda out: [[int(x) for x in row if x not in (BOS_ID, EOS_ID, PAD_ID)]  # noqa: E731
                         for row in np.asarray(out["tokens"])]
    assert all(len(set(y)) == len(y) for y in words(once)) and any(len(set(y)) < len(y) for y in words(greedy))
    sampler = _spec("--config.ctc.glancing=false", "--config.eval.sampling=true", "--config.eval.top_k=1")
    top1 = jax.jit(sampler.generate)(params, DecodeRequest(src, max_out=width, beam_size=2, nbest=2))
    np.testing.assert_array_equal(top1["tokens"], greedy["tokens"])
    np.testing.assert_allclose(top1["score"], greedy["score"], rtol=1e-5)
    assert np.array_equal(top1["nbest_tokens"][:, 1], greedy["tokens"])
    phrases = np.zeros((4, 4, 8), np.int32)
    phrases[:, 0, :2] = [11, 12]
    phrases[:, 1, :1] = 13
    # row 3: 19 pieces and 14 blanks between repeats, more than the 18 frames its output allows
    phrases[3, 2:] = np.asarray([20, 21])[:, None]
    out = generate(params, DecodeRequest(src, constraints=jnp.asarray(phrases), hard=jnp.ones(4, bool),
                                         max_out=width))
    tokens, scored = np.asarray(out["tokens"]), np.asarray(out["token_scored"])
    assert list(np.asarray(out["unsatisfied"])) == [0, 0, 0, 1]
    for b in range(3):
        y = [int(x) for x in tokens[b] if x not in (BOS_ID, EOS_ID, PAD_ID)]
        assert ref.satisfies(y, [[11, 12], [13]])
        assert np.sum(scored[b]) == len(y) - 3
