"""A distilled directory as its writer and readers see it (`jaxnat.distill` writes it): the manifest `distill.json`
that marks it finished and names the teacher, the parts `.distill_parts/` of one still under way, what makes
two distillations the same one, and the checks a student's data and workdir make: no unfinished directory is read,
and a student keeps the manifest of the distillation it trained on and does not resume on another."""

from __future__ import annotations

import json
import logging
import os

from jaxnat.errors import DataError
from jaxnat.paths import write_whole

log = logging.getLogger("jaxnat")

PARTS_DIR = ".distill_parts"
MANIFEST = "distill.json"
PARTS_META = "meta.json"
# Manifest keys that must agree for an existing distillation to count as "this one".
# ("ensemble": the other teachers of an ensemble, absent without one)
IDENTITY_KEYS = ("teacher_workdir", "checkpoint", "decoding", "sentences", "sources_sha256", "too_long_sources",
                 "ensemble")


def read_json(path: str) -> dict | None:
    """The JSON object in `path`, or None if the file is absent or not a whole JSON object."""
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError):  # absent, unreadable or cut short: not a record of finished work
        return None
    return obj if isinstance(obj, dict) else None


def same_identity(old: dict, new: dict) -> bool:
    return all(old.get(key) == new.get(key) for key in IDENTITY_KEYS)


def describe_difference(old: dict, new: dict) -> str:
    for key in IDENTITY_KEYS:
        if old.get(key) != new.get(key):
            if key == "sources_sha256":
                return "the training sources differ"
            if key == "too_long_sources":
                return "that one kept sources longer than data.max_len, translating only their beginning"
            return f"{key} {old.get(key)!r} there, {new.get(key)!r} now"
    return "unknown difference"


def check_finished(directory: str) -> None:
    """Raises DataError where `directory` is a distillation still under way (its parts, no manifest yet), whose
    split files are missing or a part of them: a student would stop on a missing file with no word of why, or
    train on what is there. A finished one (a manifest, perhaps beside parts a crash left) passes."""
    parts = os.path.join(directory, PARTS_DIR)
    if not os.path.isdir(parts) or os.path.exists(os.path.join(directory, MANIFEST)):
        return
    meta = read_json(os.path.join(parts, PARTS_META)) or {}
    done = sum(name.endswith(".json") and name[:-5].isdigit() for name in os.listdir(parts))
    sentences, size = meta.get("sentences"), meta.get("chunk_size")
    total = f" of {-(-sentences // size)}" if isinstance(sentences, int) and isinstance(size, int) and size else ""
    raise DataError(f"{directory} holds an unfinished distillation ({done}{total} chunks translated, no {MANIFEST} "
                    f"yet): run its --mode distill command again to finish it (it resumes from the last finished "
                    f"chunk)")


def check_same_teacher(data_dir: str, workdir: str) -> None:
    """Raises DataError where a run that trained on one distillation (its copy of the manifest, `record_teacher`)
    would go on with another in ``data_dir``: distilled again, by another teacher, checkpoint or beam, after it
    was deleted. The run would resume on other targets without a word, and its record would name the new teacher
    for steps the old one's targets taught. Call it only for a workdir with training states to resume."""
    trained = read_json(os.path.join(workdir, MANIFEST))
    now = read_json(os.path.join(os.path.expanduser(data_dir), MANIFEST)) if data_dir else None
    now = now and {key: now.get(key) for key in IDENTITY_KEYS}  # a manifest of an older jaxnat may lack some
    if trained is not None and (now is None or not same_identity(trained, now)):
        what = "no distillation" if now is None else f"another distillation ({describe_difference(trained, now)})"
        raise DataError(f"{workdir} trained on the distillation by {trained.get('teacher_workdir')} that "
                        f"{os.path.join(workdir, MANIFEST)} records, and data.dir={data_dir} holds {what}: keep the "
                        f"targets it trained on, or train another --workdir")


def record_teacher(data_dir: str, workdir: str, own_vocabulary: bool) -> dict | None:
    """Where a run trains on a distillation (``data_dir`` holds its manifest), copies the manifest into the
    run's workdir, so that which teacher, checkpoint and decoding made its targets stays with the run (the
    directory may be deleted or distilled again), and says so in the log; ``own_vocabulary``: the run trains its
    SentencePiece model here, on the teacher's translations rather than with the teacher's pieces. Returns the
    manifest, None where ``data_dir`` holds none."""
    manifest = read_json(os.path.join(os.path.expanduser(data_dir), MANIFEST)) if data_dir else None
    if manifest is None:
        return None
    write_whole(os.path.join(workdir, MANIFEST), json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    checkpoint = manifest.get("checkpoint") or {}
    log.info("training on a distillation: targets by the teacher %s (%s checkpoint of step %s, beam %s); its "
             "manifest copied to %s", manifest.get("teacher_workdir"), checkpoint.get("kind"), checkpoint.get("step"),
             manifest.get("beam_size"), os.path.join(workdir, MANIFEST))
    if own_vocabulary:
        # the students of docs/results.md share the teacher's: one vocabulary also lets the teacher rescore them
        log.info("this run's vocabulary is trained on the teacher's translations; --config.data.spm_from=%s takes "
                 "the teacher's instead", manifest.get("teacher_workdir"))
    return manifest
