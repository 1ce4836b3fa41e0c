"""An autoregressive Transformer as a CTranslate2 model (`--mode export --to ctranslate2:DIR`, docs/import.md).

CTranslate2 (OpenNMT's inference engine: int8 and float16 weights, CPU and GPU) describes a model by a
`TransformerSpec`, which its converters fill from a framework's weights; this module fills one from a jaxnat
workdir's parameters, with numpy alone, and hands it to CTranslate2's own writer (`Converter.convert`). What the
spec takes, by jaxnat's model conventions (`jaxnat.models.transformer.TransformerConfig`):

* per stack, pre- or post-norm (the decoder's own `decoder_norm` too), the final norm of a pre-norm stack (the
  decoder's `decoder_final_norm`), `layernorm_embedding`, the feed-forward activation, embeddings × √d or not;
* positions as the table jaxnat adds (sinusoidal of either layout from `position_offset`, or learned): CTranslate2
  adds row i at position i, as jaxnat does;
* attention projections fused as CTranslate2 keeps them ([q; k; v] for self-attention, q and [k; v] for
  cross-attention), each a PyTorch-style [out, in] matrix;
* the output projection (the target embedding where tied) with its bias (`output_bias`), −10⁴ for the reserved
  tokens an imported vocabulary lacks (`absent_tokens`, whose logits jaxnat holds 30 below the lowest): the model's
  log-probabilities are jaxnat's (`--mode score`'s). The tokens jaxnat's search never emits (PAD, BOS, PLH, MASK)
  keep their probabilities, as in jaxnat's model; a search that must not emit them either is given them as
  `suppress_sequences` (`SUPPRESSED`, and UNK without `eval.allow_unk`: the README written beside the model says
  so): baked into the bias they would
  change every score (by 2.6e-3 a sentence for the AR demo's model after 300 updates);
* the config: the decoder's start token (`decoder_start`), BOS before each source (`source_bos`) and EOS after it,
  the layer norms' epsilon (`ln_eps`), and the word alignments' layer and heads (`alignment_layer`,
  `alignment_heads`).
"""

from __future__ import annotations

import logging
import os
import shutil

import numpy as np

from jaxnat.data.vocab import BOS_ID, MASK_ID, PAD_ID, PLH_ID, UNK_ID
from jaxnat.errors import ConfigError

SUPPRESSED = (PAD_ID, BOS_ID, PLH_ID, MASK_ID)  # jaxnat.decoding.search's FORBIDDEN_IDS: never emitted
BLOCKED = -1e4  # the output bias of an absent token: e^-10000 is 0 in every dtype, and -1e4 fits float16
log = logging.getLogger("jaxnat")
START_TOKENS = {"bos": "<s>", "eos": "</s>", "pad": "<pad>"}  # model.decoder_start -> the token CTranslate2 embeds
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16")


def _own(array) -> np.ndarray:
    """A float32 copy in C order that CTranslate2 may quantize in place (a jax array's numpy view is read-only)."""
    return np.array(array, np.float32, order="C")


def _linear(spec, kernel: np.ndarray, bias: np.ndarray) -> None:
    """A flax kernel [in, out] (bias [out]) as CTranslate2's [out, in] weight."""
    spec.weight = _own(np.asarray(kernel).T)
    spec.bias = _own(bias)


def _norm(spec, params: dict) -> None:
    spec.gamma, spec.beta = _own(params["scale"]), _own(params["bias"])


def _projection(params: dict) -> tuple[np.ndarray, np.ndarray]:
    """An attention projection's kernel [D, H, K] and bias [H, K] as a dense [D, H·K] kernel and [H·K] bias."""
    kernel = np.asarray(params["kernel"])
    return kernel.reshape(kernel.shape[0], -1), np.asarray(params["bias"]).reshape(-1)


def _fused(spec, params: dict, names: tuple[str, ...]) -> None:
    kernels, biases = zip(*(_projection(params[n]) for n in names))
    _linear(spec, np.concatenate(kernels, axis=1), np.concatenate(biases))


def _attention(spec, params: dict, norm: dict, cross: bool) -> None:
    _norm(spec.layer_norm, norm)
    if cross:
        _fused(spec.linear[0], params, ("query",))
        _fused(spec.linear[1], params, ("key", "value"))
    else:
        _fused(spec.linear[0], params, ("query", "key", "value"))
    out = np.asarray(params["out"]["kernel"])
    _linear(spec.linear[-1], out.reshape(-1, out.shape[-1]), params["out"]["bias"])


def _ffn(spec, params: dict, norm: dict) -> None:
    _norm(spec.layer_norm, norm)
    _linear(spec.linear_0, params["fc1"]["kernel"], params["fc1"]["bias"])
    _linear(spec.linear_1, params["fc2"]["kernel"], params["fc2"]["bias"])


def _embedding_side(spec, tokens: np.ndarray, positions: np.ndarray, cfg, norm: dict | None) -> None:
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = _own(tokens)
    spec.scale_embeddings = bool(cfg.scale_embeddings)
    spec.position_encodings.encodings = _own(positions)
    if norm is not None:
        _norm(spec.layernorm_embedding, norm)


def model_spec(cfg, params: dict, positions: dict, pieces: dict, absent: list[int]):
    """The CTranslate2 `TransformerSpec` of an AR Transformer.

    cfg: its `TransformerConfig`; params: its parameter tree (per-layer, not stacked); positions: {"src", "tgt"}
    float32[max_len, D], the position codes each embedder adds; pieces: {"src", "tgt"} the vocabularies' pieces by id;
    absent: the target ids whose output bias is `BLOCKED`."""
    from ctranslate2.specs import common_spec, transformer_spec

    activations = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
                   "gelu_tanh": common_spec.Activation.GELUTanh, "swish": common_spec.Activation.SWISH}
    activation = activations[cfg.activation]
    encoder = transformer_spec.TransformerEncoderSpec(
        cfg.enc_layers, cfg.num_heads, pre_norm=cfg.pre_norm, activation=activation,
        layernorm_embedding=cfg.layernorm_embedding)
    decoder = transformer_spec.TransformerDecoderSpec(
        cfg.dec_layers, cfg.num_heads, pre_norm=cfg.decoder_pre_norm, activation=activation,
        layernorm_embedding=cfg.layernorm_embedding, no_final_norm=not cfg.decoder_final_norm,
        alignment_layer=cfg.alignment_layer, alignment_heads=cfg.alignment_heads or cfg.num_heads)
    spec = transformer_spec.TransformerSpec(encoder, decoder)

    src_tokens = params["src_embed"]["tokens"]["embedding"]
    tgt_tokens = params["tgt_embed"]["tokens"]["embedding"] if "tokens" in params.get("tgt_embed", {}) else src_tokens
    _embedding_side(encoder, src_tokens, positions["src"], cfg, params.get("src_embed_norm"))
    _embedding_side(decoder, tgt_tokens, positions["tgt"], cfg, params.get("tgt_embed_norm"))
    for i, layer in enumerate(encoder.layer):
        p = params["encoder"][f"layer_{i}"]
        _attention(layer.self_attention, p["self_attn"], p["res_attn"]["norm"], cross=False)
        _ffn(layer.ffn, p["ffn"], p["res_ffn"]["norm"])
    for i, layer in enumerate(decoder.layer):
        p = params["decoder"][f"layer_{i}"]
        _attention(layer.self_attention, p["self_attn"], p["res_self"]["norm"], cross=False)
        _attention(layer.attention, p["cross_attn"], p["res_cross"]["norm"], cross=True)
        _ffn(layer.ffn, p["ffn"], p["res_ffn"]["norm"])
    if cfg.pre_norm:
        _norm(encoder.layer_norm, params["encoder"]["final_norm"])
    if cfg.decoder_pre_norm and cfg.decoder_final_norm:
        _norm(decoder.layer_norm, params["decoder"]["final_norm"])

    output = _own(tgt_tokens if cfg.tie_output else np.asarray(params["output"]["kernel"]).T)
    bias = np.array(params["output_bias"] if cfg.output_bias else np.zeros(output.shape[0]), np.float32)
    bias[list(absent)] = BLOCKED
    decoder.projection.weight, decoder.projection.bias = output, bias

    spec.config.add_source_bos = bool(cfg.source_bos)
    spec.config.add_source_eos = True
    spec.config.decoder_start_token = START_TOKENS[cfg.decoder_start]
    spec.config.layer_norm_epsilon = float(cfg.ln_eps)
    # (a piece listed twice stands for its first id, in CTranslate2's lookup as in jaxnat's tokenizers)
    spec.register_source_vocabulary(pieces["src"])
    spec.register_target_vocabulary(pieces["tgt"])
    return spec


def write(spec, directory: str, quantization: str) -> None:
    """Writes ``spec`` into ``directory`` (which must not exist) by CTranslate2's own converter, its weights in
    ``quantization`` (one of `QUANTIZATIONS`)."""
    from ctranslate2.converters.converter import Converter

    if quantization not in QUANTIZATIONS:
        raise ConfigError(f"--quantization {quantization!r}: CTranslate2 takes {', '.join(QUANTIZATIONS)}")

    class Given(Converter):  # CTranslate2's writer (validation, quantization, files) over a spec made here
        def _load(self):
            return spec

    Given().convert(directory, quantization=None if quantization == "float32" else quantization)


def export(translator, config, directory: str, quantization: str, files: dict[str, str], how: dict) -> None:
    """Writes the translator's model into ``directory`` (made here): CTranslate2's files, the tokenizer ``files``
    ({name: path}, cutting text as ``how`` says: `jaxnat.exporters._tokenizer_files`) and README.md."""
    import jax

    from jaxnat.models.transformer import unstack_layers

    cfg, tok = translator.spec.cfg, translator.tokenizer
    params = jax.tree.map(np.asarray, translator.params["params"])
    bound = translator.spec.module.bind({"params": params})
    positions = {"src": np.asarray(bound.src_embed.position_table()),
                 "tgt": np.asarray(bound.tgt_embed.position_table())}
    params = unstack_layers(params) if cfg.scan_layers else params
    pieces = {side: [tok.id_to_piece(i, side) for i in range(tok.vocab_size(side))] for side in ("src", "tgt")}
    spec = model_spec(cfg, params, positions, pieces, cfg.absent_tokens)
    if cfg.full_context_alignment:
        log.warning("model.full_context_alignment: CTranslate2's return_attention will be the attention of the "
                    "causal pass, not the alignment jaxnat reads from a pass without the causal mask")
    write(spec, directory, quantization)
    for name, path in files.items():
        shutil.copyfile(path, os.path.join(directory, name))
    with open(os.path.join(directory, "README.md"), "w", encoding="utf-8") as f:
        never = SUPPRESSED + (() if config.eval.allow_unk else (UNK_ID,))  # (a Marian .npz import: Marian's rule)
        f.write(readme(how, config, cfg, [tok.id_to_piece(i, "tgt") for i in never],
                       tuple(getattr(tok, "languages", ()))))


def readme(how: dict, config, cfg, suppressed: list[str], languages: tuple[str, ...]) -> str:
    """README.md of an exported CTranslate2 model: Python that cuts sentences into its pieces, translates them with
    the options that make CTranslate2's search jaxnat's (tests/test_import.py runs it) and joins the pieces."""
    if how["segmenter"] == "spm":
        cut = ('import sentencepiece as spm\n'
               'source, target = (spm.SentencePieceProcessor(model_file=f"{model}/{s}.spm") for s in ("source", '
               '"target"))\n'
               'def cut(text): return source.encode(text, out_type=str)\n'
               'def join(pieces): return target.decode_pieces(pieces).replace("\\u2581", " ").strip()\n')
    else:  # (an FSMT import's text is lower-cased and its punctuation normalised first, as FSMTTokenizer's)
        normalize = how.get("normalize", False)
        cut = ('from sacremoses import MosesDetokenizer, MosesPunctNormalizer, MosesTokenizer\n'
               'from subword_nmt.apply_bpe import BPE\n'
               f'moses = MosesTokenizer(lang="{how["src_lang"]}")\n'
               f'demoses = MosesDetokenizer(lang="{how["tgt_lang"]}")\n'
               + (f'normalizer = MosesPunctNormalizer(lang="{how["src_lang"]}", pre_replace_unicode_punct=True, '
                  'post_remove_control_chars=True)\n' if normalize else '') +
               'bpe = BPE(open(f"{model}/bpecodes", encoding="utf-8"))\n'
               'def cut(text):\n'
               + ('    text = text.lower()\n' if how.get("lowercase") else '')
               + ('    text = normalizer.normalize(text)\n' if normalize else '') +
               f'    words = moses.tokenize(text, aggressive_dash_splits={how["dash_splits"]}, escape={how["escape"]}, '
               'return_str=True)\n'
               '    return bpe.process_line(words).split()\n'
               'def join(pieces): return demoses.detokenize((" ".join(pieces) + " ").replace("@@ ", "").split())\n')
    extra = 1 + bool(cfg.source_bos)  # what jaxnat's length limit counts besides the pieces: EOS, and BOS
    if languages:
        src_lang = config.data.src_lang_token or languages[0]
        tgt_lang = config.data.tgt_lang_token or languages[0]
        head = f'src_lang, tgt_lang = "{src_lang}", "{tgt_lang}"  # any of its language tokens\n'
        batch, prefix, out = ("[[src_lang] + cut(t) for t in texts]", "target_prefix=[[tgt_lang]] * len(batch), ",
                              "pieces[1:]")
    else:
        head, batch, prefix, out = "", "[cut(t) for t in texts]", "", "pieces"
    return f"""# A jaxnat model exported for CTranslate2

Written by `python -m jaxnat.main --mode export` from a jaxnat workdir (`jaxnat_export.json` says which, its
checkpoint and the commit). CTranslate2 translates pieces; the files beside the model cut text into them and join
them back. With these options its greedy search is jaxnat's, and its beam search nearly (`eval.beam_size`,
`eval.length_penalty`, `eval.max_len_a` and `eval.max_len_b` as the workdir's config sets them; jaxnat's length
limit is per sentence, CTranslate2's per batch, here the longest source's; a beam stops once `beam_size × patience`
hypotheses finished, jaxnat's once none alive can win):

```python
import ctranslate2
model = "."  # this directory
{cut}{head}translator = ctranslate2.Translator(model, device="cpu")
never = {suppressed!r}  # tokens jaxnat's search never emits

def translate_pieces(texts, beam_size={config.eval.beam_size}):
    batch = {batch}
    longest = max(map(len, batch)) + {extra}  # a source's pieces and its {'BOS and ' if cfg.source_bos else ''}EOS
    results = translator.translate_batch(
        batch, {prefix}beam_size=beam_size, patience=2, length_penalty={config.eval.length_penalty},
        min_decoding_length=0, max_decoding_length=int({config.eval.max_len_a} * longest + {config.eval.max_len_b}),
        suppress_sequences=[[t] for t in never])
    return [r.hypotheses[0] for r in results]

def translate(texts, beam_size={config.eval.beam_size}):
    return [join({out}) for pieces in translate_pieces(texts, beam_size)]

print(translate(["a sentence to translate"]))
```

`translator.score_batch(sources, targets)` gives each piece's log-probability, as `--mode score` with
`eval.token_scores=true` does; `translate_batch`'s scores are over the tokens it may emit (`suppress_sequences`
left out). The model adds the source's {'BOS and ' if cfg.source_bos else ''}EOS itself and starts the decoder from
`{START_TOKENS[cfg.decoder_start]}`.
"""
