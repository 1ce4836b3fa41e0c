"""Marian models as Hugging Face's `MarianMTModel` directories (the OPUS-MT layout): `config.json`, the weights
(`model.safetensors`, else `pytorch_model.bin`), `source.spm` and `target.spm` (SentencePiece, used to cut text
only) and `vocab.json` (the pieces' ids, one vocabulary for both sides). docs/import.md. Marian's own checkpoints
(`marian_npz`) are read into the same form and imported by `build`.

Conventions bridged (Marian -> jaxnat): `<pad>`, `</s>`, `<unk>` become jaxnat's PAD, EOS, UNK rows and the other
pieces follow jaxnat's six reserved ids in the vocabulary's order; BOS, PLH and MASK, which Marian lacks, are never
predicted (model.absent_tokens). The decoder starts from `<pad>` (decoder_start_token_id), sources carry no BOS,
`final_logits_bias` is the output bias, positions are Hugging Face Marian's sinusoidal table from 0, the
activation is its configured one (OPUS-MT: swish), layer norms use epsilon 1e-5.
"""

from __future__ import annotations

import json
import os

import numpy as np

from jaxnat.errors import DataError
from jaxnat.importers import Imported, remap_rows, torch_file
from jaxnat.importers.torch_layers import StateDict, stacks

FILES = ("config.json", "vocab.json", "source.spm", "target.spm")


def _read_json(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise DataError(f"{path}: unreadable ({e.strerror})") from None
    except ValueError as e:
        raise DataError(f"{path}: not JSON ({e})") from None


def _weights(directory: str) -> tuple[dict, str]:
    path = os.path.join(directory, "model.safetensors")
    if os.path.isfile(path):
        from safetensors import SafetensorError
        from safetensors.numpy import load_file

        try:
            return load_file(path), path
        except (SafetensorError, OSError, ValueError) as e:
            raise DataError(f"{path}: unreadable safetensors file ({e})") from None
    path = os.path.join(directory, "pytorch_model.bin")
    if os.path.isfile(path):
        return torch_file.load(path), path
    raise DataError(f"{directory}: no weights (model.safetensors or pytorch_model.bin)")


def _same_positions(table: np.ndarray, d: int) -> bool:
    from jaxnat.models.transformer import sinusoidal_positions

    ours = np.asarray(sinusoidal_positions(table.shape[0], d, 0, "marian"))
    return table.shape == ours.shape and np.allclose(table, ours, atol=1e-4)


def read(directory: str) -> Imported:
    if not os.path.isdir(directory):
        raise DataError(f"{directory}: marian:DIR names a directory (save_pretrained's, with {', '.join(FILES)}, "
                        f"or a Marian release's, with its .npz)")
    for name in FILES:
        if not os.path.isfile(os.path.join(directory, name)):
            raise DataError(f"{directory}: no {name} (a MarianMTModel directory holds {', '.join(FILES)})")
    cfg = _read_json(os.path.join(directory, "config.json"))
    vocab = _read_json(os.path.join(directory, "vocab.json"))
    tensors, where = _weights(directory)
    return build(cfg, vocab, tensors, directory, {"format": "marian", "architecture": "MarianMTModel"},
                 cfg_at=f"{directory}/config.json", vocab_at=f"{directory}/vocab.json", where=where)


def build(cfg: dict, vocab: dict, tensors: dict, directory: str, about: dict, *, cfg_at: str, vocab_at: str,
          where: str) -> Imported:
    """The import of a MarianMTModel: its config.json as ``cfg``, vocab.json as ``vocab`` (piece -> id), its
    parameters by Hugging Face's names in ``tensors``; source.spm and target.spm are read from ``directory``.
    ``cfg_at``, ``vocab_at``, ``where``: the files these came from, for the errors."""
    if cfg.get("model_type") != "marian":
        raise DataError(f"{cfg_at}: model_type {cfg.get('model_type')!r}, not 'marian'")
    if not cfg.get("share_encoder_decoder_embeddings", True) or cfg.get("separate_vocabs", False):
        raise DataError(f"{directory}: Marian models with separate source and target vocabularies are not "
                        f"supported yet")
    for key, want in (("normalize_embedding", False), ("add_bias_logits", False), ("static_position_embeddings", True),
                      ("add_final_layer_norm", False)):
        if cfg.get(key, want) != want:
            raise DataError(f"{cfg_at}: {key}={cfg[key]!r} is not supported")
    d = cfg["d_model"]
    if cfg.get("encoder_ffn_dim") != cfg.get("decoder_ffn_dim") or cfg.get(
            "encoder_attention_heads") != cfg.get("decoder_attention_heads"):
        raise DataError(f"{directory}: encoder and decoder of different shapes are not supported")
    activation = {"gelu_new": "gelu_tanh", "silu": "swish"}.get(cfg.get("activation_function"),
                                                               cfg.get("activation_function"))

    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise DataError(f"{vocab_at}: its ids are not 0 .. {len(by_id) - 1}, each once")
    state = StateDict(tensors, where)
    shared = state.take("model.shared.weight")
    if shared.shape[0] != len(by_id):
        raise DataError(f"{vocab_at} holds {len(by_id)} pieces, the model's embedding {shared.shape[0]} rows: not "
                        f"this model's vocabulary")
    pad, eos, unk = cfg["pad_token_id"], cfg["eos_token_id"], vocab.get("<unk>")
    if unk is None or cfg.get("decoder_start_token_id", pad) != pad:
        raise DataError(f"{directory}: expected an <unk> piece and decoding started from <pad>")
    special = {pad, eos, unk}
    # jaxnat's PAD, BOS, EOS, UNK, PLH, MASK <- Marian's rows (BOS, PLH, MASK: absent, never predicted)
    order = [pad, pad, eos, unk, unk, unk] + [i for _, i in by_id if i not in special]
    from jaxnat.data.piece_vocab import RESERVED

    pieces = list(RESERVED) + [p for p, i in by_id if i not in special]

    layers = (cfg["encoder_layers"], cfg["decoder_layers"])
    heads = (cfg["encoder_attention_heads"], cfg["decoder_attention_heads"])
    params = stacks(state, "model.encoder.layers", "model.decoder.layers", layers, heads)
    params["src_embed"] = {"tokens": {"embedding": remap_rows(shared, order)}}
    params["output_bias"] = remap_rows(state.take("final_logits_bias").reshape(-1), order)
    tied = cfg.get("tie_word_embeddings", True)
    if not tied:
        params["output"] = {"kernel": remap_rows(state.take("lm_head.weight"), order).T}
    tied_names = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight") + (
        ("lm_head.weight",) if tied else ())
    for name in tied_names:  # copies of the shared matrix, where the file keeps them
        if state.has(name) and not np.array_equal(state.take(name), shared):
            raise DataError(f"{where}: {name} differs from model.shared.weight (untied embeddings are not supported)")
    for name in ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"):
        if state.has(name) and not _same_positions(state.take(name), d):
            raise DataError(f"{where}: {name} is not Hugging Face Marian's sinusoidal table")
    unused = state.unused()
    if unused:
        raise DataError(f"{where}: parameters jaxnat's model would not use: {', '.join(unused[:3])}")

    files = {}
    for name in ("source.spm", "target.spm"):
        with open(os.path.join(directory, name), "rb") as f:
            files[name] = f.read()
    settings = {"segmenter": "spm", "joint": True, "src": {"spm": "source.spm"}, "tgt": {"spm": "target.spm"}}
    max_len = cfg.get("max_position_embeddings", 512)
    overrides = {
        "model.name": "ar", "model.d_model": d, "model.ffn_dim": cfg["encoder_ffn_dim"], "model.num_heads": heads[0],
        "model.enc_layers": layers[0], "model.dec_layers": layers[1],
        "model.pre_norm": bool(cfg.get("normalize_before", False)), "model.decoder_norm": "",
        "model.positions": "sinusoidal", "model.position_layout": "marian", "model.max_len": max_len,
        "model.share_embeddings": True, "model.tie_output": bool(tied),
        "model.scale_embeddings": bool(cfg.get("scale_embedding", True)), "model.ln_eps": 1e-5,
        "model.activation": activation, "model.output_bias": True, "model.decoder_start": "pad",
        "model.source_bos": False, "model.absent_tokens": "bos,plh,mask",
        "model.dropout": float(cfg.get("dropout", 0.1)),
        "model.attention_dropout": float(cfg.get("attention_dropout", 0.0)),
        "model.activation_dropout": float(cfg.get("activation_dropout", 0.0)),
        "data.joint_vocab": True, "data.vocab_size": len(pieces), "data.max_len": min(max_len, 256),
        "eval.beam_size": int(cfg.get("num_beams", 4) or 4), "eval.max_len_a": 1.2, "eval.max_len_b": 10,
    }
    return Imported(overrides, params, settings, {"src": pieces, "tgt": list(pieces)}, files, about)
