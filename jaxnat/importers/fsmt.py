"""fairseq's WMT19 Transformers as Hugging Face ports them (Ng et al. 2019, "Facebook FAIR's WMT19 News Translation
Task Submission"; `facebook/wmt19-en-de`, `-de-en`, `-en-ru`, `-ru-en` and the models ported the same way):
`FSMTForConditionalGeneration` directories with `config.json`, the weights (`model.safetensors`, else
`pytorch_model.bin`), FSMTTokenizer's `vocab-src.json`, `vocab-tgt.json` and `merges.txt`, and
`tokenizer_config.json` where there is one. docs/import.md.

The model is fairseq's `transformer` under the state dict's names led by `model.`, so `fairseq.convert` reads it:
post-norm stacks, sinusoidal positions from 2 (the tables the file holds are fairseq's, which jaxnat computes), a
vocabulary and an embedding per side, the decoder's own output projection (or, with `tie_word_embeddings`, one
table for all three). What differs is the text pipeline, FSMTTokenizer's: Moses's punctuation normalisation (with
its replacement of Unicode punctuation and removal of control characters: sacremoses's `MosesPunctNormalizer`
options), Moses tokens with aggressive dash splits and escaping, and BPE with `</w>` ending a word's last piece.
Its vocabularies write a piece as `piece</w>` where it ends a word and bare where it does not; jaxnat's BPE
vocabularies are subword-nmt's (`piece@@` where a piece continues), so each is rewritten (`piece</w>` → `piece`,
`piece` → `piece@@`) and merges.txt becomes subword-nmt's codes (`fairseq.merge_codes`), which segment as
FSMTTokenizer does.
"""

from __future__ import annotations

import os

from jaxnat.errors import DataError
from jaxnat.importers import fairseq, hf_fairseq
from jaxnat.importers.hf_files import read_ids
from jaxnat.importers.imported import Imported
from jaxnat.importers.torch_layers import FROM_HF_ACTIVATIONS

FILES = ("config.json", "vocab-src.json", "vocab-tgt.json", "merges.txt")
# the tokenizer's files an import keeps for an export back (`hf_fairseq.keep_tokenizer_files`)
TOKENIZER_FILES = ("vocab-src.json", "vocab-tgt.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json")
WORD_END = "</w>"
DEFAULTS = {"scale_embedding": True, "tie_word_embeddings": False, "activation_function": "relu",
            "max_position_embeddings": 1024}  # FSMTConfig's, where config.json is silent


def _vocabulary(at: str, rows: int) -> list[str]:
    """vocab-<side>.json's pieces in id order, in subword-nmt's convention; fairseq's specials first."""
    ids = read_ids(at)
    if sorted(ids.values()) != list(range(len(ids))):
        raise DataError(f"{at}: not a map of pieces to the ids 0 .. {len(ids) - 1}, each once")
    tokens = sorted(ids, key=ids.get)
    if tuple(tokens[:4]) != fairseq.SPECIALS:
        raise DataError(f"{at}: ids 0..3 are {tokens[:4]}, not fairseq's {list(fairseq.SPECIALS)}")
    if len(tokens) != rows:
        raise DataError(f"{at} holds {len(tokens)} pieces, the model's embedding {rows} rows: not this model's "
                        f"vocabulary")
    return tokens[:4] + [p[:-len(WORD_END)] if p.endswith(WORD_END) else p + "@@" for p in tokens[4:]]


def _check_positions(tensors: dict, cfg: dict, where: str) -> None:
    """The position tables the file holds (FSMT's `SinusoidalPositionalEmbedding`, which the model reads as they
    are) must be fairseq's sinusoids from row 2, which jaxnat computes (`model.position_offset` 2): a one-line
    DataError where a row it reads is not."""
    import numpy as np

    from jaxnat.models.transformer import sinusoidal_positions

    for stack in ("encoder", "decoder"):
        name = f"model.{stack}.embed_positions.weight"
        if name not in tensors:
            continue
        table = np.asarray(tensors[name], np.float32)[2: 2 + cfg["max_position_embeddings"]]
        ours = np.asarray(sinusoidal_positions(table.shape[0], table.shape[1], 2, "fairseq"))
        if table.shape != ours.shape or not np.allclose(table, ours, atol=1e-4):
            raise DataError(f"{where}: {name} is not fairseq's sinusoidal table (positions from 2), which jaxnat "
                            f"computes")


def read(directory: str) -> Imported:
    port = hf_fairseq.open_port(directory, "fsmt", "fsmt", FILES, DEFAULTS)
    cfg, tensors, where = port.cfg, port.state.tensors, port.state.where
    langs = cfg.get("langs")
    if not (isinstance(langs, list) and len(langs) == 2 and all(isinstance(x, str) and x for x in langs)
            and langs[0] != langs[1]):
        raise DataError(f"{port.at('config.json')}: langs {langs!r} is not [source language, target language]")
    _check_positions(tensors, cfg, where)
    # fairseq's names; the sinusoidal tables, which jaxnat computes, left out
    state = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")
             and not k.endswith("embed_positions.weight")}
    unknown = sorted(k for k in tensors if not k.startswith("model."))
    if unknown:
        raise DataError(f"{where}: parameters jaxnat's model would not use: {', '.join(unknown[:3])}")
    tie = bool(cfg["tie_word_embeddings"])
    activation = FROM_HF_ACTIVATIONS.get(cfg["activation_function"], cfg["activation_function"])
    model = {
        "_name": "transformer", "encoder_embed_dim": cfg["d_model"], "decoder_embed_dim": cfg["d_model"],
        "encoder_ffn_embed_dim": cfg["encoder_ffn_dim"], "decoder_ffn_embed_dim": cfg["decoder_ffn_dim"],
        "encoder_attention_heads": cfg["encoder_attention_heads"],
        "decoder_attention_heads": cfg["decoder_attention_heads"], "encoder_layers": cfg["encoder_layers"],
        "decoder_layers": cfg["decoder_layers"], "share_all_embeddings": tie, "share_decoder_input_output_embed": tie,
        "no_scale_embedding": not cfg["scale_embedding"],
        "activation_fn": {"gelu_tanh": "gelu_fast"}.get(activation, activation),
        "max_source_positions": cfg["max_position_embeddings"], "max_target_positions": cfg["max_position_embeddings"],
        "dropout": cfg.get("dropout", 0.1), "attention_dropout": cfg.get("attention_dropout", 0.0),
        "activation_dropout": cfg.get("activation_dropout", 0.0)}
    if tie:  # one table, which save_pretrained keeps once (the decoder's)
        for name, other in (("encoder", "decoder"), ("decoder", "encoder")):
            if f"{name}.embed_tokens.weight" not in state and f"{other}.embed_tokens.weight" in state:
                state[f"{name}.embed_tokens.weight"] = state[f"{other}.embed_tokens.weight"]
    files = {side: os.path.join(directory, f"vocab-{side}.json") for side in ("src", "tgt")}
    sides = dict(zip(langs, ("src", "tgt")))

    def dictionary(lang: str, rows: int) -> list[str]:
        return _vocabulary(files[sides[lang]], rows)

    def segmenter(_cfg, _task) -> tuple[dict, dict]:
        with open(os.path.join(directory, "merges.txt"), "rb") as f:
            codes = fairseq.merge_codes(f.read(), os.path.join(directory, "merges.txt"), counted=False)
        return ({"segmenter": "bpe", "codes": "bpecodes", "dash_splits": True, "escape": True, "normalize": True,
                 "lowercase": bool(port.tok_cfg.get("do_lower_case", False)),
                 "src": {"lang": langs[0]}, "tgt": {"lang": langs[1]}}, {"bpecodes": codes})

    ckpt = {"model": state, "cfg": {"model": model, "task": {"source_lang": langs[0], "target_lang": langs[1]}}}
    imported = fairseq.convert(ckpt, where, dictionary, segmenter)
    kept, kept_settings = hf_fairseq.keep_tokenizer_files(directory, TOKENIZER_FILES, "fsmt")
    imported.files.update(kept)
    imported.settings.update(kept_settings)
    imported.about = {"format": "fsmt", "architecture": "FSMTForConditionalGeneration", "family": "ar"}
    return imported
