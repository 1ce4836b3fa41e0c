"""fairseq's multilingual Transformers as Hugging Face ports them: `M2M100ForConditionalGeneration` (NLLB-200,
nllb.py; M2M-100, m2m100.py) and `MBartForConditionalGeneration` (mBART-50, mbart50.py). What these formats share,
read as data; each format's module says what differs (positions, the tokenizer's files). fsmt.py (fairseq's WMT19
models) opens its directory and keeps its tokenizer's files with the same functions (`open_port`,
`keep_tokenizer_files`).

Both are fairseq's pre-norm Transformer (a final layer norm after each stack, one embedding shared by the encoder,
the decoder and the output) under fairseq's parameter names led by `model.`, with a fairseq dictionary: `<s>` 0,
`<pad>` 1, `</s>` 2, `<unk>` 3, the SentencePiece pieces, one token per language ("eng_Latn", "en_XX"), `<mask>`;
rows of the embedding past the tokenizer's last id (NLLB's tables have two) are fairseq's padding words
`madeupword0000`, …. Conventions bridged: the four specials become jaxnat's BOS, PAD, EOS, UNK rows and the other
pieces follow jaxnat's six reserved ids in the model's order; PLH and MASK, which the model lacks, are never predicted
(model.absent_tokens). A source reads `[source-language token] pieces </s>`; the decoder starts from `</s>` and its
first token is forced to the target language's (the `forced_bos_token_id` of Hugging Face's generate; jaxnat:
data.src_lang_token / data.tgt_lang_token, `Translator.language_tokens`). Language tokens and `<mask>` are never
written out. `sentencepiece.bpe.model` cuts text; the pieces' ids are the model's (from tokenizer.json, vocab.json
or the format's convention).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from jaxnat.errors import DataError
from jaxnat.importers.imported import Imported, remap_rows
from jaxnat.importers.fairseq import SPECIALS, jaxnat_pieces, row_order
from jaxnat.importers.hf_files import read_config, read_json, weights
from jaxnat.importers.torch_layers import FROM_HF_ACTIVATIONS, StateDict, norm, stacks

SPM = "sentencepiece.bpe.model"
# the files of a directory's tokenizer an import keeps in the workdir's vocab/ (`keep_tokenizer_files`)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json")
KEPT = "hf-"


def keep_tokenizer_files(directory: str, names: tuple[str, ...], kind: str) -> tuple[dict, dict]:
    """({KEPT + name: bytes} of those of the tokenizer files ``names`` that ``directory`` holds, the vocabulary
    settings' entry that lists them): kept in the workdir's vocab/ under those names (beside jaxnat's own
    tokenizer.json), so that `--mode export --to KIND:DIR` (jaxnat.exporters.hf_fairseq) writes the original's
    tokenizer back; a vocabulary does not change after an import."""
    kept, files = [], {}
    for name in names:
        if os.path.isfile(os.path.join(directory, name)):
            with open(os.path.join(directory, name), "rb") as f:
                files[KEPT + name] = f.read()
            kept.append(name)
    return files, {"hugging_face": {"format": kind, "files": kept}}


@dataclasses.dataclass
class Port:
    """A model directory's files as read: config.json (``cfg``, over the model class's defaults),
    tokenizer_config.json (``tok_cfg``; {} where there is none) and the weights (``state``)."""

    directory: str
    cfg: dict
    tok_cfg: dict
    state: StateDict

    def at(self, name: str) -> str:
        return os.path.join(self.directory, name)


def open_port(directory: str, kind: str, model_type: str, files: tuple[str, ...], defaults: dict) -> Port:
    """Checks what every port needs (``files`` present, config.json's ``model_type``, encoder and decoder of one
    shape, fairseq's special ids) and reads the directory; ``kind`` names the format in messages ("nllb")."""
    if not os.path.isdir(directory):
        raise DataError(f"{directory}: {kind}:DIR names a directory (save_pretrained's, with {', '.join(files)})")
    for name in files:
        if not os.path.isfile(os.path.join(directory, name)):
            raise DataError(f"{directory}: no {name} ({kind}:DIR's directory holds {', '.join(files)})")
    cfg_at = os.path.join(directory, "config.json")
    cfg = {**defaults, **read_config(cfg_at)}
    if cfg.get("model_type") != model_type:
        raise DataError(f"{cfg_at}: model_type {cfg.get('model_type')!r}, not {model_type!r} ({kind}'s)")
    if cfg.get("encoder_ffn_dim") != cfg.get("decoder_ffn_dim") or (
            cfg["encoder_attention_heads"] != cfg["decoder_attention_heads"]):
        raise DataError(f"{cfg_at}: encoder and decoder of different shapes are not supported")
    ids = (cfg.get("pad_token_id", 1), cfg.get("eos_token_id", 2), cfg.get("decoder_start_token_id", 2))
    if ids != (1, 2, 2):
        raise DataError(f"{cfg_at}: pad, eos and decoder start ids {', '.join(map(str, ids))} are not fairseq's "
                        f"(1, 2, 2)")
    tok_cfg_at = os.path.join(directory, "tokenizer_config.json")
    tok_cfg = read_json(tok_cfg_at) if os.path.isfile(tok_cfg_at) else {}
    tensors, where = weights(directory)
    return Port(directory, cfg, tok_cfg, StateDict(tensors, where))


def shared_embedding(port: Port) -> np.ndarray:
    """model.shared.weight: [rows, D], the one table the encoder, the decoder and the output read."""
    shared = port.state.take("model.shared.weight")
    for name in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"):
        if port.state.has(name) and not np.array_equal(port.state.take(name), shared):
            raise DataError(f"{port.state.where}: {name} differs from model.shared.weight (untied embeddings are not "
                            f"supported)")
    return shared


def tokenizer_json_vocabulary(at: str, rows: int) -> tuple[list[str], list[str]]:
    """(tokens by the model's id, the language tokens) from a tokenizer.json: its model's vocabulary (a map for BPE,
    a list for Unigram) and its added tokens, of which the special ones but fairseq's and `<mask>` are languages."""
    tokenizer = read_json(at)
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
    languages = [t["content"] for t in added if t.get("special") and t["content"] not in SPECIALS + ("<mask>",)]
    if not languages:
        raise DataError(f"{at}: no language tokens among its special tokens (not a multilingual model's tokenizer)")
    return padded([by_id[i] for i in range(n)], rows, at), languages


def padded(tokens: list[str], rows: int, at: str) -> list[str]:
    """A dictionary of ``tokens`` for an embedding of ``rows`` rows: fairseq's four specials first, the rows past
    its last id named as fairseq's padding words."""
    if tuple(tokens[:4]) != SPECIALS:
        raise DataError(f"{at}: ids 0..3 are {tokens[:4]}, not fairseq's {list(SPECIALS)}")
    if rows < len(tokens):
        raise DataError(f"{at} holds {len(tokens)} tokens, the model's embedding {rows} rows: not this model's "
                        f"vocabulary")
    return tokens + [f"madeupword{i:04d}" for i in range(rows - len(tokens))]


def transformer(port: Port, shared: np.ndarray, vocabulary: list[str]) -> dict:
    """The parameters every port holds alike: the layers, the stacks' final norms, the shared embedding (rows in
    jaxnat's id order)."""
    cfg = port.cfg
    params = stacks(port.state, "model.encoder.layers", "model.decoder.layers",
                    (cfg["encoder_layers"], cfg["decoder_layers"]),
                    (cfg["encoder_attention_heads"], cfg["decoder_attention_heads"]))
    params["encoder"]["final_norm"] = norm(port.state, "model.encoder.layer_norm")
    params["decoder"]["final_norm"] = norm(port.state, "model.decoder.layer_norm")
    params["src_embed"] = {"tokens": {"embedding": remap_rows(shared, row_order(len(vocabulary)))}}
    return params


def imported(port: Port, params: dict, vocabulary: list[str], languages: list[str], overrides: dict,
             about: dict, ignore: tuple[str, ...] = ()) -> Imported:
    """The Imported of a port whose every parameter (but those ending in ``ignore``) ``params`` holds; ``overrides``:
    the format's own conventions (positions) over those all share."""
    unused = port.state.unused(ignore=ignore)
    if unused:
        raise DataError(f"{port.state.where}: parameters jaxnat's model would not use: {', '.join(unused[:3])}")
    from jaxnat.data.pieces import sentencepiece_bytes

    cfg = port.cfg
    kept, kept_settings = keep_tokenizer_files(port.directory, TOKENIZER_FILES, about["format"])
    files = {SPM: sentencepiece_bytes(port.at(SPM)), **kept}
    settings = {"segmenter": "spm", "joint": True, "languages": languages, "specials": [*languages, "<mask>"],
                "src": {"spm": SPM}, "tgt": {"spm": SPM}, **kept_settings}
    pieces = jaxnat_pieces(vocabulary)
    default = {side: port.tok_cfg.get(key) if port.tok_cfg.get(key) in languages else ""
               for side, key in (("src", "src_lang"), ("tgt", "tgt_lang"))}
    max_len = cfg.get("max_position_embeddings", 1024)
    activation = cfg.get("activation_function", "relu")
    return Imported({
        "model.name": "ar", "model.d_model": cfg["d_model"], "model.ffn_dim": cfg["encoder_ffn_dim"],
        "model.num_heads": cfg["encoder_attention_heads"], "model.enc_layers": cfg["encoder_layers"],
        "model.dec_layers": cfg["decoder_layers"], "model.pre_norm": True, "model.decoder_norm": "pre",
        "model.decoder_final_norm": True, "model.max_len": max_len, "model.share_embeddings": True,
        "model.tie_output": True, "model.scale_embeddings": bool(cfg["scale_embedding"]), "model.ln_eps": 1e-5,
        "model.activation": FROM_HF_ACTIVATIONS.get(activation, activation),
        "model.decoder_start": "eos", "model.source_bos": False, "model.absent_tokens": "plh,mask",
        "model.dropout": float(cfg.get("dropout", 0.1)),
        "model.attention_dropout": float(cfg.get("attention_dropout", 0.0)),
        "model.activation_dropout": float(cfg.get("activation_dropout", 0.0)),
        "data.joint_vocab": True, "data.vocab_size": len(pieces), "data.max_len": min(max_len, 256),
        "data.src_lang_token": default["src"], "data.tgt_lang_token": default["tgt"],
        "eval.beam_size": 4, "eval.max_len_a": 1.2, "eval.max_len_b": 10, **overrides,
    }, params, settings, {"src": pieces, "tgt": pieces}, files, {**about, "languages": len(languages)})
