"""EDITOR: the loss falls on both roll-in schemes; every loss term equals a plain-Python reference (the input
each head sees, its labels, mask, smoothing and mean) on both dual paths and under the paper's eqs. 6–7;
α and β mix what the paper says; filler rows carry no loss; each head reads exactly its layers; the delete
column is a learned vector (or BOS's embedding); the "−dual-path" ablation config; the jit'd refinement loop
equals a plain-Python loop applying the reference edit ops (repositioning, hard phrases, deletion reward); hard
constraints survive any model output; a sentence decodes the same alone and in a batch."""

import functools
import os
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from jaxnat.config import build_config, leaf_keys
from jaxnat.data.vocab import BOS_ID, EOS_ID, MASK_ID, NUM_RESERVED, PAD_ID, PLH_ID, PieceTables
from jaxnat.decoding.refine import RefineOptions, initial_hypotheses, length_cap, refine
from jaxnat.decoding.request import DecodeRequest
from jaxnat.models import build_model
from jaxnat.models.editor.model import editor_loss, editor_reposition
from tests import edit_reference as er
from tests import jitted
from tests import reference as ref
from tests.refine_reference import (check_fills_scored, check_loop_against_python, editor_first, fit_briefly, pad,
                                    random_batch, stub_heads)
from tests.test_config import shipped

TINY = "tests/configs/tiny.py"
V = 40
WORD_START = (np.arange(V) % 3 != 0) | (np.arange(V) < NUM_RESERVED)  # a third of the pieces continue a word
TRAILS = ~WORD_START & (np.arange(V) % 2 == 0)  # punctuation: half the pieces that start no word
CONTINUES = ~WORD_START & ~TRAILS
JOINS = (np.arange(V) % 3 == 1) & (np.arange(V) >= NUM_RESERVED)  # pieces that join the next onto their word
COUNTS = ("repositions", "deletions")


@functools.lru_cache(maxsize=None)  # one spec (and its jit'd init) a config
def _spec(*overrides):
    config = build_config(TINY, ["--config.model.name=editor", "--config.eval.beam_size=1",
                                 "--config.editor.separate_reposition=true", *overrides])
    return build_model(config, V, V, PieceTables(WORD_START, CONTINUES))


@pytest.fixture(scope="module")
def spec():
    return _spec()


def _batch(seed, b=6, s=9, t=12):
    return random_batch(seed, V, b, s, t)


def _params(spec, seed):
    """The spec's parameters drawn from PRNGKey(seed). They depend on the key alone, not on the batch (flax reads
    its shapes): every test initialises on one batch shape, and so reuses one compiled init program a spec."""
    return spec.init(jax.random.PRNGKey(seed), _batch(0))


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [(), ("--config.editor.dual_path=false", "--config.editor.roll_in_alpha=0.5",
                                            "--config.editor.roll_in_beta=0.5")])
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


def _loss_fn(module, dual_path=True, alpha=0.0, beta=0.0, sampling=False, own=0.0, spread=0.0, after=False):
    # one cache key however the options are spelt (defaults or given): test_alpha_mixes_… reuses the traced and
    # compiled losses of test_loss_terms_match_plain_reference's eqs. 6–7 rows
    return _jit_loss(module, dual_path, alpha, beta, sampling, own, spread, after)


@functools.lru_cache(maxsize=None)
def _jit_loss(module, dual_path, alpha, beta, sampling, own, spread, after):
    return jax.jit(functools.partial(editor_loss, module, word_start=jnp.asarray(WORD_START), label_smoothing=0.1,
                                     dual_path=dual_path, alpha=alpha, beta=beta, sampling=sampling,
                                     own_insertion_roll_in=own, global_shuffle=spread,
                                     insert_after_oracle_reposition=after, train=False, keep_roll_in=True))


def _rows(tokens):
    return [er.unpad(r) for r in np.asarray(tokens)]


def _on_path(loss_fn, params, batch, path_a):
    """The first seed whose batch coin picks the wanted path, and the loss there."""
    for seed in range(20):
        loss, aux = loss_fn(params, batch, jax.random.PRNGKey(seed))
        if bool(aux["roll_in"]["draws"]["path_a"]) == path_a:
            return loss, aux
    raise AssertionError("no batch took this path in 20 coin flips")


@pytest.mark.slow
@pytest.mark.parametrize("path_a", [True, False])
def test_dual_path_roll_in(spec, path_a):
    """Path A: insertion on y0, reposition on the reference with the model's fills wherever the oracle (y0 → y*)
    inserts; path B: reposition on y0, insertion on the model's argmax reposition of y0. Whatever the
    (untrained) model predicts, every roll-in is a valid hypothesis."""
    batch = _batch(3, b=8)
    params = _params(spec, 3)
    tgt = _rows(batch["tgt"])
    _, aux = _on_path(_loss_fn(spec.module), params, batch, path_a)
    roll = aux["roll_in"]
    for name in ("y0", "y_ins", "y_rps"):
        _valid_rows(roll[name], batch["tgt"].shape[1])
    y0, y_ins, y_rps = _rows(roll["y0"]), _rows(roll["y_ins"]), _rows(roll["y_rps"])
    if path_a:
        assert y_ins == y0
        for x, got, y in zip(y0, y_rps, tgt):
            inserted = ref.ed3_labels(x, y)[2]
            assert len(got) == len(y)
            assert [g for g, m in zip(got, inserted) if not m] == [t for t, m in zip(y, inserted) if not m]
    else:
        assert y_rps == y0
        heads = er.Heads(spec.module, params, batch["src"], batch["tgt"].shape[1])
        logits = heads("reposition_logits", y0)
        want = [ref.reposition(x, [int(np.argmax(logits[b, i, :len(x)])) for i in range(len(x))])[0]
                for b, x in enumerate(y0)]
        assert y_ins == want
    for row, ref_row in zip(y0, tgt):  # y0 = a shuffled subsample of the reference
        assert not Counter(row) - Counter(ref_row)


@pytest.mark.slow
@pytest.mark.parametrize("dual_path, path_a, alpha, beta, sampling, with_init, own, spread, after", [
    (True, True, 0.0, 0.0, False, False, 0.0, 0.0, False),   # the authors' dual path, path A
    (True, False, 0.0, 0.0, False, False, 0.0, 0.0, False),  # path B
    (True, False, 0.0, 0.0, True, False, 0.0, 0.0, False),   # path B with a sampled reposition
    (False, None, 0.3, 0.7, True, False, 0.0, 0.0, False),   # eqs. 6–7 per sentence (α ≠ β: a swap shows), sampled
    (False, None, 1.0, 0.0, False, True, 0.0, 0.0, False),   # Gu et al.'s roll-in ("−dual-path" ablation), init
    (False, None, 0.0, 1.0, False, True, 0.0, 0.0, False),   # reposition head always on y0, insertion on its reposition
    # path A with global shuffles, the insertion heads after the oracle's reposition of y0, then on their own insertion
    (True, True, 0.0, 0.0, False, False, 1.0, 0.5, True),
    (False, None, 0.5, 0.5, False, False, 1.0, 0.5, True),   # the same under eqs. 6–7
])
def test_loss_terms_match_plain_reference(spec, dual_path, path_a, alpha, beta, sampling, with_init, own, spread,
                                          after):
    batch = er.hand_batch() if with_init else er.with_filler_row(_batch(7))
    params = _params(spec, 1)
    loss_fn = _loss_fn(spec.module, dual_path, alpha, beta, sampling, own, spread, after)
    if dual_path:
        loss, aux = _on_path(loss_fn, params, batch, path_a)
    else:
        loss, aux = loss_fn(params, batch, jax.random.PRNGKey(2))
    heads = er.Heads(spec.module, params, batch["src"], batch["tgt"].shape[1])
    draws = aux["roll_in"]["draws"]
    want = er.editor_reference(heads, batch, draws, WORD_START, dual_path=dual_path, alpha=alpha, beta=beta,
                               eps=0.1, after_oracle=after)
    for name in ("y0", "y_ins", "y_rps"):
        got = _rows(aux["roll_in"][name])
        assert [got[b] for b in want["live"]] == want[name], name
    if after:  # some y0 row held a misplaced word, so the oracle's reposition changed what the heads saw
        refs = [_rows(batch["tgt"])[b] for b in want["live"]]
        moved = [ref.reposition(x, ref.ed3_labels(x, y)[0])[0] for x, y in zip(want["y0"], refs)]
        assert any(m != x for m, x, on in zip(moved, want["y0"], want["ins_on_y0"]) if on)
    assert bool(draws.get("own_insertion", False)) == (own == 1.0)
    for term in ("placeholder_loss", "token_loss", "reposition_loss"):
        np.testing.assert_allclose(aux[term], want[term], rtol=2e-5, err_msg=term)
    n = sum(len(r) for r in _rows(batch["tgt"]))
    np.testing.assert_allclose(aux["nll"], want["token_nll"] * n, rtol=2e-5)
    np.testing.assert_allclose(loss, (want["placeholder_loss"] + want["token_loss"] + want["reposition_loss"]) * n,
                               rtol=2e-5)
    if sampling:  # the samples are not the argmax: the model's choices really come from the noise
        argmax = er.editor_reference(heads, batch, {k: v for k, v in draws.items() if not k.endswith("_noise")},
                                     WORD_START, dual_path=dual_path, alpha=alpha, beta=beta, eps=0.1)
        assert (argmax["y_ins"], argmax["y_rps"]) != (want["y_ins"], want["y_rps"])


def test_history_reports_each_head_loss(spec):
    """The trainer logs a spec's terms beside the loss: each head's, whose sum is the loss."""
    assert spec.terms == ("placeholder_loss", "token_loss", "reposition_loss")


def test_alpha_mixes_the_insertion_input_and_beta_the_reposition_input(spec):
    """Eq. 7: α = P(insertion heads see y0); eq. 6: β = P(reposition head sees y0), else y0 itself — order and
    surplus tokens untouched — with the oracle's placeholders filled by the model. With y0 from the data,
    swapped roles would show."""
    batch = er.hand_batch()
    params = _params(spec, 1)
    init, tgt = _rows(batch["init"])[:4], _rows(batch["tgt"])[:4]

    _, aux = _loss_fn(spec.module, False, 1.0, 0.0)(params, batch, jax.random.PRNGKey(3))
    y_ins, y_rps = _rows(aux["roll_in"]["y_ins"]), _rows(aux["roll_in"]["y_rps"])
    assert y_ins[:4] == init and y_ins[4] == [] and y_rps[4] == []
    for x, got, y in zip(init, y_rps, tgt):
        assert er.is_subsequence(x, got) and len(got) == len(x) + sum(ref.ed3_labels(x, y)[2])

    _, aux = _loss_fn(spec.module, False, 0.0, 1.0)(params, batch, jax.random.PRNGKey(3))
    y_ins, y_rps = _rows(aux["roll_in"]["y_ins"]), _rows(aux["roll_in"]["y_rps"])
    assert y_rps[:4] == init and y_rps[4] == [] and y_ins[4] == []
    assert all(set(y) <= set(x) for y, x in zip(y_ins, init))  # a reposition only moves, copies, deletes


@pytest.mark.slow
@pytest.mark.parametrize("dual_path, alpha, beta, sampling", [(True, 0.0, 0.0, False), (False, 0.5, 0.5, True)])
def test_filler_rows_carry_no_loss(spec, dual_path, alpha, beta, sampling):
    """Appending an all-PAD row (as the batcher pads a bucket's last batch) changes no loss term and no
    gradient, in training mode (dropout on), on either dual path and under eqs. 6–7. (The reference tests
    above also hold a filler row, which their references skip.)"""
    batch = er.hand_batch(with_init=False)
    params = _params(spec, 1)

    def objective(params, batch, key):  # what the trainer differentiates
        loss, aux = editor_loss(spec.module, params, batch, key, word_start=jnp.asarray(WORD_START),
                                label_smoothing=0.1, dual_path=dual_path, alpha=alpha, beta=beta, sampling=sampling,
                                train=True, keep_roll_in=True)
        return loss / aux["count"], aux

    terms_and_grad = jax.jit(jax.value_and_grad(objective, has_aux=True))
    without = {k: v[:4] for k, v in batch.items()}
    assert _rows(batch["tgt"])[4] == []
    paths = set()
    for seed in range(4 if dual_path else 1):
        key = jax.random.PRNGKey(seed)
        (_, aux_with), grads_with = terms_and_grad(params, batch, key)
        (_, aux_without), grads_without = terms_and_grad(params, without, key)
        paths.add(bool(aux_with["roll_in"]["draws"].get("path_a", False)))
        for term in ("nll", "count", "placeholder_loss", "token_loss", "reposition_loss"):
            np.testing.assert_allclose(aux_with[term], aux_without[term], rtol=1e-5, err_msg=term)
        for a, b in zip(jax.tree_util.tree_leaves(grads_with), jax.tree_util.tree_leaves(grads_without)):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)
    assert not dual_path or paths == {True, False}


@pytest.mark.slow
def test_each_head_reads_exactly_its_layers():
    """Early exit "2,1,2" with the reposition head on its own stack and the placeholder head on the shared one."""
    spec = _spec("--config.model.dec_layers=3", "--config.editor.early_exit=2,1,2")
    batch = _batch(4)
    params = _params(spec, 0)
    expected = {"reposition_logits": {("reposition_decoder", 0), ("reposition_decoder", 1)},
                "placeholder_logits": {("decoder", 0)},
                "token_logits": {("decoder", 0), ("decoder", 1)}}
    for method, layers in expected.items():
        got = er.layers_read(spec.module, params, batch["src"], batch["tgt"], method)
        assert got == {(stack, f"layer_{i}") for stack, i in layers}, method


@pytest.mark.slow
@pytest.mark.parametrize("option", ["vector", "bos"])
def test_reposition_delete_column(option):
    """Eq. 1: column 0 scores h_i · b with b a learned vector (trained by the loss); with "bos", h_i · e_BOS.
    Every other column j scores h_i · e_j, e_j the raw embedding of token j."""
    spec = _spec(f"--config.editor.reposition_deletion={option}")
    batch = _batch(2)
    params = _params(spec, 0)
    module, tokens = spec.module, batch["tgt"]
    memory, mask = jitted.method(module, "encode")(params, batch["src"]), batch["src"] != PAD_ID
    logits = np.asarray(jitted.method(module, "reposition_logits")(params, tokens, memory, mask))
    h = np.asarray(jitted.method(module, "first_features")(params, tokens, memory, mask))
    table = np.asarray(params["params"]["src_embed"]["tokens"]["embedding"])  # shared embeddings
    want = np.einsum("bid,bjd->bij", h, table[np.asarray(tokens)])
    real = np.asarray(tokens) != PAD_ID
    for b in range(tokens.shape[0]):
        n = real[b].sum()
        np.testing.assert_allclose(logits[b, :n, 1:n], want[b, :n, 1:n], rtol=1e-5, atol=1e-5)
    if option == "vector":
        vector = np.asarray(params["params"]["deletion_vector"])
        assert vector.shape == (32,)
        np.testing.assert_allclose(logits[..., 0], h @ vector, rtol=1e-5, atol=1e-5)
        grads = jax.jit(jax.grad(lambda p: spec.loss(p, batch, jax.random.PRNGKey(0), False)[0]))(params)
        assert np.abs(np.asarray(grads["params"]["deletion_vector"])).max() > 0
    else:
        assert "deletion_vector" not in params["params"]
        np.testing.assert_allclose(logits[..., 0], h @ table[BOS_ID], rtol=1e-5, atol=1e-5)


def test_ablation_config_is_multi30k_with_gu_et_al_roll_in():
    """configs/editor/ablation_no_dual_path.py = configs/editor/multi30k.py with the "−dual-path" roll-in of
    the paper's Table 5 (eqs. 6–7 with α = 1, β = 0), jaxnat's roll-in additions off, and nothing else changed."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    base = shipped(os.path.join(root, "configs/editor/multi30k.py"))
    ablation = shipped(os.path.join(root, "configs/editor/ablation_no_dual_path.py"))
    changed = {k for k in leaf_keys(base) if base[k.split(".")[0]][k.split(".")[1]]
               != ablation[k.split(".")[0]][k.split(".")[1]]}
    assert changed <= {"editor.dual_path", "editor.roll_in_alpha", "editor.roll_in_beta",
                       "editor.own_insertion_roll_in", "editor.global_shuffle"}
    assert (ablation.editor.dual_path, ablation.editor.roll_in_alpha, ablation.editor.roll_in_beta) == (False, 1.0, 0.0)
    assert ablation.editor.own_insertion_roll_in == ablation.editor.global_shuffle == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("penalty, reward, run_all", [(0.0, 0.0, False), (1.5, 2.0, False), (0.0, -1.0, True)])
@settings(max_examples=2, deadline=None)
@given(st.integers(0, 10**6))
@example(0)
@example(2)
def test_jit_loop_equals_python_loop(spec, penalty, reward, run_all, seed):
    options = RefineOptions(max_iter=4, placeholder_penalty=penalty, run_all=run_all)

    def first(h, logits, active, continues, joins=None, trails=None):
        return editor_reposition(h, logits, active, continues, deletion_reward=reward, joins=joins, trails=trails)

    def first_py(row, marks, scores, logits, continues, joins, trails):
        return editor_first(row, marks, scores, logits, deletion_reward=reward, continues=continues, joins=joins,
                            trails=trails)

    check_loop_against_python(spec, seed, options, "reposition_logits", first, first_py, COUNTS, V, CONTINUES,
                              JOINS, TRAILS, edit_key=reward)


@functools.partial(jax.jit, static_argnames="paper_hard")
def _reposition(tokens, phrase, logits, continues=None, paper_hard=False, joins=None, trails=None):
    return editor_reposition(initial_hypotheses(tokens, phrase), logits, jnp.array([True]), continues,
                             paper_hard=paper_hard, joins=joins, trails=trails)


def test_reposition_step_with_word_boundaries_matches_python():
    """One reposition with sub-word pieces after phrases (and joining pieces before them): the glued pieces are
    deleted exactly as the reference does it (with punctuation between them or not), and counted as deletions."""
    rng = np.random.default_rng(0)
    capacity = 14
    for trial in range(20):
        body = rng.integers(NUM_RESERVED, V, 10).tolist()
        row = [BOS_ID, *body, EOS_ID]
        marks = [0, 0, 1, 1, 0, 0, 2, 0, 0, 3, 3, 0]
        logits = rng.normal(size=(1, capacity, capacity)).astype(np.float32)
        joins = JOINS if trial % 2 else None
        trails = TRAILS if trial % 4 < 2 else None
        got, counts = jax.device_get(_reposition(pad([row], capacity), pad([marks], capacity, 0), logits, CONTINUES,
                                                 joins=joins, trails=trails))
        want_row, want_marks, _, want_counts = editor_first(row, marks, [0.0] * len(row), logits[0],
                                                            continues=CONTINUES, joins=joins, trails=trails)
        assert [int(t) for t in got.tokens[0] if t != PAD_ID] == want_row, trial
        assert got.phrase[0, :len(want_row)].tolist() == want_marks
        assert {k: int(v[0]) for k, v in counts.items()} == want_counts


def test_paper_hard_mode_only_forbids_deleting_a_constraint_where_it_stands():
    """editor.hard_mode=paper: the slot of a constraint token cannot delete it, but other slots may copy it or
    leave it behind (the paper's gap); today's block mode keeps the phrase whole."""
    capacity = 6
    tokens = pad([[BOS_ID, 7, 8, 9, EOS_ID]], capacity)
    phrase = pad([[0, 1, 1, 0, 0]], capacity, 0)
    logits = np.full((1, capacity, capacity), -5.0, np.float32)
    logits[0, 1, 0], logits[0, 1, 1] = 9.0, 3.0   # slot 1 (the constraint's 7) wants to delete, else keep 7
    logits[0, 2, 3] = 9.0                          # slot 2 (the constraint's 8) takes 9: nobody keeps 8
    logits[0, 3, 1] = 9.0                          # slot 3 copies the 7
    paper, counts = jax.device_get(_reposition(tokens, phrase, logits, paper_hard=True))
    assert [int(t) for t in paper.tokens[0] if t != PAD_ID] == [BOS_ID, 7, 9, 7, EOS_ID]
    assert paper.phrase[0, :5].tolist() == [0, 1, 0, 1, 0]
    assert {k: int(v[0]) for k, v in counts.items()} == {"repositions": 2, "deletions": 0}
    block, _ = jax.device_get(_reposition(tokens, phrase, logits))
    row = [int(t) for t in block.tokens[0] if t != PAD_ID]
    assert any(row[i:i + 2] == [7, 8] for i in range(len(row))) and row.count(7) == 1


@jax.jit
def _random_model_refine(seed, tokens, phrase, src):
    options = RefineOptions(max_iter=5)
    return refine(stub_heads(seed, V, "reposition", plh_boost=3.0), editor_reposition,
                  initial_hypotheses(tokens, phrase), length_cap(src, tokens.shape[1], options), options, COUNTS,
                  jnp.asarray(CONTINUES), jnp.asarray(JOINS), jnp.asarray(TRAILS))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10_000), st.lists(st.lists(st.integers(NUM_RESERVED, V - 1), min_size=1, max_size=3),
                                        min_size=1, max_size=3))
def test_hard_constraints_survive_random_models(seed, phrases):
    """Whatever the reposition, placeholder and token heads say: every hard constraint comes out exactly once,
    whole and contiguous (its pieces in order), with no sub-word piece glued onto its end (after punctuation
    or not). Unlike LevT, EDITOR
    may move a whole phrase, so the order between phrases is not checked."""
    capacity = 20
    ids = [t for p in phrases for t in p]
    marks = [k + 1 for k, p in enumerate(phrases) for _ in p]
    tokens = jnp.asarray(pad([[BOS_ID, *ids, EOS_ID]] * 2, capacity))
    phrase = jnp.asarray(pad([[0, *marks, 0]] * 2, capacity, 0))
    src = jnp.asarray(pad([[BOS_ID, 7, 8, EOS_ID], [BOS_ID, *[7] * 12, EOS_ID]], 14))
    out = _random_model_refine(jnp.int32(seed), tokens, phrase, src)
    check_fills_scored(out)
    for row, got_marks in zip(np.asarray(out["tokens"]), np.asarray(out["phrase"])):
        real = [int(t) for t in row if t != PAD_ID]
        got_marks = [int(m) for m in got_marks[:len(real)]]
        assert real[0] == BOS_ID and real[-1] == EOS_ID and PAD_ID not in real and PLH_ID not in real
        for pid, p in enumerate(phrases, 1):
            where = [k for k, m in enumerate(got_marks) if m == pid]
            assert where == list(range(where[0], where[0] + len(p))), (real, got_marks, phrases)
            assert [real[k] for k in where] == p
            after, before = where[-1] + 1, where[0] - 1
            while not got_marks[after] and TRAILS[real[after]]:
                after += 1
            assert got_marks[after] or not CONTINUES[real[after]], (real, got_marks)
            assert got_marks[before] or not JOINS[real[before]], (real, got_marks)


@pytest.mark.slow
def test_sentence_alone_equals_sentence_in_batch(spec):
    batch = _batch(5, b=5, s=16)
    params = _params(spec, 5)
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


def _refine(heads, tokens, src, options):
    """EDITOR's loop from ``tokens``, jit'd: eagerly, each op of the loop compiles its own program."""
    return jax.jit(lambda t, s: refine(heads, editor_reposition, initial_hypotheses(t),
                                       length_cap(s, t.shape[1], options), options, COUNTS))(tokens, src)


def test_capacity_overflow_is_capped():
    capacity = 16
    tokens = jnp.asarray(pad([[BOS_ID, EOS_ID]] * 3, capacity))
    src = jnp.asarray(pad([[BOS_ID, 7, EOS_ID], [BOS_ID, *[7] * 10, EOS_ID], [BOS_ID, *[7] * 5, EOS_ID]], 12))
    options = RefineOptions(max_iter=3)
    heads = stub_heads(0, V, "reposition")
    greedy = heads._replace(placeholder=lambda t: jnp.zeros(t.shape[:1] + (t.shape[1] - 1, 256)).at[..., 255].set(9.0))
    out = _refine(greedy, tokens, src, options)
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
    out = jax.device_get(_refine(heads, tokens, src, options))
    assert [int(t) for t in out["tokens"][0] if t != PAD_ID] == [BOS_ID, 8, 7, 10, EOS_ID]
    assert out["repositions"].tolist() == [3] and out["deletions"].tolist() == [1]  # 8, 7, 10 moved; slot 4 emptied
    assert out["iterations"].tolist() == [2] and out["insertions"].tolist() == [0]
    assert [int(t) for t in out["trace"][0, 0, 0] if t != PAD_ID] == [BOS_ID, 8, 7, 10, EOS_ID]
