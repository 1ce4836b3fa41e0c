"""Sockeye 3's model directories (`sockeye-train -o DIR`: `params.best`, `config`, `vocab.src.0.json`,
`vocab.trg.0.json`, `version`), the PyTorch Sockeye that dropped the lexical constraints Sockeye 2 had. docs/import.md.

Sockeye reads text already cut into pieces (its users run SentencePiece or subword-nmt before it); jaxnat cuts the
text itself, with the SentencePiece model that cut the training data: `sentencepiece.model` (one for both sides) or
`source.spm` and `target.spm`, in the model's directory or the one `--dict-dir` names.

Conventions bridged (Sockeye -> jaxnat), each checked against Sockeye 3.1.34 itself (tests/data/import/sockeye*/,
tools/make_import_fixtures.py): its transformer layers as fairseq names them (`torch_layers`), the attention projections
without biases (jaxnat's are zero), the keys and values of each attention in the interleaved layout Sockeye saves them
in (per head: its key rows, then its value rows); the layouts of its residual blocks, `transformer-preprocess` /
`-postprocess` "n" / "dr" (pre-norm, a norm over each stack's top: Sockeye's default) or "" / "drn" (post-norm);
decoders of self-attention or of SSRU layers (`--decoder ssru_transformer`, Kim et al. 2019: the cell Marian's students
use, `model.decoder_autoreg=ssru`); embeddings scaled by √D and sinusoids sin | cos at 10000^(−2i / D) from position 0
(jaxnat's "marian" layout) or learned positions; layer norms with epsilon 1e-6; `<pad>` 0, `<unk>` 1, `<s>` 2, `</s>` 3
as jaxnat's PAD, UNK, BOS, EOS (the sources end with `</s>` and carry no `<s>`; the decoder starts from `<s>`); the
vocabulary's filler entries (`<pad58>` …, `--pad-vocab-to-multiple-of`) kept as pieces no text cuts into. Its decoding:
beam 5, scores normalised by the length (`--length-penalty-alpha 1`, β 0) and at most ⌈f·n⌉ − 1 tokens for a source of n
tokens with its end, f the training data's length ratio mean + 2 standard deviations (`--max-output-length-num-stds 2`);
jaxnat's limit, ⌊f·n⌋, is one token longer where f·n is a whole number.

`config` is YAML with Sockeye's class tags (`!ModelConfig` …), read as plain maps by a SafeLoader (data, no code);
`params.best` by `torch_file` (no pickle code run). Settings jaxnat's model does not compute are refused in one line
naming them (source or target factors, LHUC, GLU feed-forward layers, neural vocabulary selection, an auxiliary
length task's head)."""

from __future__ import annotations

import json
import os

import numpy as np
import yaml

from jaxnat.errors import DataError
from jaxnat.importers import torch_file
from jaxnat.importers.imported import Imported, remap_rows
from jaxnat.importers.marian import same_positions
from jaxnat.importers.torch_layers import StateDict, norm, stacks

FILES = ("params.best", "config", "vocab.src.0.json", "vocab.trg.0.json")
# transformer-preprocess, -postprocess -> pre-norm
NORMS = {("n", "dr"): True, ("", "drn"): False}
ACTIVATIONS = {"relu": "relu", "swish1": "swish", "gelu": "gelu"}
# settings jaxnat's model computes only at these values (each Sockeye's default)
REQUIRED = {"use_lhuc": False, "use_glu": False, "block_prepended_cross_attention": False}
# the decoder's layers (`--decoder`) -> model.decoder_autoreg: self-attention, or Kim et al. 2019's SSRU in its place
# (Sockeye's cell: Marian's, `transformer.SSRU`)
DECODERS = {"transformer": "self_attention", "ssru_transformer": "ssru"}
# weight-tying-type -> (one embedding matrix for both sides, the output layer the target embedding)
TYING = {"none": (False, False), "src_trg": (True, False), "trg_softmax": (False, True),
         "src_trg_softmax": (True, True)}
SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")  # Sockeye's ids 0, 1, 2, 3
# per stack, each Sockeye sublayer -> fairseq's name of it and of the norm of its residual block
SUBLAYERS = {"encoder": (("self_attention", "self_attn", "self_attn_layer_norm"), ("ff", "", "final_layer_norm")),
             "decoder": (("autoregr_layer", "self_attn", "self_attn_layer_norm"),
                         ("enc_attention", "encoder_attn", "encoder_attn_layer_norm"), ("ff", "", "final_layer_norm"))}


class _ConfigLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, reading Sockeye's tagged objects as maps and its tuples as lists."""


def _tagged(loader, suffix, node):
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    return loader.construct_sequence(node, deep=True) if isinstance(node, yaml.SequenceNode) else (
        loader.construct_scalar(node))


_ConfigLoader.add_multi_constructor("!", _tagged)
_ConfigLoader.add_constructor("tag:yaml.org,2002:python/tuple", lambda loader, node: loader.construct_sequence(node))


def read_config(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            cfg = yaml.load(f, Loader=_ConfigLoader)  # noqa: S506 (a SafeLoader)
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: not Sockeye's model config ({str(e).splitlines()[0]})") from None
    if not isinstance(cfg, dict) or "config_encoder" not in cfg:
        raise DataError(f"{path}: not Sockeye's model config (no config_encoder)")
    return cfg


def _vocabulary(path: str, rows: int) -> list[str]:
    """A side's pieces by Sockeye id, checked: ids 0 .. rows − 1 each once, its four specials first."""
    try:
        with open(path, encoding="utf-8") as f:
            vocab = json.load(f)
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: not a Sockeye vocabulary ({e})") from None
    by_id = sorted(vocab.items(), key=lambda kv: kv[1]) if isinstance(vocab, dict) else []
    if [i for _, i in by_id] != list(range(rows)):
        raise DataError(f"{path}: not the model's vocabulary (ids 0 .. {rows - 1}, each once: its embedding's rows)")
    if tuple(p for p, _ in by_id[:4]) != SPECIALS:
        raise DataError(f"{path}: its first ids are not Sockeye's {', '.join(SPECIALS)}")
    return [p for p, _ in by_id]


def _segmenter(directories: list[str]) -> tuple[dict, dict]:
    """(settings, files) of the SentencePiece model(s) found in ``directories``."""
    from jaxnat.data.pieces import sentencepiece_bytes

    for d in directories:
        if os.path.isfile(os.path.join(d, "source.spm")) and os.path.isfile(os.path.join(d, "target.spm")):
            files = {n: sentencepiece_bytes(os.path.join(d, n)) for n in ("source.spm", "target.spm")}
            return {"segmenter": "spm", "src": {"spm": "source.spm"}, "tgt": {"spm": "target.spm"}}, files
        if os.path.isfile(os.path.join(d, "sentencepiece.model")):
            files = {"sentencepiece.model": sentencepiece_bytes(os.path.join(d, "sentencepiece.model"))}
            return {"segmenter": "spm", "src": {"spm": "sentencepiece.model"},
                    "tgt": {"spm": "sentencepiece.model"}}, files
    raise DataError(f"{directories[-1]}: Sockeye reads text already cut into pieces; jaxnat cuts it with the "
                    f"SentencePiece model that cut the training data: put it there as sentencepiece.model (or "
                    f"source.spm and target.spm, one a side), or name its directory with --dict-dir")


def _attention(state: StateDict, prefix: str, out: dict, name: str, heads: int, self_attention: bool) -> None:
    """One attention as fairseq names it (q_proj, k_proj, v_proj, out_proj, zero biases) into ``out``: Sockeye's
    self-attention projects the queries, keys and values with one matrix (`ff_in`: [3D, D]), an encoder attention
    the queries (`ff_q`) and the keys and values (`ff_kv`: [2D, D]); the key and value rows interleaved by head."""
    if self_attention:
        both = state.take(f"{prefix}.ff_in.weight")
        d = both.shape[1]
        q, kv = both[:d], both[d:]
    else:
        q, kv = state.take(f"{prefix}.ff_q.weight"), state.take(f"{prefix}.ff_kv.weight")
        d = q.shape[0]
    per_head = kv.reshape(heads, 2, d // heads, kv.shape[1])
    weights = {"q_proj": q, "k_proj": per_head[:, 0].reshape(d, -1), "v_proj": per_head[:, 1].reshape(d, -1),
               "out_proj": state.take(f"{prefix}.ff_out.weight")}
    for proj, w in weights.items():
        out[f"{name}.{proj}.weight"], out[f"{name}.{proj}.bias"] = w, np.zeros(w.shape[0], np.float32)


def _fairseq_layers(state: StateDict, cfg: dict, pre: bool) -> dict:
    """Sockeye's transformer layers by fairseq's names (`torch_layers.stacks` reads them; both name a layer
    `encoder.layers.i`, `decoder.layers.i`)."""
    out = {}
    block = "pre" if pre else "post"  # the residual block holding each sublayer's norm
    for stack, sublayers in SUBLAYERS.items():
        settings = cfg[f"config_{stack}"]
        for i in range(settings["num_layers"]):
            at = f"{stack}.layers.{i}"
            for sub, name, norm_name in sublayers:
                if sub == "ff":
                    for fc, ff in (("fc1", "ff1"), ("fc2", "ff2")):
                        for k in ("weight", "bias"):
                            out[f"{at}.{fc}.{k}"] = state.take(f"{at}.ff.{ff}.{k}")
                elif sub == "autoregr_layer" and settings.get("decoder_type") == "ssru_transformer":
                    out[f"{at}.ssru.W.weight"] = state.take(f"{at}.autoregr_layer.linear.weight")
                    for k in ("weight", "bias"):
                        out[f"{at}.ssru.Wf.{k}"] = state.take(f"{at}.autoregr_layer.forget_gate.{k}")
                else:
                    _attention(state, f"{at}.{sub}", out, f"{at}.{name}", settings["attention_heads"],
                               self_attention=sub != "enc_attention")
                for k in ("weight", "bias"):
                    out[f"{at}.{norm_name}.{k}"] = state.take(f"{at}.{block}_{sub}.layer_norm.{k}")
    return out


def _check(cfg: dict, at: str) -> tuple[bool, str, bool]:
    """(pre-norm, activation, learned positions) of a config jaxnat computes (its decoder's layers: `DECODERS`); a
    one-line DataError otherwise."""
    enc, dec = cfg["config_encoder"], cfg["config_decoder"]
    data = cfg.get("config_data") or {}
    if data.get("num_source_factors", 1) != 1 or data.get("num_target_factors", 1) != 1:
        raise DataError(f"{at}: source or target factors (num_source_factors={data.get('num_source_factors')}, "
                        f"num_target_factors={data.get('num_target_factors')}) are not supported")
    for key in ("lhuc", "neural_vocab_selection", "config_length_task"):
        if cfg.get(key):
            raise DataError(f"{at}: Sockeye setting {key}={cfg[key]!r} is not supported")
    for side, stack in (("encoder", enc), ("decoder", dec)):
        for key, want in REQUIRED.items():
            if stack.get(key, want) != want:
                raise DataError(f"{at}: Sockeye's {side} {key}={stack[key]!r} is not supported (jaxnat computes "
                                f"{key}={want!r})")
    same = ("model_size", "attention_heads", "feed_forward_num_hidden", "act_type", "preprocess_sequence",
            "postprocess_sequence", "positional_embedding_type")
    for key in same:
        if enc.get(key) != dec.get(key):
            raise DataError(f"{at}: encoder and decoder of different {key} ({enc.get(key)!r}, {dec.get(key)!r}) are "
                            f"not supported")
    if dec.get("decoder_type", "transformer") not in DECODERS:
        raise DataError(f"{at}: Sockeye's decoder {dec['decoder_type']!r} is not supported ({', '.join(DECODERS)})")
    if dec.get("depth_key_value", enc["model_size"]) != enc["model_size"]:
        raise DataError(f"{at}: depth_key_value={dec['depth_key_value']} is not the model size: not supported")
    layout = (enc["preprocess_sequence"], enc["postprocess_sequence"])
    if layout not in NORMS:
        raise DataError(f"{at}: transformer-preprocess {layout[0]!r} with -postprocess {layout[1]!r} is not "
                        f"supported ('n' with 'dr': pre-norm, or '' with 'drn': post-norm)")
    if enc["act_type"] not in ACTIVATIONS:
        raise DataError(f"{at}: transformer-activation-type {enc['act_type']!r} is not supported "
                        f"({', '.join(ACTIVATIONS)})")
    if cfg.get("weight_tying_type", "src_trg_softmax") not in TYING:
        raise DataError(f"{at}: weight-tying-type {cfg['weight_tying_type']!r} is not supported "
                        f"({', '.join(TYING)})")
    return NORMS[layout], ACTIVATIONS[enc["act_type"]], enc["positional_embedding_type"] == "learned"


def _rows(n: int) -> list[int]:
    """Sockeye's row of each of jaxnat's ids for a vocabulary of ``n``: PAD, BOS, EOS, UNK, PLH, MASK from `<pad>` 0,
    `<s>` 2, `</s>` 3, `<unk>` 1 (PLH and MASK absent: `<unk>`'s row, never predicted), then its pieces in order."""
    return [0, 2, 3, 1, 1, 1] + list(range(4, n))


def _params(state: StateDict, cfg: dict, pre: bool, learned: bool, where: str) -> dict:
    """jaxnat's parameter tree of a checked config's model."""
    enc, dec = cfg["config_encoder"], cfg["config_decoder"]
    share, tie = TYING[cfg.get("weight_tying_type", "src_trg_softmax")]
    params = stacks(StateDict(_fairseq_layers(state, cfg, pre), where), "encoder.layers", "decoder.layers",
                    (enc["num_layers"], dec["num_layers"]), (enc["attention_heads"], dec["attention_heads"]))
    if pre:  # each stack's top norm (its `final_process`: the preprocess sequence)
        for stack in ("encoder", "decoder"):
            params[stack]["final_norm"] = norm(state, f"{stack}.final_process.layer_norm")
    embeddings = {"src": state.take("embedding_source.embedding.weight"),
                  "tgt": state.take("embedding_target.embedding.weight")}
    output = state.take("output_layer.weight")
    for name, tied, a, b in (("embedding_target", share, embeddings["tgt"], embeddings["src"]),
                             ("output_layer", tie, output, embeddings["tgt"])):
        if tied and not np.array_equal(a, b):
            raise DataError(f"{where}: {name}'s weights differ from those weight-tying-type "
                            f"{cfg['weight_tying_type']} ties them to")
    rows = {side: _rows(len(table)) for side, table in embeddings.items()}
    params["src_embed"] = {"tokens": {"embedding": remap_rows(embeddings["src"], rows["src"])}}
    if not share:
        params["tgt_embed"] = {"tokens": {"embedding": remap_rows(embeddings["tgt"], rows["tgt"])}}
    if not tie:
        params["output"] = {"kernel": remap_rows(output, rows["tgt"]).T}
    params["output_bias"] = remap_rows(state.take("output_layer.bias"), rows["tgt"])
    max_len = min(enc["max_seq_len_source"], dec["max_seq_len_target"])
    for stack, side in (("encoder", "src"), ("decoder", "tgt")):
        table = state.take(f"{stack}.pos_embedding.weight")
        if learned:  # (with one embedding for both sides, the target's positions its own: model.separate_positions)
            params[f"{side}_embed"] = {**params.get(f"{side}_embed", {}), "positions": table[:max_len]}
        elif not same_positions(table, enc["model_size"]):
            raise DataError(f"{where}: {stack}.pos_embedding.weight is not Sockeye's sinusoidal table")
    unused = state.unused()
    if unused:
        raise DataError(f"{where}: parameters jaxnat's model would not use: {', '.join(unused[:3])}")
    return params


def read(directory: str, dict_dir: str | None = None) -> Imported:
    from jaxnat.data.vocab import RESERVED_PIECES

    if not os.path.isdir(directory):
        raise DataError(f"{directory}: sockeye:DIR names a Sockeye 3 model directory (sockeye-train's -o)")
    for name in FILES:
        if not os.path.isfile(os.path.join(directory, name)):
            raise DataError(f"{directory}: no {name} (a Sockeye 3 model directory holds {', '.join(FILES)})")
    version = ""
    if os.path.isfile(os.path.join(directory, "version")):
        with open(os.path.join(directory, "version"), encoding="utf-8") as f:
            version = f.read().strip()
    if version and not version.startswith("3."):
        raise DataError(f"{directory}: a Sockeye {version} model; jaxnat reads Sockeye 3's (convert an MXNet "
                        f"Sockeye 2 model with Sockeye 3's sockeye.mx_to_pt)")
    at = os.path.join(directory, "config")
    cfg = read_config(at)
    pre, activation, learned = _check(cfg, at)
    enc, dec = cfg["config_encoder"], cfg["config_decoder"]
    share, tie = TYING[cfg.get("weight_tying_type", "src_trg_softmax")]
    vocab = {side: _vocabulary(os.path.join(directory, f"vocab.{name}.0.json"), cfg[f"vocab_{size}_size"])
             for side, name, size in (("src", "src", "source"), ("tgt", "trg", "target"))}
    if share and vocab["src"] != vocab["tgt"]:
        raise DataError(f"{directory}: weight-tying-type {cfg['weight_tying_type']} with two different vocabularies")
    pieces = {side: list(RESERVED_PIECES) + vocab[side][4:] for side in ("src", "tgt")}
    where = os.path.join(directory, "params.best")
    params = _params(StateDict(torch_file.load(where), where), cfg, pre, learned, where)
    max_len = min(enc["max_seq_len_source"], dec["max_seq_len_target"])

    settings, files = _segmenter([directory] + ([dict_dir] if dict_dir else []))
    settings["joint"] = share
    stats = (cfg.get("config_data") or {}).get("data_statistics") or {}
    factor = float(stats.get("length_ratio_mean", 1.0)) + 2 * float(stats.get("length_ratio_std", 0.0))
    overrides = {
        "model.name": "ar", "model.d_model": enc["model_size"], "model.ffn_dim": enc["feed_forward_num_hidden"],
        "model.num_heads": enc["attention_heads"], "model.enc_layers": enc["num_layers"],
        "model.dec_layers": dec["num_layers"],
        "model.decoder_autoreg": DECODERS[dec.get("decoder_type", "transformer")],
        "model.pre_norm": pre, "model.decoder_norm": "pre" if pre else "post", "model.decoder_final_norm": pre,
        "model.positions": "learned" if learned else "sinusoidal", "model.position_layout": "marian",
        "model.max_len": max_len, "model.share_embeddings": share, "model.separate_positions": share and learned,
        "model.tie_output": tie, "model.scale_embeddings": True, "model.ln_eps": 1e-6, "model.activation": activation,
        "model.output_bias": True, "model.decoder_start": "bos", "model.source_bos": False,
        "model.absent_tokens": "plh,mask", "model.dropout": float(enc.get("dropout_prepost", 0.1)),
        "model.attention_dropout": float(enc.get("dropout_attention", 0.0)),
        "model.activation_dropout": float(enc.get("dropout_act", 0.0)),
        "data.joint_vocab": share, "data.vocab_size": len(pieces["tgt"]), "data.max_len": min(max_len, 256),
        "eval.beam_size": 5, "eval.length_penalty": 1.0, "eval.max_len_a": round(factor, 6), "eval.max_len_b": 0,
    }
    about = {"format": "sockeye", "architecture": f"Sockeye {version or '3'} transformer"}
    return Imported(overrides, params, settings, pieces, files, about)

