"""`--mode import`: a model trained elsewhere written as an ordinary jaxnat workdir (docs/import.md).

One module per source format reads its files into an `Imported` (imported.py): `fairseq.read`, `marian.read` for
Hugging Face's MarianMTModel directories, `marian_npz.read` for Marian's own checkpoints, `nllb.read`,
`m2m100.read` and `mbart50.read` for NLLB-200's, M2M-100's and mBART-50's (hf_fairseq holds what the last three
share), `fsmt.read` for fairseq's WMT19 models as Hugging Face ports them, `sockeye.read` for Sockeye 3's model
directories. An Imported holds the config overrides that make jaxnat's model compute the original's function
(`jaxnat.config`'s model conventions), the parameters in jaxnat's tree with the vocabulary's rows in jaxnat's id
order (`remap_rows`), and the vocabulary (`jaxnat.data.piece_vocab`). `write_workdir` checks the parameters
against the model the config builds and writes `config.json`, `vocab/`, `checkpoints/best/0` and `imported.json`
into a fresh directory it renames into place at the end, so that a failed import leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
import tempfile

import numpy as np

from jaxnat.errors import ConfigError, DataError
from jaxnat.importers.imported import Imported

log = logging.getLogger("jaxnat")
FORMATS = ("fairseq", "marian", "nllb", "m2m100", "mbart50", "fsmt", "sockeye", "hf")
# hf:PATH: its config.json's model_type -> the format reading it (M2M100's: by its tokenizer, `_hf_format`)
HF_TYPES = {"marian": "marian", "m2m_100": "nllb", "mbart": "mbart50", "fsmt": "fsmt"}


def parse_source(spec: str) -> tuple[str, str]:
    """"fairseq:PATH" | "sockeye:PATH" | "FORMAT:PATH" | "FORMAT:ORG/NAME[@REVISION]" for the Hugging Face
    formats marian, nllb, m2m100, mbart50, fsmt (a model id, read from the local cache: `hub_cache`) and hf (the
    format its config.json's model_type names) -> (format, path); a one-line ConfigError or DataError otherwise."""
    kind, _, path = spec.partition(":")
    if kind not in FORMATS or not path:
        raise ConfigError(f"--from takes {' or '.join(f'{k}:PATH' for k in FORMATS)}, got {spec!r}")
    if kind not in ("fairseq", "sockeye"):
        from jaxnat.importers import hub_cache

        if hub_cache.looks_like_model_id(path):
            path = hub_cache.snapshot(path)
    if not os.path.exists(path):
        raise DataError(f"--from {spec}: {path} does not exist")
    return (_hf_format(path) if kind == "hf" else kind), path


def _hf_format(directory: str) -> str:
    """The format of a Hugging Face model directory, by its config.json's model_type (and for M2M100's
    architecture, which NLLB-200 and M2M-100 share, by its tokenizer's files)."""
    from jaxnat.importers.hf_files import read_json

    at = os.path.join(directory, "config.json")
    if not os.path.isfile(at):
        raise DataError(f"{directory}: no config.json (hf:DIR names a Hugging Face model's directory)")
    model_type = read_json(at).get("model_type")
    if model_type not in HF_TYPES:
        raise DataError(f"{at}: model_type {model_type!r}; jaxnat imports Hugging Face's "
                        f"{', '.join(HF_TYPES)} models")
    if model_type == "m2m_100" and not os.path.isfile(os.path.join(directory, "tokenizer.json")) and (
            os.path.isfile(os.path.join(directory, "vocab.json"))):
        return "m2m100"  # M2M100Tokenizer's files; NLLB's tokenizer writes tokenizer.json
    return HF_TYPES[model_type]


def read(spec: str, dict_dir: str | None = None) -> Imported:
    kind, path = parse_source(spec)
    if kind == "fairseq":
        from jaxnat.importers import fairseq

        return fairseq.read(path, dict_dir or os.path.dirname(os.path.abspath(path)))
    if kind == "sockeye":
        from jaxnat.importers import sockeye

        return sockeye.read(path, dict_dir)
    if kind in ("nllb", "m2m100", "mbart50", "fsmt"):
        from jaxnat.importers import fsmt, m2m100, mbart50, nllb

        return {"nllb": nllb, "m2m100": m2m100, "mbart50": mbart50, "fsmt": fsmt}[kind].read(path)
    from jaxnat.importers import marian, marian_npz

    return marian_npz.read(path) if marian_npz.is_release(path) else marian.read(path)


def _check_params(config, params: dict, vocab_sizes: tuple[int, int]) -> dict:
    """The imported tree as jaxnat's model of ``config`` holds it (float32 arrays of exactly its shapes); a
    one-line DataError naming the first parameter that is missing, extra or of another shape."""
    import jax

    from jaxnat.models import build_model
    from jaxnat.models.transformer import stack_layers

    expected = build_model(config, *vocab_sizes).abstract_params()["params"]
    if config.model.scan_layers:
        params = stack_layers(params)
    want = {jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_flatten_with_path(expected)[0]}
    got = {jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_flatten_with_path(params)[0]}
    for key in want:
        if key not in got:
            raise DataError(f"the imported model has no parameter for jaxnat's {key} {tuple(want[key].shape)}")
        if tuple(got[key].shape) != tuple(want[key].shape):
            raise DataError(f"the imported parameter for {key} has shape {tuple(got[key].shape)}, jaxnat's model "
                            f"{tuple(want[key].shape)}")
    extra = sorted(set(got) - set(want))
    if extra:
        raise DataError(f"the imported model has parameters jaxnat's model does not use: {', '.join(extra[:3])}")
    return jax.tree.map(lambda x: np.asarray(x, np.float32), params)


def _on_device(imported: Imported) -> dict:
    """The imported parameters as jax arrays, each numpy array dropped once copied (``imported`` lets go of its
    tree), so that one copy of the weights is held at a time; Orbax then saves them with less memory besides than
    numpy arrays need."""
    import jax

    leaves, tree = jax.tree_util.tree_flatten(imported.params)
    imported.params = None
    host = jax.devices("cpu")[0]  # not an accelerator's memory, which may be smaller than the model
    for i, leaf in enumerate(leaves):
        leaves[i] = jax.device_put(leaf, host)
    return jax.tree_util.tree_unflatten(tree, leaves)


def _digest(path: str) -> str:
    h = hashlib.sha256()
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(path, n) for n in os.listdir(path) if os.path.isfile(os.path.join(path, n)))
    for name in files:
        with open(name, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


OWNER = "owner"  # in an import's staging directory: "<host> <pid>" of the process writing it


def remove_abandoned(parent: str, prefix: str) -> None:
    """Removes the staging directories (``parent/<prefix>*``) of imports into the same workdir whose process is gone:
    an import killed with `kill -9` (or by the machine's end) leaves its copy of the model, gigabytes for an NLLB
    model, hidden beside the workdir. One of another host, of a live process, or without its owner file (written
    first: none is an import that has barely started, or not an import's) is left."""
    host = socket.gethostname()
    for name in sorted(os.listdir(parent)):
        path = os.path.join(parent, name)
        if not name.startswith(prefix) or not os.path.isdir(path):
            continue
        try:
            with open(os.path.join(path, OWNER)) as f:
                owner_host, pid = f.read().split()
            if owner_host != host or _alive(int(pid)):
                continue
        except (OSError, ValueError):
            continue
        shutil.rmtree(path, ignore_errors=True)
        log.info("removed %s, left by an import into the same workdir that did not finish (process %s is gone)",
                 path, pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def write_workdir(spec: str, workdir: str, dict_dir: str | None = None) -> str:
    """--mode import: reads the model ``spec`` names and writes it as the workdir ``workdir`` (which must not
    exist). Returns a one-line summary."""
    import jax

    from jaxnat.config import default_config, family_defaults, validate
    from jaxnat.data import piece_vocab
    from jaxnat.training.checkpoint import Checkpoints

    if os.path.exists(workdir):
        raise ConfigError(f"--workdir {workdir} exists; --mode import writes a new workdir")
    imported = read(spec, dict_dir)
    config = default_config()
    for key, value in imported.overrides.items():
        section, name = key.split(".")
        config[section][name] = value
    validate(family_defaults(config, set(imported.overrides)))
    sizes = tuple(len(imported.pieces[side]) for side in ("src", "tgt"))
    imported.params = _check_params(config, imported.params, sizes)
    params = _on_device(imported)
    parent = os.path.dirname(os.path.abspath(workdir))
    os.makedirs(parent, exist_ok=True)
    prefix = f".{os.path.basename(os.path.abspath(workdir))}.import-"
    remove_abandoned(parent, prefix)
    # a unique directory beside the workdir, and in it the workdir made as os.makedirs makes a trained run's (with
    # the umask's permissions: mkdtemp's own are the owner's alone)
    unique = tempfile.mkdtemp(dir=parent, prefix=prefix)
    staging = os.path.join(unique, "workdir")
    try:
        with open(os.path.join(unique, OWNER), "w") as f:  # whose it is, for a later import to tell it abandoned
            f.write(f"{socket.gethostname()} {os.getpid()}\n")
        os.mkdir(staging)
        with open(os.path.join(staging, "config.json"), "w") as f:
            f.write(config.to_json_best_effort(indent=2, sort_keys=True))
        piece_vocab.write(os.path.join(staging, piece_vocab.SUBDIR), imported.settings, imported.pieces,
                          imported.files)
        path = parse_source(spec)[1]
        about = {**imported.about, "from": spec, "path": os.path.abspath(path), "sha256": _digest(path)}
        with open(os.path.join(staging, "imported.json"), "w") as f:
            json.dump(about, f, indent=2, sort_keys=True)
        ckpt = Checkpoints(staging, config.train.keep_checkpoints)
        try:
            ckpt.save_best(0, {"params": params}, bleu=0.0)
            ckpt.wait()
        finally:
            ckpt.close()
        os.replace(staging, workdir)
    finally:
        shutil.rmtree(unique, ignore_errors=True)
    n = sum(x.size for x in jax.tree_util.tree_leaves(params))
    return (f"imported {about['format']} {about['architecture']} ({n:,} parameters, vocabularies {sizes[0]:,} / "
            f"{sizes[1]:,}) into {workdir}")
