"""A run's history in its workdir, and its training curves as a picture.

`history.jsonl` holds one JSON object per line: a log window (`step, loss, nll, grad_norm, lr, tokens_per_s,
mfu, padding`: `jaxnat.training.flops`; `compiling: true` where train programs still compiled beside it) or a
validation (`step, valid_loss, valid_nll, valid_bleu`). It is the plain-text twin of the TensorBoard scalars, for
readers without TensorBoard: `curves.png` is drawn from it at the end of training and on demand (`python -m
jaxnat.main --mode curves --workdir DIR`).

A resumed run continues from its newest checkpoint, so the entries after that step (written by the killed
process after its last checkpoint) are dropped first: the file always tells the history of the parameters
that exist. A run that stops off the train.log_every grid (SIGTERM or Ctrl-C, train.stop_patience) logs the steps
since its last log window as a window of its last step, so every step trained is in one window.
"""

from __future__ import annotations

import json
import logging
import math
import os

from jaxnat import strict_json
from jaxnat.errors import DataError, JaxnatError
from jaxnat.optional import install_hint, optional, require
from jaxnat.paths import write_whole

log = logging.getLogger("jaxnat")

FILE, PICTURE = "history.jsonl", "curves.png"


def read_jsonl(path: str) -> list[dict]:
    """Every object of a JSON-lines file a run appends to, in order, up to a line cut short (the last one of a
    process killed while writing it) or otherwise damaged (not UTF-8, not a JSON object); [] when there is no file;
    a one-line DataError where it cannot be read (a directory)."""
    if not os.path.exists(path):
        return []
    entries = []
    try:
        with open(path, "rb") as f:  # bytes, decoded line by line: a damaged line ends the entries, not the command
            for line in f:
                try:
                    entry = json.loads(line.decode("utf-8"))
                except (ValueError, RecursionError):  # (UnicodeDecodeError and JSONDecodeError are ValueErrors)
                    break
                if not isinstance(entry, dict):
                    break
                entries.append(entry)
    except OSError as e:
        raise DataError(f"{path}: unreadable ({e.strerror})") from None
    return entries


def read_history(workdir: str) -> list[dict]:
    """Every entry of a workdir's history, in order (those with a step: what training, the curves and the report
    read); [] when it has none."""
    return [e for e in read_jsonl(os.path.join(workdir, FILE)) if isinstance(e.get("step"), int)]


class History:
    """Appends entries to `<workdir>/history.jsonl` (one process writes it: pass `write=False` to the others)."""

    def __init__(self, workdir: str, resumed_step: int, write: bool = True):
        self.path, self.write = os.path.join(workdir, FILE), write
        self.entries = [e for e in read_history(workdir) if e["step"] <= resumed_step]
        if write:
            write_whole(self.path, "".join(strict_json.dumps(e) + "\n" for e in self.entries))

    def append(self, entry: dict) -> None:
        self.entries.append(entry)
        if self.write:
            with open(self.path, "a") as f:
                f.write(strict_json.dumps(entry) + "\n")  # a loss that overflowed: null


def series(entries: list[dict], key: str, workdir: str) -> list[tuple[int, float]]:
    """(step, value) of the history ``entries`` logging ``key`` (null, a value not measured, left out); a one-line
    JaxnatError naming the file for a value that is not a finite number (a hand-edited line)."""
    points = []
    for e in entries:
        value = e.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise JaxnatError(f"{os.path.join(workdir, FILE)}: step {e['step']}'s {key} is {value!r:.40}, not a "
                              "number (null for none)")
        points.append((e["step"], value))
    return points


def tensorboard_writer(logdir: str):
    """A tensorboardX ``SummaryWriter`` writing to ``logdir``, or None, with one log line, when tensorboardX (the
    tensorboard extra) is not installed: history.jsonl records the same values either way."""
    tensorboard = optional("tensorboardX")
    if tensorboard is None:
        log.info("no TensorBoard logs: tensorboardX is not installed (%s); history.jsonl has the same values",
                 install_hint("tensorboardX"))
        return None
    return tensorboard.SummaryWriter(logdir)


def plot_curves(workdir: str, required: bool = False) -> str:
    """Draws `<workdir>/curves.png`: training and validation loss, validation BLEU and tokens/s over steps.
    Returns its path. Without matplotlib (the plots extra) nothing is drawn: a one-line `MissingDependency` when
    the curves are ``required`` (`--mode curves`), else the text returned says so (the trainer logs it)."""
    from jaxnat.data import piece_vocab

    entries = read_history(workdir)
    if not entries and os.path.exists(os.path.join(workdir, FILE)):
        raise JaxnatError(f"{os.path.join(workdir, FILE)} holds no entry to draw (none logged yet, or a damaged file)")
    if not entries:  # an import's workdir (its vocab/ settings) has a model but no training to draw
        why = ("it holds an imported model, not trained here" if piece_vocab.exists(workdir) else
               "a run trained by this version of jaxnat writes one")
        raise JaxnatError(f"{workdir} has no {FILE} ({why})")
    if required:
        require("matplotlib", "drawing curves.png")
    elif optional("matplotlib") is None:
        return f"not drawn, matplotlib is not installed ({install_hint('matplotlib')})"
    from matplotlib.figure import Figure  # no pyplot: the caller's backend (a notebook's) stays as it is

    fig = Figure(figsize=(13, 3.6))
    axes = fig.subplots(1, 3)
    panels = [("loss", [("loss", "train loss"), ("valid_loss", "valid loss")]),
              ("valid BLEU", [("valid_bleu", "valid BLEU")]),
              ("tokens / s", [("tokens_per_s", "train tokens/s")])]
    for ax, (title, keys) in zip(axes, panels):
        for key, label in keys:
            points = series(entries, key, workdir)
            if points:
                x, y = zip(*points)
                ax.plot(x, y, marker="o" if len(x) < 30 else None, markersize=3, label=label)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if len(keys) > 1:
            ax.legend()
    fig.suptitle(os.path.basename(os.path.abspath(workdir)))
    fig.tight_layout()
    path = os.path.join(workdir, PICTURE)
    fig.savefig(path, dpi=100)
    return path
