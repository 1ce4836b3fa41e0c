"""Marian's own checkpoints: the `.npz` that Marian writes and OPUS-MT's and the Tatoeba Challenge's releases ship
(`opus.spm32k-spm32k.transformer-align.model1.npz.best-perplexity.npz` beside `*.vocab.yml`, `decoder.yml`,
`source.spm` and `target.spm`). docs/import.md.

The arrays are read as Hugging Face's conversion reads them (transformers' convert_marian_to_pytorch, by which
OPUS-MT's models reached the hub): Marian's names and layouts become MarianMTModel's, and `marian.build` imports the
result as it imports a Hugging Face directory; the model then computes what Marian computes, not MarianMTModel's
approximation of it, in the three places where those differ (measured with Marian itself, pymarian:
tests/data/import/marian-*/expected_marian.json): Marian's sinusoids take the frequencies 10000^(−i / (D/2 − 1))
(jaxnat's "fairseq" layout; MarianMTModel's 10000^(−2i / D)), its softmax has no `<pad>` row (model.absent_tokens
names it), and its layer norms' epsilon is 1e-6 (MarianMTModel's 1e-5). Marian keeps a layer's weights as [in, out]
and its biases and layer-norm parameters as [1, out]. Its vocabulary has no padding piece: `<pad>` is appended with
a zero embedding row and a zero output bias, and the decoder starts from it (Marian's decoder starts from a zero
vector). One vocabulary (`tied-embeddings-all` or `-src`: `Wemb`) or one per side (`encoder_Wemb`, `decoder_Wemb`,
decoder.yml's two `vocabs` or `*.src.vocab.yml` and `*.trg.vocab.yml`, of the same size or not); the output layer is
the target embedding, or one of its own (`decoder_ff_logit_out_W`, without `tied-embeddings-all` or
`tied-embeddings`: Marian's default; `lm_head.weight`). Settings that conversion cannot express are refused with one
line naming them, but for SSRU decoder layers (`transformer-decoder-autoreg: rnn`, `dec-cell: ssru`),
average-attention ones (`average-attention`) and pre-norm layers with top norms, which no MarianMTModel computes.
The file is read with `np.load(allow_pickle=False)` and the YAML with PyYAML's BaseLoader (strings, lists and maps
only): data, no code.
"""

from __future__ import annotations

import glob
import logging
import os
import zipfile
import zlib

import numpy as np

from jaxnat.errors import DataError
from jaxnat.importers import marian
from jaxnat.importers.imported import Imported

log = logging.getLogger("jaxnat")

CONFIG_KEY = "special:model.yml"
# model.yml settings that jaxnat computes only at these values, each Marian's default where a file omits it: no
# embedding norm, two-layer FFNs, sinusoidal positions, an SSRU without layer norms or output projection where the
# decoder's layers are recurrent (AUTOREG); the residual layouts: NORMS
REQUIRED = {
    "type": "transformer", "transformer-postprocess-emb": "d", "transformer-ffn-depth": "2",
    "transformer-decoder-ffn-depth": "0",
    "transformer-no-projection": "false", "transformer-train-position-embeddings": "false",
    "layer-normalization": "false", "right-left": "false", "ulr": "false", "transformer-rnn-projection": "false",
}
# (transformer-preprocess, transformer-postprocess, transformer-postprocess-top) -> pre-norm: post-norm layers ("dan":
# dropout, add, normalise), or pre-norm ones ("n" before, "da" after) with a norm over each stack's top ("n"), as
# Marian's documentation recommends for them
NORMS = {("", "dan", ""): False, ("n", "da", "n"): True}
# Marian's transformer-decoder-autoreg (and dec-cell, for "rnn") -> model.decoder_autoreg; MarianMTModel (and so
# Hugging Face's conversion) computes the first alone
AUTOREG = {("self-attention", None): "self_attention", ("rnn", "ssru"): "ssru", ("average-attention", None): "aan"}
# Marian's activations as jaxnat names them. Marian's "gelu" is x * sigmoid(1.702 x), which neither jaxnat nor
# MarianMTModel computes: refused.
ACTIVATIONS = {"swish": "swish", "relu": "relu"}
# Marian's transformer normalises every layer with epsilon 1e-6 under the square root (its `layerNorm` helper);
# MarianMTModel with PyTorch's default, 1e-5
LN_EPS = 1e-6
_PROJECTIONS = {"Wq": "q_proj.weight", "bq": "q_proj.bias", "Wk": "k_proj.weight", "bk": "k_proj.bias",
                "Wv": "v_proj.weight", "bv": "v_proj.bias", "Wo": "out_proj.weight", "bo": "out_proj.bias"}
# a layer's parameters: Marian's name after "encoder_l<i>_" / "decoder_l<i>_" -> MarianMTModel's after "layers.<i-1>."
LAYER = {
    **{f"self_{m}": f"self_attn.{h}" for m, h in _PROJECTIONS.items()},
    "self_Wo_ln_scale": "self_attn_layer_norm.weight", "self_Wo_ln_bias": "self_attn_layer_norm.bias",
    **{f"context_{m}": f"encoder_attn.{h}" for m, h in _PROJECTIONS.items()},
    "context_Wo_ln_scale": "encoder_attn_layer_norm.weight", "context_Wo_ln_bias": "encoder_attn_layer_norm.bias",
    "ffn_W1": "fc1.weight", "ffn_b1": "fc1.bias", "ffn_W2": "fc2.weight", "ffn_b2": "fc2.bias",
    "ffn_ffn_ln_scale": "final_layer_norm.weight", "ffn_ffn_ln_bias": "final_layer_norm.bias",
}
# an SSRU decoder layer's own (`rnn_*`) in place of its self-attention's (`self_*`), under names of this module's own
# in the MarianMTModel layout (`torch_layers.decoder_layer` reads them)
SSRU_LAYER = {
    "rnn_W": "ssru.W.weight", "rnn_Wf": "ssru.Wf.weight", "rnn_bf": "ssru.Wf.bias",
    "rnn_ffn_ln_scale": "self_attn_layer_norm.weight", "rnn_ffn_ln_bias": "self_attn_layer_norm.bias",
    **{k: v for k, v in LAYER.items() if not k.startswith("self_")},
}
# an average-attention decoder layer's own (`aan_*`: its feed-forward network, its two gates)
AAN_LAYER = {
    "aan_W1": "aan.fc1.weight", "aan_b1": "aan.fc1.bias", "aan_W2": "aan.fc2.weight", "aan_b2": "aan.fc2.bias",
    "aan_Wi": "aan.Wi.weight", "aan_bi": "aan.Wi.bias", "aan_Wf": "aan.Wf.weight", "aan_bf": "aan.Wf.bias",
    "aan_ffn_ln_scale": "self_attn_layer_norm.weight", "aan_ffn_ln_bias": "self_attn_layer_norm.bias",
    **{k: v for k, v in LAYER.items() if not k.startswith("self_")},
}
# a decoder layer's names by model.decoder_autoreg (an encoder layer's: LAYER)
DECODER_LAYERS = {"self_attention": LAYER, "ssru": SSRU_LAYER, "aan": AAN_LAYER}


def is_release(path: str) -> bool:
    """Whether ``marian:PATH`` names Marian's own files: an .npz, or a directory that holds one and no
    config.json (a Hugging Face directory has config.json)."""
    if os.path.isfile(path):
        return path.endswith(".npz")
    return (os.path.isdir(path) and not os.path.exists(os.path.join(path, "config.json"))
            and bool(glob.glob(os.path.join(glob.escape(path), "*.npz"))))


def _yaml(text: str, where: str):
    import yaml

    try:
        return yaml.load(text, Loader=getattr(yaml, "CBaseLoader", yaml.BaseLoader))
    except yaml.YAMLError as e:
        raise DataError(f"{where}: not YAML ({str(e).splitlines()[0]})") from None


def _yaml_file(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            return _yaml(f.read(), path)
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: unreadable ({getattr(e, 'strerror', None) or e})") from None


def _decoder_yml(directory: str) -> dict:
    path = os.path.join(directory, "decoder.yml")
    if not os.path.isfile(path):
        return {}
    found = _yaml_file(path)
    if not isinstance(found, dict):
        raise DataError(f"{path}: not a map of Marian's decoding options")
    return found


def _listed(directory: str, name: str) -> str:
    """A file decoder.yml names, relative to its directory (Marian's relative-paths); a path from the machine that
    wrote it is looked up by its name beside decoder.yml."""
    path = os.path.join(directory, name)
    return path if os.path.exists(path) else os.path.join(directory, os.path.basename(name))


def _model_file(path: str, decoding: dict) -> str:
    """The .npz ``path`` names: itself, or in a directory the one decoder.yml's `models` lists, else its only
    model file (optimizer states left out)."""
    if os.path.isfile(path):
        return path
    models = decoding.get("models")
    if isinstance(models, list) and models and isinstance(models[0], str):
        if len(models) > 1:
            raise DataError(f"{path}/decoder.yml lists an ensemble of {len(models)} models; import one with "
                            f"marian:{path}/{models[0]}")
        return _listed(path, models[0])
    found = sorted(f for f in glob.glob(os.path.join(glob.escape(path), "*.npz")) if not f.endswith(".optimizer.npz"))
    if len(found) != 1:
        raise DataError(f"{path} holds {len(found)} .npz files and no decoder.yml naming one; name the model: "
                        f"marian:{found[0] if found else path + '/MODEL.npz'}")
    return found[0]


def _vocabulary_files(directory: str, decoding: dict, shared: bool) -> dict:
    """{"src", "tgt"}: the paths of Marian's vocabularies, from decoder.yml's `vocabs`, else the directory's
    *.vocab.yml (one shared) or *.src.vocab.yml and *.trg.vocab.yml."""
    vocabs = decoding.get("vocabs")
    if isinstance(vocabs, list) and len(vocabs) == 2 and all(isinstance(v, str) for v in vocabs):
        names = {"src": vocabs[0], "tgt": vocabs[0] if shared else vocabs[1]}
    else:
        def only(pattern: str, what: str) -> str:
            found = sorted(f for f in glob.glob(os.path.join(glob.escape(directory), pattern))
                           if shared != f.endswith(("src.vocab.yml", "trg.vocab.yml")))
            if len(found) != 1:
                raise DataError(f"{directory}: {len(found)} files {pattern} ({what}) and no decoder.yml naming one")
            return os.path.basename(found[0])

        names = (dict.fromkeys(("src", "tgt"), only("*vocab.yml", "Marian's vocabulary")) if shared else
                 {"src": only("*src.vocab.yml", "the source vocabulary"),
                  "tgt": only("*trg.vocab.yml", "the target vocabulary")})
    return {side: _listed(directory, name) for side, name in names.items()}


def _vocabulary(path: str, rows: int) -> dict:
    """Marian's vocabulary file (piece -> id), checked against the ``rows`` of its embedding."""
    name = os.path.basename(path)
    if name.endswith(".spm"):
        raise DataError(f"{path}: a SentencePiece model as Marian's vocabulary is not supported (the release's "
                        f"*.vocab.yml is)")
    found = _yaml_file(path)
    if not isinstance(found, dict):
        raise DataError(f"{path}: not a map of pieces to ids")
    try:
        vocab = {str(piece): int(i) for piece, i in found.items()}
    except (TypeError, ValueError):
        raise DataError(f"{path}: not a map of pieces to ids") from None
    if "<pad>" in vocab:
        raise DataError(f"{path} holds a <pad> piece; Marian's vocabularies have none")
    if "</s>" not in vocab:
        raise DataError(f"{path}: no </s> piece")
    if rows != len(vocab):
        raise DataError(f"{path} holds {len(vocab)} pieces, the model's embedding {rows} rows: not this model's "
                        f"vocabulary")
    return vocab


def _settings(arrays, where: str) -> dict:
    if CONFIG_KEY not in arrays:
        raise DataError(f"{where}: no {CONFIG_KEY} (not a Marian model file)")
    text = bytes(np.asarray(arrays[CONFIG_KEY]).astype(np.uint8)).decode("utf-8", "replace").rstrip("\0")
    cfg = _yaml(text, f"{where} ({CONFIG_KEY})")
    if not isinstance(cfg, dict):
        raise DataError(f"{where}: {CONFIG_KEY} is not a map of Marian's options")
    tied_all = cfg.get("tied-embeddings-all", "false") == "true"
    shared = tied_all or cfg.get("tied-embeddings-src", "false") == "true"
    vocab_sizes = cfg.get("dim-vocabs", [])
    if not isinstance(vocab_sizes, list) or shared and len(set(vocab_sizes)) > 1:
        raise DataError(f"{where}: dim-vocabs {vocab_sizes!r} with tied-embeddings-all or -src: one embedding for "
                        f"vocabularies of different sizes")
    for key, want in REQUIRED.items():
        if cfg.get(key, want) != want:
            raise DataError(f"{where}: Marian's {key}: {cfg[key]!r} is not supported (jaxnat imports {want!r})")
    norms = tuple(cfg.get(f"transformer-{k}", d) for k, d in (("preprocess", ""), ("postprocess", "dan"),
                                                              ("postprocess-top", "")))
    if norms not in NORMS:
        raise DataError(f"{where}: Marian's transformer-preprocess/-postprocess/-postprocess-top {norms!r} are not "
                        f"supported ({' or '.join(map(repr, NORMS))}: post-norm, or pre-norm with a top norm)")
    kind = cfg.get("transformer-decoder-autoreg", "self-attention")
    autoreg = AUTOREG.get((kind, cfg.get("dec-cell", "gru") if kind == "rnn" else None))
    if autoreg is None:
        raise DataError(f"{where}: Marian's transformer-decoder-autoreg: {kind!r}"
                        + (f" with dec-cell: {cfg.get('dec-cell', 'gru')!r}" if kind == "rnn" else "")
                        + " is not supported (self-attention, average-attention, or rnn with dec-cell: ssru)")
    if autoreg == "aan":
        _average_attention(cfg, norms, where)
    if cfg.get("transformer-tied-layers", []) not in ([], ""):
        raise DataError(f"{where}: Marian's transformer-tied-layers is not supported")
    if cfg.get("transformer-decoder-dim-ffn", "0") not in ("0", cfg.get("transformer-dim-ffn")):
        raise DataError(f"{where}: encoder and decoder of different shapes are not supported")
    activation = cfg.get("transformer-ffn-activation", "swish")
    if activation not in ACTIVATIONS:
        raise DataError(f"{where}: Marian's transformer-ffn-activation: {activation!r} is not supported (swish or "
                        f"relu; Marian's gelu is x·sigmoid(1.702x))")
    try:
        return {"activation": ACTIVATIONS[activation], "autoreg": autoreg, "pre_norm": NORMS[norms], "shared": shared,
                "tied": tied_all or cfg.get("tied-embeddings", "false") == "true", **{k: int(cfg[k]) for k in (
            "dim-emb", "enc-depth", "dec-depth", "transformer-heads", "transformer-dim-ffn")},
            "version": str(cfg.get("version", "")), "dropout": float(cfg.get("transformer-dropout", 0.1))}
    except KeyError as e:
        raise DataError(f"{where}: {CONFIG_KEY} lacks {e.args[0]}") from None
    except (TypeError, ValueError) as e:
        raise DataError(f"{where}: {CONFIG_KEY}: {e}") from None


def _average_attention(cfg: dict, norms: tuple, where: str) -> None:
    """An average-attention decoder's options that jaxnat's `AverageAttention` computes: its feed-forward network
    the layers' own (width, activation, two layers deep), the gates on, post-norm layers; else a one-line error."""
    wanted = {"transformer-dim-aan": cfg.get("transformer-dim-ffn"), "transformer-aan-depth": "2",
              "transformer-aan-activation": cfg.get("transformer-ffn-activation", "swish"),
              "transformer-aan-nogate": "false"}
    defaults = {"transformer-dim-aan": "2048", "transformer-aan-depth": "2", "transformer-aan-activation": "swish",
                "transformer-aan-nogate": "false"}
    for key, want in wanted.items():
        if cfg.get(key, defaults[key]) != want:
            raise DataError(f"{where}: Marian's {key}: {cfg.get(key, defaults[key])!r} with average-attention is not "
                            f"supported (jaxnat's average attention: {want!r}, the feed-forward layers' own, gated)")
    if NORMS[norms]:
        raise DataError(f"{where}: average-attention decoder layers with pre-norm are not supported (Marian "
                        f"normalises the mean of the layer's inputs, jaxnat averages normalised inputs)")


def pre_norm_names(names: dict) -> dict:
    """A layer's names with its norms before each sublayer (Marian's preprocess "n": `_ln_*_pre`; an SSRU's under the
    layer's own prefix, `rnn_ln_*_pre`, not its post-process's `rnn_ffn_`)."""
    return {(k.replace("rnn_ffn_", "rnn_") + "_pre" if "_ln_" in k else k): v for k, v in names.items()}


def _tensors(arrays, layers: tuple[int, int], shared: bool, where: str, autoreg: str = "self_attention",
             pre_norm: bool = False, tied: bool = True) -> dict:
    """Marian's arrays under MarianMTModel's names and layouts (torch's Linear: [out, in]; vectors flat), with
    <pad>'s rows appended; an SSRU decoder's (``autoreg``) under `SSRU_LAYER`'s names; with ``pre_norm`` the norms
    before the sublayers, and each stack's top norm as `model.<stack>.layer_norm`; an output layer of its own
    (not ``tied``: `decoder_ff_logit_out_W`) as `lm_head.weight`."""
    out, seen = {}, {CONFIG_KEY}
    for stack, depth in zip(("encoder", "decoder"), layers):
        names = DECODER_LAYERS[autoreg] if stack == "decoder" else LAYER
        names = pre_norm_names(names) if pre_norm else names
        if pre_norm:
            for part in ("scale", "bias"):
                key = f"{stack}_top_ln_{part}"
                if key not in arrays:
                    raise DataError(f"{where}: no parameter {key} (not the transformer its model.yml describes?)")
                out[f"model.{stack}.layer_norm.{'weight' if part == 'scale' else 'bias'}"] = arrays[key].reshape(-1)
                seen.add(key)
        for i in range(1, depth + 1):
            for name, hf in names.items():
                key = f"{stack}_l{i}_{name}"
                if key not in arrays:
                    if stack == "encoder" and name.startswith("context_"):
                        continue
                    raise DataError(f"{where}: no parameter {key} (not the transformer its model.yml describes?)")
                matrix = hf.endswith(".weight") and "layer_norm" not in hf
                out[f"model.{stack}.layers.{i - 1}.{hf}"] = arrays[key].T if matrix else arrays[key].reshape(-1)
                seen.add(key)
    embeddings = {"Wemb": "model.shared.weight"} if shared else {
        "encoder_Wemb": "model.encoder.embed_tokens.weight", "decoder_Wemb": "model.decoder.embed_tokens.weight"}
    if not tied:
        embeddings["decoder_ff_logit_out_W"] = "lm_head.weight"
    for name in (*embeddings, "decoder_ff_logit_out_b"):
        if name not in arrays:
            raise DataError(f"{where}: no parameter {name} (not the vocabulary layout its model.yml describes?)")
    # <pad>, which Marian lacks: a zero embedding (the decoder's start) and a zero output bias
    for name, hf in embeddings.items():
        rows = arrays[name].T if hf == "lm_head.weight" else arrays[name]  # (Marian's output layer: [d, vocabulary])
        out[hf] = np.concatenate([rows, np.zeros((1, rows.shape[1]), rows.dtype)])
    bias = arrays["decoder_ff_logit_out_b"].reshape(-1)
    out["final_logits_bias"] = np.concatenate([bias, np.zeros(1, bias.dtype)])
    seen.update({*embeddings, "decoder_ff_logit_out_b"})
    unused = sorted(set(arrays) - seen)
    if unused:
        raise DataError(f"{where}: parameters jaxnat's model would not use: {', '.join(unused[:3])}")
    return out


def read(path: str) -> Imported:
    directory = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    decoding = _decoder_yml(directory)
    where = _model_file(path, decoding)
    try:
        with np.load(where, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
        # numpy reads a file that is no zip archive as a pickle, which allow_pickle=False refuses: say what it is not
        why = "not a NumPy .npz archive" if "allow_pickle" in str(e) and not zipfile.is_zipfile(where) else str(e)
        why = why if len(why) <= 120 else why[:120] + "…"  # a damaged member's message quotes its bytes
        raise DataError(f"{where}: unreadable .npz file ({why})") from None
    settings = _settings(arrays, where)
    shared = settings["shared"]
    tensors = _tensors(arrays, (settings["enc-depth"], settings["dec-depth"]), shared, where, settings["autoreg"],
                       settings["pre_norm"], settings["tied"])
    tops = {stack: {"scale": tensors.pop(f"model.{stack}.layer_norm.weight"),  # (no MarianMTModel has them)
                    "bias": tensors.pop(f"model.{stack}.layer_norm.bias")}
            for stack in ("encoder", "decoder") if settings["pre_norm"]}
    vocab_at = _vocabulary_files(directory, decoding, shared)
    rows = {side: tensors["model.shared.weight" if shared else f"model.{stack}.embed_tokens.weight"].shape[0] - 1
            for side, stack in (("src", "encoder"), ("tgt", "decoder"))}
    vocabs = {side: _vocabulary(vocab_at[side], rows[side]) for side in ("src", "tgt")}
    for name in ("source.spm", "target.spm"):
        if not os.path.isfile(os.path.join(directory, name)):
            raise DataError(f"{directory}: no {name} (a Marian release's SentencePiece models cut the text)")
    for side, vocab in vocabs.items():  # (each side's own: vocabularies of different sizes)
        vocab["<pad>"] = rows[side]
    pad = rows["tgt"]
    heads, ffn = settings["transformer-heads"], settings["transformer-dim-ffn"]
    beam = decoding.get("beam-size", "4")
    cfg = {  # what Hugging Face's conversion writes as the MarianMTModel's config.json
        "model_type": "marian", "d_model": settings["dim-emb"], "encoder_layers": settings["enc-depth"],
        "decoder_layers": settings["dec-depth"], "encoder_attention_heads": heads, "decoder_attention_heads": heads,
        "encoder_ffn_dim": ffn, "decoder_ffn_dim": ffn, "activation_function": settings["activation"],
        "pad_token_id": pad, "decoder_start_token_id": pad, "eos_token_id": vocabs["tgt"]["</s>"],
        "scale_embedding": True, "normalize_before": settings["pre_norm"], "tie_word_embeddings": settings["tied"],
        "share_encoder_decoder_embeddings": shared,
        "dropout": settings["dropout"], "num_beams": int(beam) if str(beam).isdigit() else 4,
    }
    about = {"format": "marian", "architecture": "Marian transformer (.npz)", "marian_version": settings["version"]}
    imported = marian.build(cfg, vocabs, tensors, directory, about, cfg_at=f"{where} ({CONFIG_KEY})",
                            vocab_at=vocab_at, where=where)
    imported.overrides.update(_search_options(decoding, os.path.join(directory, "decoder.yml")))
    # Marian's own function (module docstring)
    imported.overrides.update({"model.position_layout": "fairseq", "model.absent_tokens": "pad,bos,plh,mask",
                               "model.ln_eps": LN_EPS})
    for stack, top in tops.items():  # pre-norm: each stack's top norm, its final norm
        imported.params[stack]["final_norm"] = top
    if settings["autoreg"] != "self_attention":
        imported.overrides["model.decoder_autoreg"] = settings["autoreg"]
    return imported


def _search_options(decoding: dict, at: str) -> dict:
    """decoder.yml's `normalize` as eval.length_penalty: Marian's decoder ranks finished hypotheses by their score
    over their length (EOS counted) to that power, as jaxnat's searches do (marian-dev's `History`); absent, jaxnat's
    default stays. Its `allow-unk` as eval.allow_unk (Marian's default: off, `<unk>` never written). A
    `word-penalty`, which jaxnat's searches lack, is left out with a warning."""
    def number(key: str) -> float:
        try:
            return float(decoding[key])
        except (TypeError, ValueError):
            raise DataError(f"{at}: {key} {decoding[key]!r} is not a number") from None

    if "word-penalty" in decoding and number("word-penalty") != 0.0:
        log.warning("%s: word-penalty %s is not applied (jaxnat's searches have none)", at, decoding["word-penalty"])
    allow_unk = str(decoding.get("allow-unk", "false")).lower() == "true"
    return {"eval.allow_unk": allow_unk, **({"eval.length_penalty": number("normalize")} if "normalize" in decoding
                                            else {})}
