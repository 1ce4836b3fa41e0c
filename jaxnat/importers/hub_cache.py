"""A Hugging Face model id (`Helsinki-NLP/opus-mt-en-de`) read from the local Hugging Face cache, where
`from_pretrained`, `snapshot_download` or `huggingface-cli download` left it: jaxnat downloads nothing.

The cache's layout (huggingface_hub's): `<cache>/models--<org>--<name>/snapshots/<commit>/` holds the files (links
into `blobs/`), `refs/<revision>` the commit a revision names. The cache is `$HF_HUB_CACHE`, else
`$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`.
"""

from __future__ import annotations

import os
import re

from jaxnat.errors import DataError

MODEL_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?$")


def cache_dir() -> str:
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return os.path.join(home, "hub")


def looks_like_model_id(path: str) -> bool:
    """"org/name" or "org/name@revision", and no such path on disk."""
    return bool(MODEL_ID.match(path)) and not os.path.exists(path)


def snapshot(model_id: str) -> str:
    """The cached snapshot directory of ``model_id`` ("org/name", optionally "@revision": a branch, tag or
    commit; default main); a one-line DataError naming the download command when it is not cached."""
    name, _, revision = model_id.partition("@")
    revision = revision or "main"
    root = os.path.join(cache_dir(), "models--" + name.replace("/", "--"))
    fetch = f"huggingface-cli download {name}" + (f" --revision {revision}" if revision != "main" else "")
    if not os.path.isdir(root):
        raise DataError(f"{model_id}: not in the Hugging Face cache ({cache_dir()}); jaxnat downloads nothing: "
                        f"`{fetch}` first, or name the model's directory")
    commit = revision
    ref = os.path.join(root, "refs", revision)
    snapshots = os.path.join(root, "snapshots")
    if os.path.isfile(ref):
        with open(ref, encoding="utf-8") as f:
            commit = f.read().strip()
    elif revision == "main" and os.path.isdir(snapshots) and len(os.listdir(snapshots)) == 1:
        commit = os.listdir(snapshots)[0]  # fetched by commit: no refs/main, one snapshot
    path = os.path.join(snapshots, commit)
    if not os.path.isdir(path):
        raise DataError(f"{model_id}: the Hugging Face cache ({root}) holds no snapshot of revision {revision!r}: "
                        f"`{fetch}` first")
    return path
