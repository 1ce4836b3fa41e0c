"""The Transformer: cached one-token decoding equals the full teacher-forced pass, for every layout option (Marian's
SSRU and average-attention decoders too, whose scans are their recurrences written out: hypothesis); padding changes
nothing; the embedding dropout rate; beam search carries no cross-attention cache."""

import functools

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxnat.models.ar.model import ARTransformer, ar_generate, ar_loss, ar_score
from jaxnat.models.transformer import RECURRENT, Embedder, TransformerConfig


# every pair of the three options' values, in four runs (an orthogonal array), not all eight combinations; the
# last two with Marian's average attention and SSRU in the self-attention's place
@pytest.mark.slow
@pytest.mark.parametrize("pre_norm, positions, shared, autoreg", [
    (False, "sinusoidal", True, "self_attention"), (False, "learned", False, "aan"),
    (True, "sinusoidal", False, "self_attention"), (True, "learned", True, "ssru")])
def test_cached_step_equals_full_forward(pre_norm, positions, shared, autoreg):
    # two decoder layers (each its own cache), one encoder layer: both passes read the same encoder memory
    cfg = TransformerConfig(src_vocab_size=50, tgt_vocab_size=50 if shared else 40, d_model=32, ffn_dim=64,
                            num_heads=4, enc_layers=1, dec_layers=2, pre_norm=pre_norm, positions=positions,
                            max_len=16, share_embeddings=shared, tie_output=shared, decoder_autoreg=autoreg)
    model = ARTransformer(cfg)
    src = np.array([[1, 7, 8, 9, 2, 0], [1, 10, 11, 2, 0, 0]], np.int32)
    tgt = np.array([[1, 12, 13, 14, 2, 0], [1, 15, 2, 0, 0, 0]], np.int32)
    # each computation jit'd: one compiled program instead of flax's op-by-op dispatch (and the arrays the test
    # slices on the host: an eager slice of a device array compiles too)
    params = jax.jit(model.init)(jax.random.PRNGKey(0), src, tgt)
    full = jax.jit(lambda p, s, t: jax.nn.log_softmax(model.apply(p, s, t)))(params, src, tgt)
    memory = jax.jit(functools.partial(model.apply, method=ARTransformer.encode))(params, src)
    cache = jax.jit(functools.partial(model.apply, method=ARTransformer.init_cache), static_argnums=2)(
        params, memory, tgt.shape[1])
    step = jax.jit(functools.partial(model.apply, method=ARTransformer.step))  # the position traced, as in decoding
    steps = []
    for i in range(tgt.shape[1]):
        logp, cache = step(params, tgt[:, i], cache, i, src != 0)
        steps.append(np.asarray(logp))
    cached = np.stack(steps, 1)
    real = np.asarray(tgt != 0)
    np.testing.assert_allclose(np.asarray(cached)[real], np.asarray(full)[real], atol=1e-5)


@functools.cache
def _recurrent(kind: str):
    """A `RECURRENT` layer of width 8 (the average attention's FFN 12 wide) at random weights (its biases too):
    (params, the jit'd scan, the jit'd step)."""
    module = RECURRENT[kind](TransformerConfig(src_vocab_size=10, tgt_vocab_size=10, d_model=8, ffn_dim=12))
    params = jax.jit(module.init)(jax.random.PRNGKey(0), jnp.zeros((1, 2, 8)), jnp.ones((1, 2), bool))
    params = jax.tree.map(lambda p: p + 0.3 * jax.random.normal(jax.random.PRNGKey(1), p.shape), params)
    return params, jax.jit(module.apply), jax.jit(functools.partial(module.apply, method="step"))


def _dense(p: dict, x: list) -> list:
    """x @ kernel (+ bias) in plain Python, float64."""
    return [sum(x[i] * p["kernel"][i, j] for i in range(len(x))) + (p["bias"][j] if "bias" in p else 0.0)
            for j in range(p["kernel"].shape[1])]


def _sigmoid(v: list) -> list:
    return [1 / (1 + math.exp(-a)) for a in v]


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(sorted(RECURRENT)), st.integers(0, 2**16),
       st.lists(st.lists(st.booleans(), min_size=6, max_size=6), min_size=3, max_size=3))
def test_the_recurrent_layers_scans_are_their_recurrences_written_out(kind, seed, resets):
    """`SSRU` and `AverageAttention` over whole sequences (the associative scans) and position by position (their
    `step`, the state reset where a sequence starts) against their recurrences in plain Python, from each start
    (position 0 and any other: packed segments). SSRU: c = σ(W_f x + b_f) c + (1 − σ(·)) W x from c = 0, the
    output ReLU(c); average attention: the mean a of the inputs since the start (the step's state, which Marian
    updates as (a·t + x) / (t + 1)), y = FFN(a), the output σ(W_i x + b_i) x + σ(W_f y + b_f) y."""
    params, scan, step = _recurrent(kind)
    x = np.random.default_rng(seed).normal(size=(3, 7, 8)).astype(np.float32)
    starts = np.asarray([[True] + row for row in resets])
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params["params"])
    got = np.asarray(scan(params, x, starts))
    state, since, stepped = np.zeros((3, 8), np.float32), np.zeros(3, np.int32), []
    for t in range(7):  # the rows start anew at different positions: one row at a time
        since = np.where(starts[:, t], 0, since + 1)
        state = np.where(starts[:, t, None], 0.0, state).astype(np.float32)
        rows = [step(params, x[b:b + 1, t:t + 1], state[b:b + 1], since[b]) for b in range(3)]
        stepped.append(np.concatenate([np.asarray(out[:, 0]) for out, _ in rows]))
        state = np.concatenate([np.asarray(c) for _, c in rows])
    for b in range(3):
        c, seen = [0.0] * 8, []
        for t in range(7):
            xt = [float(v) for v in x[b, t]]
            if starts[b, t]:
                c, seen = [0.0] * 8, []
            seen.append(xt)
            if kind == "ssru":
                u, f = _dense(p["W"], xt), _sigmoid(_dense(p["Wf"], xt))
                c = [f[j] * c[j] + (1 - f[j]) * u[j] for j in range(8)]
                want = [max(v, 0.0) for v in c]
            else:
                mean = [sum(s[j] for s in seen) / len(seen) for j in range(8)]
                y = _dense(p["ffn"]["fc2"], [max(v, 0.0) for v in _dense(p["ffn"]["fc1"], mean)])
                gi, gf = _sigmoid(_dense(p["Wi"], xt)), _sigmoid(_dense(p["Wf"], y))
                want = [gi[j] * xt[j] + gf[j] * y[j] for j in range(8)]
            np.testing.assert_allclose(got[b, t], want, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(stepped[t][b], want, rtol=1e-5, atol=1e-5)


def test_padding_does_not_change_outputs():
    cfg = TransformerConfig(src_vocab_size=30, tgt_vocab_size=30, d_model=16, ffn_dim=32, num_heads=2,
                            enc_layers=1, dec_layers=1, max_len=16)
    model = ARTransformer(cfg)
    src, tgt = jnp.array([[1, 7, 8, 2]]), jnp.array([[1, 9, 2]])
    params = jax.jit(model.init)(jax.random.PRNGKey(1), src, tgt)
    apply = jax.jit(model.apply)
    short = apply(params, src, tgt)
    padded = apply(params, jnp.pad(src, ((0, 0), (0, 3))), jnp.pad(tgt, ((0, 0), (0, 2))))
    np.testing.assert_allclose(np.asarray(padded[:, :3]), np.asarray(short), atol=1e-5)


@pytest.mark.parametrize("start", [2, 0])  # model.decoder_start eos (fairseq's) and pad (Marian's)
def test_only_the_bos_that_starts_a_sequence_is_embedded_as_the_decoder_start(start):
    """A BOS past the first position (fairseq's search rules may generate one: fairseq reads it as `<s>`) is
    embedded as BOS, in teacher forcing and in the cached steps; in a packed row each pair's first BOS is the
    start."""
    cfg = TransformerConfig(src_vocab_size=30, tgt_vocab_size=30, d_model=16, ffn_dim=32, num_heads=2,
                            enc_layers=1, dec_layers=1, max_len=16, decoder_start={2: "eos", 0: "pad"}[start])
    model = ARTransformer(cfg)
    src, tgt = jnp.array([[1, 7, 8, 2]]), jnp.array([[1, 9, 1, 2]])
    params = jax.jit(model.init)(jax.random.PRNGKey(1), src, tgt)
    embed = jax.jit(functools.partial(model.apply, method=ARTransformer.embed_target), static_argnums=2)
    lookup = jax.jit(functools.partial(model.apply, method=lambda m, ids: m.tgt_embed(ids, False)))
    np.testing.assert_array_equal(embed(params, tgt, False), lookup(params, jnp.array([[start, 9, 1, 2]])))
    packed = embed(params, tgt, False, 0, jnp.array([[1, 1, 2, 2]]))  # two pairs: [BOS 9] [BOS EOS]
    by_pair = [lookup(params, jnp.array([[start, 9]])), lookup(params, jnp.array([[start, 2]]))]
    np.testing.assert_array_equal(packed, jnp.concatenate(by_pair, axis=1))
    step = jax.jit(functools.partial(model.apply, method=lambda m, t, i: m.embed_target(t[:, None], False, offset=i)))
    np.testing.assert_array_equal(step(params, jnp.array([1]), 2), embed(params, tgt, False)[:, 2:3])


def test_rescorer_score_is_the_mean_log_probability_of_each_candidate():
    """`ar_score` encodes each source once for all its candidates: the same scores as teacher forcing each
    candidate with its own copy of the source, computed here in plain numpy from the full forward pass."""
    cfg = TransformerConfig(src_vocab_size=30, tgt_vocab_size=30, d_model=16, ffn_dim=32, num_heads=2,
                            enc_layers=1, dec_layers=1, max_len=16)
    model = ARTransformer(cfg)
    src = np.array([[1, 7, 8, 2, 0], [1, 9, 10, 11, 2]], np.int32)  # host arrays: eager indexing compiles
    tgt = np.array([[1, 12, 13, 2, 0], [1, 14, 2, 0, 0], [1, 15, 16, 17, 2], [1, 2, 0, 0, 0]], np.int32)
    rows_of = np.array([0, 0, 1, 1], np.int32)
    params = jax.jit(model.init)(jax.random.PRNGKey(2), src[rows_of], tgt)
    got = np.asarray(jax.jit(functools.partial(ar_score, model))(params, src, tgt, rows_of))
    logp = np.asarray(jax.jit(lambda p, s, t: jax.nn.log_softmax(model.apply(p, s, t)))(params, src[rows_of],
                                                                                          tgt[:, :-1]))
    for r, row in enumerate(np.asarray(tgt)):
        n = int(np.sum(row[1:] != 0))
        want = np.mean([logp[r, i, row[i + 1]] for i in range(n)])
        np.testing.assert_allclose(got[r], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scale", [True, False])
def test_separate_positions_share_the_tokens_and_not_the_position_table(scale):
    """model.separate_positions (fairseq's encoder and decoder position tables) with shared embeddings: the
    target embedder holds only its own learned positions and reads the source's token matrix; the source side
    is what it was. model.scale_embeddings: the tokens enter × √D, or as they are (--no-scale-embedding)."""
    cfg = TransformerConfig(src_vocab_size=30, tgt_vocab_size=30, d_model=16, ffn_dim=32, num_heads=2,
                            enc_layers=1, dec_layers=1, max_len=16, dropout=0.0, positions="learned",
                            separate_positions=True, scale_embeddings=scale)
    model = ARTransformer(cfg)
    src, tgt = np.array([[1, 7, 8, 9, 2]], np.int32), np.array([[1, 12, 13, 2]], np.int32)
    # jit'd: eagerly, each op of flax's initialisation and of the embedders would compile its own program
    params = jax.jit(model.init)(jax.random.PRNGKey(0), src, tgt)["params"]
    embed = jax.jit(lambda p, ids, side: model.apply(p, ids, False, method=lambda m, i, t: getattr(m, side)(i, t)),
                    static_argnums=2)
    assert set(params["tgt_embed"]) == {"positions"} and set(params["src_embed"]) == {"tokens", "positions"}
    assert not np.allclose(params["tgt_embed"]["positions"], params["src_embed"]["positions"])
    tokens = np.asarray(params["src_embed"]["tokens"]["embedding"])
    factor = 4.0 if scale else 1.0
    for side, ids in (("src_embed", src), ("tgt_embed", tgt)):
        got = np.asarray(embed({"params": params}, ids, side))
        want = tokens[ids[0]] * factor + np.asarray(params[side]["positions"])[:ids.shape[1]]
        np.testing.assert_allclose(got[0], want, rtol=1e-6, atol=1e-6)


def test_one_rows_logits_against_the_embedding_are_the_batchs():
    """Embedder.attend: one row (greedy decoding of one sentence) takes E x, a batch x E^T: the same logits."""
    cfg = TransformerConfig(src_vocab_size=30, tgt_vocab_size=30, d_model=16, ffn_dim=32, num_heads=2,
                            enc_layers=1, dec_layers=1, max_len=16)
    embedder = Embedder(cfg, 30)
    x = np.random.default_rng(0).standard_normal((3, 1, 16)).astype(np.float32)
    params = embedder.init(jax.random.PRNGKey(0), np.zeros((1, 2), np.int32), False)
    attend = jax.jit(lambda p, h: embedder.apply(p, h, method=Embedder.attend))
    batch, one = attend(params, x), attend(params, x[:1])
    assert one.shape == (1, 1, 30)
    np.testing.assert_allclose(np.asarray(one), np.asarray(batch[:1]), rtol=1e-5, atol=1e-5)

@pytest.mark.slow
def test_embedding_dropout_rate():
    """model.embed_dropout: -1 (unset) is model.dropout, so the AR loss is unchanged bit for bit; set, it is the
    rate on the embedded inputs alone (0: the embeddings are not dropped while the sublayers still are)."""
    base = dict(src_vocab_size=30, tgt_vocab_size=30, d_model=64, ffn_dim=32, num_heads=2, enc_layers=1,
                dec_layers=1, max_len=16, dropout=0.3)
    ids = jnp.full((4, 16), 7)
    key = {"dropout": jax.random.PRNGKey(1)}

    # the options change no parameter: one initialisation serves every variant (each a compiled program: eagerly,
    # each op would compile its own)
    params = jax.jit(Embedder(TransformerConfig(**base), 30).init, static_argnums=2)(jax.random.PRNGKey(0), ids, False)

    def embedded(train, **options):
        embedder = Embedder(TransformerConfig(**base, **options), 30)
        return np.asarray(jax.jit(embedder.apply, static_argnums=2)(params, ids, train, rngs=key))

    clean, trained = embedded(False), embedded(True)
    dropped = trained == 0
    assert 0.25 < dropped.mean() < 0.35                                 # model.dropout applies when unset
    assert (embedded(True, embed_dropout=0.3) == trained).all()
    np.testing.assert_array_equal(embedded(True, embed_dropout=0.0), clean)
    assert 0.05 < (embedded(True, embed_dropout=0.1) == 0).mean() < 0.15

    batch = {"src": jnp.array([[1, 7, 8, 9, 2, 0]]), "tgt": jnp.array([[1, 12, 13, 14, 2, 0]])}

    model_params = jax.jit(ARTransformer(TransformerConfig(**base)).init)(jax.random.PRNGKey(0), batch["src"],
                                                                          batch["tgt"][:, :-1])

    def loss(**options):
        model = ARTransformer(TransformerConfig(**base, **options))
        return float(jax.jit(lambda p, b, k: ar_loss(model, p, b, k, 0.1, train=True)[0])(
            model_params, batch, jax.random.PRNGKey(2)))

    unset = loss()
    assert unset == loss(embed_dropout=0.3)
    assert unset != loss(embed_dropout=0.0)  # the option reaches the model's embedders


@pytest.mark.slow
@pytest.mark.parametrize("pre_norm", [False, True])
def test_prefix_entries_extend_attention_and_masked_ones_change_nothing(pre_norm):
    """The encoder's self-attention and the decoder's cross-attention take C extra key/value entries per layer
    (vectorized constraints): all masked, the outputs are the model's without them; unmasked, they change the
    outputs; the cached one-token decoder reads them as the full pass does."""
    from jaxnat.models.transformer import Decoder, Encoder

    cfg = TransformerConfig(src_vocab_size=30, tgt_vocab_size=30, d_model=16, ffn_dim=32, num_heads=2,
                            enc_layers=2, dec_layers=2, max_len=16, pre_norm=pre_norm)
    rng = np.random.default_rng(0)  # host arrays: eager slices and concatenations of device arrays compile
    x = rng.normal(size=(2, 5, 16)).astype(np.float32)
    y = rng.normal(size=(2, 4, 16)).astype(np.float32)
    mask, tgt_mask = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], bool), np.ones((2, 4), bool)
    prefixes = [(rng.normal(size=(2, 3, 16)).astype(np.float32), rng.normal(size=(2, 3, 16)).astype(np.float32))
                for _ in range(2)]
    none, some = np.zeros((2, 3), bool), np.array([[1, 1, 0], [1, 0, 0]], bool)

    enc = Encoder(cfg)  # each computation jit'd (train=False static): one program, not flax's op-by-op dispatch
    ep = jax.jit(enc.init, static_argnums=3)(jax.random.PRNGKey(0), x, mask, False)
    encode = jax.jit(enc.apply, static_argnums=3)
    plain = encode(ep, x, mask, False)
    np.testing.assert_allclose(encode(ep, x, mask, False, prefixes, none), plain, atol=1e-5)
    assert not np.allclose(encode(ep, x, mask, False, prefixes, some), plain, atol=1e-3)

    dec = Decoder(cfg, 2, causal=True)
    dp = jax.jit(dec.init, static_argnums=5)(jax.random.PRNGKey(1), y, tgt_mask, x, mask, False)
    decode = jax.jit(dec.apply, static_argnums=5)
    plain = decode(dp, y, tgt_mask, x, mask, False)
    masked = decode(dp, y, tgt_mask, x, np.concatenate([none, mask], 1), False, prefixes=prefixes)
    np.testing.assert_allclose(masked, plain, atol=1e-5)
    full = decode(dp, y, tgt_mask, x, np.concatenate([some, mask], 1), False, prefixes=prefixes)
    assert not np.allclose(full, plain, atol=1e-3)
    cache = jax.jit(functools.partial(dec.apply, method="init_cache"), static_argnums=2)(dp, x, 4, prefixes)
    step = jax.jit(functools.partial(dec.apply, method="step"))
    steps = []
    for i in range(4):
        out, cache = step(dp, y[:, i:i + 1], cache, i, np.concatenate([some, mask], 1))
        steps.append(np.asarray(out))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)


def test_beam_search_does_not_carry_the_cross_attention_cache():
    """The searches reorder what they carry at every step; the cross-attention keys and values [B·K, H, S, K]
    stay out of it (`without_cross_cache`), while the self-attention ones [B·K, H, T, K] are carried."""
    cfg = TransformerConfig(src_vocab_size=50, tgt_vocab_size=50, d_model=32, ffn_dim=64, num_heads=4, enc_layers=1,
                            dec_layers=2, max_len=16)
    model = ARTransformer(cfg)
    src = jnp.array([[1, 7, 8, 9, 10, 2, 0], [1, 10, 11, 2, 0, 0, 0]])  # S = 7
    params = jax.jit(model.init)(jax.random.PRNGKey(0), src, src[:, :3])
    jaxpr = jax.make_jaxpr(lambda p, s: ar_generate(model, p, s, beam_size=3, max_out=12))(params, src)
    loops = [e for e in jaxpr.eqns if e.primitive.name == "while"]
    assert len(loops) == 1
    body = loops[0].params["body_jaxpr"].jaxpr
    carried = [v.aval.shape for v in body.invars[loops[0].params["body_nconsts"]:]]
    assert carried.count((6, 4, 11, 8)) == 2 * cfg.dec_layers   # self-attention keys and values, T = max_out - 1
    assert (6, 4, 7, 8) not in carried                           # cross-attention: the source's S positions


def test_a_models_abstract_parameters_are_its_own_and_traced_once(monkeypatch):
    """`ModelSpec.abstract_params`, the tree a checkpoint restores into: init's shapes and dtypes; traced once for two
    specs of one config (the second load of a workdir), anew for a model of another width, and at every call for an
    init that closes over a value without a hash (nothing to key it by)."""
    import dataclasses

    from jaxnat.config import build_config
    from jaxnat.models import build_model

    traced = []
    eval_shape = jax.eval_shape
    monkeypatch.setattr(jax, "eval_shape", lambda fn, *args: eval_shape(fn, *args) if not fn.__qualname__.startswith(
        "ModelSpec.abstract_params") else traced.append(fn) or eval_shape(fn, *args))
    first, again = (build_model(build_config("tests/configs/tiny.py", []), 40, 40) for _ in range(2))
    wide = build_model(build_config("tests/configs/tiny.py", ["--config.model.d_model=48"]), 40, 40)
    batch = {"src": jnp.asarray([[1, 7, 2]], jnp.int32), "tgt": jnp.asarray([[1, 8, 9, 2]], jnp.int32)}

    def shapes(tree):
        return jax.tree.map(lambda x: (x.shape, x.dtype), tree)

    assert shapes(first.abstract_params()) == shapes(again.abstract_params()) == shapes(
        first.init(jax.random.PRNGKey(1), batch))
    assert shapes(wide.abstract_params()) == shapes(wide.init(jax.random.PRNGKey(1), batch)) != shapes(
        first.abstract_params())
    assert len(traced) <= 2  # (none where an earlier test traced these models)
    unkeyed = {"module": first.module}
    odd = dataclasses.replace(first, init=lambda rng, b: unkeyed["module"].init(rng, b["src"][:1], b["tgt"][:1, :-1]))
    traced.clear()
    assert shapes(odd.abstract_params()) == shapes(odd.abstract_params()) == shapes(first.abstract_params())
    assert len(traced) == 2
