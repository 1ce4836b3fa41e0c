"""Levenshtein Transformer: the loss falls; every loss term equals a plain-Python reference of Algorithm 1 (the
input each head sees, its labels, mask, smoothing and mean) under every roll-in; α and β mix what the paper
says; filler rows carry no loss; each head reads exactly its layers; sampled fills are samples; the jit'd
refinement loop equals a plain-Python loop applying the reference edit ops to the same model outputs; stop
conditions; batch-1 = in-batch decoding; hard constraints survive any model output; post-editing; capacity
overflow."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from jaxnat.config import build_config
from jaxnat.data.vocab import BOS_ID, EOS_ID, NUM_RESERVED, PAD_ID, PLH_ID
from jaxnat import edit_ops
from jaxnat.decoding.refine import (Heads, RefineOptions, initial_hypotheses, insert_and_fill, length_cap, narrowed,
                                    refine, shared_placeholder_logits, static_length_cap)
from jaxnat.models import build_model
from jaxnat.models.insertion import mean_loss, model_choice
from jaxnat.models.levt.model import levt_delete, levt_loss
from tests import edit_reference as er
from tests.refine_reference import (check_fills_scored, check_loop_against_python, fit_briefly, levt_first,
                                    model_heads, pad, random_batch, stub_heads)

TINY = "tests/configs/tiny.py"
V = 40


@pytest.fixture(scope="module")
def spec():
    return build_model(build_config(TINY, ["--config.model.name=levt", "--config.eval.beam_size=1"]), V, V)


_pad = pad


def _batch(seed, b=6, s=9, t=12):
    return random_batch(seed, V, b, s, t)


def _params(spec, seed):
    """The spec's parameters drawn from PRNGKey(seed). They depend on the key alone, not on the batch (flax reads
    its shapes): every test initialises on one batch shape, and so reuses one compiled init program a spec."""
    return spec.init(jax.random.PRNGKey(seed), _batch(0))


@pytest.mark.slow
def test_loss_falls(spec):
    losses = [loss for loss, _ in fit_briefly(spec, _batch(0))]
    assert np.mean(losses[-5:]) < 0.6 * np.mean(losses[:5]), losses


# --------------------------------------------------------------------------------- the loss vs plain Python

HAND_LCS = [4, 4, 2, 3]  # what the ed2 oracle keeps of each y⁰ of er.HAND: its longest common subsequence with y*


def _loss_fn(module, alpha, beta, sampling=False, train=False, own=0.0, spread=0.0):
    # one cache key however the options are spelt (defaults or given): test_alpha_mixes_… reuses the traced and
    # compiled losses of test_loss_terms_match_plain_reference's y⁰ rows
    return _jit_loss(module, alpha, beta, sampling, train, own, spread)


@functools.lru_cache(maxsize=None)
def _jit_loss(module, alpha, beta, sampling, train, own, spread):
    return jax.jit(functools.partial(levt_loss, module, label_smoothing=0.1, alpha=alpha, beta=beta,
                                     sampling_for_deletion=sampling, own_insertion_roll_in=own,
                                     global_shuffle=spread, train=train, keep_roll_in=True))


def _rows(tokens):
    return [er.unpad(r) for r in np.asarray(tokens)]


@pytest.mark.slow
@pytest.mark.parametrize("alpha, beta, sampling, with_init, own, spread", [
    (0.0, 0.0, False, False, 0.0, 0.0),   # the reference code's roll-in
    (0.3, 0.7, True, False, 0.0, 0.0),    # per-sentence mixtures (α ≠ β, so a swap shows), sampled fills
    (1.0, 0.0, False, True, 0.0, 0.0),    # y⁰ from the data, the deletion head always on it
    (0.0, 1.0, False, True, 0.0, 0.0),    # the insertion heads always on what the oracle keeps of y⁰
    (0.0, 0.0, False, False, 0.0, 0.5),   # half the deletion inputs shuffled subsets of y*
    (0.0, 0.0, False, False, 1.0, 0.5),   # own insertion, on the shuffled subsets where a row has one
])
def test_loss_terms_match_plain_reference(spec, alpha, beta, sampling, with_init, own, spread):
    batch = er.hand_batch() if with_init else er.with_filler_row(_batch(7))
    params = _params(spec, 1)
    loss, aux = _loss_fn(spec.module, alpha, beta, sampling, own=own, spread=spread)(params, batch,
                                                                                      jax.random.PRNGKey(2))
    heads = er.Heads(spec.module, params, batch["src"], batch["tgt"].shape[1])
    draws = aux["roll_in"]["draws"]
    want = er.levt_reference(heads, batch, draws, alpha=alpha, beta=beta, eps=0.1)
    got_ins, got_del = _rows(aux["roll_in"]["y_ins"]), _rows(aux["roll_in"]["y_del"])
    assert [got_ins[b] for b in want["live"]] == want["y_ins"]
    assert [got_del[b] for b in want["live"]] == want["y_del"]
    for term in ("placeholder_loss", "token_loss", "deletion_loss"):
        np.testing.assert_allclose(aux[term], want[term], rtol=2e-5, err_msg=term)
    n = sum(len(r) for r in _rows(batch["tgt"]))
    assert float(aux["count"]) == n
    np.testing.assert_allclose(aux["nll"], want["token_nll"] * n, rtol=2e-5)
    np.testing.assert_allclose(loss, (want["placeholder_loss"] + want["token_loss"] + want["deletion_loss"]) * n,
                               rtol=2e-5)
    if spread:  # some rows really took a shuffled subset, out of order
        shuffled = np.asarray(aux["roll_in"]["draws"]["shuffle"][2])
        assert any(shuffled[b] and not er.is_subsequence(got_del[b], er.unpad(batch["tgt"][b])) for b in want["live"])
    if sampling:  # the samples are not the argmax: the fills really come from the noise
        argmax = er.levt_reference(heads, batch, {k: v for k, v in draws.items() if k != "token_noise"},
                                   alpha=alpha, beta=beta, eps=0.1)
        assert argmax["fills"] != want["fills"]


def test_history_reports_each_head_loss(spec):
    """The trainer logs a spec's terms beside the loss: each head's, whose sum is the loss (the paper's Table 2b
    compares roll-ins by the deletion head's NLL); their values are checked against plain Python above."""
    assert spec.terms == ("placeholder_loss", "token_loss", "deletion_loss")


def test_alpha_mixes_the_deletion_input_and_beta_the_insertion_input(spec):
    """Algorithm 1: α = P(deletion head sees y⁰), β = P(insertion heads see y⁰ minus the oracle's deletions).
    With y⁰ from the data, swapped roles would show: y⁰ is neither a subsequence of y* nor the model's fills."""
    batch = er.hand_batch()
    params = _params(spec, 1)
    init, tgt = _rows(batch["init"])[:4], _rows(batch["tgt"])[:4]

    _, aux = _loss_fn(spec.module, 1.0, 0.0)(params, batch, jax.random.PRNGKey(3))
    y_ins, y_del = _rows(aux["roll_in"]["y_ins"]), _rows(aux["roll_in"]["y_del"])
    assert y_del[:4] == init and y_del[4] == []
    assert all(er.is_subsequence(y, t) for y, t in zip(y_ins, tgt))   # random_delete(y*)

    _, aux = _loss_fn(spec.module, 0.0, 1.0)(params, batch, jax.random.PRNGKey(3))
    y_ins, y_del = _rows(aux["roll_in"]["y_ins"]), _rows(aux["roll_in"]["y_del"])
    assert [len(y) for y in y_ins[:4]] == HAND_LCS and y_ins[4] == []
    assert all(er.is_subsequence(y, i) and er.is_subsequence(y, t) for y, i, t in zip(y_ins, init, tgt))
    assert [len(y) for y in y_del[:4]] == [len(t) for t in tgt]      # the reference with the model's fills


@pytest.mark.slow
@pytest.mark.parametrize("alpha, beta, sampling", [(0.0, 0.0, True), (1.0, 1.0, False)])
def test_filler_rows_carry_no_loss(spec, alpha, beta, sampling):
    """Appending an all-PAD row (as the batcher pads a bucket's last batch) changes no loss term and no
    gradient, in training mode (dropout on), whether the heads roll in from y* (α = β = 0) or from y⁰
    (α = β = 1, where a filler row once got a [BOS, EOS] start). (The reference tests above also hold a filler
    row, which their references skip.)"""
    batch = er.hand_batch(with_init=False)
    params = _params(spec, 1)

    def objective(params, batch):  # what the trainer differentiates
        loss, aux = levt_loss(spec.module, params, batch, jax.random.PRNGKey(4), label_smoothing=0.1, alpha=alpha,
                              beta=beta, sampling_for_deletion=sampling, train=True)
        return loss / aux["count"], aux

    terms_and_grad = jax.jit(jax.value_and_grad(objective, has_aux=True))
    without = {k: v[:4] for k, v in batch.items()}
    assert _rows(batch["tgt"])[4] == []
    (_, aux_with), grads_with = terms_and_grad(params, batch)
    (_, aux_without), grads_without = terms_and_grad(params, without)
    for term in aux_with:
        np.testing.assert_allclose(aux_with[term], aux_without[term], rtol=1e-5, err_msg=term)
    for a, b in zip(jax.tree_util.tree_leaves(grads_with), jax.tree_util.tree_leaves(grads_without)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)


# --------------------------------------------------------------------------------- which layers each head reads

@pytest.mark.slow
@pytest.mark.parametrize("early_exit, separate_deletion, separate_placeholder, expected", [
    ("1,2,3", False, False, {"deletion_logits": {("decoder", 0)},
                             "placeholder_logits": {("decoder", 0), ("decoder", 1)},
                             "token_logits": {("decoder", 0), ("decoder", 1), ("decoder", 2)}}),
    ("2,1,2", True, True, {"deletion_logits": {("deletion_decoder", 0), ("deletion_decoder", 1)},
                           "placeholder_logits": {("placeholder_decoder", 0)},
                           "token_logits": {("decoder", 0), ("decoder", 1)}}),
])
def test_each_head_reads_exactly_its_layers(early_exit, separate_deletion, separate_placeholder, expected):
    """Early exit (a head reads the first k layers of its stack) and separate stacks (LevT's Table 2a)."""
    config = build_config(TINY, ["--config.model.name=levt", "--config.eval.beam_size=1", "--config.model.dec_layers=3",
                                 f"--config.levt.early_exit={early_exit}",
                                 f"--config.levt.separate_deletion={separate_deletion}",
                                 f"--config.levt.separate_placeholder={separate_placeholder}"])
    spec = build_model(config, V, V)
    batch = _batch(4)
    params = _params(spec, 0)
    for method, layers in expected.items():
        got = er.layers_read(spec.module, params, batch["src"], batch["tgt"], method)
        assert got == {(stack, f"layer_{i}") for stack, i in layers}, method


def test_model_choice_samples_from_the_softmax():
    """With Gumbel noise, the choice is a sample from softmax(logits): frequencies match the probabilities."""
    probs = np.array([0.6, 0.3, 0.1])
    n = 20000
    logits = jnp.broadcast_to(jnp.log(jnp.asarray(probs)), (n, 3))
    picks = np.asarray(model_choice(logits, jax.random.gumbel(jax.random.PRNGKey(0), (n, 3))))
    np.testing.assert_allclose(np.bincount(picks, minlength=3) / n, probs, atol=0.015)  # ~5 std devs
    assert (np.asarray(model_choice(logits)) == 0).all()


def test_placeholder_slot_reads_its_left_token_then_its_right_one(spec):
    """Slot k's logits are [h_k ; h_k+1] times the head's kernel, the left token's features first, as fairseq's
    LevT concatenates them for embed_mask_ins (which the fairseq importer copies into placeholder_head)."""
    h = jax.random.normal(jax.random.PRNGKey(0), (2, 5, spec.cfg.d_model))
    params = spec.module.init(jax.random.PRNGKey(1), h, method="placeholder_from")
    kernel = np.asarray(params["params"]["placeholder_head"]["kernel"], np.float64)
    got = np.asarray(spec.module.apply(params, h, method="placeholder_from"))
    x = np.asarray(h, np.float64)
    want = [[np.concatenate([x[b, k], x[b, k + 1]]) @ kernel for k in range(4)] for b in range(2)]
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-4, atol=1e-5)


def test_a_loss_over_no_position_is_zero():
    """A head with nothing to learn in a batch (no slot, no inserted token) adds 0 to the loss, not NaN."""
    assert float(mean_loss(jnp.float32(0.0), jnp.float32(0.0))) == 0.0
    assert float(mean_loss(jnp.float32(3.0), jnp.float32(2.0))) == 1.5


# --------------------------------------------------------------------------------- the loop vs plain Python

# plain, and with the penalty and every iteration run (one program each, for random models: hypothesis over seeds)
@pytest.mark.parametrize("penalty, run_all", [(0.0, False), (1.5, True)])
@settings(max_examples=2, deadline=None)
@given(st.integers(0, 10**6))
@example(0)
@example(1)
def test_jit_loop_equals_python_loop(spec, penalty, run_all, seed):
    options = RefineOptions(max_iter=4, placeholder_penalty=penalty, run_all=run_all)
    check_loop_against_python(spec, seed, options, "deletion_logits", levt_delete, levt_first, ("deletions",), V,
                              CONTINUES, JOINS, TRAILS)


def test_placeholder_head_reuses_the_deletion_features(spec):
    """`refine.shared_placeholder_logits` gives the placeholder head's logits on the canvas after deletion however
    many rows the deletion changed: none (the deletion head's features as they are), one of eight (that row's
    computed alone) or half of them (a decoder run on all), on a canvas whose rows fit in half of it."""
    batch = random_batch(3, V, b=8)
    params = _params(spec, 3)
    shared = model_heads(spec, params, batch["src"], "deletion_logits").shared
    before = jnp.pad(batch["tgt"], ((0, 0), (0, 20)), constant_values=PAD_ID)  # [8, 32], every row within 16
    features = narrowed(shared.features, before)
    lengths = np.asarray((before != PAD_ID).sum(1))
    reuse = jax.jit(lambda f, b, a: shared_placeholder_logits(shared, f, b, a))
    for rows in ([], [3], [0, 2, 5, 6]):
        gone = jnp.zeros(before.shape, bool).at[jnp.asarray(rows, jnp.int32), 1].set(True)  # each one's first word
        after = edit_ops.delete_tokens(before, gone, PAD_ID).tokens
        got, want = reuse(features, before, after), model_heads(spec, params, batch["src"], "x").placeholder(after)
        for b in range(8):
            slots = lengths[b] - 1 - (b in rows)
            np.testing.assert_allclose(got[b, :slots], want[b, :slots], atol=2e-5, err_msg=f"{rows}, row {b}")


def test_half_canvas_only_when_every_token_fits():
    """A head runs on the first half of a 32-wide canvas (`refine.narrowed`, and the fill in `insert_and_fill`) only
    when every row fits in it: a row of 17 tokens, its EOS past the half, is read whole. The heads here answer how
    many real tokens they were given."""
    def seen(t):
        return jnp.sum(t != PAD_ID, axis=1)[:, None, None]

    for n in (16, 17):
        tokens = jnp.asarray(_pad([[BOS_ID, *[7] * (n - 2), EOS_ID]], 32))
        got = jax.jit(lambda t: narrowed(lambda t: jnp.broadcast_to(seen(t), t.shape + (2,)), t))(tokens)
        assert (np.asarray(got)[0, :n] == n).all(), n
    # one placeholder opened after BOS makes the 16 tokens 17; the token head fills it with the id of what it saw
    heads = Heads(None, lambda t: jnp.zeros(t.shape[:1] + (t.shape[1] - 1, 256)).at[:, 0, 1].set(9.0),
                  lambda t: jnp.where(jnp.arange(V) == NUM_RESERVED + seen(t), 9.0, 0.0))
    hyps = initial_hypotheses(jnp.asarray(_pad([[BOS_ID, *[7] * 14, EOS_ID]], 32)))
    _, filled, _ = jax.jit(lambda h: insert_and_fill(h, heads, jnp.asarray([32]), jnp.asarray([True]), 0.0))(hyps)
    assert np.asarray(filled.tokens)[0, :3].tolist() == [BOS_ID, NUM_RESERVED + 17, 7]


def test_length_cap_uses_each_sentence_own_source():
    src = jnp.asarray(_pad([[BOS_ID, *[7] * 28, EOS_ID], [BOS_ID, 7, EOS_ID]], 30))
    cap = jax.jit(lambda s: length_cap(s, 128, RefineOptions()))
    assert cap(src).tolist() == [60, 10]
    assert cap(src[:1]).tolist() == [60]  # batch size 1: no 10-token cap
    # a fractional product is cut down, as fairseq's (src_lens * max_ratio).long(): 1.65 · 15 → 24
    fraction = jax.jit(lambda s: length_cap(s, 128, RefineOptions(cap_ratio=1.65)))
    assert fraction(jnp.asarray(_pad([[BOS_ID, *[7] * 13, EOS_ID]], 15))).tolist() == [24]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(2, 256), min_size=8, max_size=8), st.integers(0, 300), st.floats(0.0, 4.0),
       st.integers(1, 1024))
@example([45, 90, 30, 100, 2, 2, 2, 2], 10, 1.4, 1024)  # float64 gave 62 for 1.4 · 45 where float32 gives 63
@example([90, 2, 2, 2, 2, 2, 2, 2], 10, 1.3, 1024)      # and 117 for 1.3 · 90, not 116
def test_the_static_length_cap_is_the_traced_one(src_lens, cap_min, cap_ratio, capacity):
    """A model's static output capacity (`static_length_cap`, host side) and the per-sentence cap it decodes
    under (`length_cap`, traced) are one formula: a sentence as long as its batch's source gets the same cap as
    beside a longer one. (Fixed shapes: the traced ops compile once.)"""
    src = jnp.asarray(_pad([[BOS_ID, *[7] * (n - 2), EOS_ID] for n in src_lens], 256))
    traced = length_cap(src, capacity, RefineOptions(cap_min=cap_min, cap_ratio=cap_ratio))
    assert traced.tolist() == [static_length_cap(n, capacity, cap_min, cap_ratio) for n in src_lens]


# --------------------------------------------------------------------------------- stub heads

def _stub_heads(seed, plh_boost=0.0):
    return stub_heads(seed, V, "deletion", plh_boost)


CONTINUES = (np.arange(V) % 3 == 0) & (np.arange(V) >= NUM_RESERVED)  # a third of the pieces continue a word
JOINS = (np.arange(V) % 3 == 1) & (np.arange(V) >= NUM_RESERVED)  # a third join the next onto theirs (BPE's "@@")
TRAILS = (np.arange(V) % 6 == 2) & (np.arange(V) >= NUM_RESERVED)  # punctuation, after which a word is still open


@jax.jit
def _random_model_refine(seed, tokens, phrase, src):
    options = RefineOptions(max_iter=5)
    return refine(_stub_heads(seed, plh_boost=3.0), levt_delete, initial_hypotheses(tokens, phrase),
                  length_cap(src, tokens.shape[1], options), options, ("deletions",), jnp.asarray(CONTINUES),
                  jnp.asarray(JOINS), jnp.asarray(TRAILS))


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10_000), st.lists(st.lists(st.integers(NUM_RESERVED, V - 1), min_size=1, max_size=3),
                                        min_size=1, max_size=3))
def test_hard_constraints_survive_random_models(seed, phrases):
    capacity = 20
    ids = [t for p in phrases for t in p]
    marks = [k + 1 for k, p in enumerate(phrases) for _ in p]
    tokens = jnp.asarray(_pad([[BOS_ID, *ids, EOS_ID]] * 2, capacity))
    phrase = jnp.asarray(_pad([[0, *marks, 0]] * 2, capacity, 0))
    src = jnp.asarray(_pad([[BOS_ID, 7, 8, EOS_ID], [BOS_ID, *[7] * 12, EOS_ID]], 14))
    out = _random_model_refine(jnp.int32(seed), tokens, phrase, src)
    check_fills_scored(out)
    for row, marks in zip(np.asarray(out["tokens"]), np.asarray(out["phrase"])):
        real = [int(t) for t in row if t != PAD_ID]
        assert real[0] == BOS_ID and real[-1] == EOS_ID and PAD_ID not in real and PLH_ID not in real
        text = " " + " ".join(map(str, real)) + " "
        positions = [text.find(" " + " ".join(map(str, p)) + " ") for p in phrases]
        assert all(p >= 0 for p in positions), (real, phrases)  # contiguous
        # in order: each phrase found after the previous one
        start = 0
        for p in phrases:
            found = text.find(" " + " ".join(map(str, p)) + " ", start)
            assert found >= 0, (real, phrases)
            start = found + 1
        # the piece after each phrase (and its punctuation) begins a new word: no sub-word glued onto a constraint
        assert [t for t, m in zip(real, marks) if m] == ids  # the constraint tokens, each once, in order
        for k in range(1, len(real) - 1):
            if marks[k] and not marks[k + 1]:
                j = k + 1
                while not marks[j] and TRAILS[real[j]]:
                    j += 1
                assert marks[j] or not CONTINUES[real[j]], (real, phrases)
            if marks[k] and not marks[k - 1]:  # and the piece before it glues nothing onto it
                assert not JOINS[real[k - 1]], (real, phrases)


def _refine(heads, tokens, src, options):
    """LevT's loop from ``tokens``, jit'd: eagerly, each op of the loop compiles its own program."""
    return jax.jit(lambda t, s: refine(heads, levt_delete, initial_hypotheses(t), length_cap(s, t.shape[1], options),
                                       options, ("deletions",)))(tokens, src)


def test_capacity_overflow_is_capped():
    capacity = 16
    tokens = jnp.asarray(_pad([[BOS_ID, EOS_ID]] * 3, capacity))
    src = jnp.asarray(_pad([[BOS_ID, 7, EOS_ID], [BOS_ID, *[7] * 10, EOS_ID], [BOS_ID, *[7] * 5, EOS_ID]], 12))
    options = RefineOptions(max_iter=3)
    heads = _stub_heads(0)
    greedy = Heads(heads.first, lambda t: jnp.zeros(t.shape[:1] + (t.shape[1] - 1, 256)).at[..., 255].set(9.0),
                   heads.token)
    out = _refine(greedy, tokens, src, options)
    lengths = (np.asarray(out["tokens"]) != PAD_ID).sum(1)
    assert lengths.tolist() == [10, 16, 14]  # max(10, 2·src_len), never above the capacity
    for row in np.asarray(out["tokens"]):
        n = (row != PAD_ID).sum()
        assert (row[:n] != PAD_ID).all() and row[0] == BOS_ID and row[n - 1] == EOS_ID


def test_a_finished_row_stays_as_it_finished():
    """A row a pass left unchanged is finished and frozen, even where what a head says of it changes with the rest
    of the batch: here row 0 is offered a placeholder once row 1 (one token longer each pass) reaches 4 tokens."""
    def placeholder(t):
        grown = jnp.sum(t[1] != PAD_ID) >= 4
        logit = jnp.where(jnp.asarray([grown, ~grown]), 9.0, -9.0)
        return jnp.zeros(t.shape[:1] + (t.shape[1] - 1, 256)).at[:, 0, 1].set(logit)

    heads = Heads(lambda t: jnp.zeros(t.shape + (2,)).at[..., 0].set(1.0), placeholder,
                  lambda t: jnp.zeros(t.shape + (V,)).at[..., 7].set(1.0))
    tokens = jnp.asarray(_pad([[BOS_ID, EOS_ID]] * 2, 8))
    out = _refine(heads, tokens, jnp.asarray(_pad([[BOS_ID, 7, EOS_ID]] * 2, 3)), RefineOptions(max_iter=5))
    assert np.asarray(out["tokens"])[:, :4].tolist() == [[BOS_ID, EOS_ID, PAD_ID, PAD_ID], [BOS_ID, 7, 7, EOS_ID]]
    assert out["iterations"].tolist() == [1, 3] and out["insertions"].tolist() == [0, 2]


def test_post_editing_starts_from_the_given_hypothesis():
    capacity = 12
    init = [BOS_ID, 7, 8, 9, 10, EOS_ID]
    tokens = jnp.asarray(_pad([init], capacity))
    src = jnp.asarray(_pad([[BOS_ID, 7, 8, EOS_ID]], 4))
    # a model that deletes every 8 and inserts nothing: post-editing = the initial hypothesis minus 8
    heads = Heads(lambda t: jnp.stack([jnp.zeros(t.shape), jnp.where(t == 8, 1.0, -1.0)], -1),
                  lambda t: jnp.zeros(t.shape[:1] + (t.shape[1] - 1, 256)).at[..., 0].set(1.0),
                  _stub_heads(0).token)
    options = RefineOptions(max_iter=3, trace=True)
    out = jax.device_get(_refine(heads, tokens, src, options))
    assert [int(t) for t in out["tokens"][0] if t != PAD_ID] == [BOS_ID, 7, 9, 10, EOS_ID]
    assert out["deletions"].tolist() == [1] and out["iterations"].tolist() == [2]
    assert out["steps"].tolist() == [1]  # the papers' count: the pass that changed nothing is not a step
    assert out["trace"].shape == (1, 4, 3, capacity)
    assert [int(t) for t in out["trace"][0, 0, 0] if t != PAD_ID] == [BOS_ID, 7, 9, 10, EOS_ID]
    # the passes the loop did not run (2 of 4 ran) repeat the final hypothesis in each of their three snapshots
    assert (out["trace"][0, 2:] == out["tokens"][0]).all()


@pytest.mark.slow
def test_sentence_alone_equals_sentence_in_batch(spec):
    """fairseq once capped batch-1 outputs at 10 tokens (BLEU 4.3): here every row decodes the same alone."""
    batch = _batch(5, b=5, s=16)
    params = _params(spec, 5)
    src = batch["src"]
    options = RefineOptions(max_iter=4)
    capacity = 32

    @jax.jit
    def decode(src):
        heads = model_heads(spec, params, src, "deletion_logits")
        start = initial_hypotheses(jnp.asarray(_pad([[BOS_ID, EOS_ID]] * src.shape[0], capacity)))
        return refine(heads, levt_delete, start, length_cap(src, capacity, options), options, ("deletions",))

    together = decode(src)
    assert max((np.asarray(together["tokens"]) != PAD_ID).sum(1)) > 10  # long sources are not cut at 10
    for b in range(src.shape[0]):
        alone = decode(src[b:b + 1])
        for key in ("tokens", "iterations", "deletions", "insertions"):
            np.testing.assert_array_equal(alone[key][0], together[key][b])
        np.testing.assert_allclose(alone["score"][0], together["score"][b], rtol=1e-5)


@pytest.mark.parametrize("mode, expected", [("deletion", [BOS_ID, 7, 9, 10, EOS_ID]),
                                            ("deletion_placeholder", [BOS_ID, 7, 9, 11, 10, EOS_ID])])
def test_oracle_collaboration_takes_the_oracles_steps(mode, expected):
    """Gu et al. 2019 Fig. 5: the oracle deletes what the reference lacks (model: delete nothing) and, with
    placeholders, opens exactly the reference's missing slots (model: insert nothing); the fills stay the
    model's (here always 11)."""
    from jaxnat.models.levt.model import oracle_heads

    capacity = 12
    tokens = jnp.asarray(_pad([[BOS_ID, 7, 8, 9, 10, EOS_ID]], capacity))
    reference = jnp.asarray(_pad([[BOS_ID, 7, 9, 11, 10, EOS_ID]], 8))
    src = jnp.asarray(_pad([[BOS_ID, 7, 8, EOS_ID]], 4))
    heads = Heads(lambda t: jnp.stack([jnp.ones(t.shape), jnp.zeros(t.shape)], -1),
                  lambda t: jnp.zeros(t.shape[:1] + (t.shape[1] - 1, 256)).at[..., 0].set(1.0),
                  lambda t: jax.nn.one_hot(jnp.full(t.shape, 11), V))
    out = jax.device_get(_refine(oracle_heads(heads, reference, mode), tokens, src, RefineOptions(max_iter=3)))
    assert [int(t) for t in out["tokens"][0] if t != PAD_ID] == expected
    assert out["deletions"].tolist() == [1] and out["iterations"].tolist() == [2]
