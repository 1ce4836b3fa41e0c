"""NLLB-200 (Costa-jussà et al. 2022) as Hugging Face's `M2M100ForConditionalGeneration` directories: `config.json`,
the weights (`model.safetensors`, else `pytorch_model.bin`), `tokenizer.json` (the pieces' and the language tokens'
ids), `sentencepiece.bpe.model` (used to cut text only) and `tokenizer_config.json`. docs/import.md.

The model is fairseq's pre-norm Transformer (both stacks pre-norm with a final layer norm, sinusoidal positions from
`padding_idx + 1` = 2 at fairseq's frequencies, embeddings × √d, the output tied to the one shared embedding, no
output bias) and its vocabulary fairseq's dictionary (`<s>` 0, `<pad>` 1, `</s>` 2, `<unk>` 3, the SentencePiece
pieces, then one token per language, "eng_Latn", and `<mask>`). Conventions bridged (NLLB -> jaxnat): the four
specials become jaxnat's BOS, PAD, EOS, UNK rows, the other pieces follow jaxnat's six reserved ids in the model's
order (rows of the embedding past the tokenizer's last id, which NLLB's tables have, are fairseq's padding words
`madeupword0000`, …); PLH and MASK, which the model lacks, are never predicted (model.absent_tokens). As in
`NllbTokenizer` (its default, non-legacy layout) a source reads `[source-language token] pieces </s>`; the decoder
starts from `</s>` and its first token is forced to the target language's (the `forced_bos_token_id` of Hugging Face's
generate; jaxnat: data.src_lang_token / data.tgt_lang_token, `Translator.language_tokens`). Language tokens and
`<mask>` are never written out.
"""

from __future__ import annotations

import os

import numpy as np

from jaxnat.errors import DataError
from jaxnat.importers import Imported, remap_rows
from jaxnat.importers.fairseq import SPECIALS, jaxnat_pieces, row_order  # NLLB's vocabulary is a fairseq dictionary
from jaxnat.importers.hf_files import read_json, weights
from jaxnat.importers.torch_layers import StateDict, norm, stacks

FILES = ("config.json", "tokenizer.json", "sentencepiece.bpe.model")


def _vocabulary(tokenizer: dict, at: str, rows: int) -> tuple[list[str], list[str]]:
    """(pieces by the model's id, the language tokens) from tokenizer.json: its model's vocabulary (a map for BPE,
    a list for Unigram) and its added tokens; rows past the last id (the embedding has ``rows``) are fairseq's
    padding words."""
    model = tokenizer.get("model") or {}
    vocab = model.get("vocab")
    if isinstance(vocab, list):
        by_id = {i: entry[0] for i, entry in enumerate(vocab)}
    elif isinstance(vocab, dict):
        by_id = {int(i): p for p, i in vocab.items()}
    else:
        raise DataError(f"{at}: no model vocabulary (a tokenizer.json of Hugging Face's tokenizers holds one)")
    added = tokenizer.get("added_tokens") or []
    by_id.update({int(t["id"]): t["content"] for t in added})
    n = max(by_id) + 1
    if sorted(by_id) != list(range(n)):
        raise DataError(f"{at}: its ids are not 0 .. {n - 1}, each once")
    pieces = [by_id[i] for i in range(n)]
    if tuple(pieces[:4]) != SPECIALS:
        raise DataError(f"{at}: ids 0..3 are {pieces[:4]}, not fairseq's {list(SPECIALS)} (not an NLLB vocabulary)")
    if rows < n:
        raise DataError(f"{at} holds {n} tokens, the model's embedding {rows} rows: not this model's vocabulary")
    languages = [t["content"] for t in added
                 if t.get("special") and t["content"] not in SPECIALS + ("<mask>",)]
    if not languages:
        raise DataError(f"{at}: no language tokens among its special tokens (not an NLLB tokenizer)")
    return pieces + [f"madeupword{i:04d}" for i in range(rows - n)], languages


def read(directory: str) -> Imported:
    if not os.path.isdir(directory):
        raise DataError(f"{directory}: nllb:DIR names a directory (save_pretrained's, with {', '.join(FILES)})")
    for name in FILES:
        if not os.path.isfile(os.path.join(directory, name)):
            raise DataError(f"{directory}: no {name} (an NLLB model's directory holds {', '.join(FILES)})")
    cfg_at = os.path.join(directory, "config.json")
    cfg = read_json(cfg_at)
    if cfg.get("model_type") != "m2m_100":
        raise DataError(f"{cfg_at}: model_type {cfg.get('model_type')!r}, not 'm2m_100' (NLLB-200's dense models; "
                        f"the mixture-of-experts NLLB is not supported)")
    tok_cfg_at = os.path.join(directory, "tokenizer_config.json")
    tok_cfg = read_json(tok_cfg_at) if os.path.isfile(tok_cfg_at) else {}
    if tok_cfg.get("legacy_behaviour"):
        raise DataError(f"{tok_cfg_at}: legacy_behaviour (the language token after the source's </s>) is not "
                        f"supported")
    d, heads = cfg["d_model"], (cfg["encoder_attention_heads"], cfg["decoder_attention_heads"])
    if cfg.get("encoder_ffn_dim") != cfg.get("decoder_ffn_dim") or heads[0] != heads[1]:
        raise DataError(f"{cfg_at}: encoder and decoder of different shapes are not supported")
    pad, eos = cfg.get("pad_token_id", 1), cfg.get("eos_token_id", 2)
    if (pad, eos, cfg.get("decoder_start_token_id", eos)) != (1, 2, 2):
        raise DataError(f"{cfg_at}: pad, eos and decoder start ids {pad}, {eos}, {cfg.get('decoder_start_token_id')}"
                        f" are not NLLB's (1, 2, 2)")
    activation = {"gelu_new": "gelu_tanh", "silu": "swish"}.get(cfg.get("activation_function", "relu"),
                                                               cfg.get("activation_function", "relu"))

    tensors, where = weights(directory)
    state = StateDict(tensors, where)
    shared = state.take("model.shared.weight")
    for name in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"):
        if state.has(name) and not np.array_equal(state.take(name), shared):
            raise DataError(f"{where}: {name} differs from model.shared.weight (untied embeddings are not supported)")
    tok_at = os.path.join(directory, "tokenizer.json")
    vocabulary, languages = _vocabulary(read_json(tok_at), tok_at, shared.shape[0])

    layers = (cfg["encoder_layers"], cfg["decoder_layers"])
    params = stacks(state, "model.encoder.layers", "model.decoder.layers", layers, heads)
    params["encoder"]["final_norm"] = norm(state, "model.encoder.layer_norm")
    params["decoder"]["final_norm"] = norm(state, "model.decoder.layer_norm")
    params["src_embed"] = {"tokens": {"embedding": remap_rows(shared, row_order(len(vocabulary)))}}
    # the sinusoidal tables, which jaxnat computes, where a file keeps them (Hugging Face saves them as no parameter)
    unused = state.unused(ignore=("embed_positions.weights", "embed_positions._float_tensor"))
    if unused:
        raise DataError(f"{where}: parameters jaxnat's model would not use: {', '.join(unused[:3])}")

    with open(os.path.join(directory, "sentencepiece.bpe.model"), "rb") as f:
        files = {"sentencepiece.bpe.model": f.read()}
    settings = {"segmenter": "spm", "joint": True, "languages": languages, "specials": [*languages, "<mask>"],
                "src": {"spm": "sentencepiece.bpe.model"}, "tgt": {"spm": "sentencepiece.bpe.model"}}
    pieces = jaxnat_pieces(vocabulary)
    default = {side: tok_cfg.get(key) if tok_cfg.get(key) in languages else ""
               for side, key in (("src", "src_lang"), ("tgt", "tgt_lang"))}
    max_len = cfg.get("max_position_embeddings", 1024)
    overrides = {
        "model.name": "ar", "model.d_model": d, "model.ffn_dim": cfg["encoder_ffn_dim"], "model.num_heads": heads[0],
        "model.enc_layers": layers[0], "model.dec_layers": layers[1], "model.pre_norm": True,
        "model.decoder_norm": "pre", "model.decoder_final_norm": True, "model.positions": "sinusoidal",
        "model.position_offset": 2, "model.max_len": max_len, "model.share_embeddings": True,
        "model.tie_output": True, "model.scale_embeddings": bool(cfg.get("scale_embedding", True)),
        "model.ln_eps": 1e-5, "model.activation": activation, "model.decoder_start": "eos",
        "model.source_bos": False, "model.absent_tokens": "plh,mask",
        "model.dropout": float(cfg.get("dropout", 0.1)),
        "model.attention_dropout": float(cfg.get("attention_dropout", 0.0)),
        "model.activation_dropout": float(cfg.get("activation_dropout", 0.0)),
        "data.joint_vocab": True, "data.vocab_size": len(pieces), "data.max_len": min(max_len, 256),
        "data.src_lang_token": default["src"], "data.tgt_lang_token": default["tgt"],
        "eval.beam_size": 4, "eval.max_len_a": 1.2, "eval.max_len_b": 10,
    }
    return Imported(overrides, params, settings, {"src": pieces, "tgt": pieces}, files,
                    {"format": "nllb", "architecture": "M2M100ForConditionalGeneration", "languages": len(languages)})
