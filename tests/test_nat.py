"""NAT-base and Coverage-NAT: the coverage vector (eq. 6) and its attention bias (eqs. 8–9) against plain
Python; λ receives gradients; SCA (eqs. 11–14) and both losses against plain-Python computations; the loss
falls; the repeat removal against a plain-Python reference; K_dec is a decoding choice; a sentence decodes
alone as in a batch; the repeated-token ratios. (Length-parallel decoding with a rescorer is mask-predict with
one pass: tests/test_cmlm.py checks it against a plain-Python loop, repeat removal included.)"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxnat.config import build_config
from jaxnat.data.vocab import BOS_ID, EOS_ID, NUM_RESERVED, PAD_ID
from jaxnat.decoding import mask_predict as mp
from jaxnat.decoding.request import DecodeRequest
from jaxnat.evaluation.metrics import repeated_token_ratios
from jaxnat.models import build_model
from jaxnat.models.nat.model import CoverageIteration, coverage, source_words
from jaxnat.models.transformer import DecoderLayer, MultiHeadAttention, attention_bias
from tests import edit_reference as er
from tests import jitted
from tests import mask_predict_reference as ref
from tests.refine_reference import fit_briefly, pad, random_batch

TINY = "tests/configs/tiny.py"
V = 40
SEVERAL = settings(max_examples=60, deadline=None)
# K = 2 iterations in training and decoding: the second reads the first's attention, as every later one does its
# predecessor's (the iterations are unrolled: each more is one more layer to compile in every program)
K = 2
COVERAGE = ("--config.nat.coverage=true", "--config.model.dec_layers=2", f"--config.nat.train_iterations={K}",
            f"--config.nat.decode_iterations={K}")
# the decoding tests' options: the forced-λ and the alone-as-in-a-batch tests then share one compiled generate
DECODING = ("--config.nat.remove_repeats=true", "--config.nat.length_beam=3", "--config.nat.length_beam_mode=centred")


@functools.lru_cache(maxsize=None)
def _spec(*overrides):
    return build_model(build_config(TINY, ["--config.model.name=nat", "--config.eval.beam_size=1", *overrides]), V, V)


# --------------------------------------------------------------------------------- eqs. 6–9

def coverage_reference(attention, counted):
    """Eq. 6 for one sentence: C[t][i] = min(Σ_{t' < t, counted} A[t'][i], 1)."""
    steps, width = attention.shape
    out = np.zeros((steps, width))
    for t in range(steps):
        for i in range(width):
            out[t, i] = min(sum(float(attention[u, i]) for u in range(t) if counted[u]), 1.0)
    return out


# The kernels and layers under test are jit'd: one program a shape, where eagerly each op compiles its own (even
# jnp.asarray of a NumPy array: the jit'd functions take the NumPy arrays as they are)
_coverage = jax.jit(coverage)


@SEVERAL
@given(seed=st.integers(0, 2**31 - 1), steps=st.integers(1, 9), width=st.integers(1, 6),
       counted_kind=st.sampled_from(["random", "none", "all"]))
def test_coverage_matches_eq6(seed, steps, width, counted_kind):
    """Random attention rows (each a distribution over the source), any subset of counted target steps. The
    kernel runs on them padded to [2, 9, 6] (one program), as a batch pads them: target steps that are not
    counted after them, source PAD columns of zero attention; its real [2, steps, width] part is checked."""
    rng = np.random.default_rng(seed)
    attention = rng.dirichlet(np.ones(width), (2, steps)).astype(np.float32)
    counted = {"random": rng.random((2, steps)) < 0.6, "none": np.zeros((2, steps), bool),
               "all": np.ones((2, steps), bool)}[counted_kind]
    padded = np.pad(attention, ((0, 0), (0, 9 - steps), (0, 6 - width)))
    got = np.asarray(_coverage(padded, np.pad(counted, ((0, 0), (0, 9 - steps)))))
    for b in range(2):
        np.testing.assert_allclose(got[b, :steps, :width], coverage_reference(attention[b], counted[b]),
                                   rtol=1e-5, atol=1e-6)


def _softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def test_attention_weights_are_the_softmax_of_scaled_scores_plus_the_bias():
    """`MultiHeadAttention.attend(return_weights=True)` = softmax(Q Kᵀ / √d_k + bias) per head (eq. 9's form)."""
    cfg = _spec().cfg
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, cfg.d_model)).astype(np.float32)
    mem = rng.normal(size=(2, 4, cfg.d_model)).astype(np.float32)
    bias = rng.normal(size=(2, 1, 5, 4)).astype(np.float32)
    attn = MultiHeadAttention(cfg)

    @jax.jit
    def run(x, mem, bias):
        params = attn.init(jax.random.PRNGKey(0), x, mem, bias, False)
        return params, attn.apply(params, x, *attn.apply(params, mem, method="project_kv"), bias, False, True,
                                  method="attend")[1]

    params, weights = run(x, mem, bias)
    p = params["params"]
    q = np.einsum("btd,dhk->bthk", x, p["query"]["kernel"]) + p["query"]["bias"]
    k = np.einsum("bsd,dhk->bshk", mem, p["key"]["kernel"]) + p["key"]["bias"]
    scores = np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(q.shape[-1]) + bias
    np.testing.assert_allclose(np.asarray(weights), _softmax(scores), rtol=1e-4, atol=1e-6)


@functools.lru_cache(maxsize=None)
def _iteration(**options):
    """`CoverageIteration(cfg, **options)`'s init and apply, jit'd once for every test that builds the same."""
    it = CoverageIteration(_spec().cfg, **options)
    return jax.jit(it.init), jax.jit(it.apply)


@jax.jit
def _layer_by_hand(layer_params, hidden, self_bias, memory, cross_bias):
    layer = DecoderLayer(_spec().cfg)
    kv = layer.apply(layer_params, memory, method="cross_kv")
    return layer.apply(layer_params, hidden, self_bias, kv, cross_bias, False, return_attention=True)


def _iteration_inputs(cfg):
    rng = np.random.default_rng(1)
    b, t, s = 2, 6, 5
    hidden = rng.normal(size=(b, t, cfg.d_model)).astype(np.float32)
    memory = rng.normal(size=(b, s, cfg.d_model)).astype(np.float32)
    attention = rng.dirichlet(np.ones(s), (b, t)).astype(np.float32)
    counted = np.array([[0, 1, 1, 1, 1, 0], [0, 1, 1, 0, 0, 0]], bool)
    tgt_mask = np.array([[1] * 6, [1] * 4 + [0] * 2], bool)
    src_mask = np.array([[1] * 5, [1] * 3 + [0] * 2], bool)
    return hidden, memory, attention, counted, attention_bias(jnp.asarray(tgt_mask)), src_mask


@pytest.mark.parametrize("scale, forced", [(0.0, None), (0.7, None), (-1.3, None), (0.7, 0.0), (0.7, 2.5)])
@pytest.mark.parametrize("bos_eos", [False, True])
def test_coverage_iteration_biases_the_inter_attention_by_lambda_times_one_minus_coverage(scale, forced, bos_eos):
    """One iteration = the decoder layer with ``λ(1 − C)`` (eqs. 8–9; C from eq. 6 in plain Python) added to
    its inter-attention logits at the source words (BOS and EOS too with ``bos_eos``, jaxnat's former rule):
    its hidden states and head-mean attention against the layer run by hand; a forced λ replaces the trained one."""
    cfg = _spec().cfg
    hidden, memory, attention, counted, self_bias, src_mask = _iteration_inputs(cfg)
    cross_bias = attention_bias(jnp.asarray(src_mask))
    coverable = src_mask if bos_eos else np.array([[0, 1, 1, 1, 0], [0, 1, 0, 0, 0]], bool)
    init, apply = _iteration(forced_lambda=forced)
    params = init(jax.random.PRNGKey(0), (hidden, attention), self_bias, memory, cross_bias, counted, coverable)
    assert float(params["params"]["coverage_scale"]) == 1.0  # λ initialised to 1
    params = {"params": {**params["params"], "coverage_scale": jnp.float32(scale)}}
    (h, a), _ = apply(params, (hidden, attention), self_bias, memory, cross_bias, counted, coverable)

    cov = np.stack([coverage_reference(attention[k], counted[k]) for k in range(len(hidden))])
    bias = (scale if forced is None else forced) * np.where(coverable[:, None, :], 1.0 - cov, 0.0)
    want_h, want_w = _layer_by_hand({"params": params["params"]["layer"]}, hidden, self_bias, memory,
                                    cross_bias + bias[:, None])
    np.testing.assert_allclose(np.asarray(h), np.asarray(want_h), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(a), np.asarray(want_w).mean(axis=1), rtol=1e-4, atol=1e-6)


def test_source_words_are_the_tokens_between_bos_and_eos():
    src = jnp.asarray([[BOS_ID, 7, 8, EOS_ID, PAD_ID], [BOS_ID, EOS_ID, PAD_ID, PAD_ID, PAD_ID]])
    words = jax.jit(source_words)
    assert words(src != PAD_ID).tolist() == [[False, True, True, False, False], [False] * 5]
    segments = jnp.asarray([[1, 1, 1, 2, 2, 2, 2, 0]])  # packed: [BOS w EOS][BOS w w EOS] PAD
    assert words(segments).tolist() == [[False, True, False, False, True, True, False, False]]


@pytest.mark.parametrize("stop_gradient", [False, True])
def test_stop_gradient_makes_the_coverage_a_constant(stop_gradient):
    """nat.coverage_stop_gradient: the previous iteration's attention reaches the next only through C, so its
    gradient is zero exactly when C is a constant."""
    cfg = _spec().cfg
    hidden, memory, attention, counted, self_bias, src_mask = _iteration_inputs(cfg)
    cross_bias = attention_bias(jnp.asarray(src_mask))
    init, apply = _iteration(stop_gradient=stop_gradient)
    params = init(jax.random.PRNGKey(0), (hidden, attention), self_bias, memory, cross_bias, counted, src_mask)
    grad = jax.jit(jax.grad(lambda a: jnp.sum(apply(params, (hidden, a), self_bias, memory, cross_bias, counted,
                                                    src_mask)[0][0] ** 2)))(jnp.asarray(attention))
    assert (float(jnp.max(jnp.abs(grad))) == 0.0) == stop_gradient


@pytest.mark.slow
def test_lambda_receives_gradients():
    spec = _spec(*COVERAGE)
    batch = random_batch(0, V)
    params = spec.init(jax.random.PRNGKey(0), batch)

    def loss(lam, params):  # the gradient of λ alone: the backward pass skips the layers below the coverage layer
        iteration = {**params["params"]["coverage"]["iteration"], "coverage_scale": lam}
        params = {"params": {**params["params"], "coverage": {"iteration": iteration}}}
        return spec.loss(params, batch, jax.random.PRNGKey(1), False)[0]

    g = float(jax.jit(jax.grad(loss))(params["params"]["coverage"]["iteration"]["coverage_scale"], params))
    assert np.isfinite(g) and abs(g) > 0


@pytest.mark.slow
def test_a_forced_lambda_decodes_as_parameters_with_that_lambda():
    """nat.coverage_lambda=0 (the control without the coverage bias) decodes the trained parameters as if their λ
    were 0; the spec reports λ (history, metrics.json) and the stop-gradient switch reaches the coverage layer."""
    spec, forced = _spec(*COVERAGE, *DECODING), _spec(*COVERAGE, *DECODING, "--config.nat.coverage_lambda=0")
    batch = random_batch(2, V)
    params = spec.init(jax.random.PRNGKey(0), batch)
    iteration = params["params"]["coverage"]["iteration"]
    # λ a float32 array, as trained: one program decodes both parameters (and the next test's batch)
    zeroed = {"params": {**params["params"], "coverage": {"iteration": {
        **iteration, "coverage_scale": jnp.zeros_like(iteration["coverage_scale"])}}}}
    request = DecodeRequest(batch["src"], max_out=20)
    want = jax.jit(spec.generate)(zeroed, request)
    got = jax.jit(forced.generate)(params, request)
    np.testing.assert_array_equal(got["tokens"], want["tokens"])
    np.testing.assert_allclose(got["score"], want["score"], rtol=1e-6)
    assert not np.allclose(jax.jit(spec.generate)(params, request)["score"], want["score"])
    assert spec.summary(params) == {"coverage_lambda": 1.0} and spec.terms == ("length_loss",)
    assert _spec(*COVERAGE, "--config.nat.coverage_stop_gradient=true").module.coverage_options[1] is True


def test_k_is_a_decoding_choice_with_one_set_of_weights():
    """The same parameters serve every K (one scanned layer); K_dec changes the output, K_train does not
    change the parameter tree."""
    batch = random_batch(2, V)
    p1 = _spec(*COVERAGE, "--config.nat.train_iterations=1").init(jax.random.PRNGKey(0), batch)
    pk = _spec(*COVERAGE).init(jax.random.PRNGKey(0), batch)  # K_train = K
    assert jax.tree_util.tree_structure(p1) == jax.tree_util.tree_structure(pk)
    shapes = jax.tree_util.tree_map(lambda x: x.shape, p1)
    assert shapes == jax.tree_util.tree_map(lambda x: x.shape, pk)
    spec = _spec(*COVERAGE)
    memory, _ = jitted.method(spec.module, "encode")(p1, batch["src"])
    canvas = jnp.where((batch["tgt"] > EOS_ID), 5, batch["tgt"])
    logits = {k: jitted.method(spec.module, "token_logits", iterations=k)(p1, canvas, memory, batch["src"] != PAD_ID)
              for k in (1, 2)}
    assert not np.allclose(logits[1], logits[2])


# --------------------------------------------------------------------------------- losses

def reference_loss(spec, params, batch, *, eps, weight, sca, iterations):
    """The NAT objective, sentence by sentence: smoothed CE of the n tokens on the fully masked canvas (mean over
    tokens) + α × the length CE (mean over sentences) + β × ‖Ē_src − Ē_hyp‖ / √d (eqs. 11–14, mean over
    sentences); then × the batch's real tokens (BOS/EOS included), as the trainer divides by that count."""
    module = spec.module
    src, tgt = np.asarray(batch["src"]), np.asarray(batch["tgt"])
    memory, length_logits = jitted.method(module, "encode")(params, batch["src"])
    canvas = np.where((tgt != PAD_ID) & (tgt != BOS_ID) & (tgt != EOS_ID), 5, tgt)  # 5 = MASK
    logits = np.asarray(jitted.method(module, "token_logits", iterations=iterations)(
        params, jnp.asarray(canvas), memory, batch["src"] != PAD_ID))
    p = params["params"]
    emb = np.asarray(p["src_embed"]["tokens"]["embedding"], np.float64)
    ws = np.asarray(p["source_map"]["kernel"], np.float64)
    tok, lengths, agreements = [], [], []
    for b in range(len(tgt)):
        row = [int(x) for x in tgt[b] if x != PAD_ID]
        n, src_words = len(row) - 2, [int(x) for x in src[b] if x not in (PAD_ID, BOS_ID, EOS_ID)]
        tok += [er.smoothed_nll(logits[b, i], row[i], eps)[0] for i in range(1, n + 1)]
        lengths.append(er.smoothed_nll(np.asarray(length_logits[b]), min(n, 255), 0.0)[0])
        src_repr = np.mean([np.maximum(emb[w] @ ws, 0.0) for w in src_words], axis=0)
        hyp_repr = np.mean([_softmax(logits[b, i].astype(np.float64)) @ emb for i in range(1, n + 1)], axis=0)
        agreements.append(np.linalg.norm(src_repr - hyp_repr) / np.sqrt(emb.shape[1]))
    loss = np.mean(tok) + weight * np.mean(lengths) + (sca * np.mean(agreements) if sca else 0.0)
    return loss * np.sum(tgt != PAD_ID), np.mean(agreements)


@pytest.mark.slow
# the coverage layer with SCA is checked pre-norm only: SCA reads the logits and the embeddings, whatever the norms'
# places, and the post-norm coverage layer is the (COVERAGE, 0.0) case's
@pytest.mark.parametrize("overrides, sca", [((), 0.0), ((), 0.5), (COVERAGE, 0.0),
                                           ((*COVERAGE, "--config.model.pre_norm=true"), 0.5)])
def test_loss_matches_plain_reference(overrides, sca):
    spec = _spec(*overrides, f"--config.nat.sca_weight={sca}")
    batch = random_batch(3, V)
    params = spec.init(jax.random.PRNGKey(0), batch)
    loss, aux = jax.jit(spec.loss, static_argnums=3)(params, batch, jax.random.PRNGKey(1), False)
    want, agreement = reference_loss(spec, params, batch, eps=0.1, weight=0.1, sca=sca,
                                     iterations=K if overrides else 1)
    np.testing.assert_allclose(float(loss), want, rtol=1e-4)
    if sca:
        np.testing.assert_allclose(float(aux["coverage_loss"]), agreement, rtol=1e-4)
    else:
        assert "coverage_loss" not in aux


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [(), (*COVERAGE, "--config.nat.sca_weight=0.5")])
def test_loss_falls(overrides):
    history = fit_briefly(_spec(*overrides), random_batch(4, V), steps=25)
    assert history[-1][0] < 0.6 * history[0][0]


# --------------------------------------------------------------------------------- decoding

_remove_repeats = jax.jit(mp.remove_repeats)


@SEVERAL
@given(seed=st.integers(0, 2**31 - 1), width=st.integers(1, 10), kind=st.sampled_from(["random", "empty", "full",
                                                                                       "pads", "repeats"]))
def test_remove_repeats_matches_reference(seed, width, kind):
    """Rows of every shape: [BOS, EOS] (empty), one token, full capacity (no PAD), all PAD, long runs."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(4):
        if kind == "pads":
            rows.append([PAD_ID] * width)
            continue
        n = {"empty": 0, "full": max(width - 2, 0)}.get(kind, int(rng.integers(0, max(width - 1, 1))))
        n = min(n, max(width - 2, 0))
        vocab = NUM_RESERVED + (2 if kind == "repeats" else 6)
        words = list(rng.integers(NUM_RESERVED, vocab, n))
        rows.append(([BOS_ID, *words, EOS_ID] if width >= 2 else [PAD_ID] * width))
    tokens = pad(rows, width).astype(np.int32)
    got, removed = map(np.asarray, _remove_repeats(tokens))
    for r in range(4):
        want, count = ref.remove_repeats(list(tokens[r]))
        assert got[r].tolist() == want and int(removed[r]) == count


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [(), COVERAGE])
def test_a_sentence_decodes_alone_as_in_a_batch(overrides):
    spec = _spec(*overrides, *DECODING)
    batch = random_batch(5, V)
    params = spec.init(jax.random.PRNGKey(0), batch)
    generate = jax.jit(spec.generate)  # the parameters an argument: the forced-λ test's program for the batch

    def run(src):  # the outputs on the host: indexing them there compiles nothing
        return jax.tree.map(np.asarray, generate(params, DecodeRequest(jnp.asarray(src), max_out=20)))

    src = np.asarray(batch["src"])
    together = run(src)
    # every token between BOS and EOS is the model's (one pass, no constraints), with its log-probability
    tokens, scored, token_logp = (np.asarray(together[k]) for k in ("tokens", "token_scored", "token_logp"))
    np.testing.assert_array_equal(scored, np.isin(tokens, [BOS_ID, EOS_ID, PAD_ID], invert=True))
    assert np.all(np.isfinite(token_logp)) and np.all(token_logp[scored] <= 0) and np.all(token_logp[~scored] == 0)
    for k in range(len(src)):
        alone = run(src[k:k + 1])
        for name in ("tokens", "chosen_length", "repeats", "token_scored"):
            assert np.asarray(alone[name][0]).tolist() == np.asarray(together[name][k]).tolist()
        np.testing.assert_allclose(alone["score"][0], together["score"][k], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(alone["token_logp"][0], together["token_logp"][k], rtol=1e-5, atol=1e-5)


def test_repeated_token_ratios_over_all_and_the_short_and_long_halves():
    # sentences 0 and 2 are the short half (source lengths 2, 3), 1 and 3 the long one (7, 9)
    out = repeated_token_ratios([1, 4, 0, 2], [10, 20, 10, 20], [2, 7, 3, 9])
    assert out == {"repeated": 100 * 7 / 60, "repeated_short": 100 * 1 / 20, "repeated_long": 100 * 6 / 40}
    assert repeated_token_ratios([0], [0], [1]) == {"repeated": 0.0, "repeated_short": 0.0, "repeated_long": 0.0}
    # by source length, not output length; an odd count gives the short half the middle sentence (⌈3/2⌉ = 2), and
    # tied source lengths keep input order: sentence 2 (source 2), then 0 before 1 (both 4), so 2 and 0 are short
    out = repeated_token_ratios([1, 0, 3], [10, 5, 20], [4, 4, 2])
    assert out == {"repeated": 100 * 4 / 35, "repeated_short": 100 * 4 / 30, "repeated_long": 0.0}
