"""EDITOR: the loss falls on both roll-in schemes; dual-path roll-in gives valid inputs on both paths; the
jit'd refinement loop equals a plain-Python loop applying the reference edit ops (repositioning, hard phrases,
deletion reward); hard constraints survive any model output; a sentence decodes the same alone and in a batch."""

from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxnat.config import build_config
from jaxnat.data.vocab import BOS_ID, EOS_ID, MASK_ID, NUM_RESERVED, PAD_ID, PLH_ID, PieceTables
from jaxnat.decoding.refine import RefineOptions, initial_hypotheses, length_cap, refine
from jaxnat.decoding.request import DecodeRequest
from jaxnat.models import build_model
from jaxnat.models.editor import editor_loss, editor_reposition
from tests.refine_reference import check_loop_against_python, fit_briefly, editor_first, pad, random_batch, stub_heads

TINY = "tests/configs/tiny.py"
V = 40
WORD_START = (np.arange(V) % 3 != 0) | (np.arange(V) < NUM_RESERVED)  # a third of the pieces continue a word
CONTINUES = ~WORD_START
COUNTS = ("repositions", "deletions")


def _spec(*overrides):
    config = build_config(TINY, ["--config.model.name=editor", "--config.eval.beam_size=1", "--config.model.separate_reposition=true",
                                 *overrides])
    return build_model(config, V, V, PieceTables(WORD_START, CONTINUES))


@pytest.fixture(scope="module")
def spec():
    return _spec()


def _batch(seed, b=6, s=9, t=12):
    return random_batch(seed, V, b, s, t)


@pytest.mark.parametrize("overrides", [(), ("--config.train.dual_path=false", "--config.train.roll_in_alpha=0.5",
                                            "--config.train.roll_in_beta=0.5")])
def test_loss_falls(overrides):
    spec = _spec(*overrides)
    history = fit_briefly(spec, _batch(0))
    losses, rps = [loss for loss, _ in history], [aux["reposition_loss"] for _, aux in history]
    assert np.all(np.isfinite(losses))
    assert np.mean(losses[-5:]) < 0.6 * np.mean(losses[:5]), losses
    assert np.mean(rps[-5:]) < np.mean(rps[:5]), rps


def _valid_rows(tokens, width):
    for row in np.asarray(tokens):
        real = [int(t) for t in row if t != PAD_ID]
        assert len(real) >= 2 and real[0] == BOS_ID and real[-1] == EOS_ID, row
        assert list(row[:len(real)]) == real, row  # right-padded: no PAD inside
        assert not {BOS_ID, EOS_ID, PLH_ID, MASK_ID} & set(real[1:-1]), row
        assert len(row) == width


@pytest.mark.parametrize("path_a", [True, False])
def test_dual_path_roll_in_gives_valid_inputs(spec, path_a):
    """Path A: insertion on y0, reposition on the model's fills; path B: reposition on y0, insertion on the
    model's reposition of y0. Whatever the (untrained) model predicts, every roll-in is a valid hypothesis."""
    batch = _batch(3, b=8)
    params = spec.init(jax.random.PRNGKey(3), batch)
    tgt = batch["tgt"]
    seen = set()
    for seed in range(12):
        _, aux = editor_loss(spec.module, params, batch, jax.random.PRNGKey(seed), word_start=jnp.asarray(WORD_START),
                             label_smoothing=0.1, dual_path=True, train=True, keep_roll_in=True)
        roll = aux["roll_in"]
        if bool(np.all(roll["ins_on_y0"])) != path_a:
            continue
        seen.add(seed)
        for name in ("y0", "y_ins", "y_rps"):
            _valid_rows(roll[name], tgt.shape[1])
        y0 = np.asarray(roll["y0"])
        if path_a:
            np.testing.assert_array_equal(roll["y_ins"], y0)
            # the fills keep the reference everywhere the oracle does not insert
            assert ((np.asarray(roll["y_rps"]) != PAD_ID).sum(1) == (np.asarray(tgt) != PAD_ID).sum(1)).all()
        else:
            np.testing.assert_array_equal(roll["y_rps"], y0)
            # a reposition only moves, copies and deletes tokens of y0
            for row, src_row in zip(np.asarray(roll["y_ins"]), y0):
                assert set(row.tolist()) <= set(src_row.tolist())
        for row, ref_row in zip(y0, np.asarray(tgt)):  # y0 = a shuffled subsample of the reference
            assert not Counter(row[row != PAD_ID].tolist()) - Counter(ref_row[ref_row != PAD_ID].tolist())
    assert seen, "no batch took this path in 12 coin flips"


@pytest.mark.parametrize("seed, penalty, reward, run_all", [(0, 0.0, 0.0, False), (1, 1.5, 2.0, False),
                                                            (2, 0.0, -1.0, True)])
def test_jit_loop_equals_python_loop(spec, seed, penalty, reward, run_all):
    options = RefineOptions(max_iter=4, placeholder_penalty=penalty, run_all=run_all)

    def first(h, logits, active, continues):
        return editor_reposition(h, logits, active, continues, deletion_reward=reward)

    def first_py(row, marks, scores, logits, continues):
        return editor_first(row, marks, scores, logits, deletion_reward=reward, continues=continues)

    check_loop_against_python(spec, seed, options, "reposition_logits", first, first_py, COUNTS, V, CONTINUES)


def test_reposition_step_with_word_boundaries_matches_python():
    """One reposition with sub-word pieces after phrases: the glued pieces are deleted exactly as the
    reference does it, and counted as deletions."""
    rng = np.random.default_rng(0)
    capacity = 14
    for trial in range(20):
        body = rng.integers(NUM_RESERVED, V, 10).tolist()
        row = [BOS_ID, *body, EOS_ID]
        marks = [0, 0, 1, 1, 0, 0, 2, 0, 0, 3, 3, 0]
        logits = rng.normal(size=(1, capacity, capacity)).astype(np.float32)
        hyps = initial_hypotheses(jnp.asarray(pad([row], capacity)), jnp.asarray(pad([marks], capacity, 0)))
        got, counts = editor_reposition(hyps, jnp.asarray(logits), jnp.array([True]), jnp.asarray(CONTINUES))
        want_row, want_marks, _, want_counts = editor_first(row, marks, [0.0] * len(row), logits[0],
                                                            continues=CONTINUES)
        assert [int(t) for t in got.tokens[0] if t != PAD_ID] == want_row, trial
        assert got.phrase[0, :len(want_row)].tolist() == want_marks
        assert {k: int(v[0]) for k, v in counts.items()} == want_counts


@jax.jit
def _random_model_refine(seed, tokens, phrase, src):
    options = RefineOptions(max_iter=5)
    return refine(stub_heads(seed, V, "reposition", plh_boost=3.0), editor_reposition,
                  initial_hypotheses(tokens, phrase), length_cap(src, tokens.shape[1], options), options, COUNTS,
                  jnp.asarray(CONTINUES))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10_000), st.lists(st.lists(st.integers(NUM_RESERVED, V - 1), min_size=1, max_size=3),
                                        min_size=1, max_size=3))
def test_hard_constraints_survive_random_models(seed, phrases):
    """Whatever the reposition, placeholder and token heads say: every hard constraint comes out exactly once,
    whole and contiguous (its pieces in order), with no sub-word piece glued onto its end. Unlike LevT, EDITOR
    may move a whole phrase, so the order between phrases is not checked."""
    capacity = 20
    ids = [t for p in phrases for t in p]
    marks = [k + 1 for k, p in enumerate(phrases) for _ in p]
    tokens = jnp.asarray(pad([[BOS_ID, *ids, EOS_ID]] * 2, capacity))
    phrase = jnp.asarray(pad([[0, *marks, 0]] * 2, capacity, 0))
    src = jnp.asarray(pad([[BOS_ID, 7, 8, EOS_ID], [BOS_ID, *[7] * 12, EOS_ID]], 14))
    out = _random_model_refine(jnp.int32(seed), tokens, phrase, src)
    for row, got_marks in zip(np.asarray(out["tokens"]), np.asarray(out["phrase"])):
        real = [int(t) for t in row if t != PAD_ID]
        got_marks = [int(m) for m in got_marks[:len(real)]]
        assert real[0] == BOS_ID and real[-1] == EOS_ID and PAD_ID not in real and PLH_ID not in real
        for pid, p in enumerate(phrases, 1):
            where = [k for k, m in enumerate(got_marks) if m == pid]
            assert where == list(range(where[0], where[0] + len(p))), (real, got_marks, phrases)
            assert [real[k] for k in where] == p
            after = where[-1] + 1
            assert got_marks[after] or not CONTINUES[real[after]], (real, got_marks)


def test_sentence_alone_equals_sentence_in_batch(spec):
    batch = _batch(5, b=5, s=16)
    params = spec.init(jax.random.PRNGKey(5), batch)
    src = batch["src"]

    @jax.jit
    def decode(src):
        return spec.generate(params, DecodeRequest(src, max_out=32))

    together = decode(src)
    for b in range(src.shape[0]):
        alone = decode(src[b:b + 1])
        for key in ("tokens", "iterations", "insertions", *COUNTS):
            np.testing.assert_array_equal(alone[key][0], together[key][b])
        np.testing.assert_allclose(alone["score"][0], together["score"][b], rtol=1e-5)


def test_capacity_overflow_is_capped():
    capacity = 16
    tokens = jnp.asarray(pad([[BOS_ID, EOS_ID]] * 3, capacity))
    src = jnp.asarray(pad([[BOS_ID, 7, EOS_ID], [BOS_ID, *[7] * 10, EOS_ID], [BOS_ID, *[7] * 5, EOS_ID]], 12))
    options = RefineOptions(max_iter=3)
    heads = stub_heads(0, V, "reposition")
    greedy = heads._replace(placeholder=lambda t: jnp.zeros(t.shape[:1] + (t.shape[1] - 1, 256)).at[..., 255].set(9.0))
    out = refine(greedy, editor_reposition, initial_hypotheses(tokens), length_cap(src, capacity, options), options,
                 COUNTS)
    lengths = (np.asarray(out["tokens"]) != PAD_ID).sum(1)
    assert lengths.max() <= capacity and (lengths <= [10, 16, 14]).all()
    for row in np.asarray(out["tokens"]):
        n = (row != PAD_ID).sum()
        assert (row[:n] != PAD_ID).all() and row[0] == BOS_ID and row[n - 1] == EOS_ID


def test_post_editing_moves_and_deletes_from_the_given_hypothesis():
    """A reposition head that wants [8 7 10] (slot i points at the token the target has at i) and no
    insertions: post-editing the given hypothesis [7 8 9 10] takes one iteration, then nothing changes."""
    capacity = 12
    tokens = jnp.asarray(pad([[BOS_ID, 7, 8, 9, 10, EOS_ID]], capacity))
    src = jnp.asarray(pad([[BOS_ID, 7, 8, EOS_ID]], 4))
    target = jnp.asarray(pad([[BOS_ID, 8, 7, 10, EOS_ID]], capacity))

    def reposition(t):
        return (t[:, None, :] == target[:, :, None]).astype(jnp.float32) * 5.0

    heads = stub_heads(0, V, "reposition")._replace(
        first=reposition, placeholder=lambda t: jnp.zeros(t.shape[:1] + (t.shape[1] - 1, 256)).at[..., 0].set(1.0))
    options = RefineOptions(max_iter=3, trace=True)
    out = refine(heads, editor_reposition, initial_hypotheses(tokens), length_cap(src, capacity, options), options,
                 COUNTS)
    assert [int(t) for t in out["tokens"][0] if t != PAD_ID] == [BOS_ID, 8, 7, 10, EOS_ID]
    assert out["repositions"].tolist() == [3] and out["deletions"].tolist() == [1]  # 8, 7, 10 moved; slot 4 emptied
    assert out["iterations"].tolist() == [2] and out["insertions"].tolist() == [0]
    assert [int(t) for t in out["trace"][0, 0, 0] if t != PAD_ID] == [BOS_ID, 8, 7, 10, EOS_ID]
