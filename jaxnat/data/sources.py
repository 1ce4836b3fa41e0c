"""Loads the corpus a config asks for: synthetic, local text files, or a TFDS dataset.

Config fields (`config.data`): `source` ('synthetic' | 'text' | 'tfds'), `dir`, `src_lang`, `tgt_lang`,
`train_split`, `valid_split`, `test_splits` (comma-separated), `synthetic_seed`, `synthetic_train`,
`synthetic_valid`, `synthetic_test`, `tfds_name`, `tfds_data_dir`, `init_lang`.

* synthetic: `jaxnat.data.synthetic.generate_corpus`; the test split is called 'test'.
* text: `{dir}/{split}.{lang}[.gz]`. A test split whose target file is missing is loaded with target None
  (translate only); train and valid need both sides.
* tfds: with `dir` set, the text files of `dir` are first turned into the ArrayRecord dataset `tfds_name` in
  `tfds_data_dir` (reused if already built from the same files); without `dir`, `tfds_name` must already be
  prepared there (e.g. `wmt14_translate/de-en`, see `jaxnat.data.tfds_builder`).

`init_lang` (text source only) names a third, optional side: initial hypotheses y⁰ to refine, e.g. MT output
for post-editing (LevT §5); `load_inits` reads them.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from jaxnat.errors import ConfigError, DataError

log = logging.getLogger(__name__)

SOURCES = ("synthetic", "text", "tfds")

Corpus = dict[str, tuple[list[str], "list[str] | None"]]

_MISSING = object()


def _get(cfg: Any, key: str, default: Any = _MISSING) -> Any:
    if hasattr(cfg, "get"):  # ConfigDict, dict
        value = cfg.get(key, _MISSING)
    else:
        value = getattr(cfg, key, _MISSING)
    if value is _MISSING:
        if default is _MISSING:
            raise ConfigError(f"config.data.{key} is required")
        return default
    return value


def _str(cfg: Any, key: str, default: Any = _MISSING) -> str:
    value = _get(cfg, key, default)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigError(f"config.data.{key} must be a string, got {value!r}")
    return value.strip()


def _int(cfg: Any, key: str, minimum: int) -> int:
    value = _get(cfg, key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"config.data.{key} must be an integer >= {minimum}, got {value!r}")
    return value


def named_test_splits(data_cfg: Any) -> list[str]:
    """The test splits a config names (for 'synthetic': ['test'])."""
    if _str(data_cfg, "source") == "synthetic":
        return ["test"]
    names = [s.strip() for s in _str(data_cfg, "test_splits", "").split(",")]
    names = [s for s in names if s]
    if len(set(names)) != len(names):
        raise ConfigError(f"config.data.test_splits names a split twice: {_str(data_cfg, 'test_splits')!r}")
    for name in names:
        if name in ("train", "valid"):
            raise ConfigError(f"config.data.test_splits: {name!r} is reserved for the train/valid corpus")
    return names


def _langs(cfg: Any) -> tuple[str, str]:
    src_lang, tgt_lang = _str(cfg, "src_lang"), _str(cfg, "tgt_lang")
    if not src_lang or not tgt_lang or src_lang == tgt_lang:
        raise ConfigError(
            f"config.data.src_lang and tgt_lang must be two different codes, got {src_lang!r} and {tgt_lang!r}"
        )
    return src_lang, tgt_lang


def _load_synthetic(cfg: Any) -> Corpus:
    from jaxnat.data import synthetic  # written separately; imported only when asked for

    sizes = {
        "train": _int(cfg, "synthetic_train", 1),
        "valid": _int(cfg, "synthetic_valid", 1),
        "test": _int(cfg, "synthetic_test", 1),
    }
    variant = synthetic.Variant(kinds=synthetic.parse_kinds(str(cfg.get("synthetic_kinds", ""))),
                                lexicon=float(cfg.get("synthetic_lexicon", 1.0)),
                                multimodal=bool(cfg.get("synthetic_multimodal", True)),
                                synonyms=float(cfg.get("synthetic_synonyms", 0.0)))
    corpus = synthetic.generate_corpus(seed=_int(cfg, "synthetic_seed", 0), sizes=sizes, variant=variant)
    return {k: (list(corpus[k][0]), list(corpus[k][1])) for k in ("train", "valid", "test")}


def _load_text(cfg: Any) -> Corpus:
    from jaxnat.data.text import find_split_file, find_split_files, read_lines, read_parallel

    directory = _data_dir(cfg)
    src_lang, tgt_lang = _langs(cfg)
    out: Corpus = {}
    for key in ("train", "valid"):
        out[key] = read_parallel(*find_split_files(directory, _split(cfg, key), src_lang, tgt_lang))
    for name in named_test_splits(cfg):
        src_path = find_split_file(directory, name, src_lang)
        try:
            tgt_path = find_split_file(directory, name, tgt_lang)
        except DataError:  # no reference: translated only, said now rather than by a table without scores at the end
            log.warning("%s: no %s.%s or %s.%s.gz there: test split %r will be translated, not scored", directory,
                        name, tgt_lang, name, tgt_lang, name)
            out[name] = (read_lines(src_path), None)
        else:
            out[name] = read_parallel(src_path, tgt_path)
    return out


def _load_tfds(cfg: Any) -> Corpus:
    from jaxnat.data import tfds_builder
    from jaxnat.data.text import find_split_files

    name = _str(cfg, "tfds_name", "")
    if not name:
        raise ConfigError("config.data.tfds_name is required when config.data.source is 'tfds'")
    data_dir = _str(cfg, "tfds_data_dir", "") or None
    src_lang, tgt_lang = _langs(cfg)
    splits = {"train": _split(cfg, "train"), "valid": _split(cfg, "valid")}
    splits.update({name_: name_ for name_ in named_test_splits(cfg)})
    if _str(cfg, "dir", ""):
        directory = _data_dir(cfg)
        files = {
            split: find_split_files(directory, split, src_lang, tgt_lang) for split in dict.fromkeys(splits.values())
        }
        tfds_builder.build_parallel_tfds(name, data_dir, files, src_lang, tgt_lang)
    loaded = tfds_builder.load_tfds_splits(name, data_dir, list(dict.fromkeys(splits.values())), src_lang, tgt_lang)
    return {key: loaded[split] for key, split in splits.items()}


def train_origin(data_cfg: Any) -> str:
    """Where the training pairs of ``data_cfg`` are read from, in words (a record and a warning name it)."""
    source, split = _str(data_cfg, "source", ""), _str(data_cfg, "train_split", "")
    if source == "synthetic":
        return f"the synthetic corpus of data.synthetic_seed={_get(data_cfg, 'synthetic_seed', 0)}"
    src_lang, tgt_lang = _langs(data_cfg)
    files = f"{os.path.abspath(os.path.expanduser(_str(data_cfg, 'dir', '')))}/{split}.{{{src_lang},{tgt_lang}}}"
    if source == "tfds":
        return f"TFDS {_str(data_cfg, 'tfds_name', '')} split {split}" + (f" built from {files}"
                                                                         if _str(data_cfg, "dir", "") else "")
    return files


def _data_dir(cfg: Any) -> str:
    directory = os.path.expanduser(_str(cfg, "dir", ""))
    if not directory:
        raise ConfigError(f"config.data.dir is required for data source {_str(cfg, 'source')!r}")
    if not os.path.isdir(directory):
        raise DataError(f"{directory}: data directory not found (config.data.dir)")
    from jaxnat.data.distilled import check_finished

    check_finished(directory)
    return directory


def _split(cfg: Any, key: str) -> str:
    split = _str(cfg, f"{key}_split", "")
    if not split:
        raise ConfigError(f"config.data.{key}_split must name a split")
    return split


def load_inits(data_cfg: Any, corpus: Corpus) -> dict[str, list[str]]:
    """Initial hypotheses y⁰ of the splits of `corpus` that have them: {corpus key: lines}; {} without init_lang.

    With `data.init_lang` set, `{dir}/{split}.{init_lang}[.gz]` holds one target-language hypothesis per line,
    line-aligned with the split's source. Train and valid must have one (their batches carry it); a test split
    may (evaluation then also post-edits from it).

    Raises:
      ConfigError: init_lang is set but the source is not 'text'.
      DataError: the train or valid file is missing (naming its path), or a file is bad or not line-aligned
        with its source (naming both files and counts).
    """
    from jaxnat.data.text import find_split_file, read_aligned

    lang = _str(data_cfg, "init_lang", "")
    if not lang:
        return {}
    source = _str(data_cfg, "source", "")
    if source != "text":
        raise ConfigError(
            f"config.data.init_lang needs data.source=text (the {{split}}.{lang} files are read from data.dir), "
            f"got source {source!r}"
        )
    directory = _data_dir(data_cfg)
    src_lang, _ = _langs(data_cfg)
    out: dict[str, list[str]] = {}
    for key, (src, _) in corpus.items():
        split = _split(data_cfg, key) if key in ("train", "valid") else key
        src_path = find_split_file(directory, split, src_lang)
        try:
            path = find_split_file(directory, split, lang)
        except DataError:
            if key not in ("train", "valid"):
                continue  # a test split without initial hypotheses is only translated from scratch
            raise DataError(
                f"{os.path.join(directory, f'{split}.{lang}')}[.gz]: file not found; data.init_lang={lang!r} needs "
                f"the initial hypotheses of the {key} split, line-aligned with {os.path.basename(src_path)}"
            ) from None
        out[key] = read_aligned(path, src_path, len(src), blank_ok=True)  # an empty y0 is the usual start
    return out


Pairs = list[list[tuple[str, str]]]  # per sentence: its constraint pairs (source phrase, target phrase)


def parse_pairs(line: str, where: str) -> list[tuple[str, str]]:
    """One JSON line of constraint pairs, ``[["source phrase", "target phrase"], ...]`` (``[]``: none)."""
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than json's decoder recurses
        raise DataError(f"{where}: not JSON (expected a list of [source phrase, target phrase] pairs)") from None
    if not isinstance(value, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) and x.strip() for x in p) for p in value):
        raise DataError(f"{where}: expected a list of [source phrase, target phrase] pairs of non-empty strings")
    return [(a, b) for a, b in value]


def load_pairs(data_cfg: Any, corpus: Corpus, trains_on: bool = False) -> dict[str, Pairs]:
    """Constraint pairs of the splits of `corpus` that have them (`python -m jaxnat.data.alignment` writes
    them): {corpus key: pairs per sentence}; {} without `data.pairs_dir`.

    data.pairs_dir="synthetic" draws them from the lexicon of the synthetic corpus (`_synthetic_pairs`). Else
    `{pairs_dir}/{split}.pairs.jsonl` holds one JSON list of [source phrase, target phrase] per line,
    line-aligned with the split. Train and valid must have one; a test split may. Where the alignment's record
    names what a split's pairs were drawn from (`jaxnat.data.alignment.recorded_fingerprints`), they must be the
    split's files as read: the training split's only for a model that ``trains_on`` them (another model reads
    the valid and test splits' pairs alone, so a student of a distilled corpus is scored on the original's).

    Raises:
      DataError: the train or valid file is missing, a line is not a list of pairs, the file is not line-aligned
        with its split (naming the file and the line or the counts), or was drawn from other files.
    """
    directory = _str(data_cfg, "pairs_dir", "")
    if not directory:
        return {}
    if directory == "synthetic":
        return _synthetic_pairs(data_cfg, corpus)
    from jaxnat.data.alignment import recorded_fingerprints, split_fingerprint
    from jaxnat.data.text import read_lines

    drawn_from = recorded_fingerprints(directory)
    out: dict[str, Pairs] = {}
    for key, (src, tgt) in corpus.items():
        split = _split(data_cfg, key) if key in ("train", "valid") else key
        path = os.path.join(directory, f"{split}.pairs.jsonl")
        if not os.path.isfile(path):
            if key not in ("train", "valid"):
                continue  # a test split without pairs is only translated without them
            raise DataError(f"{path}: file not found; data.pairs_dir needs the constraint pairs of the {key} split "
                            f"(python -m jaxnat.data.alignment writes them)")
        lines = read_lines(path)
        if len(lines) != len(src):
            raise DataError(f"{path}: {len(lines)} lines, but the {key} split has {len(src)} sentences")
        recorded = drawn_from.get(split)
        checked = trains_on or key != "train"
        if checked and recorded is not None and tgt is not None and recorded != split_fingerprint(src, tgt):
            # same sources, other targets (a distilled corpus beside the original's pairs): their target phrases
            # are not in the targets, and a model trained on them learns to leave its constraints out
            raise DataError(f"{path}: drawn from other {split} files than those in data.dir (the original corpus's "
                            f"pairs beside a distilled one?); align those: python -m jaxnat.data.alignment "
                            f"--data-dir {_str(data_cfg, 'dir', 'DATA_DIR')} --output DIR, then data.pairs_dir=DIR")
        out[key] = [parse_pairs(line, f"{path}:{i + 1}") for i, line in enumerate(lines)]
    return out


def load_alignments(data_cfg: Any, corpus: Corpus) -> dict[str, list[set[tuple[int, int]]]]:
    """The word alignments of the train and valid splits of `corpus` in data.alignments_dir ({} without it), what
    guided alignment trains on (`jaxnat.data.piece_links`): `{split}.align`, Pharaoh links ``i-j`` over the words of
    `dictionary_words`, a line per pair, as `python -m jaxnat.data.alignment` writes them ({corpus key: links per
    pair}). The training split's is needed, the valid split's taken where it is there.

    Raises:
      DataError: the training split's file is missing, a line is not Pharaoh links, or a file is not line-aligned
        with its split (naming the file and the line or the counts).
    """
    directory = _str(data_cfg, "alignments_dir", "")
    if not directory:
        return {}
    from jaxnat.data.alignment import parse_links
    from jaxnat.data.text import read_lines

    out = {}
    for key in ("train", "valid"):
        src = corpus[key][0]
        path = os.path.join(directory, f"{_split(data_cfg, key)}.align")
        if not os.path.isfile(path):
            if key == "valid":
                continue
            raise DataError(f"{path}: file not found; data.alignments_dir needs the word alignments of the {key} "
                            f"split (python -m jaxnat.data.alignment writes them)")
        lines = read_lines(path, blank_ok=True)
        if len(lines) != len(src):
            raise DataError(f"{path}: {len(lines)} lines, but the {key} split has {len(src)} sentences")
        parsed = []
        for i, line in enumerate(lines):
            try:
                parsed.append(parse_links(line))
            except DataError as e:
                raise DataError(f"{path}:{i + 1}: {e}") from None
        out[key] = parsed
    return out


def _synthetic_pairs(data_cfg: Any, corpus: Corpus) -> dict[str, Pairs]:
    """Per sentence of the synthetic corpus, 1–3 of its nouns and multi-word terms with their fixed
    translations (`synthetic.lexicon_pairs`) in a random order, the draw seeded by data.synthetic_seed."""
    import random

    from jaxnat.data import synthetic

    if _str(data_cfg, "source", "") != "synthetic":
        raise ConfigError('data.pairs_dir="synthetic" needs data.source=synthetic')
    seed = _int(data_cfg, "synthetic_seed", 0)
    out: dict[str, Pairs] = {}
    for key, (src, tgt) in corpus.items():
        rng = random.Random(f"{seed}:{key}")
        out[key] = []
        for s, t in zip(src, tgt):
            found = synthetic.lexicon_pairs(s, t)
            rng.shuffle(found)
            out[key].append(found[: rng.randint(1, 3)])
    return out


def load_corpus(data_cfg: Any) -> Corpus:
    """Returns {'train': (src, tgt), 'valid': (src, tgt), <test split>: (src, tgt or None), ...}.

    Raises:
      ConfigError: unknown source or invalid fields.
      DataError: missing directory/files or unreadable data.
    """
    source = _str(data_cfg, "source", "")
    loaders = {"synthetic": _load_synthetic, "text": _load_text, "tfds": _load_tfds}
    if source not in loaders:
        raise ConfigError(f"config.data.source must be one of {', '.join(SOURCES)}, got {source!r}")
    corpus = loaders[source](data_cfg)
    for key, (src, tgt) in corpus.items():
        if not src:
            raise DataError(f"{source} corpus: split {key!r} is empty")
        if tgt is not None and len(tgt) != len(src):
            raise DataError(f"{source} corpus: split {key!r} has {len(src)} sources but {len(tgt)} targets")
    return corpus
