"""Word alignment of a parallel corpus with eflomal (Östling and Tiedemann 2016), and the constraint pairs of
Wang et al. (2022) drawn from it, written beside the corpus (or into --output).

    python -m jaxnat.data.alignment --data-dir DIR --src en --tgt de [--output DIR] [--train-split train]
        [--splits val,test_2016_flickr] [--seed 1] [--code-switch] [--common-words 100]

1. Both sides of every split are split into words (`dictionary_words`: Moses tokens; in Chinese, Japanese and
   Korean a dictionary segmenter's words, jieba's through rjieba and MeCab's, `jaxnat.data.words.SEGMENTERS`, or
   without it Chinese and Japanese characters and Korean Moses words). A pair's phrases are cut from their
   sentences as written (`jaxnat.data.phrase_pairs.Written`): a Korean word without the particle after it.
2. The training split is aligned in both directions and the two directions are symmetrised with
   grow-diag-final-and (`symmetrise`): `{train}.align`, Pharaoh links ``i-j`` over Moses words, a line per pair.
3. Every other split is aligned *with the model learned on the training data*: eflomal's lexical, jump and
   fertility priors counted from the training alignments (what `eflomal-makepriors` computes) guide its
   sampler, so a test set's links come from the training statistics rather than from the few test
   sentences alone. `{split}.align`.
4. Each sentence's constraint pairs (`jaxnat.data.phrase_pairs`: up to 3 tight consistent pairs, 1–3 words, in
   a random order, none made only of the training side's 100 (--common-words) most frequent words, listed in
   `{train}.common.json`; drawn with --seed from the alignments): `{split}.pairs.jsonl`, one JSON list of
   ``[source phrase, target phrase]`` per line, detokenized. With --code-switch also the code-switched
   variant as a split of its own, `{split}.cs`: `{split}.cs.{src}` (the sources), `{split}.cs.{tgt}` (the
   targets with half of the constrained phrases left in the source language) and `{split}.cs.pairs.jsonl` —
   train on it with data.dir and data.pairs_dir at --output and the split names ending in ".cs".

Every file is written whole under a temporary name and renamed, and a rerun skips the files that exist, so a
killed run resumes where it stopped. `{train}.alignment.json` records the settings (--src, --tgt, --seed,
--common-words, and the segmenter that cut a Chinese, Japanese or Korean side into words) and a fingerprint of each
split's files: a rerun with others, or on changed files, stops rather than keep pairs made from something else.
Errors print one line and exit with code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import sys
import tempfile
from collections.abc import Iterable

from jaxnat.data.phrase_pairs import (MAX_WORDS, Written, code_switch, most_common_words, phrase_pairs,
                                      sample_pairs)
from jaxnat.errors import DataError, JaxnatError, run_command
from jaxnat.optional import require
from jaxnat.paths import write_whole

log = logging.getLogger("jaxnat")

Links = set[tuple[int, int]]
RECORD_SUFFIX = ".alignment.json"  # {train split}.alignment.json: the settings, what each split was drawn from
NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def parse_links(line: str) -> Links:
    """A Pharaoh line ``"0-0 1-2"`` → {(0, 0), (1, 2)}."""
    try:
        return {(int(a), int(b)) for a, b in (link.split("-") for link in line.split())}
    except ValueError:
        raise DataError(f"not an alignment line (i-j links): {line.strip()[:80]!r}") from None


def format_links(links: Links) -> str:
    return " ".join(f"{i}-{j}" for i, j in sorted(links))


def symmetrise(forward: Links, reverse: Links) -> Links:
    """grow-diag-final-and (Koehn et al. 2003): start from the intersection of the two directions; repeatedly
    add a union link next to (or diagonal to) an alignment link when it aligns a word not aligned yet; finally
    add union links whose two words are both still unaligned. Both arguments are (source, target) links."""
    union, alignment = forward | reverse, forward & reverse
    src_done, tgt_done = {i for i, _ in alignment}, {j for _, j in alignment}
    grown = True
    while grown:
        grown = False
        for i, j in sorted(alignment):
            for di, dj in NEIGHBOURS:
                link = (i + di, j + dj)
                if link in union and link not in alignment and (link[0] not in src_done or link[1] not in tgt_done):
                    alignment.add(link)
                    src_done.add(link[0])
                    tgt_done.add(link[1])
                    grown = True
    for direction in (forward, reverse):
        for i, j in sorted(direction):
            if i not in src_done and j not in tgt_done:
                alignment.add((i, j))
                src_done.add(i)
                tgt_done.add(j)
    return alignment


def _eflomal_align(src: list[str], tgt: list[str], priors: str | None) -> tuple[list[Links], list[Links]]:
    """eflomal's forward and reverse links of whitespace-tokenized sentence pairs (with a priors file). Its
    sampler seeds itself (from /dev/urandom): the alignment files, written once, are the record."""
    eflomal = require("eflomal", "word alignment (jaxnat.data.alignment)")
    with tempfile.TemporaryDirectory() as tmp, \
            (open(priors, encoding="utf-8") if priors else contextlib.nullcontext()) as prior_file:
        fwd, rev = os.path.join(tmp, "fwd"), os.path.join(tmp, "rev")
        eflomal.Aligner().align(src, tgt, links_filename_fwd=fwd, links_filename_rev=rev, priors_input=prior_file,
                                quiet=True)
        with open(fwd, encoding="utf-8") as f, open(rev, encoding="utf-8") as r:
            return [parse_links(line) for line in f], [parse_links(line) for line in r]


def _write_priors(path: str, src: list[str], tgt: list[str], forward: list[Links], reverse: list[Links]) -> None:
    eflomal = require("eflomal", "word alignment (jaxnat.data.alignment)")

    counts = eflomal.calculate_priors(src, tgt, [format_links(a) for a in forward], [format_links(a) for a in reverse])
    with open(path, "w", encoding="utf-8") as f:
        eflomal.write_priors(f, *counts)


def _write_whole(path: str, lines: Iterable[str]) -> None:
    write_whole(path, "".join(line + "\n" for line in lines))


def pairs_of_split(src_texts: list[str], tgt_texts: list[str], src_words: list[list[str]],
                   tgt_words: list[list[str]], alignments: list[Links], seed: int, src_lang: str, tgt_lang: str,
                   switch: bool, common: tuple[set[str], set[str]]) -> tuple[list[list[list[str]]], list[str] | None]:
    """Per sentence the sampled [source phrase, target phrase] pairs, each as its sentence writes it
    (`jaxnat.data.phrase_pairs.Written`); with ``switch``, the code-switched pairs and targets instead: the same
    pairs, half of them switched (a second generator draws the switches, so the pairs themselves do not change)."""
    from sacremoses import MosesDetokenizer

    from jaxnat.data.words import primary_language

    # by the primary language, as the words were tokenized (Moses joins Hangul words under "ko-KR", not "ko")
    detok_src, detok_tgt = (MosesDetokenizer(lang=primary_language(lang)) for lang in (src_lang, tgt_lang))
    rng, switch_rng = random.Random(seed), random.Random(seed + 7919)
    out, targets = [], [] if switch else None
    for src_text, tgt_text, src, tgt, links in zip(src_texts, tgt_texts, src_words, tgt_words, alignments):
        chosen = sample_pairs(phrase_pairs(src, tgt, links, common=common), rng)
        s, t = Written.of(src_text, src, detok_src.detokenize), Written.of(tgt_text, tgt, detok_tgt.detokenize)
        if switch:
            target, pairs = code_switch(s, t, chosen, switch_rng)
            targets.append(target)
            out.append([list(pair) for pair in pairs])
        else:
            out.append([[s.phrase(p.src_start, p.src_end), t.phrase(p.tgt_start, p.tgt_end)] for p in chosen])
    return out, targets


def few_pairs(split: str, pairs: list[list], common_words: int) -> str:
    """A warning where most of a split's sentences got no constraint pair ('' where not; a few percent have none
    on Multi30k): a sentence of a language written without spaces that `dictionary_words` does not split (Thai) is one
    Moses word, which no phrase of at most 3 words on the other side is consistent with; in a small corpus, or on
    the characters of Chinese and Japanese without their segmenter, a side's ``common_words`` most frequent words
    may make up every phrase."""
    empty = sum(not p for p in pairs)
    if 2 * empty <= len(pairs):
        return ""
    return (f"{split}: {empty} of {len(pairs)} sentences got no constraint pair; a phrase is 1–{MAX_WORDS} words "
            f"(Moses's, split at spaces; Chinese and Japanese by their segmenters) not all among a side's "
            f"{common_words} most frequent: lower --common-words for a small vocabulary, and segment a language "
            f"written without spaces other than Chinese and Japanese (Thai) into words first")


def split_fingerprint(src: list[str], tgt: list[str]) -> str:
    """What a split's pairs were drawn from, as the record keeps it: the hash of its two sides as read."""
    from jaxnat.data.text import lines_sha256

    return lines_sha256([*src, "", *tgt])


def recorded_fingerprints(out_dir: str) -> dict[str, str]:
    """{split: `split_fingerprint` of the files its pairs were drawn from} from the records in ``out_dir`` ({}
    without one: pairs written by an older jaxnat or by hand; an unreadable record is the alignment's to report)."""
    found = {}
    for name in sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else ():
        if name.endswith(RECORD_SUFFIX):
            try:
                with open(os.path.join(out_dir, name), encoding="utf-8") as f:
                    found.update(json.load(f)["splits"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
    return found


def align_corpus(data_dir: str, src_lang: str, tgt_lang: str, out_dir: str, train_split: str = "train",
                 splits: tuple[str, ...] = (), seed: int = 1, switch: bool = False, common_words: int = 100
                 ) -> dict[str, str]:
    """Steps 1–4 of the module docstring; returns {file name: what it holds} of the files written or found.
    common_words: how many of each training side's most frequent words a phrase may not consist of only."""
    from tqdm import tqdm

    from jaxnat.data.text import find_split_files, read_parallel
    from jaxnat.data.words import dictionary_words, segmenter

    os.makedirs(out_dir, exist_ok=True)
    priors = os.path.join(out_dir, f"{train_split}.priors")
    common_path = os.path.join(out_dir, f"{train_split}.common.json")  # the frequent words phrases avoid
    # what the files were made from: a rerun keeps them only for the same settings and the same split files
    record_path = os.path.join(out_dir, f"{train_split}{RECORD_SUFFIX}")
    settings = {"src": src_lang, "tgt": tgt_lang, "seed": seed, "common_words": common_words}
    if segmented := {lang: name for lang in (src_lang, tgt_lang) if (name := segmenter(lang))}:
        settings["words"] = segmented  # a segmenter's words, not characters (or Korean Moses words): other pairs
    record = _read_record(record_path, out_dir, settings)
    written = {}
    for split in (train_split, *splits):
        names = [f"{split}.align", f"{split}.pairs.jsonl"] + (
            [f"{split}.cs.{src_lang}", f"{split}.cs.{tgt_lang}", f"{split}.cs.pairs.jsonl"] if switch else [])
        names += [os.path.basename(p) for p in (priors, common_path) if split == train_split]
        src, tgt = read_parallel(*find_split_files(data_dir, split, src_lang, tgt_lang))
        fingerprint = split_fingerprint(src, tgt)
        made_from = (record or {}).get("splits", {}).get(split)
        if made_from is not None and made_from != fingerprint:
            raise DataError(f"{out_dir} holds the alignment of other {split}.{src_lang}/{split}.{tgt_lang} files than "
                            f"those in {data_dir} now; choose another --output or delete it")
        if record is None and any(os.path.exists(os.path.join(out_dir, n)) for n in names):
            log.warning("%s: no record of what %s's files there were made from (%s, written by an older jaxnat or "
                        "by hand); they are kept as found", out_dir, split, os.path.basename(record_path))
        if all(os.path.exists(os.path.join(out_dir, n)) for n in names):
            log.info("%s: already aligned, constraint pairs drawn", split)
            written.update(dict.fromkeys(names, "kept"))
            if split == train_split:
                with open(common_path, encoding="utf-8") as f:
                    common = tuple(set(words) for words in json.load(f))
            continue
        # no bar in a log file: on millions of pairs, minutes of silence before the aligner's first line
        log.info("%s: words of %d sentence pairs", split, len(src))
        src_words = [dictionary_words(s, src_lang) for s in tqdm(src, desc=f"tokenize {split}.{src_lang}",
                                                                  disable=None)]
        tgt_words = [dictionary_words(t, tgt_lang) for t in tqdm(tgt, desc=f"tokenize {split}.{tgt_lang}",
                                                                  disable=None)]
        align_path = os.path.join(out_dir, f"{split}.align")
        if os.path.exists(align_path):
            with open(align_path, encoding="utf-8") as f:
                alignments = [parse_links(line) for line in f]
        else:
            if split != train_split and not os.path.exists(priors):
                raise DataError(f"{priors}: the training split's priors are missing; align {train_split} first")
            log.info("aligning %s (%d sentence pairs) with eflomal", split, len(src))
            joined = [" ".join(w) for w in src_words], [" ".join(w) for w in tgt_words]
            forward, reverse = _eflomal_align(*joined, None if split == train_split else priors)
            alignments = [symmetrise(f, r) for f, r in zip(forward, reverse)]
            if split == train_split:
                _write_priors(priors, *joined, forward, reverse)
            _write_whole(align_path, [format_links(a) for a in alignments])
        if split == train_split:
            common = most_common_words(src_words, common_words), most_common_words(tgt_words, common_words)
            _write_whole(common_path, [json.dumps([sorted(c) for c in common], ensure_ascii=False)])
        for switched in (False, True) if switch else (False,):
            pairs, targets = pairs_of_split(src, tgt, src_words, tgt_words, alignments, seed, src_lang, tgt_lang,
                                            switched, common)
            prefix = f"{split}.cs" if switched else split
            if targets is not None:  # the split "<split>.cs": the same sources, the switched targets
                _write_whole(os.path.join(out_dir, f"{prefix}.{src_lang}"), src)
                _write_whole(os.path.join(out_dir, f"{prefix}.{tgt_lang}"), targets)
            _write_whole(os.path.join(out_dir, f"{prefix}.pairs.jsonl"),
                         (json.dumps(p, ensure_ascii=False) for p in pairs))
            found = sum(len(p) for p in pairs)
            log.info("%s: %d constraint pairs in %d sentences%s", prefix, found, len(pairs),
                     " (code-switched)" if switched else "")
            if not switched and (warning := few_pairs(split, pairs, common_words)):
                log.warning("%s", warning)
        written.update(dict.fromkeys(names, "written"))
        if record is not None or split == train_split:  # not for a legacy directory's other splits: unverified
            record = {"settings": settings, "splits": {**(record or {}).get("splits", {}), split: fingerprint}}
            _write_whole(record_path, [json.dumps(record, indent=2, sort_keys=True)])
    return written


def _read_record(path: str, out_dir: str, settings: dict) -> dict | None:
    """The record of an earlier run into ``out_dir`` (None: there is none); DataError where it was made with
    other settings (its files would be kept as they are, and hold another language's or seed's pairs)."""
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
        old = record["settings"]
        record["splits"] = dict(record["splits"])
    except (OSError, ValueError, KeyError, TypeError):
        raise DataError(f"{path}: unreadable (not the record an alignment run writes); delete it and the files "
                        f"beside it, or choose another --output") from None
    if old != settings:
        different = ", ".join(f"{'' if k == 'words' else '--'}{k.replace('_', '-')} {old.get(k)!r} there, {v!r} now"
                              for k, v in settings.items() if old.get(k) != v)
        raise DataError(f"{out_dir} holds an alignment made with other settings ({different}); choose another "
                        f"--output or delete it")
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jaxnat.data.alignment", description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True, help="a directory of {split}.{lang}[.gz] files")
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--output", default="", help="where to write (default: the data directory)")
    parser.add_argument("--train-split", default="train")
    parser.add_argument("--splits", default="", help="comma list of other splits, aligned with the training model")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--code-switch", action="store_true", help="also write the code-switched variant")
    parser.add_argument("--common-words", type=int, default=100,
                        help="no constraint phrase consists only of a side's this many most frequent words")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    written = args.output or args.data_dir

    def align() -> int:
        align_corpus(args.data_dir, args.src, args.tgt, written, args.train_split,
                     tuple(s for s in args.splits.split(",") if s), args.seed, args.code_switch, args.common_words)
        return 0
    return run_command(align, f"the same command goes on from the files written whole in {written} (each split's "
                              f"alignment, then its constraint pairs)", (JaxnatError, OSError))


if __name__ == "__main__":
    sys.exit(main())
