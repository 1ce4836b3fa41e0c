"""`--mode export`: a workdir's model written for another inference engine (docs/import.md, "Exporting").

One module per target format: `ctranslate2` (the AR Transformer as a CTranslate2 model), `marian` (one of
Marian's conventions as Hugging Face's MarianMTModel), `marian_npz` (Marian's own function as Marian's `.npz`),
`hf_fairseq` (an NLLB-200, M2M-100, mBART-50 or FSMT import as Hugging Face's class of it) and `fairseq` (fairseq's
conventions as its own checkpoint). `export` reads
the workdir as every decoding mode does (`jaxnat.restore.load_translator`: the parameters `eval.params` names, the
best validation's by default), builds the target's model from its parameters and conventions, and writes it with
the files that cut text into its pieces into a fresh directory it renames into place at the end, so that a failed
export leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from jaxnat.errors import ConfigError

# hf: the Hugging Face format the model came from
FORMATS = ("ctranslate2", "marian", "marian-npz", "nllb", "m2m100", "mbart50", "fsmt", "fairseq", "hf")
NAMES = {"ctranslate2": "CTranslate2", "marian": "Hugging Face MarianMTModel", "marian-npz": "Marian .npz",
         "nllb": "Hugging Face M2M100ForConditionalGeneration (NLLB)",
         "m2m100": "Hugging Face M2M100ForConditionalGeneration (M2M-100)",
         "mbart50": "Hugging Face MBartForConditionalGeneration (mBART-50)",
         "fsmt": "Hugging Face FSMTForConditionalGeneration (fairseq's WMT19)",
         "fairseq": "fairseq checkpoint"}
EXPORTED_FAMILY = "ar"  # the family whose model every format holds: the encoder-decoder Transformer


def _families(kind: str) -> tuple[str, ...]:
    """The model families (model.name) format ``kind`` holds: fairseq's `fairseq.FAMILIES`, the others'
    `EXPORTED_FAMILY`."""
    from jaxnat.exporters import fairseq

    return fairseq.FAMILIES if kind == "fairseq" else (EXPORTED_FAMILY,)


def parse_target(spec: str) -> tuple[str, str]:
    """"FORMAT:DIR" (FORMATS) -> (format, DIR); a one-line ConfigError otherwise."""
    kind, _, path = spec.partition(":")
    if kind not in FORMATS or not path:
        raise ConfigError(f"--to takes {', '.join(f'{k}:DIR' for k in FORMATS[:-1])} or {FORMATS[-1]}:DIR, got "
                          f"{spec!r}")
    return kind, path


def _tokenizer_files(workdir: str) -> tuple[dict[str, str], dict]:
    """({name in the export: path} of the files that cut the workdir's text into pieces and join them back, and
    how: {"segmenter": "spm" | "bpe", ...}). SentencePiece models become source.spm and target.spm (the layout
    CTranslate2's OPUS-MT models ship); subword-nmt codes become bpecodes, with the Moses settings."""
    from jaxnat.data import piece_vocab
    from jaxnat.data.tokenizer import Tokenizer

    if not piece_vocab.exists(workdir):
        paths = Tokenizer.model_paths(workdir)
        joint = os.path.isfile(paths["joint"])
        return ({"source.spm": paths["joint" if joint else "src"], "target.spm": paths["joint" if joint else "tgt"]},
                {"segmenter": "spm"})
    with open(piece_vocab.settings_path(workdir), encoding="utf-8") as f:
        settings = json.load(f)
    at = os.path.dirname(piece_vocab.settings_path(workdir))
    if settings["segmenter"] == "spm":
        return ({"source.spm": os.path.join(at, settings["src"]["spm"]),
                 "target.spm": os.path.join(at, settings["tgt"]["spm"])},
                {"segmenter": "spm", "language_codes": bool(settings.get("language_codes"))})
    return ({"bpecodes": os.path.join(at, settings["codes"])},
            {"segmenter": "bpe", "src_lang": settings["src"]["lang"], "tgt_lang": settings["tgt"]["lang"],
             "escape": settings.get("escape", True), "dash_splits": settings.get("dash_splits", True),
             "lowercase": settings.get("lowercase", False), "normalize": settings.get("normalize", False)})


def _hugging_face_format(workdir: str) -> str:
    """The format `--to hf:DIR` writes: the one the workdir's vocabulary was imported from (NLLB, M2M-100, mBART-50,
    FSMT), else Marian's (whose conventions `marian.check` then holds the model to)."""
    from jaxnat.data import piece_vocab

    if not piece_vocab.exists(workdir):
        return "marian"
    with open(piece_vocab.settings_path(workdir), encoding="utf-8") as f:
        return json.load(f).get("hugging_face", {}).get("format", "marian")


def export(config, workdir: str, target: str, quantization: str = "float32") -> str:
    """--mode export: writes ``workdir``'s model (as ``config`` reads it) to ``target`` ("FORMAT:DIR", a directory
    that must not exist). Returns a one-line summary."""
    import jax

    from jaxnat.exporters import ctranslate2, fairseq, hf_fairseq, marian, marian_npz
    from jaxnat.optional import require
    from jaxnat.provenance import commit
    from jaxnat.restore import load_translator

    kind, directory = parse_target(target)
    if kind == "hf":
        kind = _hugging_face_format(workdir)
    if os.path.exists(directory):
        raise ConfigError(f"--to {target}: {directory} exists; an export writes a new directory")
    if config.model.name not in _families(kind):
        writes = ("the autoregressive Transformer" if _families(kind) == (EXPORTED_FAMILY,) else
                  "these models") + f" (model.name {', '.join(_families(kind))})"
        raise ConfigError(f"--mode export --to {kind}:DIR writes {writes}; {workdir} holds a {config.model.name} "
                          f"model, which {NAMES[kind]} does not run")
    if config.eval.ensemble:
        raise ConfigError("--mode export writes one model; eval.ensemble names others (export each on its own)")
    if config.model.decoder_autoreg != "self_attention" and kind != "marian-npz":
        layers = {"ssru": "Marian's SSRU", "aan": "Marian's average attention"}[config.model.decoder_autoreg]
        raise ConfigError(f"{workdir}'s decoder layers are {layers} (model.decoder_autoreg="
                          f"{config.model.decoder_autoreg}), which {NAMES[kind]} does not compute: its decoders "
                          f"attend to the tokens before")
    if kind == "ctranslate2":
        require("ctranslate2", "--mode export --to ctranslate2:DIR")
    elif quantization != "float32":
        raise ConfigError(f"--quantization is CTranslate2's; --to {kind}:DIR writes float32 weights")
    translator = load_translator(config, workdir)
    files, how = _tokenizer_files(workdir)
    parent = os.path.dirname(os.path.abspath(directory))
    os.makedirs(parent, exist_ok=True)
    unique = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(os.path.abspath(directory))}.export-")
    staging = os.path.join(unique, "model")
    try:
        if kind == "ctranslate2":
            ctranslate2.export(translator, config, staging, quantization, files, how)
        elif kind == "marian":
            marian.write(translator, config, staging, files, how)
        elif kind == "marian-npz":
            marian_npz.write(translator, config, staging, files, how)
        elif kind == "fairseq":
            fairseq.write(translator, config, staging, files, how, (translator.checkpoint or {}).get("step", 0))
        else:
            hf_fairseq.write(translator, config, kind, workdir, staging)
        about = {"format": kind, "quantization": quantization, "workdir": os.path.abspath(workdir),
                 "checkpoint": translator.checkpoint, "commit": commit(), "tokenizer": how,
                 "src_lang_token": config.data.src_lang_token, "tgt_lang_token": config.data.tgt_lang_token}
        with open(os.path.join(staging, "jaxnat_export.json"), "w", encoding="utf-8") as f:
            json.dump(about, f, indent=2, sort_keys=True, default=str)
        os.replace(staging, directory)
    finally:
        shutil.rmtree(unique, ignore_errors=True)
    n = sum(x.size for x in jax.tree_util.tree_leaves(translator.params))
    return f"exported {workdir} ({n:,} parameters, {quantization}) as a {NAMES[kind]} model into {directory}"
