"""Checks that a path given on the command line can be used, made before any work starts, and `write_whole`, the
one way jaxnat writes a file that must never be found half written.

Each check raises a `ConfigError` with one line naming the flag and the path, so a run that could never save its
results fails in a second instead of after hours of training or translating.
"""

from __future__ import annotations

import contextlib
import os

from jaxnat.errors import ConfigError


def write_whole(path: str, data: str | bytes) -> None:
    """Writes ``data`` (text as UTF-8) to ``path`` through a file beside it and a rename, so that ``path`` is absent,
    as it was, or whole: never the first part of a write that a kill, Ctrl-C or a full disk cut short (a rerun that
    skips what exists would take it for done). The file is on disk before the rename (fsync); the temporary file,
    named by the process, goes on failure."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def _nearest_existing(path: str) -> str:
    """The path itself or its closest ancestor that exists."""
    path = os.path.abspath(path)
    while not os.path.lexists(path):
        path = os.path.dirname(path)
    return path


def check_creatable_dir(path: str, flag: str) -> None:
    """`path` is a writable directory, or one that can be created (no file in the way, a writable parent)."""
    existing = _nearest_existing(path)
    if not os.path.isdir(existing):
        where = "is a file" if existing == os.path.abspath(path) else f"lies under {existing}, which is a file"
        raise ConfigError(f"{flag} {path} {where}, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path} cannot be written: {existing} is not writable")


def check_existing_dir(path: str, flag: str) -> None:
    """`path` is a directory that exists (a trained run)."""
    if not os.path.exists(path):
        raise ConfigError(f"{flag} {path} does not exist; train a model there first with --mode train")
    if not os.path.isdir(path):
        raise ConfigError(f"{flag} {path} is a file, not a directory")


def check_writable_file(path: str, flag: str) -> None:
    """`path` can be written as a file: it is not a directory, and it or its directory is writable."""
    if os.path.isdir(path):
        raise ConfigError(f"{flag} {path} is a directory, not a file")
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            raise ConfigError(f"{flag} {path} cannot be written: the file is not writable")
        return
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ConfigError(f"{flag} {path} cannot be written: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path} cannot be written: the directory {parent} is not writable")


def check_not_the_input(output: str, output_flag: str, source: str | None, source_flag: str, what: str) -> None:
    """`output` is not the file `source` (nor a link to it): the input is read whole before the output is written,
    so writing there would replace the user's file with ``what`` (translations, constraints)."""
    both = source and os.path.exists(source) and os.path.exists(output)
    if both and os.path.samefile(source, output):
        raise ConfigError(f"{output_flag} {output} is the {source_flag} file, which the {what} would replace; "
                          f"write them to another file")
