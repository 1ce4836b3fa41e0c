"""Vectorized constraints: the vectorization (eqs. 2–4) and the output plug-in (eqs. 8–11) against plain
numpy; missing pairs change nothing, and with both integrations off the model is the AR model; eq. 12's α/β
loss; the gate learns; cached decoding equals the full pass; a sentence decodes alone as in a batch; packing the
constraint entries (against a plain-Python reference) changes no translation. The authors' forms: their output
plug-in and separate adapters against numpy, their α positions (first spans) against plain Python, and their
decoding rule (a produced constraint token leaves the plug-in) against a step-by-step loop."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxnat.config import build_config
from jaxnat.data.vocab import BOS_ID, EOS_ID, NUM_RESERVED, PAD_ID, PieceTables
from jaxnat.decoding.request import DecodeRequest
from jaxnat.models.ar.model import ARTransformer
from jaxnat.models.losses import log_prob_losses
from jaxnat.models.transformer import config_from
from jaxnat.data.phrase_pairs import entry_capacity
from jaxnat.models.vecconst.model import PairInputs, build_spec, consume, first_spans, pack_entries
from tests import jitted
from tests.refine_reference import random_batch

TINY = "tests/configs/tiny.py"
V = 40
AUTHORS = ("--config.vecconst.output=authors", "--config.vecconst.adapters=separate")


def _pairs(pair_src, pair_tgt, entries=None) -> dict:
    """A decode request's extras with these constraint pairs."""
    return {"pairs": PairInputs(pair_src, pair_tgt, entries)}


@functools.lru_cache(maxsize=None)
def _spec(*overrides):
    """The model on the tiny config."""
    config = build_config(TINY, ["--config.model.name=vecconst", "--config.data.pairs_dir=synthetic",
                                 "--config.model.positions=learned", *overrides])
    return build_spec(config, config_from(config.model, V, V), PieceTables.every_piece_a_word(V))


def with_pairs(batch, seed, n=3, ps=3, pt=4, empty_rows=(1,)):
    """The batch plus random pairs: up to n pairs of 1..ps source and 1..pt target pieces; rows in empty_rows
    get none (all PAD)."""
    rng = np.random.default_rng(seed)
    b = batch["src"].shape[0]
    src = np.full((b, n, ps), PAD_ID, np.int32)
    tgt = np.full((b, n, pt), PAD_ID, np.int32)
    for r in range(b):
        if r in empty_rows:
            continue
        for k in range(int(rng.integers(1, n + 1))):
            m_src, m_tgt = int(rng.integers(1, ps + 1)), int(rng.integers(1, pt + 1))
            src[r, k, :m_src] = rng.integers(NUM_RESERVED, V, m_src)
            tgt[r, k, :m_tgt] = rng.integers(NUM_RESERVED, V, m_tgt)
    return {**batch, "pair_src": jnp.asarray(src), "pair_tgt": jnp.asarray(tgt)}


def constraint_tokens(pair_tgt, vocab_size):
    """bool[B, V]: the tokens of each sentence's target phrases (pair_tgt: int[B, N, P_t], PAD-padded)."""
    member = np.zeros((pair_tgt.shape[0], vocab_size), bool)
    for b, ids in enumerate(np.asarray(pair_tgt).reshape(pair_tgt.shape[0], -1)):
        member[b, ids[ids != PAD_ID]] = True
    return member


def _softmax(z, axis=-1):
    z = z - z.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def _mha(p, q_in, kv_in, kv_mask, heads):
    """Multi-head attention in numpy from a MultiHeadAttention's parameters."""
    q = np.einsum("btd,dhk->bthk", q_in, p["query"]["kernel"]) + p["query"]["bias"]
    k = np.einsum("bsd,dhk->bshk", kv_in, p["key"]["kernel"]) + p["key"]["bias"]
    v = np.einsum("bsd,dhk->bshk", kv_in, p["value"]["kernel"]) + p["value"]["bias"]
    scores = np.einsum("bthk,bshk->bhts", q / np.sqrt(q.shape[-1]), k) + np.where(kv_mask, 0.0, -1e9)[:, None, None]
    out = np.einsum("bhts,bshk->bthk", _softmax(scores), v)
    return np.einsum("bthk,hkd->btd", out, p["out"]["kernel"]) + p["out"]["bias"]


# The model's methods are called jit'd (tests/jitted.py): eagerly, each op would compile its own program.

@pytest.mark.slow
def test_vectorize_matches_eqs_2_to_4():
    spec = _spec()
    batch = with_pairs(random_batch(0, V), 0)
    params = spec.init(jax.random.PRNGKey(0), batch)
    keys, values, mask = jitted.method(spec.module, "vectorize")(params, batch["pair_src"], batch["pair_tgt"])
    p = jax.tree_util.tree_map(np.asarray, params["params"])
    emb, pos, d = p["src_embed"]["tokens"]["embedding"], p["src_embed"]["positions"], spec.cfg.d_model
    src, tgt = np.asarray(batch["pair_src"]), np.asarray(batch["pair_tgt"])
    b, n, ps = src.shape
    s = emb[src] * np.sqrt(d) + pos[:ps]                    # eq. 2: word + position, positions per phrase
    t = emb[tgt] * np.sqrt(d) + pos[:tgt.shape[2]]
    want_v = _mha(p["pair_align"], s.reshape(b * n, ps, d), t.reshape(b * n, -1, d), (tgt != PAD_ID).reshape(b * n, -1),
                  spec.cfg.num_heads)                       # eq. 3: V_c = attn(S, T, T)
    np.testing.assert_allclose(np.asarray(keys), s.reshape(b, n * ps, d), rtol=1e-5, atol=1e-5)
    real = (src != PAD_ID).reshape(b, n * ps)
    np.testing.assert_allclose(np.asarray(values)[real], want_v.reshape(b, n * ps, d)[real], rtol=1e-4, atol=1e-4)
    assert (np.asarray(mask) == real).all()


@pytest.mark.parametrize("renormalise", [False, True])
def test_plug_in_matches_eqs_8_to_11(renormalise):
    spec = _spec(f"--config.vecconst.renormalise={str(renormalise).lower()}")
    batch = with_pairs(random_batch(1, V), 1)
    params = spec.init(jax.random.PRNGKey(0), batch)
    rng = np.random.default_rng(1)
    h = rng.normal(size=(6, 5, spec.cfg.d_model)).astype(np.float32)
    member = constraint_tokens(batch["pair_tgt"], V)
    logp = np.asarray(jitted.method(spec.module, "pair_log_probs")(params, jnp.asarray(h), batch["pair_tgt"]))
    p = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float64), params["params"])
    w = p["src_embed"]["tokens"]["embedding"]              # shared, tied: the output embedding W
    p_model = _softmax(h @ w.T)                                                            # eq. 8
    cos = (h / np.linalg.norm(h, axis=-1, keepdims=True)) @ (w / np.linalg.norm(w, axis=-1, keepdims=True)).T
    p_plug = np.where(np.asarray(member)[:, None], np.maximum(cos, 0.0), 0.0)              # eq. 9
    w3 = p["gate_out"][:, 0]
    d = spec.cfg.d_model
    gate = 1 / (1 + np.exp(-(np.tanh(h @ p["gate_state"]["kernel"]) @ w3[d:])[..., None]
                           - (np.tanh(w @ p["gate_token"]["kernel"]) @ w3[:d])))           # eq. 10
    want = (1 - gate) * p_model + gate * p_plug                                            # eq. 11
    if renormalise:
        want = want / want.sum(-1, keepdims=True)
    np.testing.assert_allclose(np.exp(logp), want, rtol=1e-4, atol=1e-7)
    ids = np.asarray(batch["pair_tgt"]).reshape(len(h), -1)
    assert any(len(set(r[r != PAD_ID])) < (r != PAD_ID).sum() for r in ids)  # a token in two phrases is covered


@functools.lru_cache(maxsize=None)
def _three_forms():
    """Σ_t w_t (loss_t + nll_t / 2) and its gradients in three forms: eq. 11 computed densely over all V tokens,
    through `pair_log_probs` (its M constraint-token values scattered into the vocabulary: a token in two phrases,
    and PAD, written more than once; the renormalised and the authors' outputs train through it) and through
    `pair_token_losses` (never writing out log P, what eq. 11 as written trains with)."""
    spec = _spec()
    eps = 0.1

    def dense(params, h, pair_tgt, labels):  # eq. 11 over every token, the plug-in masked to the constraint tokens
        p = params["params"]
        w, w3, d = p["src_embed"]["tokens"]["embedding"], p["gate_out"][:, 0], spec.cfg.d_model
        rows = jnp.arange(h.shape[0])[:, None]
        member = jnp.zeros((h.shape[0], V), bool).at[rows, pair_tgt.reshape(h.shape[0], -1)].set(True)
        member = member.at[:, PAD_ID].set(False)
        logp_model = jax.nn.log_softmax(spec.module.apply(params, h, method="logits"))
        unit = lambda x: x / (jnp.linalg.norm(x, axis=-1, keepdims=True) + 1e-9)  # noqa: E731
        plug = jnp.where(member[:, None], jnp.maximum(unit(h) @ unit(w).T, 0.0), 0.0)
        gate = (jnp.tanh(h @ p["gate_state"]["kernel"]) @ w3[d:])[..., None] + \
            jnp.tanh(w @ p["gate_token"]["kernel"]) @ w3[:d]
        log_plug = jnp.where(plug > 0, jax.nn.log_sigmoid(gate) + jnp.log(jnp.maximum(plug, 1e-30)), -jnp.inf)
        return log_prob_losses(jnp.logaddexp(jax.nn.log_sigmoid(-gate) + logp_model, log_plug), labels, eps)

    def scattered(params, h, pair_tgt, labels):
        return log_prob_losses(spec.module.apply(params, h, pair_tgt, method="pair_log_probs"), labels, eps)

    def reduced(params, h, pair_tgt, labels):
        return spec.module.apply(params, h, labels, pair_tgt, eps, method="pair_token_losses")

    def objective(form):
        def f(params, h, pair_tgt, labels, weights):
            loss, nll = form(params, h, pair_tgt, labels)
            return jnp.sum(weights * (loss + 0.5 * nll))
        return jax.jit(jax.value_and_grad(f, argnums=(0, 1)))

    return spec, [objective(f) for f in (dense, scattered, reduced)]


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 2**16))
def test_plug_in_values_and_gradients_equal_the_dense_form(seed):
    """Phrases drawn from few tokens (most sentences repeat one across phrases), labels drawn often from them."""
    spec, (dense, scattered, reduced) = _three_forms()
    rng = np.random.default_rng(seed)
    pair_tgt = np.where(rng.random((6, 3, 4)) < 0.6, rng.integers(NUM_RESERVED, NUM_RESERVED + 6, (6, 3, 4)), PAD_ID)
    labels = np.where(rng.random((6, 5)) < 0.5, rng.integers(NUM_RESERVED, NUM_RESERVED + 6, (6, 5)),
                      rng.integers(0, V, (6, 5)))
    params = spec.init(jax.random.PRNGKey(seed % 4), random_batch(1, V))
    h = rng.normal(size=(6, 5, spec.cfg.d_model)).astype(np.float32)
    args = (jnp.asarray(h), jnp.asarray(pair_tgt, jnp.int32), jnp.asarray(labels, jnp.int32),
            jnp.asarray(rng.random((6, 5)), jnp.float32))
    want_value, want = dense(params, *args)
    for form in (scattered, reduced):
        value, got = form(params, *args)
        np.testing.assert_allclose(float(value), float(want_value), rtol=1e-5)
        for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_no_pairs_change_nothing_and_no_integration_is_the_ar_model():
    """All-PAD pair slots (a sentence without constraints, or the empty slots of one with fewer) are masked
    out; with both integrations off the model computes the AR model's log-probabilities from its parameters."""
    spec = _spec("--config.vecconst.plug_in=false")
    batch = with_pairs(random_batch(2, V), 2, empty_rows=(0, 1, 2, 3, 4, 5))
    params = spec.init(jax.random.PRNGKey(0), batch)
    ar = ARTransformer(spec.cfg)
    ar_logp = jax.jit(lambda p, src, tgt: jax.nn.log_softmax(ar.apply(p, src, tgt)))
    vanilla = {"params": {k: v for k, v in params["params"].items() if k in ("src_embed", "encoder", "decoder")}}
    want = ar_logp(vanilla, batch["src"], batch["tgt"][:, :-1])
    got = jax.jit(spec.module.apply)(params, batch["src"], batch["tgt"][:, :-1], batch["pair_src"], batch["pair_tgt"])
    real = np.asarray(batch["tgt"][:, 1:] != PAD_ID)
    np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], atol=1e-5)
    off = _spec("--config.vecconst.plug_in=false", "--config.vecconst.attention=false")
    some = with_pairs(random_batch(2, V), 3)
    params = off.init(jax.random.PRNGKey(0), some)
    assert set(params["params"]) == {"src_embed", "encoder", "decoder"}
    got = jax.jit(off.module.apply)(params, some["src"], some["tgt"][:, :-1], some["pair_src"], some["pair_tgt"])
    want = ar_logp(params, some["src"], some["tgt"][:, :-1])
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("alpha, beta", [(0.8, 0.2), (0.5, 0.5)])
def test_loss_weights_constraint_tokens_alpha_and_others_beta(alpha, beta):
    spec = _spec(f"--config.vecconst.alpha={alpha}", f"--config.vecconst.beta={beta}")
    batch = with_pairs(random_batch(3, V), 3)
    # make some reference tokens constraint tokens: the first target token of row 0's first pair
    tgt = np.asarray(batch["tgt"]).copy()
    tgt[0, 1] = int(batch["pair_tgt"][0, 0, 0])
    batch = {**batch, "tgt": jnp.asarray(tgt)}
    params = spec.init(jax.random.PRNGKey(0), batch)
    loss, aux = jax.jit(spec.loss, static_argnums=3)(params, batch, jax.random.PRNGKey(1), False)
    logp = np.asarray(jax.jit(spec.module.apply)(params, batch["src"], batch["tgt"][:, :-1], batch["pair_src"],
                                                 batch["pair_tgt"]), np.float64)
    member = np.asarray(constraint_tokens(batch["pair_tgt"], V))
    want, constrained = 0.0, 0
    for b in range(tgt.shape[0]):
        for i in range(1, tgt.shape[1]):
            y = int(tgt[b, i])
            if y == PAD_ID:
                continue
            ce = (1 - 0.1) * -logp[b, i - 1, y] - 0.1 * logp[b, i - 1].mean()
            want += (alpha if member[b, y] else beta) * ce
            constrained += int(member[b, y])
    np.testing.assert_allclose(float(loss), want, rtol=1e-4)
    assert int(aux["constraint_tokens"]) == constrained >= 1


@pytest.mark.slow
@pytest.mark.parametrize("overrides, names", [
    ((), ("gate_out", "gate_token", "gate_state")), (AUTHORS, ("plug_gate",))])
def test_the_gate_and_the_constraint_layers_receive_gradients(overrides, names):
    spec = _spec(*overrides)
    batch = with_pairs(random_batch(4, V), 4)
    params = spec.init(jax.random.PRNGKey(0), batch)
    grads = jax.jit(jax.grad(lambda p: spec.loss(p, batch, jax.random.PRNGKey(1), False)[0]))(params)["params"]
    for name in (*names, "pair_align", "enc_adapter_0", "dec_adapter_0"):
        norm = sum(float(np.sum(np.abs(np.asarray(g)))) for g in jax.tree_util.tree_leaves(grads[name]))
        assert np.isfinite(norm) and norm > 0, name


@pytest.mark.parametrize("overrides", [(), AUTHORS])
def test_cached_steps_equal_the_full_pass(overrides):
    spec = _spec(*overrides)
    batch = with_pairs(random_batch(5, V), 5)
    params = spec.init(jax.random.PRNGKey(0), batch)
    m = spec.module
    src, tgt = batch["src"], np.asarray(batch["tgt"])
    full = jax.jit(m.apply)(params, src, tgt, batch["pair_src"], batch["pair_tgt"])
    encode, step = _jitted(m, tgt.shape[1])  # encode_with_pairs, then init_pair_cache; pair_step
    memory, memory_mask, cache = encode(params, src, batch["pair_src"], batch["pair_tgt"])
    steps = []
    for i in range(tgt.shape[1]):
        logp, cache = step(params, tgt[:, i], cache, i, memory_mask, batch["pair_tgt"])
        steps.append(logp)
    real = np.asarray(tgt != PAD_ID)
    np.testing.assert_allclose(np.asarray(jnp.stack(steps, 1))[real], np.asarray(full)[real], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("beam", [1, 3])
def test_a_sentence_decodes_alone_as_in_a_batch(beam):
    """The beam of 3 also repeats no pair of tokens (eval.no_repeat_ngram=2: the searches' bans, which travel with
    each row's beams)."""
    spec = _spec(*(["--config.eval.no_repeat_ngram=2"] if beam > 1 else []))
    batch = with_pairs(random_batch(6, V), 6)
    params = spec.init(jax.random.PRNGKey(0), batch)
    run = jax.jit(lambda s, ps, pt: spec.generate(params, DecodeRequest(s, extras=_pairs(ps, pt), max_out=16,
                                                                        beam_size=beam)))
    src, pair_src, pair_tgt = (np.asarray(batch[k]) for k in ("src", "pair_src", "pair_tgt"))
    together = jax.device_get(run(src, pair_src, pair_tgt))
    for k in range(src.shape[0]):
        alone = jax.device_get(run(src[k:k + 1], pair_src[k:k + 1], pair_tgt[k:k + 1]))
        assert np.asarray(alone["tokens"][0]).tolist() == np.asarray(together["tokens"][k]).tolist()
        np.testing.assert_allclose(alone["score"][0], together["score"][k], rtol=1e-5, atol=1e-6)
    if beam > 1:
        rows = [[int(t) for t in row if t != PAD_ID] for row in np.asarray(together["tokens"])]
        assert all(len(set(zip(row, row[1:]))) == len(row) - 1 for row in rows), rows
    # a request without pairs is as wide: its shapes are known once traced, no program compiled for them
    plain = jax.eval_shape(lambda s: spec.generate(params, DecodeRequest(s, max_out=16, beam_size=beam)), src)
    assert plain["tokens"].shape == together["tokens"].shape


# ------------------------------------------------------------------------- packing the constraint entries

def ref_pack(mask: list[bool], values: list, capacity: int) -> tuple[list[bool], list]:
    """One row: the real entries in order, then the padding in order, the first ``capacity`` of them."""
    order = [i for i, m in enumerate(mask) if m] + [i for i, m in enumerate(mask) if not m]
    return [mask[i] for i in order[:capacity]], [values[i] for i in order[:capacity]]


@st.composite
def entry_rows(draw):
    """mask bool[B, C] (rows all real, all padding or mixed; C = 0 and 1 included), values float[B, C, 2] and a
    capacity from the largest row count up to C."""
    b, c = draw(st.integers(1, 4)), draw(st.integers(0, 12))
    kind = draw(st.sampled_from(["mixed", "full", "empty"]))
    mask = np.asarray([[kind == "full" or (kind == "mixed" and draw(st.booleans())) for _ in range(c)]
                       for _ in range(b)], bool).reshape(b, c)
    values = np.arange(b * c * 2, dtype=np.float32).reshape(b, c, 2)
    capacity = draw(st.integers(int(mask.sum(axis=1).max(initial=0)), c))
    return mask, values, capacity


_pack_entries = jax.jit(pack_entries, static_argnums=1)
ROWS_AT_MOST, WIDTH = 4, 12  # the rows' largest (B, C): what the drawn ones are padded to (bar C = 0 and 1)


@settings(max_examples=100, deadline=None)
@given(entry_rows())
def test_pack_entries_matches_reference(case):
    # padded to one shape, one program a capacity (C = 0 and 1 kept as drawn): filler rows all padding, filler
    # entries after a row's own; capacity ≤ C, so a row's first ``capacity`` entries are the drawn row's
    mask, values, capacity = case
    rows, c = mask.shape
    width = c if c <= 1 else WIDTH
    padded_mask = np.zeros((ROWS_AT_MOST, width), bool)
    padded_mask[:rows, :c] = mask
    padded = np.full((ROWS_AT_MOST, width, 2), -1.0, np.float32)  # no drawn value
    padded[:rows, :c] = values
    packed_mask, packed = map(np.asarray, _pack_entries(padded_mask, capacity, padded))
    assert packed_mask.shape == (ROWS_AT_MOST, capacity) and packed.shape == (ROWS_AT_MOST, capacity, 2)
    assert not packed_mask[rows:].any()
    for b in range(rows):
        want_mask, want_values = ref_pack(mask[b].tolist(), values[b].tolist(), capacity)
        assert packed_mask[b].tolist() == want_mask
        assert packed[b].tolist() == want_values


def test_entry_capacity_rounds_the_largest_count_up():
    pair_src = np.full((3, 3, 8), PAD_ID, np.int32)
    assert entry_capacity(pair_src) == 0                     # no pairs: no entries
    pair_src[0, 0, :3] = 7
    assert entry_capacity(pair_src) == 8
    pair_src[2, :2, :5] = 7                                  # 10 pieces in one row
    assert entry_capacity(pair_src) == 16
    pair_src[1] = 7                                          # a full row: N · P_s, never more
    assert entry_capacity(pair_src) == 24 and entry_capacity(pair_src, multiple=7) == 24


@pytest.mark.slow
@pytest.mark.parametrize("beam", [1, 3])
def test_packed_entries_translate_as_all_of_them(beam):
    """Decoding with the batch's entry capacity (`entry_capacity`, what the translator asks) gives the tokens and
    scores of decoding with all N · P_s entries, with pairs and without."""
    spec = _spec()
    batch = with_pairs(random_batch(6, V), 7, n=3, ps=6, empty_rows=(1, 4))
    params = spec.init(jax.random.PRNGKey(0), batch)
    run = jax.jit(lambda s, ps, pt, entries: spec.generate(params, DecodeRequest(
        s, extras=_pairs(ps, pt, entries), max_out=16, beam_size=beam)), static_argnums=3)
    no_pairs = jnp.full_like(batch["pair_src"], PAD_ID)
    for pair_src, pair_tgt in ((batch["pair_src"], batch["pair_tgt"]), (no_pairs, no_pairs)):
        entries = entry_capacity(np.asarray(pair_src))
        assert entries < pair_src.shape[1] * pair_src.shape[2]
        packed = run(batch["src"], pair_src, pair_tgt, entries)
        full = run(batch["src"], pair_src, pair_tgt, None)
        assert np.asarray(packed["tokens"]).tolist() == np.asarray(full["tokens"]).tolist()
        np.testing.assert_allclose(packed["score"], full["score"], rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------- the authors' forms (issue 49, item 9)

def _layer_norm(p, x):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-6) * p["scale"] + p["bias"]


def test_authors_output_matches_their_decoder():
    """P = clamp(P_model + ε + g_t s_t onehot(y*_t), ε, 1) with y*_t the constraint token most similar to h_t,
    s_t its cosine floored at 0 and g_t their gate σ(w·tanh([LN(attn); LN(W h)]) + b)."""
    spec = _spec(*AUTHORS)
    batch = with_pairs(random_batch(1, V), 1)
    params = spec.init(jax.random.PRNGKey(0), batch)
    rng = np.random.default_rng(1)
    h = rng.normal(size=(6, 5, spec.cfg.d_model)).astype(np.float32)
    logp = np.asarray(jitted.method(spec.module, "pair_log_probs")(params, jnp.asarray(h), batch["pair_tgt"]))
    p = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float64), params["params"])
    w, g = p["src_embed"]["tokens"]["embedding"], p["plug_gate"]
    ids = np.asarray(batch["pair_tgt"]).reshape(len(h), -1)
    real = ids != PAD_ID
    e = w[ids] * real[..., None]
    cos = np.einsum("btd,bmd->btm", h / np.linalg.norm(h, axis=-1, keepdims=True),
                    e / np.maximum(np.linalg.norm(e, axis=-1, keepdims=True), 1e-12))
    cos = np.where(real[:, None], cos, 0.0)
    read = _layer_norm(g["read_norm"], _mha(g["attention"], h, e * np.sqrt(spec.cfg.d_model), real, 2))
    state = _layer_norm(g["state_norm"], h @ g["state"]["kernel"] + g["state"]["bias"])
    gate = 1 / (1 + np.exp(-(np.tanh(np.concatenate([read, state], -1)) @ g["out"]["kernel"] + g["out"]["bias"])))
    want = _softmax(h @ w.T) + 1e-12
    for b in range(len(h)):
        for t in range(h.shape[1]):
            best = int(np.argmax(cos[b, t]))
            want[b, t, ids[b, best]] += gate[b, t, 0] * max(cos[b, t, best], 0.0)
    want = np.clip(want, 1e-12, 1.0)
    with_pairs_rows = [b for b in range(len(h)) if real[b].any()]
    np.testing.assert_allclose(np.exp(logp)[with_pairs_rows], want[with_pairs_rows], rtol=1e-4, atol=1e-7)


def test_separate_adapters_are_per_head_keys_and_values():
    """The authors' adapters: LayerNorm(W₂ GELU(W₁ x)) for the keys and, with other weights, the values, taken as
    the attention's keys and values without its projections."""
    spec = _spec(*AUTHORS)
    batch = with_pairs(random_batch(0, V), 0)
    params = spec.init(jax.random.PRNGKey(0), batch)
    keys, values, _ = jitted.method(spec.module, "vectorize")(params, batch["pair_src"], batch["pair_tgt"])
    _, _, prefixes = jitted.method(spec.module, "encode_with_pairs")(params, batch["src"], batch["pair_src"],
                                                                     batch["pair_tgt"])
    p = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float64), params["params"]["dec_adapter_0"])
    from scipy.special import erf

    def network(x, name):
        x = np.asarray(x, np.float64) @ p[f"{name}_fc1"]["kernel"] + p[f"{name}_fc1"]["bias"]
        x = 0.5 * x * (1 + erf(x / np.sqrt(2)))                                  # exact GELU, as fairseq's
        x = _layer_norm(p[f"{name}_norm"], x @ p[f"{name}_fc2"]["kernel"] + p[f"{name}_fc2"]["bias"])
        return x.reshape(x.shape[:-1] + (2, -1))
    np.testing.assert_allclose(np.asarray(prefixes[0][0]), network(keys, "key"), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(prefixes[0][1]), network(values, "value"), rtol=1e-4, atol=1e-5)


def ref_first_spans(labels: list[int], phrases: list[list[int]], segments=None, owners=None) -> list[bool]:
    """One row: each phrase's real pieces found at their first start (in the phrase's own segment), marked."""
    marked = [False] * len(labels)
    for n, phrase in enumerate(phrases):
        real = [x for x in phrase if x != PAD_ID]
        if not real:
            continue
        for i in range(len(labels)):
            own = segments is None or segments[i] == owners[n]
            if own and labels[i:i + len(real)] == real:
                marked[i:i + len(real)] = [True] * len(real)
                break
    return marked


ROWS, T, K, N, P = 3, 10, 3, 3, 3  # fixed shapes (one compiled program a layout); lengths vary inside them


@st.composite
def span_rows(draw):
    token = st.integers(3, 6)  # a small alphabet: phrases often occur, and more than once

    def padded(size):
        real = draw(st.lists(token, max_size=size))
        return real + [PAD_ID] * (size - len(real))
    labels = [padded(T) for _ in range(ROWS)]
    phrases = [[[padded(P) for _ in range(N)] for _ in range(K)] for _ in range(ROWS)]
    segments = [sorted(draw(st.lists(st.integers(1, K), min_size=T, max_size=T))) for _ in range(ROWS)]
    return labels, phrases, segments


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**16))
def test_consume_drops_every_occurrence_of_the_token_just_produced(seed):
    """`consume` (vecconst.consume) against plain Python: in each row's phrases every occurrence of that row's token
    becomes PAD, nothing else changes (few tokens: repeats within and across phrases)."""
    rng = np.random.default_rng(seed)
    pair_tgt = np.where(rng.random((5, 3, 4)) < 0.7, rng.integers(NUM_RESERVED, NUM_RESERVED + 4, (5, 3, 4)), PAD_ID)
    token = rng.integers(NUM_RESERVED - 1, NUM_RESERVED + 5, 5)
    got = np.asarray(_consume(jnp.asarray(pair_tgt, jnp.int32), jnp.asarray(token, jnp.int32)))
    want = [[[PAD_ID if t == token[b] else t for t in phrase] for phrase in row]
            for b, row in enumerate(pair_tgt.tolist())]
    assert got.tolist() == want


_consume = jax.jit(consume)
_first_spans = jax.jit(first_spans)


@settings(max_examples=100, deadline=None)
@given(st.booleans(), span_rows())
def test_first_spans_match_reference(packed, case):
    labels, phrases, segments = case
    if not packed:
        phrases = [slots[:1] for slots in phrases]
    want = []
    for row, slots, seg in zip(labels, phrases, segments):
        flat = [phrase for slot in slots for phrase in slot]
        owners = [k + 1 for k, slot in enumerate(slots) for _ in slot]
        want.append(ref_first_spans(row, flat, seg if packed else None, owners))
    pair_tgt = np.asarray(phrases, np.int32)                  # [B, K, N, P]
    got = _first_spans(jnp.asarray(labels, jnp.int32), jnp.asarray(pair_tgt if packed else pair_tgt[:, 0]),
                       jnp.asarray(segments, jnp.int32) if packed else None)
    assert np.asarray(got).tolist() == want


def test_span_weighting_puts_alpha_on_the_first_occurrence_only():
    spec = _spec("--config.vecconst.weighting=span", "--config.vecconst.alpha=0.8", "--config.vecconst.beta=0.2")
    token = NUM_RESERVED + 5
    batch = with_pairs(random_batch(3, V), 3)
    tgt = np.asarray(batch["tgt"]).copy()
    pair_tgt = np.full_like(np.asarray(batch["pair_tgt"]), PAD_ID)
    pair_tgt[0, 0, 0] = token
    tgt[0, 1], tgt[0, 3] = token, token                       # the phrase twice in row 0: α on position 1 only
    batch = {**batch, "tgt": jnp.asarray(tgt), "pair_tgt": jnp.asarray(pair_tgt)}
    params = spec.init(jax.random.PRNGKey(0), batch)
    loss, aux = jax.jit(spec.loss, static_argnums=3)(params, batch, jax.random.PRNGKey(1), False)
    assert int(aux["constraint_tokens"]) == 1
    tokens = _spec("--config.vecconst.alpha=0.8", "--config.vecconst.beta=0.2")
    assert int(jax.jit(tokens.loss, static_argnums=3)(params, batch, jax.random.PRNGKey(1), False)[1][
        "constraint_tokens"]) == 2


def _score_step_by_step(spec, params, batch, row, tokens, consumes):
    """A hypothesis's score (mean log-probability, EOS included) from cached steps, the plug-in's phrases with
    every token produced so far removed when ``consumes``, and each token's log-probability (0.0 at BOS)."""
    src, pair_src, pair_tgt = (np.asarray(batch[k])[row:row + 1] for k in ("src", "pair_src", "pair_tgt"))
    encode, step = _jitted(spec.module)
    memory, memory_mask, cache = encode(params, src, pair_src, pair_tgt)
    remaining, steps = pair_tgt.copy(), [0.0]
    for i in range(len(tokens) - 1):
        if consumes:
            remaining[remaining == tokens[i]] = PAD_ID
        logp, cache = step(params, jnp.asarray([tokens[i]]), cache, i, memory_mask, jnp.asarray(remaining))
        steps.append(float(logp[0, tokens[i + 1]]))
        if tokens[i + 1] == EOS_ID:
            return sum(steps) / (i + 1), steps
    raise AssertionError("no EOS")


@functools.lru_cache(maxsize=None)
def _jitted(module, steps=15):
    """(encode: the memory, its mask and a cache of ``steps`` steps, step: `pair_step`), each one compiled program."""
    def encode(params, src, pair_src, pair_tgt):
        memory, memory_mask, prefixes = module.apply(params, src, pair_src, pair_tgt, method="encode_with_pairs")
        return memory, memory_mask, module.apply(params, memory, steps, prefixes, method="init_pair_cache")

    return jax.jit(encode), jax.jit(lambda params, *args: module.apply(params, *args, method="pair_step"))


@pytest.mark.parametrize("beam", [1, 3])
def test_the_authors_rule_drops_produced_constraint_tokens_from_each_beam(beam):
    spec = _spec(*AUTHORS)
    batch = with_pairs(random_batch(6, V), 6)
    params = spec.init(jax.random.PRNGKey(0), batch)
    out = jax.device_get(jax.jit(lambda s, ps, pt: spec.generate(params, DecodeRequest(
        s, extras=_pairs(ps, pt), max_out=16, beam_size=beam)))(batch["src"], batch["pair_src"], batch["pair_tgt"]))
    changed = 0
    for row in range(batch["src"].shape[0]):
        tokens = [int(x) for x in np.asarray(out["tokens"][row])]
        assert tokens[0] == BOS_ID
        want, steps = _score_step_by_step(spec, params, batch, row, tokens, consumes=True)
        np.testing.assert_allclose(float(out["score"][row]), want, rtol=1e-4, atol=1e-5)
        # each token's log-probability under the beam's own plug-in (their sum: the score before its mean)
        rest = [0.0] * (len(tokens) - len(steps))
        np.testing.assert_allclose(np.asarray(out["token_logp"][row]), steps + rest, rtol=1e-4, atol=1e-5)
        assert out["token_scored"][row].tolist() == [False] + [True] * (len(steps) - 1) + [False] * len(rest)
        changed += abs(_score_step_by_step(spec, params, batch, row, tokens, consumes=False)[0] - want) > 1e-4
    assert changed  # some hypothesis produced a constraint token before its end
