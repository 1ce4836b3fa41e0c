"""Reading plain-text parallel corpora (one sentence per line, optionally gzip-compressed).

Every problem with a file is reported as a one-line `DataError` that names the file, so that `jaxnat.main`
can print it and exit without a traceback.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import zlib

from jaxnat.errors import DataError

_GZIP_MAGIC = b"\x1f\x8b"
_MAX_LISTED = 30


def _read_bytes(path: str) -> bytes:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise DataError(f"{path}: file not found")
    if os.path.isdir(path):
        raise DataError(f"{path}: is a directory, expected a text file")
    try:
        with open(path, "rb") as f:
            data = f.read()
        # Decide by content, not by name: a `.gz` name on a plain file (or the reverse) still works.
        if data[:2] == _GZIP_MAGIC:
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"{path}: cannot read file ({type(e).__name__}: {_one_line(e)})") from None
    return data


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def read_lines(path: str, blank_ok: bool = False) -> list[str]:
    """Returns the lines of a UTF-8 text file (plain or gzip), without surrounding whitespace.

    Lines are split on "\\n" only (a stray form feed or U+2028 inside a sentence does not split it) and a
    UTF-8 byte-order mark is ignored, at the start of the file or of any line. Blank lines are kept so that
    parallel files stay aligned.

    Raises:
      DataError: the file is missing, unreadable, empty (or, unless ``blank_ok``, blank lines only: no sentence;
        initial hypotheses may all be empty), or not valid UTF-8 or holds a NUL byte (the message gives the line).
    """
    return split_lines(_read_bytes(path), path, blank_ok)


def split_lines(data: bytes, path: str, blank_ok: bool = False) -> list[str]:
    """Decodes UTF-8 bytes (from a file or stdin, named `path` in errors) into stripped lines; see read_lines."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if b"\0" in data:  # in no text; UTF-16 has one every other byte of ASCII, and decodes as UTF-8 without a mark
        line_no = data.count(b"\n", 0, data.index(b"\0")) + 1
        raise DataError(f"{path}: line {line_no} holds a NUL byte, which no UTF-8 text does (a UTF-16 or binary "
                        f"file?); re-encode the file as UTF-8")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line_no = data.count(b"\n", 0, e.start) + 1
        raise DataError(
            f"{path}: line {line_no} is not valid UTF-8 (byte 0x{data[e.start]:02x}); re-encode the file as UTF-8"
        ) from None
    if "\n" not in text and "\r" in text.strip():  # classic Mac line breaks: every sentence would be one line
        raise DataError(f"{path}: its lines end in carriage returns (\\r) alone, not in \\n; convert its line "
                        f"breaks to \\n (e.g. tr '\\r' '\\n')")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line, not an extra empty sentence
    if not lines or not blank_ok and all(not line.strip() for line in lines):
        raise DataError(f"{path}: file is empty")
    return [line.lstrip("\ufeff").strip() for line in lines]  # a mark that leads a line: files joined with cat


def one_line(text: str) -> str:
    """``text`` (a decoded hypothesis) as one line of a line-aligned file: a line break inside it (byte pieces decode
    to "\\n" and "\\r") would shift every later line of the file, so it becomes a space, as the scores read it."""
    return text.replace("\r", " ").replace("\n", " ").strip()


def read_parallel(src_path: str, tgt_path: str) -> tuple[list[str], list[str]]:
    """Reads two line-aligned files; raises DataError (one line) if either is bad or the line counts differ."""
    src = read_lines(src_path)
    return src, read_aligned(tgt_path, src_path, len(src))


def read_aligned(path: str, other_path: str, other_lines: int, blank_ok: bool = False) -> list[str]:
    """Reads `path`, which must have as many lines as `other_path` (already read: `other_lines`); ``blank_ok``:
    see read_lines.

    Raises:
      DataError: `path` is bad, or (one line naming both files and counts) the line counts differ.
    """
    lines = read_lines(path, blank_ok)
    if len(lines) != other_lines:
        raise DataError(
            f"{other_path} has {other_lines} lines but {path} has {len(lines)}; parallel files must be line-aligned"
        )
    return lines


def find_split_file(directory: str, split: str, lang: str) -> str:
    """Resolves `{directory}/{split}.{lang}` or `{directory}/{split}.{lang}.gz` (plain preferred)."""
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise DataError(f"{directory}: data directory not found")
    for name in (f"{split}.{lang}", f"{split}.{lang}.gz"):
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate):
            return candidate
    existing = sorted(n for n in os.listdir(directory) if not n.startswith("."))
    listed = ", ".join(existing[:_MAX_LISTED]) + (", ..." if len(existing) > _MAX_LISTED else "")
    raise DataError(
        f"{directory}: no file {split}.{lang} or {split}.{lang}.gz (found: {listed or 'nothing'})"
    )


def find_split_files(directory: str, split: str, src_lang: str, tgt_lang: str) -> tuple[str, str]:
    """Returns (src_path, tgt_path) of a split; DataError listing the directory's files if one is missing."""
    return (find_split_file(directory, split, src_lang), find_split_file(directory, split, tgt_lang))


def corpus_fingerprint(src: list[str], tgt: list[str], samples: int = 256) -> dict:
    """A cheap fingerprint of parallel lines as read (what a run trains on): their count, each side's characters,
    and the sha256 of about ``samples`` pairs spaced evenly through them, the last included. Cheap on a WMT-sized
    corpus (the lines are in memory: one len() a line, no full hash of gigabytes); the same for the same text
    wherever and however it is stored (moved, renamed, gzipped). An edit that keeps both sides' sizes and misses
    every sampled pair goes unseen: enough to tell another corpus apart, not to prove two the same."""
    n = len(src)
    h = hashlib.sha256()
    for i in dict.fromkeys([*range(0, n, max(1, n // samples)), n - 1] if n else []):
        h.update(f"{i}\t{src[i]}\t{tgt[i]}\n".encode("utf-8"))
    return {"pairs": n, "chars": [sum(map(len, src)), sum(map(len, tgt))], "sample_sha256": h.hexdigest()}


def lines_sha256(lines: list[str]) -> str:
    """sha256 of the lines, each ended by a newline: tells two texts of the same size apart (what a distillation
    or an alignment was made from)."""
    h = hashlib.sha256()
    for line in lines:
        h.update(line.encode("utf-8") + b"\n")
    return h.hexdigest()
