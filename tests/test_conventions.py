"""The model conventions an imported model needs (model.ln_eps … model.absent_tokens), each against a plain
reference; the defaults leave jaxnat's models as they were (the rest of the suite)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxnat.config import default_config
from jaxnat.data.vocab import BOS_ID, EOS_ID, MASK_ID, PAD_ID, PLH_ID, UNK_ID
from jaxnat.errors import ConfigError
from jaxnat.models import build_model
from jaxnat.models.transformer import TransformerConfig, absent_logits, absent_ids, sinusoidal_positions, source_tokens


def reference_table(length, dim, offset, layout):
    """Plain Python: fairseq's `SinusoidalPositionalEmbedding.get_embedding` (positions from padding_idx + 1) or
    Hugging Face's `MarianSinusoidalPositionalEmbedding._init_weight`."""
    half = dim // 2
    rows = []
    for pos in range(offset, offset + length):
        if layout == "fairseq":
            freqs = [math.exp(-i * math.log(10000.0) / (half - 1)) for i in range(half)]
        else:
            freqs = [1.0 / 10000 ** (2 * i / dim) for i in range(half)]
        rows.append([math.sin(pos * f) for f in freqs] + [math.cos(pos * f) for f in freqs])
    return np.array(rows)


@pytest.mark.parametrize("layout", ["fairseq", "marian"])
@pytest.mark.parametrize("offset", [0, 2])
def test_sinusoidal_tables_match_the_references(layout, offset):
    ours = np.asarray(sinusoidal_positions(9, 8, offset, layout))
    np.testing.assert_allclose(ours, reference_table(9, 8, offset, layout), atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-20, 20), min_size=6, max_size=6), st.sets(st.sampled_from(["bos", "plh", "mask"])))
def test_absent_tokens_leave_the_other_rows_distribution(row, absent):
    """The softmax over the rows a model has is unchanged (to e^-30), and the absent rows are the least likely."""
    cfg = TransformerConfig(6, 6, absent_tokens=absent_ids(",".join(sorted(absent))))
    logits = jnp.asarray([row], jnp.float32)
    out = jax.nn.log_softmax(absent_logits(cfg, logits))[0]
    keep = np.array([i not in cfg.absent_tokens for i in range(6)])
    reference = jax.nn.log_softmax(logits[0][keep])
    np.testing.assert_allclose(np.asarray(out)[keep], reference, atol=1e-5)
    if absent:
        assert np.max(np.asarray(out)[~keep]) <= np.min(np.asarray(out)[keep]) - 29


def test_absent_tokens_names_are_checked():
    with pytest.raises(ConfigError, match="absent_tokens"):
        absent_ids("plh,eos")


@pytest.mark.parametrize("names", ["plh,mask", ""])
def test_unk_inputs_read_unks_row(names):
    """model.unk_inputs=plh,mask (fairseq's NAT models mask and place with <unk>): PLH and MASK embed as UNK's row,
    whatever their own rows hold; every other token, and every token without the setting, reads its own row."""
    from jaxnat.models.transformer import Embedder, unk_input_ids

    embedder = Embedder(TransformerConfig(8, 8, d_model=4, unk_inputs=unk_input_ids(names)), 8)
    ids = jnp.arange(8)[None]
    params = embedder.init(jax.random.PRNGKey(0), ids, method="lookup")
    table = np.asarray(params["params"]["tokens"]["embedding"])
    rows = [UNK_ID if names and i in (PLH_ID, MASK_ID) else i for i in range(8)]
    np.testing.assert_array_equal(embedder.apply(params, ids, method="lookup")[0], table[rows])
    with pytest.raises(ConfigError, match="model.unk_inputs is a comma list of plh, mask; got 'pad'"):
        unk_input_ids("pad")


def test_a_translation_lev_model_of_other_conventions_is_named():
    """What fairseq's CMLM and LevT, and the DA-Transformer plugin's model, would not compute of jaxnat's own
    (`--to fairseq:DIR` refuses them so)."""
    from jaxnat.exporters.fairseq import conventions
    from jaxnat.models.transformer import config_from

    c = default_config()
    common = ["model.ln_eps=1e-06", "model.position_offset=0", "model.absent_tokens=(none) (fairseq's model has no "
              "PLH or MASK row: 'plh,mask')"]
    for family, arch, own in (("cmlm", "cmlm_transformer", ["cmlm.length_prediction=token", "cmlm.length_bias=True",
                                                            "cmlm.length_with_ends=False"]),
                              ("levt", "levenshtein_transformer", []),
                              ("dat", "", ["dat.links=paper", "dat.vertex_inputs=positions"])):  # (no <unk> input)
        c.model.name = family
        unk = [f"model.unk_inputs=(none) (fairseq's {arch} reads <unk> as its mask and placeholder: 'plh,mask')"]
        assert conventions(config_from(c.model, 10, 10), family, c[family]) == common + unk * bool(arch) + own
    c.model.update(name="cmlm", ln_eps=1e-5, position_offset=2, absent_tokens="plh,mask", unk_inputs="plh,mask")
    c.cmlm.update(length_prediction="pooled", length_bias=False, length_offset=True)
    assert conventions(config_from(c.model, 10, 10), "cmlm", c.cmlm) == []


def test_source_tokens_drop_each_sentences_bos():
    cfg = TransformerConfig(10, 10, source_bos=False)
    src = jnp.asarray([[BOS_ID, 7, 8, EOS_ID], [BOS_ID, 9, EOS_ID, PAD_ID]])
    out, _ = source_tokens(cfg, src)
    np.testing.assert_array_equal(out, [[7, 8, EOS_ID, PAD_ID], [9, EOS_ID, PAD_ID, PAD_ID]])
    packed = jnp.asarray([[BOS_ID, 7, EOS_ID, BOS_ID, 9, EOS_ID]])
    seg = jnp.asarray([[1, 1, 1, 2, 2, 2]])
    out, out_seg = source_tokens(cfg, packed, seg)
    np.testing.assert_array_equal(out, [[PAD_ID, 7, EOS_ID, PAD_ID, 9, EOS_ID]])
    np.testing.assert_array_equal(out_seg, [[0, 1, 1, 0, 2, 2]])


def _model(**model):
    c = default_config()
    c.model.update(d_model=8, ffn_dim=12, num_heads=2, enc_layers=1, dec_layers=2, max_len=16, dropout=0.0, **model)
    spec = build_model(c, 12, 12)
    batch = {"src": jnp.asarray([[BOS_ID, 6, 7, EOS_ID]]), "tgt": jnp.asarray([[BOS_ID, 8, 9, EOS_ID]])}
    return spec, jax.jit(spec.init)(jax.random.PRNGKey(0), batch)


@pytest.mark.slow
def test_the_conventions_compute_what_they_say():
    """One AR model with every convention on, against the same parameters run by hand where each applies."""
    conventions = dict(ln_eps=1e-5, activation="swish", pre_norm=True, decoder_norm="post", layernorm_embedding=True,
                       position_offset=2, output_bias=True, decoder_start="eos", source_bos=False,
                       absent_tokens="plh,mask")
    spec, params = _model(**conventions)
    p = params["params"]
    assert set(p) >= {"output_bias", "src_embed_norm", "tgt_embed_norm"}
    assert "final_norm" in p["encoder"] and "final_norm" not in p["decoder"]  # pre-norm encoder, post-norm decoder
    p = jax.tree.map(lambda x: x + 0.1 * jax.random.normal(jax.random.PRNGKey(1), x.shape), p)
    module = spec.module
    src = jnp.asarray([[BOS_ID, 6, 7, EOS_ID]])
    stripped, _ = source_tokens(module.cfg, src)
    # each one compiled program (run op by op, the test took half as long again)
    with_bos = jax.jit(module.apply)({"params": p}, stripped, jnp.asarray([[BOS_ID, 8, 9]]))
    # the same model read as it is told to: without the source's BOS, the decoder started from EOS
    plain = module.clone(cfg=TransformerConfig(**{**module.cfg.__dict__, "source_bos": True, "decoder_start": "bos"}))
    by_hand = jax.jit(plain.apply)({"params": p}, jnp.asarray([[6, 7, EOS_ID, PAD_ID]]), jnp.asarray([[EOS_ID, 8, 9]]))
    np.testing.assert_allclose(with_bos, by_hand, atol=1e-5)
    # absent rows (PLH 4, MASK 5) far below the others
    assert float(jnp.max(with_bos[..., 4:6])) < float(jnp.min(with_bos[..., 6:]))
    # the loss reads the sources the same way (its negative log-likelihood is that of these logits), and stays
    # finite with absent rows under label smoothing
    batch = {"src": src, "tgt": jnp.asarray([[BOS_ID, 8, 9, EOS_ID]])}
    loss, aux = jax.jit(lambda p, b: spec.loss(p, b, jax.random.PRNGKey(0), train=False))({"params": p}, batch)
    picked = jnp.take_along_axis(jax.nn.log_softmax(with_bos), jnp.asarray([[[8], [9], [EOS_ID]]]), axis=-1)
    np.testing.assert_allclose(float(aux["nll"]), -float(jnp.sum(picked)), rtol=1e-5)
    assert np.isfinite(float(loss)) and float(loss) < 3 * 40


def test_a_convention_is_refused_where_the_family_does_not_apply_it():
    from jaxnat.config import validate

    c = default_config()
    c.model.name = "cmlm"
    c.model.source_bos = False
    with pytest.raises(ConfigError, match="model.source_bos=False is not applied by model 'cmlm'"):
        validate(c)
