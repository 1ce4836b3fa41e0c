"""Sequence-level knowledge distillation (Kim & Rush 2016): a trained AR teacher translates the training
sources with beam search, and the (source, teacher translation) pairs become a new training set.

`python -m jaxnat.main --mode distill --config CONFIG --workdir TEACHER_WORKDIR --output OUT_DIR` writes
OUT_DIR as a complete `data.source=text` directory (`--config.data.dir=OUT_DIR` trains a student on it):

  {train_split}.{src_lang}   the training sources that fit the teacher, as read
  {train_split}.{tgt_lang}   the teacher's translations (beam eval.beam_size, batches of eval.batch_size)
  {valid_split}.{lang}, {test split}.{lang}   copies of the other splits with their original references
  distill.json               the manifest: teacher, checkpoint, decoding settings, counts, timing ('seconds':
                             translation time summed over chunks, across resumed runs)

A source whose sub-word ids with BOS and EOS are more than data.max_len is dropped, source and target: the
teacher could only translate its cut beginning, and that translation written beside the whole line would
teach the student to leave the rest of a sentence out. Writing the cut source instead would leave a training
line that stops mid-sentence (or mid-word), so the pair is not written at all; a student with the same
data.max_len would leave such a pair out of its batches anyway (or cut it, with data.truncate).
'dropped_too_long' in distill.json counts them; the train files have 'sentences' - 'dropped_too_long' lines.

All files are UTF-8 plain text, one sentence per line. Work is done in chunks of `CHUNK_SIZE` sentences, each
written atomically to OUT_DIR/.distill_parts/ as soon as it is translated, so an interrupted run re-run with
the same command skips the finished chunks. The manifest is written last: a directory with one is finished, and
running it again translates nothing (`refresh_copies` makes the other splits' copies the corpus's of now).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import shutil
import time

import numpy as np

from jaxnat.config import ensemble_members
from jaxnat.data.distilled import MANIFEST, PARTS_DIR, PARTS_META, describe_difference, read_json, same_identity
from jaxnat.data.sources import load_corpus
from jaxnat.data.text import lines_sha256, one_line
from jaxnat.decoding.translator import duration
from jaxnat.errors import ConfigError, DataError
from jaxnat.paths import write_whole

log = logging.getLogger("jaxnat")

CHUNK_SIZE = 1024  # sentences per resumable chunk: small enough to lose little on a crash, big enough to batch well
# Identity value of what happens to sources longer than data.max_len; distillations without it (older jaxnat)
# wrote the translation of their cut beginning beside the whole source, and are not resumed or reused.
TOO_LONG_SOURCES = "dropped"


# -- small file helpers ------------------------------------------------------------------------------
def _write_lines(path: str, lines: list[str]) -> None:
    write_whole(path, _text(lines))


def _text(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


# -- what to write -----------------------------------------------------------------------------------
def split_file_names(config, corpus: dict) -> dict[str, str]:
    """Corpus key -> split name used in OUT_DIR's file names (the names a text config with the same
    data.train_split / valid_split / test_splits looks for)."""
    d = config.data
    names = {"train": d.train_split, "valid": d.valid_split}
    names.update({key: key for key in corpus if key not in ("train", "valid")})  # test splits keep their names
    for key, name in names.items():
        if key != "train" and name == names["train"]:
            # The copy would overwrite the distilled training targets.
            raise ConfigError(f"split {key!r} is named {name!r} like the training split; distillation needs "
                              "distinct split names")
    return names


def planned_files(names: dict[str, str], corpus: dict, src_lang: str, tgt_lang: str) -> list[str]:
    """File names written into OUT_DIR (a test split without references gets only its source file)."""
    files = []
    for key, name in names.items():
        files.append(f"{name}.{src_lang}")
        if key == "train" or corpus[key][1] is not None:
            files.append(f"{name}.{tgt_lang}")
    return list(dict.fromkeys(files))


def decoding_settings(config) -> dict:
    """The settings that change the teacher's output (batch size does not). fairseq's search rules and sampling
    (sampled distillation, back-translation) are named only where set, so that a distillation recorded before they
    were is still the same one."""
    e = config.eval
    out = {"beam_size": int(e.beam_size), "length_penalty": float(e.length_penalty), "max_len_a": float(e.max_len_a),
           "max_len_b": int(e.max_len_b), "max_len": int(config.data.max_len)}
    if e.search_rules != "jaxnat":
        out["search_rules"] = e.search_rules
    if e.sampling:
        out["sampling"] = {"temperature": float(e.temperature), "top_k": int(e.top_k), "top_p": float(e.top_p),
                           "epsilon": float(e.epsilon), "seed": int(e.sample_seed)}
    return out


# -- guarding a user's data ----------------------------------------------------------------------------
def check_output_dir(out_dir: str, identity: dict, files: list[str]) -> dict | None:
    """Returns the manifest if OUT_DIR already holds this very distillation (nothing to translate), None if the work
    may go on (fresh directory, or our own unfinished parts). Raises DataError rather than overwrite anything
    else: another distillation, or files not written by one."""
    manifest = read_json(os.path.join(out_dir, MANIFEST))
    if manifest is not None:
        if same_identity(manifest, identity):
            return manifest
        difference = describe_difference(manifest, identity)
        raise DataError(f"{out_dir} already holds a different distillation ({difference}); choose another --output "
                        "or delete that directory")
    parts_meta = read_json(os.path.join(out_dir, PARTS_DIR, PARTS_META))
    if parts_meta is not None:
        if not same_identity(parts_meta, identity):
            raise DataError(f"{os.path.join(out_dir, PARTS_DIR)} holds an unfinished distillation of a different run "
                            f"({describe_difference(parts_meta, identity)}); delete it or choose another --output")
        return None  # ours: finished files from a crash while finalising may be overwritten
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise DataError(f"{out_dir} exists and is not a directory (--output)")
    if os.path.isdir(out_dir):
        existing = [f for name in files for f in (name, name + ".gz") if os.path.exists(os.path.join(out_dir, f))]
        if existing:
            raise DataError(f"{out_dir} already holds {', '.join(existing[:3])}{', ...' if len(existing) > 3 else ''}"
                            f" not written by a distillation (no {MANIFEST}); choose an empty or new --output")
    return None


def refresh_copies(out_dir: str, manifest: dict, names: dict[str, str], corpus: dict, langs: tuple[str, str],
                   files: list[str]) -> dict:
    """A finished distillation's copies of the other splits made those of the corpus now: a split added to
    data.test_splits, or a valid or test file edited since, is (re)written, so that a student trained on OUT_DIR
    is validated and tested on them; the distilled training split stays. Returns the manifest, updated."""
    written = []
    for key, name in names.items():
        if key == "train":
            continue
        for lang, lines in zip(langs, corpus[key]):
            path = os.path.join(out_dir, f"{name}.{lang}")
            if lines is not None and _read_text(path) != _text(lines):
                write_whole(path, _text(lines))
                written.append(os.path.basename(path))
    if not written and manifest["files"] == files:
        return manifest
    log.info("copied the corpus's other splits as they are now: %s", ", ".join(written) or "(none changed)")
    manifest = {**manifest, "files": files,
                "splits": {**manifest["splits"], "test": [n for k, n in names.items() if k not in ("train", "valid")]}}
    write_whole(os.path.join(out_dir, MANIFEST), json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, ValueError):
        return None


# -- chunks ------------------------------------------------------------------------------------------
class Parts:
    """The finished chunks in OUT_DIR/.distill_parts/: `meta.json` (identity + chunk size) and one
    `NNNNNN.json` per chunk = {'start', 'end', 'hyps': [str | None] (None: source dropped as too long),
    'seconds', 'dropped', 'ratio_sum', 'ratio_count', 'ref_ratio_sum', 'ref_ratio_count'}."""

    def __init__(self, out_dir: str, identity: dict, chunk_size: int):
        self.dir = os.path.join(out_dir, PARTS_DIR)
        meta_path = os.path.join(self.dir, PARTS_META)
        meta = read_json(meta_path)
        if meta is not None and meta.get("chunk_size") != chunk_size:
            # Chunk i must cover the same sentences on every run, or the parts would not line up.
            log.warning("resuming with the chunk size of the unfinished run (%s, not %d)", meta.get("chunk_size"),
                        chunk_size)
            chunk_size = int(meta["chunk_size"])
        if meta is None:
            os.makedirs(self.dir, exist_ok=True)
            write_whole(meta_path, json.dumps({**identity, "chunk_size": chunk_size}, indent=2, sort_keys=True))
        self.chunk_size = chunk_size

    def path(self, index: int) -> str:
        return os.path.join(self.dir, f"{index:06d}.json")

    def load(self, index: int, start: int, end: int) -> dict | None:
        """The finished chunk, or None if absent or unusable (then it is simply translated again)."""
        part = read_json(self.path(index))
        if part is None:
            if os.path.exists(self.path(index)):  # a file cut short or damaged: say so, then redo the chunk
                log.warning("%s is unreadable; translating that chunk again", self.path(index))
            return None
        hyps = part.get("hyps")
        if (part.get("start"), part.get("end")) != (start, end) or not isinstance(hyps, list) \
                or len(hyps) != end - start or part.get("dropped") != hyps.count(None):
            log.warning("%s does not match sentences %d-%d; translating that chunk again", self.path(index), start, end)
            return None
        return part

    def save(self, index: int, part: dict) -> None:
        write_whole(self.path(index), json.dumps(part, ensure_ascii=False))

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def translate_chunk(translator, sources: list[str], references: list[str], beam_size: int, batch_size: int) -> dict:
    """Translates the sources of one chunk that fit data.max_len (with BOS and EOS) and drops the others
    (module docstring). Returns {'hyps': [str | None] (one per source, None = dropped), 'dropped' (how many),
    'ratio_sum', 'ratio_count', 'ref_ratio_sum', 'ref_ratio_count'}: length ratios (target / source, in
    subword tokens) summed over the translated sentences with a non-empty source, for the teacher's output
    and for the original references."""
    tok = translator.tokenizer
    pieces = tok.encode(sources, "src")
    src_ids, cut = translator.encode(sources)
    kept = [k for k, was_cut in enumerate(cut) if not was_cut]
    outs = translator.translate_ids([src_ids[k] for k in kept], beam_size, batch_size) if kept else []
    hyps: list[str | None] = [None] * len(sources)
    for k, out in zip(kept, outs):
        hyps[k] = one_line(tok.decode(list(out["tokens"]), "tgt"))
    src_lens = [len(pieces[k]) for k in kept]
    out_lens = [int(np.count_nonzero(translator.translation_pieces(np.asarray(o["tokens"])))) for o in outs]
    ref_lens = [len(ids) for ids in tok.encode([references[k] for k in kept], "tgt")]
    ratios = [o / s for o, s in zip(out_lens, src_lens) if s > 0]
    ref_ratios = [r / s for r, s in zip(ref_lens, src_lens) if s > 0]
    return {"hyps": hyps, "dropped": len(sources) - len(kept), "ratio_sum": float(sum(ratios)),
            "ratio_count": len(ratios), "ref_ratio_sum": float(sum(ref_ratios)), "ref_ratio_count": len(ref_ratios)}


def run_chunks(translator, parts: Parts, sources: list[str], references: list[str], beam_size: int,
               batch_size: int) -> list[dict]:
    """Translates every chunk not already in `parts`; returns all chunks' parts, in order."""
    from tqdm import tqdm

    n, size = len(sources), parts.chunk_size
    bounds = [(i, s, min(s + size, n)) for i, s in enumerate(range(0, n, size))]
    done = {i: parts.load(i, s, e) for i, s, e in bounds}
    done = {i: p for i, p in done.items() if p is not None}
    finished = sum(e - s for i, s, e in bounds if i in done)
    if done:
        log.info("resuming: %d of %d chunks (%d sentences) already translated", len(done), len(bounds), finished)
    bar = tqdm(total=n, initial=finished, unit="sent", desc="distill", dynamic_ncols=True, disable=None)
    began, resumed_at = time.perf_counter(), finished
    try:
        for i, start, end in bounds:
            if i in done:
                continue
            t0 = time.perf_counter()
            part = translate_chunk(translator, sources[start:end], references[start:end], beam_size, batch_size)
            part.update(start=start, end=end, seconds=time.perf_counter() - t0)
            parts.save(i, part)
            done[i] = part
            bar.update(end - start)
            finished += end - start
            # a log file has no bar: the corpus's progress and what is left at this run's pace
            left = (time.perf_counter() - began) / (finished - resumed_at) * (n - finished)
            log.info("chunk %d/%d: sentences %d-%d in %.1f s (%.1f sentences/s); %d of %d sentences done%s", i + 1,
                     len(bounds), start, end - 1, part["seconds"], (end - start) / max(part["seconds"], 1e-9),
                     finished, n, f", about {duration(left)} left" if finished < n else "")
    finally:
        bar.close()
    return [done[i] for i, _, _ in bounds]


# -- the command ---------------------------------------------------------------------------------------
def summarize(chunks: list[dict], sentences: int) -> dict:
    """Manifest statistics over all chunks (finished in this run or an earlier one): 'sentences_per_s' counts
    the translated sentences, 'dropped_too_long' the sources left out."""
    seconds = sum(p["seconds"] for p in chunks)
    dropped = sum(p["dropped"] for p in chunks)

    def mean(key):
        count = sum(p[f"{key}_count"] for p in chunks)
        return sum(p[f"{key}_sum"] for p in chunks) / count if count else None

    return {"seconds": seconds, "sentences_per_s": (sentences - dropped) / max(seconds, 1e-9),
            "length_ratio": mean("ratio"), "reference_length_ratio": mean("ref_ratio"), "dropped_too_long": dropped}


def write_outputs(out_dir: str, names: dict[str, str], corpus: dict, hyps: list[str | None], src_lang: str,
                  tgt_lang: str) -> None:
    """The text directory: the distilled train split (the pairs whose hyp is not None), and copies of the other
    splits with their original references."""
    for key, name in names.items():
        src, tgt = corpus[key]
        if key == "train":
            src, tgt = [s for s, h in zip(src, hyps) if h is not None], [h for h in hyps if h is not None]
        _write_lines(os.path.join(out_dir, f"{name}.{src_lang}"), src)
        if tgt is not None:
            _write_lines(os.path.join(out_dir, f"{name}.{tgt_lang}"), tgt)


def distill(config, teacher_workdir: str, out_dir: str, *, config_path: str = "", overrides: list[str] = (),
            chunk_size: int = CHUNK_SIZE) -> dict:
    """Distils the training split of `config`'s corpus with the teacher in `teacher_workdir` into `out_dir`
    (see the module docstring). Returns the manifest (also written to OUT_DIR/distill.json).

    Raises:
      JaxnatError: no trained teacher, OUT_DIR holds other data or another distillation, bad config.
    """
    import jax

    from jaxnat.restore import load_translator, params_choice

    if chunk_size < 1:
        raise ConfigError(f"chunk size must be positive, got {chunk_size}")
    if config.eval.mbr:  # the teacher's own best output is distilled: the setting would do nothing
        raise ConfigError(f"eval.mbr={config.eval.mbr} chooses outputs in translate and eval; distillation writes the "
                          f"teacher's own best output: leave eval.mbr empty")
    if jax.process_count() > 1:
        raise ConfigError("distillation runs in a single process; start it without the multi-process launcher")
    corpus = load_corpus(config.data)
    src_lang, tgt_lang = config.data.src_lang, config.data.tgt_lang
    names = split_file_names(config, corpus)
    files = planned_files(names, corpus, src_lang, tgt_lang)
    sources, references = corpus["train"]
    identity = {
        "teacher_workdir": os.path.realpath(teacher_workdir),
        "checkpoint": params_choice(config, teacher_workdir),
        "decoding": decoding_settings(config),
        "sentences": len(sources),
        "sources_sha256": lines_sha256(sources),
        "too_long_sources": TOO_LONG_SOURCES,
    }
    if members := ensemble_members(config):  # an ensemble of teachers: each run and the parameters it decodes with
        identity["ensemble"] = [{"workdir": os.path.realpath(path), "checkpoint": params_choice(config, path)}
                                for path in members]
    finished = check_output_dir(out_dir, identity, files)
    if finished is not None:
        shutil.rmtree(os.path.join(out_dir, PARTS_DIR), ignore_errors=True)  # left if a crash followed the manifest
        log.info("%s already holds this distillation (%d sentences, teacher %s, %s checkpoint of step %d); nothing "
                 "to translate", out_dir, finished["sentences"], finished["teacher_workdir"],
                 finished["checkpoint"]["kind"], finished["checkpoint"]["step"])
        return refresh_copies(out_dir, finished, names, corpus, (src_lang, tgt_lang), files)

    translator = load_translator(config, teacher_workdir)
    parts = Parts(out_dir, identity, chunk_size)
    e = config.eval
    log.info("distilling %d training sentences with %s (%s checkpoint of step %d), beam %d, chunks of %d", len(sources),
             teacher_workdir, identity["checkpoint"]["kind"], identity["checkpoint"]["step"], e.beam_size,
             parts.chunk_size)
    chunks = run_chunks(translator, parts, sources, references, e.beam_size, e.batch_size)
    hyps = [h for p in chunks for h in p["hyps"]]
    write_outputs(out_dir, names, corpus, hyps, src_lang, tgt_lang)
    stats = summarize(chunks, len(sources))
    manifest = {
        **identity,
        "config": os.path.abspath(config_path) if config_path else "",
        "overrides": list(overrides),
        "beam_size": int(e.beam_size),
        "chunk_size": parts.chunk_size,
        "src_lang": src_lang,
        "tgt_lang": tgt_lang,
        "splits": {"train": names["train"], "valid": names["valid"],
                   "test": [n for k, n in names.items() if k not in ("train", "valid")]},
        "files": files,
        **stats,
        "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    write_whole(os.path.join(out_dir, MANIFEST), json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    parts.remove()  # after the manifest: a crash in between leaves a finished directory plus stale parts
    log.info("distilled %d sentences in %.1f s of translation (%.1f sentences/s) into %s",
             len(sources) - stats["dropped_too_long"], stats["seconds"], stats["sentences_per_s"], out_dir)
    if stats["length_ratio"] is not None:
        log.info("mean output/input length ratio %.3f (the original references: %.3f), in subword tokens",
                 stats["length_ratio"], stats["reference_length_ratio"])
    if stats["dropped_too_long"]:
        log.warning("%d of %d sources were longer than data.max_len (%d tokens with BOS and EOS) and were left out "
                    "of the distilled training set", stats["dropped_too_long"], len(sources), config.data.max_len)
    return manifest
