"""Marian models as Hugging Face's `MarianMTModel` directories (the OPUS-MT layout): `config.json`, the weights
(`model.safetensors`, else `pytorch_model.bin`), `source.spm` and `target.spm` (SentencePiece, used to cut text
only) and `vocab.json` (the pieces' ids: one vocabulary for both sides, or with `target_vocab.json` one each, when
`share_encoder_decoder_embeddings` is false). docs/import.md. Marian's own checkpoints (`marian_npz`) are read into
the same form and imported by `build`.

Conventions bridged (Marian -> jaxnat): `<pad>`, `</s>`, `<unk>` become jaxnat's PAD, EOS, UNK rows and the other
pieces follow jaxnat's six reserved ids in the vocabulary's order; BOS, PLH and MASK, which Marian lacks, are never
predicted (model.absent_tokens). The decoder starts from `<pad>` (decoder_start_token_id), sources carry no BOS,
`final_logits_bias` is the output bias, positions are Hugging Face Marian's sinusoidal table from 0, the
activation is its configured one (OPUS-MT: swish), layer norms use epsilon 1e-5.
"""

from __future__ import annotations

import os

import numpy as np

from jaxnat.errors import DataError
from jaxnat.importers.imported import Imported, remap_rows
from jaxnat.importers.hf_files import read_config, read_ids, weights
from jaxnat.importers.torch_layers import FROM_HF_ACTIVATIONS, StateDict, stacks

FILES = ("config.json", "vocab.json", "source.spm", "target.spm")


def same_positions(table: np.ndarray, d: int) -> bool:
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
    cfg = read_config(os.path.join(directory, "config.json"))
    names = {"src": "vocab.json", "tgt": "vocab.json" if _shared(cfg) else "target_vocab.json"}
    if not os.path.isfile(os.path.join(directory, names["tgt"])):
        raise DataError(f"{directory}: no target_vocab.json (the target vocabulary of a model with separate ones)")
    vocabs = {side: read_ids(os.path.join(directory, name)) for side, name in names.items()}
    tensors, where = weights(directory)
    return build(cfg, vocabs, tensors, directory, {"format": "marian", "architecture": "MarianMTModel"},
                 cfg_at=f"{directory}/config.json",
                 vocab_at={side: f"{directory}/{name}" for side, name in names.items()}, where=where)


def _shared(cfg: dict) -> bool:
    """One vocabulary and one embedding matrix for both sides (OPUS-MT's usual layout)?"""
    return bool(cfg.get("share_encoder_decoder_embeddings", True))


def _rows(vocab: dict, at: str, rows: int, pad: int, eos: int) -> tuple[list[int], list[str]]:
    """One side's vocabulary (piece -> id) in jaxnat's order: the source's row of each jaxnat id (PAD, BOS, EOS, UNK,
    PLH, MASK from `<pad>`, `<pad>`, `</s>`, `<unk>`, `<unk>`, `<unk>`: BOS, PLH and MASK are absent, never
    predicted; the decoder's BOS is its start, `<pad>`), then the other pieces in the source's order; and the
    pieces by jaxnat id."""
    from jaxnat.data.vocab import RESERVED_PIECES

    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise DataError(f"{at}: its ids are not 0 .. {len(by_id) - 1}, each once")
    if rows != len(by_id):
        raise DataError(f"{at} holds {len(by_id)} pieces, the model's embedding {rows} rows: not this model's "
                        f"vocabulary")
    unk = vocab.get("<unk>")
    if unk is None or vocab.get("<pad>", pad) != pad or vocab.get("</s>", eos) != eos:
        raise DataError(f"{at}: expected <unk>, and <pad> and </s> at the model's pad and eos ids ({pad}, {eos})")
    special = {pad, eos, unk}
    return ([pad, pad, eos, unk, unk, unk] + [i for _, i in by_id if i not in special],
            list(RESERVED_PIECES) + [p for p, i in by_id if i not in special])


def build(cfg: dict, vocabs: dict, tensors: dict, directory: str, about: dict, *, cfg_at: str, vocab_at: dict,
          where: str) -> Imported:
    """The import of a MarianMTModel: its config.json as ``cfg``, its vocabularies (piece -> id) as ``vocabs``
    {"src", "tgt"} (vocab.json for both, or vocab.json and target_vocab.json), its parameters by Hugging Face's
    names in ``tensors``; source.spm and target.spm are read from ``directory``. ``cfg_at``, ``vocab_at`` {side},
    ``where``: the files these came from, for the errors."""
    if cfg.get("model_type") != "marian":
        raise DataError(f"{cfg_at}: model_type {cfg.get('model_type')!r}, not 'marian'")
    for key, want in (("normalize_embedding", False), ("add_bias_logits", False), ("static_position_embeddings", True),
                      ("add_final_layer_norm", False)):
        if cfg.get(key, want) != want:
            raise DataError(f"{cfg_at}: {key}={cfg[key]!r} is not supported")
    d = cfg["d_model"]
    if cfg.get("encoder_ffn_dim") != cfg.get("decoder_ffn_dim") or cfg.get(
            "encoder_attention_heads") != cfg.get("decoder_attention_heads"):
        raise DataError(f"{directory}: encoder and decoder of different shapes are not supported")
    activation = FROM_HF_ACTIVATIONS.get(cfg.get("activation_function"), cfg.get("activation_function"))
    pad, eos = cfg["pad_token_id"], cfg["eos_token_id"]
    if cfg.get("decoder_start_token_id", pad) != pad:
        raise DataError(f"{cfg_at}: decoding starts from id {cfg['decoder_start_token_id']}, not from <pad> ({pad})")

    state = StateDict(tensors, where)
    shared = _shared(cfg)
    tied = cfg.get("tie_word_embeddings", True)
    names = {"src": "model.encoder.embed_tokens.weight", "tgt": "model.decoder.embed_tokens.weight"}
    if shared:
        embeddings = dict.fromkeys(("src", "tgt"), state.take("model.shared.weight"))
        copies = list(names.values())  # of the shared matrix, where the file keeps them
    else:
        embeddings = {side: state.take(name) for side, name in names.items()}
        copies = []
    if tied:
        copies.append("lm_head.weight")
    for name in copies:
        if state.has(name) and not np.array_equal(state.take(name), embeddings["tgt"]):
            raise DataError(f"{where}: {name} differs from the embedding it is tied to (untied embeddings are not "
                            f"supported)")
    order, pieces = {}, {}
    for side in ("src", "tgt"):  # the source's <pad> where its vocabulary has it (one of another size: its own)
        side_pad = vocabs[side].get("<pad>", pad) if side == "src" and not shared else pad
        order[side], pieces[side] = _rows(vocabs[side], vocab_at[side], embeddings[side].shape[0], side_pad, eos)

    layers = (cfg["encoder_layers"], cfg["decoder_layers"])
    heads = (cfg["encoder_attention_heads"], cfg["decoder_attention_heads"])
    params = stacks(state, "model.encoder.layers", "model.decoder.layers", layers, heads)
    params["src_embed"] = {"tokens": {"embedding": remap_rows(embeddings["src"], order["src"])}}
    if not shared:
        params["tgt_embed"] = {"tokens": {"embedding": remap_rows(embeddings["tgt"], order["tgt"])}}
    params["output_bias"] = remap_rows(state.take("final_logits_bias").reshape(-1), order["tgt"])
    if not tied:
        params["output"] = {"kernel": remap_rows(state.take("lm_head.weight"), order["tgt"]).T}
    for name in ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"):
        if state.has(name) and not same_positions(state.take(name), d):
            raise DataError(f"{where}: {name} is not Hugging Face Marian's sinusoidal table")
    unused = state.unused()
    if unused:
        raise DataError(f"{where}: parameters jaxnat's model would not use: {', '.join(unused[:3])}")

    from jaxnat.data.pieces import sentencepiece_bytes

    files = {}
    for name in ("source.spm", "target.spm"):
        files[name] = sentencepiece_bytes(os.path.join(directory, name))
    settings = {"segmenter": "spm", "joint": shared, "language_codes": True, "src": {"spm": "source.spm"},
                "tgt": {"spm": "target.spm"}}
    max_len = cfg.get("max_position_embeddings", 512)
    overrides = {
        "model.name": "ar", "model.d_model": d, "model.ffn_dim": cfg["encoder_ffn_dim"], "model.num_heads": heads[0],
        "model.enc_layers": layers[0], "model.dec_layers": layers[1],
        "model.pre_norm": bool(cfg.get("normalize_before", False)), "model.decoder_norm": "",
        "model.positions": "sinusoidal", "model.position_layout": "marian", "model.max_len": max_len,
        "model.share_embeddings": shared, "model.tie_output": bool(tied),
        "model.scale_embeddings": bool(cfg.get("scale_embedding", True)), "model.ln_eps": 1e-5,
        "model.activation": activation, "model.output_bias": True, "model.decoder_start": "pad",
        "model.source_bos": False, "model.absent_tokens": "bos,plh,mask",
        "model.dropout": float(cfg.get("dropout", 0.1)),
        "model.attention_dropout": float(cfg.get("attention_dropout", 0.0)),
        "model.activation_dropout": float(cfg.get("activation_dropout", 0.0)),
        "data.joint_vocab": shared, "data.vocab_size": len(pieces["tgt"]), "data.max_len": min(max_len, 256),
        "eval.beam_size": int(cfg.get("num_beams", 4) or 4), "eval.max_len_a": 1.2, "eval.max_len_b": 10,
    }
    return Imported(overrides, params, settings, pieces, files, about)
