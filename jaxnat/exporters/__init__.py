"""`--mode export`: a workdir's model written for another inference engine (docs/import.md, "Exporting").

One module per target format: `ctranslate2` (the AR Transformer as a CTranslate2 model). `export` reads the
workdir as every decoding mode does (`jaxnat.restore.load_translator`: the parameters `eval.params` names, the
best validation's by default), builds the target's model from its parameters and conventions, and writes it with
the files that cut text into its pieces and a README.md saying how to run it into a fresh directory it renames into
place at the end, so that a failed export leaves nothing behind.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile

from jaxnat.errors import ConfigError

log = logging.getLogger("jaxnat")

FORMATS = ("ctranslate2",)
EXPORTED_FAMILY = "ar"  # the family whose model the formats hold: the encoder-decoder Transformer


def parse_target(spec: str) -> tuple[str, str]:
    """"ctranslate2:DIR" -> (format, DIR); a one-line ConfigError otherwise."""
    kind, _, path = spec.partition(":")
    if kind not in FORMATS or not path:
        raise ConfigError(f"--to takes {' or '.join(f'{k}:DIR' for k in FORMATS)}, got {spec!r}")
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
             "escape": settings.get("escape", True), "dash_splits": settings.get("dash_splits", True)})


def _usage(how: dict, config, cfg, suppressed: list[str], languages: tuple[str, ...]) -> str:
    """README.md of an exported CTranslate2 model: Python that cuts sentences into its pieces, translates them with
    the options that make CTranslate2's search jaxnat's (tests/test_import.py runs it) and joins the pieces."""
    from jaxnat.exporters import ctranslate2

    if how["segmenter"] == "spm":
        cut = ('import sentencepiece as spm\n'
               'source, target = (spm.SentencePieceProcessor(model_file=f"{model}/{s}.spm") for s in ("source", '
               '"target"))\n'
               'def cut(text): return source.encode(text, out_type=str)\n'
               'def join(pieces): return target.decode_pieces(pieces).replace("\\u2581", " ").strip()\n')
    else:
        cut = ('from sacremoses import MosesDetokenizer, MosesTokenizer\n'
               'from subword_nmt.apply_bpe import BPE\n'
               f'moses = MosesTokenizer(lang="{how["src_lang"]}")\n'
               f'demoses = MosesDetokenizer(lang="{how["tgt_lang"]}")\n'
               'bpe = BPE(open(f"{model}/bpecodes", encoding="utf-8"))\n'
               'def cut(text):\n'
               f'    words = moses.tokenize(text, aggressive_dash_splits={how["dash_splits"]}, escape={how["escape"]}, '
               'return_str=True)\n'
               '    return bpe.process_line(words).split()\n'
               'def join(pieces): return demoses.detokenize((" ".join(pieces) + " ").replace("@@ ", "").split())\n')
    extra = 1 + bool(cfg.source_bos)  # what jaxnat's length limit counts besides the pieces: EOS, and BOS
    if languages:
        src_lang = config.data.src_lang_token or languages[0]
        tgt_lang = config.data.tgt_lang_token or languages[0]
        head = f'src_lang, tgt_lang = "{src_lang}", "{tgt_lang}"  # any of its language tokens\n'
        batch, prefix, out = ("[[src_lang] + cut(t) for t in texts]", "target_prefix=[[tgt_lang]] * len(batch), ",
                              "pieces[1:]")
    else:
        head, batch, prefix, out = "", "[cut(t) for t in texts]", "", "pieces"
    return f"""# A jaxnat model exported for CTranslate2

Written by `python -m jaxnat.main --mode export` from a jaxnat workdir (`jaxnat_export.json` says which, its
checkpoint and the commit). CTranslate2 translates pieces; the files beside the model cut text into them and join
them back. With these options its search is jaxnat's (`eval.beam_size`, `eval.length_penalty`, `eval.max_len_a`
and `eval.max_len_b` as the workdir's config sets them; jaxnat's length limit is per sentence, CTranslate2's per
batch, here the longest source's):

```python
import ctranslate2
model = "."  # this directory
{cut}{head}translator = ctranslate2.Translator(model, device="cpu")
never = {suppressed!r}  # tokens jaxnat's search never emits

def translate_pieces(texts, beam_size={config.eval.beam_size}):
    batch = {batch}
    longest = max(map(len, batch)) + {extra}  # a source's pieces and its {'BOS and ' if cfg.source_bos else ''}EOS
    results = translator.translate_batch(
        batch, {prefix}beam_size=beam_size, patience=2, length_penalty={config.eval.length_penalty},
        min_decoding_length=0, max_decoding_length=int({config.eval.max_len_a} * longest + {config.eval.max_len_b}),
        suppress_sequences=[[t] for t in never])
    return [r.hypotheses[0] for r in results]

def translate(texts, beam_size={config.eval.beam_size}):
    return [join({out}) for pieces in translate_pieces(texts, beam_size)]

print(translate(["a sentence to translate"]))
```

`translator.score_batch(sources, targets)` gives each piece's log-probability, as `--mode score` with
`eval.token_scores=true` does; `translate_batch`'s scores are over the tokens it may emit (`suppress_sequences`
left out). The model adds the source's {'BOS and ' if cfg.source_bos else ''}EOS itself and starts the decoder from
`{ctranslate2.START_TOKENS[cfg.decoder_start]}`.
"""


def export(config, workdir: str, target: str, quantization: str = "float32") -> str:
    """--mode export: writes ``workdir``'s model (as ``config`` reads it) to ``target`` ("ctranslate2:DIR", a
    directory that must not exist). Returns a one-line summary."""
    import jax
    import numpy as np

    from jaxnat.exporters import ctranslate2
    from jaxnat.models.transformer import unstack_layers
    from jaxnat.optional import require
    from jaxnat.provenance import commit
    from jaxnat.restore import load_translator

    _, directory = parse_target(target)
    if os.path.exists(directory):
        raise ConfigError(f"--to {target}: {directory} exists; an export writes a new directory")
    if config.model.name != EXPORTED_FAMILY:
        raise ConfigError(f"--mode export writes the autoregressive Transformer (model.name {EXPORTED_FAMILY}); "
                          f"{workdir} holds a {config.model.name} model, which CTranslate2 does not run")
    if config.eval.ensemble:
        raise ConfigError("--mode export writes one model; eval.ensemble names others (export each on its own and "
                          "pass CTranslate2 their directories)")
    require("ctranslate2", "--mode export --to ctranslate2:DIR")
    translator = load_translator(config, workdir)
    cfg, tok = translator.spec.cfg, translator.tokenizer
    params = jax.tree.map(np.asarray, translator.params["params"])
    bound = translator.spec.module.bind({"params": params})
    positions = {"src": np.asarray(bound.src_embed.position_table()),
                 "tgt": np.asarray(bound.tgt_embed.position_table())}
    params = unstack_layers(params) if cfg.scan_layers else params
    pieces = {side: [tok.id_to_piece(i, side) for i in range(tok.vocab_size(side))] for side in ("src", "tgt")}
    spec = ctranslate2.model_spec(cfg, params, positions, pieces, cfg.absent_tokens)
    if cfg.full_context_alignment:
        log.warning("model.full_context_alignment: CTranslate2's return_attention will be the attention of the "
                    "causal pass, not the alignment jaxnat reads from a pass without the causal mask")

    files, how = _tokenizer_files(workdir)
    parent = os.path.dirname(os.path.abspath(directory))
    os.makedirs(parent, exist_ok=True)
    unique = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(os.path.abspath(directory))}.export-")
    staging = os.path.join(unique, "model")
    try:
        ctranslate2.write(spec, staging, quantization)
        for name, path in files.items():
            shutil.copyfile(path, os.path.join(staging, name))
        with open(os.path.join(staging, "README.md"), "w", encoding="utf-8") as f:
            f.write(_usage(how, config, cfg, [tok.id_to_piece(i, "tgt") for i in ctranslate2.SUPPRESSED],
                           tuple(getattr(tok, "languages", ()))))
        about = {"format": "ctranslate2", "quantization": quantization, "workdir": os.path.abspath(workdir),
                 "checkpoint": translator.checkpoint, "commit": commit(), "tokenizer": how,
                 "src_lang_token": config.data.src_lang_token, "tgt_lang_token": config.data.tgt_lang_token}
        with open(os.path.join(staging, "jaxnat_export.json"), "w", encoding="utf-8") as f:
            json.dump(about, f, indent=2, sort_keys=True, default=str)
        os.replace(staging, directory)
    finally:
        shutil.rmtree(unique, ignore_errors=True)
    n = sum(x.size for x in jax.tree_util.tree_leaves(params))
    return f"exported {workdir} ({n:,} parameters, {quantization}) as a CTranslate2 model into {directory}"
