"""fairseq's Transformers as Hugging Face ports them, written back (`--mode export --to nllb:DIR`, `m2m100:DIR`,
`mbart50:DIR`, `fsmt:DIR`; docs/import.md): what `jaxnat.importers.hf_fairseq` and `jaxnat.importers.fsmt` read, so
that an NLLB-200, M2M-100, mBART-50 or FSMT (fairseq's WMT19) model imported and fine-tuned here goes back to
`transformers` (and the hub).

The layout is the import's, inverted: the layers under fairseq's names, the embeddings with their rows back in the
model's own order (fairseq's `<s> <pad> </s> <unk>` first, then the pieces; jaxnat's PLH and MASK rows, which the
model lacks, left out). The multilingual ports: one shared embedding and the stacks' final norms; mBART-50's
position tables with their two rows that are never read (zeros), its embedding norms and its output bias. FSMT: an
embedding per side, the decoder's output projection and the sinusoidal tables the class reads from its file
(fairseq's, the padding row zero). The tokenizer is the original's: an import keeps its files
(`hf_fairseq.keep_tokenizer_files`), the vocabulary never changes afterwards, so their ids are the export's;
`tokenizer_config.json`'s default languages become data.src_lang_token and data.tgt_lang_token where those name
others; the generation config starts an output with the target language's token (`forced_bos_token_id`), bans `<s>`
and `<pad>` and ends an output cut at the length limit with `</s>`, as jaxnat's search does. A model of other
conventions, or a vocabulary imported from another format (or by a jaxnat that kept no tokenizer files), is refused
in one line.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np

from jaxnat.data.vocab import BOS_ID, PAD_ID
from jaxnat.errors import ConfigError

ARCHITECTURES = {"nllb": "M2M100ForConditionalGeneration", "m2m100": "M2M100ForConditionalGeneration",
                 "mbart50": "MBartForConditionalGeneration", "fsmt": "FSMTForConditionalGeneration"}
_FAIRSEQ = {"ln_eps": 1e-5, "decoder_start": "eos", "source_bos": False}  # every port's
_PRE_NORM = {**_FAIRSEQ, "pre_norm": True, "decoder_pre_norm": True, "decoder_final_norm": True,
             "share_embeddings": True, "tie_output": True}  # the multilingual ports'
# each class's conventions (model.KEY: value)
CONVENTIONS = {
    "M2M100ForConditionalGeneration": {**_PRE_NORM, "positions": "sinusoidal", "position_offset": 2,
                                       "position_layout": "fairseq", "layernorm_embedding": False,
                                       "output_bias": False},
    "MBartForConditionalGeneration": {**_PRE_NORM, "positions": "learned", "separate_positions": True,
                                      "layernorm_embedding": True},
    "FSMTForConditionalGeneration": {**_FAIRSEQ, "pre_norm": False, "decoder_pre_norm": False,
                                     "positions": "sinusoidal", "position_offset": 2, "position_layout": "fairseq",
                                     "layernorm_embedding": False, "output_bias": False},
}


def check(cfg, kind: str, settings: dict) -> None:
    """A one-line ConfigError naming every convention of ``cfg`` (a `TransformerConfig`) that ``kind``'s Hugging
    Face class does not compute, or where the workdir's vocabulary (its `piece_vocab` ``settings``) is not an import
    of ``kind``."""
    architecture = ARCHITECTURES[kind]
    wrong = [f"model.{key}={getattr(cfg, key)}".replace("model.decoder_pre_norm", "a decoder pre_norm")
             for key, value in CONVENTIONS[architecture].items() if getattr(cfg, key) != value]
    if kind == "fsmt" and cfg.share_embeddings != cfg.tie_output:  # FSMT ties all three tables or none
        wrong.append(f"model.share_embeddings={cfg.share_embeddings} with model.tie_output={cfg.tie_output}")
    if wrong:
        raise ConfigError(f"Hugging Face's {architecture} cannot compute this model ({', '.join(wrong)}); export it "
                          f"with --to ctranslate2:DIR")
    imported = (settings or {}).get("hugging_face", {}).get("format")
    if imported != kind:
        raise ConfigError(f"--to {kind}:DIR writes back a model imported from {kind}:DIR with its tokenizer; this "
                          f"workdir's vocabulary "
                          + (f"came from {imported}:DIR (export it with --to {imported}:DIR)" if imported else
                             "keeps no such tokenizer (a model trained here, another format, or an import by a "
                             "jaxnat before 2026-12-07: import the original again)"))


def _languages(config, tok, settings: dict) -> dict[str, str]:
    """{"src_lang"/"tgt_lang": the language as the original tokenizer_config.json names it} of data.src_lang_token
    and data.tgt_lang_token where set (M2M-100's by its code, "de"; the others by their token)."""
    codes = {token: code for code, token in settings.get("language_names", {}).items()}
    out = {}
    for side in ("src", "tgt"):
        name = config.data[f"{side}_lang_token"]
        if name:
            token = tok.id_to_piece(tok.language_id(name, side), side)
            out[f"{side}_lang"] = codes.get(token, token)
    return out


def _multilingual_tensors(params: dict, cfg, rows: list[int]) -> dict:
    """M2M100's and MBart's own tensors: the shared embedding, the stacks' final norms; MBart's positions, embedding
    norms and output bias."""
    tensors = {"model.shared.weight": np.asarray(params["src_embed"]["tokens"]["embedding"])[rows]}
    for stack, side in (("encoder", "src"), ("decoder", "tgt")):
        final = params[stack]["final_norm"]
        tensors[f"model.{stack}.layer_norm.weight"], tensors[f"model.{stack}.layer_norm.bias"] = (
            final["scale"], final["bias"])
        if cfg.layernorm_embedding:  # MBart
            positions = np.asarray(params[f"{side}_embed"]["positions"])
            tensors[f"model.{stack}.embed_positions.weight"] = np.concatenate(  # rows 0, 1: never read
                [np.zeros((2, positions.shape[1]), positions.dtype), positions])
            embed_norm = params[f"{side}_embed_norm"]
            tensors[f"model.{stack}.layernorm_embedding.weight"] = embed_norm["scale"]
            tensors[f"model.{stack}.layernorm_embedding.bias"] = embed_norm["bias"]
    if cfg.output_bias:
        tensors["final_logits_bias"] = np.asarray(params["output_bias"])[rows][None]
    return tensors


def _fsmt_tensors(params: dict, cfg, rows: dict) -> dict:
    """FSMT's own tensors: an embedding per side (one table where tied), the output projection, and the sinusoidal
    tables FSMT reads from its file: fairseq's for positions 0 … max_len + 1, the padding row (1) zero."""
    from jaxnat.exporters.fairseq import token_tables
    from jaxnat.models.transformer import sinusoidal_positions

    tensors = token_tables(params, cfg, rows, "model.")
    table = np.array(sinusoidal_positions(cfg.max_len + 2, cfg.d_model, 0, "fairseq"))
    table[1] = 0.0
    for stack in ("encoder", "decoder"):
        tensors[f"model.{stack}.embed_positions.weight"] = table
    return tensors


def write(translator, config, kind: str, workdir: str, directory: str) -> None:
    """Writes the translator's model into ``directory`` (made here) as `save_pretrained` would: config.json,
    generation_config.json, model.safetensors and the tokenizer's files (the import kept them)."""
    import jax

    from jaxnat.data import piece_vocab
    from jaxnat.importers.fairseq import fairseq_order
    from jaxnat.importers.hf_fairseq import KEPT, SPM
    from jaxnat.importers.hf_files import write_safetensors
    from jaxnat.importers.torch_layers import HF_ACTIVATIONS, stack_tensors
    from jaxnat.models.transformer import unstack_layers

    cfg, tok = translator.spec.cfg, translator.tokenizer
    settings = {}
    if piece_vocab.exists(workdir):
        with open(piece_vocab.settings_path(workdir), encoding="utf-8") as f:
            settings = json.load(f)
    check(cfg, kind, settings)
    architecture = ARCHITECTURES[kind]
    params = jax.tree.map(np.asarray, translator.params["params"])
    params = unstack_layers(params) if cfg.scan_layers else params
    # jaxnat's ids in the model's order (PLH and MASK left out), per side
    rows = {side: fairseq_order(tok.vocab_size(side) - 2) for side in ("src", "tgt")}
    tensors = stack_tensors(params, "model.encoder.layers", "model.decoder.layers")
    tensors.update(_fsmt_tensors(params, cfg, rows) if kind == "fsmt" else
                   _multilingual_tensors(params, cfg, rows["tgt"]))

    os.makedirs(directory)
    write_safetensors(os.path.join(directory, "model.safetensors"),
                      {k: np.asarray(v, np.float32) for k, v in tensors.items()})
    vocab_dir = os.path.dirname(piece_vocab.settings_path(workdir))
    if kind != "fsmt":  # (FSMT's merges.txt is among the kept files)
        shutil.copyfile(os.path.join(vocab_dir, SPM), os.path.join(directory, SPM))
    for name in settings["hugging_face"]["files"]:
        shutil.copyfile(os.path.join(vocab_dir, KEPT + name), os.path.join(directory, name))
    languages = _languages(config, tok, settings)
    tok_cfg_at = os.path.join(directory, "tokenizer_config.json")
    if languages and os.path.isfile(tok_cfg_at):
        with open(tok_cfg_at, encoding="utf-8") as f:
            tok_cfg = json.load(f)
        if any(tok_cfg.get(key) != value for key, value in languages.items()):
            with open(tok_cfg_at, "w", encoding="utf-8") as f:
                json.dump({**tok_cfg, **languages}, f, indent=2, ensure_ascii=False)

    special = {"bos_token_id": 0, "pad_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 2}
    model = {
        "architectures": [architecture], "model_type": {"mbart50": "mbart", "fsmt": "fsmt"}.get(kind, "m2m_100"),
        "d_model": cfg.d_model, "encoder_layers": cfg.enc_layers, "decoder_layers": cfg.dec_layers,
        "encoder_attention_heads": cfg.num_heads, "decoder_attention_heads": cfg.num_heads,
        "encoder_ffn_dim": cfg.ffn_dim, "decoder_ffn_dim": cfg.ffn_dim,
        "activation_function": HF_ACTIVATIONS[cfg.activation], "scale_embedding": bool(cfg.scale_embeddings),
        "max_position_embeddings": cfg.max_len, "tie_word_embeddings": bool(cfg.tie_output),
        "dropout": cfg.dropout, "attention_dropout": cfg.attention_dropout,
        "activation_dropout": cfg.activation_dropout, "is_encoder_decoder": True, **special,
    }
    if kind == "fsmt":
        model.update(langs=[settings["src"]["lang"], settings["tgt"]["lang"]], src_vocab_size=len(rows["src"]),
                     tgt_vocab_size=len(rows["tgt"]))
    else:
        model["vocab_size"] = len(rows["tgt"])
    if kind == "mbart50":
        model["tokenizer_class"] = "MBart50Tokenizer"  # where AutoTokenizer looks without a tokenizer_config.json
    # as jaxnat's search: never <s> or <pad>; </s> at the length limit
    generation = {**special, "bad_words_ids": [[rows["tgt"].index(BOS_ID)], [rows["tgt"].index(PAD_ID)]],
                  "forced_eos_token_id": 2, "num_beams": config.eval.beam_size, "max_length": cfg.max_len}
    if "tgt_lang" in languages:
        generation["forced_bos_token_id"] = rows["tgt"].index(tok.language_id(config.data.tgt_lang_token, "tgt"))
    for name, content in (("config.json", model), ("generation_config.json", generation)):
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            json.dump(content, f, indent=2, sort_keys=True)
