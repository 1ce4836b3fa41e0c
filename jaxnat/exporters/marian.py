"""An autoregressive Transformer of Marian's conventions as a Hugging Face `MarianMTModel` directory (`--mode export
--to marian:DIR`, docs/import.md): what `jaxnat.importers.marian` reads, written back, so that an OPUS-MT model
imported, fine-tuned or otherwise trained here goes back to `transformers` (and the hub).

`MarianMTModel` computes one layout: post-norm layers, Hugging Face Marian's sinusoidal positions from 0, layer
norms of epsilon 1e-5, sources without BOS, the decoder started from `<pad>`, no norm over the embeddings; a model
of other conventions (jaxnat's own: BOS before each source, epsilon 1e-6, fairseq's frequencies) is refused in one
line naming each, and exports to CTranslate2 instead. The vocabularies are jaxnat's pieces in jaxnat's order without
the reserved tokens the model lacks (`absent_tokens`: an imported Marian model's BOS, PLH and MASK), so that
importing the export gives back the same workdir; `bad_words_ids` of its generation config holds the tokens
jaxnat's search never emits that the model has.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np

from jaxnat.data.vocab import BOS_ID, EOS_ID, MASK_ID, PAD_ID, PLH_ID
from jaxnat.errors import ConfigError



def check(cfg, config) -> None:
    """A one-line ConfigError naming every convention of ``cfg`` (a `TransformerConfig`) that MarianMTModel does not
    compute."""
    wrong = [f"{key}={value}" for key, value, marian in (
        ("model.pre_norm", cfg.pre_norm, False), ("a pre-norm decoder", cfg.decoder_pre_norm, False),
        ("model.positions", cfg.positions, "sinusoidal"), ("model.position_layout", cfg.position_layout, "marian"),
        ("model.position_offset", cfg.position_offset, 0), ("model.ln_eps", cfg.ln_eps, 1e-5),
        ("model.layernorm_embedding", cfg.layernorm_embedding, False), ("model.source_bos", cfg.source_bos, False),
        ("model.decoder_start", cfg.decoder_start, "pad")) if value != marian]
    if PAD_ID in cfg.absent_tokens:  # (a Marian .npz import: Marian's own softmax)
        wrong.append("model.absent_tokens with pad (MarianMTModel's softmax has a <pad> row; Marian's own model: "
                     "--to marian-npz:DIR)")
    if config.data.src_lang_token or config.data.tgt_lang_token:
        wrong.append("data.src_lang_token / tgt_lang_token (language tokens outside the text)")
    if wrong:
        raise ConfigError(f"Hugging Face's MarianMTModel cannot compute this model ({', '.join(wrong)}); export it "
                          f"with --to ctranslate2:DIR")


def write(translator, config, directory: str, files: dict[str, str], how: dict) -> None:
    """Writes the translator's model into ``directory`` (made here) as `save_pretrained` would: config.json,
    generation_config.json, model.safetensors, vocab.json (and target_vocab.json), source.spm and target.spm,
    tokenizer_config.json. files, how: the workdir's tokenizer files and how they cut text
    (`jaxnat.exporters._tokenizer_files`)."""
    import jax

    from jaxnat.importers.hf_files import write_safetensors
    from jaxnat.importers.torch_layers import HF_ACTIVATIONS, stack_tensors
    from jaxnat.models.transformer import sinusoidal_positions, unstack_layers

    cfg, tok = translator.spec.cfg, translator.tokenizer
    check(cfg, config)
    if how["segmenter"] != "spm":
        raise ConfigError("MarianTokenizer cuts text with SentencePiece; this model's pieces are BPE's: export it "
                          "with --to ctranslate2:DIR")
    params = jax.tree.map(np.asarray, translator.params["params"])
    params = unstack_layers(params) if cfg.scan_layers else params
    absent = set(cfg.absent_tokens)
    shared = cfg.share_embeddings
    # the rows kept, per side: jaxnat's ids but the absent ones (their new ids: the positions in these lists)
    rows = {side: [i for i in range(tok.vocab_size(side)) if i not in absent] for side in ("src", "tgt")}
    vocab = {side: {tok.id_to_piece(i, side): n for n, i in enumerate(rows[side])} for side in ("src", "tgt")}
    if any(len(v) != len(rows[side]) for side, v in vocab.items()):
        raise ConfigError("the vocabulary holds a piece twice, which vocab.json cannot map: export it with "
                          "--to ctranslate2:DIR")
    new = {i: n for n, i in enumerate(rows["tgt"])}

    tensors = stack_tensors(params, "model.encoder.layers", "model.decoder.layers")
    src_tokens = np.asarray(params["src_embed"]["tokens"]["embedding"])
    if shared:
        tensors["model.shared.weight"] = src_tokens[rows["src"]]
    else:
        tensors["model.encoder.embed_tokens.weight"] = src_tokens[rows["src"]]
        tensors["model.decoder.embed_tokens.weight"] = np.asarray(
            params["tgt_embed"]["tokens"]["embedding"])[rows["tgt"]]
    bias = np.asarray(params["output_bias"]) if cfg.output_bias else np.zeros(tok.vocab_size("tgt"), np.float32)
    tensors["final_logits_bias"] = bias[rows["tgt"]][None]
    if not cfg.tie_output:
        tensors["lm_head.weight"] = np.asarray(params["output"]["kernel"]).T[rows["tgt"]]
    table = np.asarray(sinusoidal_positions(cfg.max_len, cfg.d_model, 0, "marian"))
    for stack in ("encoder", "decoder"):
        tensors[f"model.{stack}.embed_positions.weight"] = table

    os.makedirs(directory)
    write_safetensors(os.path.join(directory, "model.safetensors"), tensors)
    for name, path in files.items():
        shutil.copyfile(path, os.path.join(directory, name))
    names = {"src": "vocab.json", "tgt": "vocab.json" if shared else "target_vocab.json"}
    for side, name in names.items():
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            json.dump(vocab[side], f, ensure_ascii=False, indent=2)
    pad, eos = new[PAD_ID], new[EOS_ID]
    never = [[new[i]] for i in (PAD_ID, BOS_ID, PLH_ID, MASK_ID) if i in new]
    model = {
        "architectures": ["MarianMTModel"], "model_type": "marian", "d_model": cfg.d_model,
        "encoder_layers": cfg.enc_layers, "decoder_layers": cfg.dec_layers,
        "encoder_attention_heads": cfg.num_heads, "decoder_attention_heads": cfg.num_heads,
        "encoder_ffn_dim": cfg.ffn_dim, "decoder_ffn_dim": cfg.ffn_dim,
        "activation_function": HF_ACTIVATIONS[cfg.activation], "scale_embedding": bool(cfg.scale_embeddings),
        "max_position_embeddings": cfg.max_len, "vocab_size": len(rows["src"]), "decoder_vocab_size": len(rows["tgt"]),
        "share_encoder_decoder_embeddings": bool(shared), "tie_word_embeddings": bool(cfg.tie_output),
        "pad_token_id": pad, "eos_token_id": eos, "decoder_start_token_id": pad, "forced_eos_token_id": eos,
        "bos_token_id": None, "dropout": cfg.dropout, "attention_dropout": cfg.attention_dropout,
        "activation_dropout": cfg.activation_dropout, "is_encoder_decoder": True, "normalize_embedding": False,
        "static_position_embeddings": True, "add_final_layer_norm": False,
    }
    generation = {"decoder_start_token_id": pad, "eos_token_id": eos, "forced_eos_token_id": eos,
                  "pad_token_id": pad, "bad_words_ids": never, "num_beams": config.eval.beam_size,
                  "max_length": cfg.max_len}
    tokenizer = {"tokenizer_class": "MarianTokenizer", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
                 "separate_vocabs": not shared, "model_max_length": cfg.max_len,
                 "source_lang": config.data.src_lang, "target_lang": config.data.tgt_lang}
    for name, content in (("config.json", model), ("generation_config.json", generation),
                          ("tokenizer_config.json", tokenizer)):
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            json.dump(content, f, indent=2, sort_keys=True)
