"""What produced a workdir's results: each finished command's line, the code's commit, the machine and how long it ran,
one JSON object a line in `<workdir>/runs.jsonl` (`python -m jaxnat.main` appends it when a train or eval command
ends, and when a training stops on SIGTERM or Ctrl-C; a killed process leaves none). A results table cites its rows
from it (`jaxnat.report`'s "Runs" section): the command that trained each system, the commit, the devices, the steps
and the wall time of training, resumed parts summed.

The commit is `git rev-parse HEAD` of the checkout jaxnat runs from, marked "+changes" when tracked files differ
from it; where jaxnat runs from a copy without `.git` (a GPU machine given the working tree), JAXNAT_COMMIT names
it, else it is null.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import subprocess
import sys

from jaxnat.errors import JaxnatError

FILE = "runs.jsonl"
SHAPE = {"mode": (str,), "command": (str,), "commit": (str, type(None)), "devices": (str,), "seconds": (int, float),
         "steps": (int,)}  # what `summary` reads of each line ("steps" where training ended)
SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout holding the jaxnat package


def commit() -> str | None:
    """The checkout's commit ("+changes" if tracked files were changed since), else $JAXNAT_COMMIT, else None."""
    def git(*args):
        return subprocess.run(["git", "-C", SOURCE, *args], capture_output=True, text=True, timeout=10)

    try:
        head = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no").stdout.strip() if head.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):  # no git on the machine
        head = None
    if head is None or head.returncode != 0:  # not a checkout: a copy of one, named by the variable
        return os.environ.get("JAXNAT_COMMIT") or None
    return head.stdout.strip() + ("+changes" if changed else "")


def machine() -> str:
    """One line naming the machine, the code and the command a benchmark ran, printed with its table: the CPU model
    and the cores this process may use, jax's version, backend and devices, `commit()` and the command line.
    Starts JAX's backend: a driver that leaves the accelerator to processes of its own asks one of them
    (bench/gpu_figures.py)."""
    import jax

    cpu = platform.processor() or platform.machine()  # where there is no /proc/cpuinfo
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"machine: {cpu}, {cores} cores; jax {jax.__version__}, {jax.default_backend()} backend, "
            f"{_devices()}; commit {commit() or 'unknown'}{_command()}")


def _command() -> str:
    """'; command: python bench/oracle.py ...': this process's command line as a reader would type it in the
    repository ('' for `python -c` or an interactive session, which have none)."""
    if not sys.argv or sys.argv[0] in ("", "-c"):
        return ""
    script = os.path.abspath(sys.argv[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if script.startswith(root + os.sep):
        script = os.path.relpath(script, root)
    return "; command: " + shlex.join(["python", script, *sys.argv[1:]])


def _devices() -> str:
    """This process's JAX devices: "1 × cpu", "8 × NVIDIA H200"."""
    import jax

    devices = jax.devices()
    return f"{len(devices)} × {devices[0].device_kind}"


def record(workdir: str, mode: str, seconds: float, args: list[str], steps: int | None = None) -> None:
    """Appends a command's line to `<workdir>/runs.jsonl`: mode (train or eval), the command (``args``: those of
    `python -m jaxnat.main`), commit, devices, jax and Python versions, when it ended (UTC) and its wall seconds;
    ``steps``: the run's step when its training ended. Written by the first process only."""
    import jax

    if jax.process_index() != 0:
        return
    entry = {"mode": mode, "command": shlex.join(["python", "-m", "jaxnat.main", *args]), "commit": commit(),
             "devices": _devices(), "jax": jax.__version__,
             "python": platform.python_version(),
             "ended": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
             "seconds": round(seconds, 1)}
    if steps is not None:
        entry["steps"] = steps
    with open(os.path.join(workdir, FILE), "a") as f:
        f.write(json.dumps(entry) + "\n")


def summary(workdir: str) -> dict | None:
    """A workdir's runs for a results table: the command that first trained it (else its first evaluation's), the
    commits and devices of every recorded command, the steps trained and the training's wall seconds (every
    training command summed: a resumed run's parts); None without a record."""
    from jaxnat.training.history import read_jsonl

    path = os.path.join(workdir, FILE)
    runs = read_jsonl(path)
    if not runs:
        return None
    for n, r in enumerate(runs, 1):  # each line as `record` writes it: a hand-edited one says which
        for key, kinds in SHAPE.items():
            if key not in r and key != "steps":
                raise JaxnatError(f"{path}: line {n} has no {key} (a line `python -m jaxnat.main` did not write?)")
            if key in r and (isinstance(r[key], bool) or not isinstance(r[key], kinds)):
                raise JaxnatError(f"{path}: line {n}'s {key} is {r[key]!r:.40}, not what `python -m jaxnat.main` "
                                  f"writes there ({' or '.join(k.__name__ for k in kinds)})")
    train = [r for r in runs if r["mode"] == "train"]
    return {"command": (train or runs)[0]["command"],
            "commits": sorted({r["commit"] or "unknown" for r in runs}),
            "devices": sorted({r["devices"] for r in runs}),
            "steps": max((r["steps"] for r in train if "steps" in r), default=None),
            "train_seconds": round(sum(r["seconds"] for r in train), 1) if train else None}
