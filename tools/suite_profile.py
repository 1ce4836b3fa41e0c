"""Where the test suite's time goes: each test's wall seconds (setup, call and teardown), and of them the seconds its
own process spent tracing, lowering to StableHLO and XLA-compiling (jax's compile log), with the programs it
compiled and the ones it read back from the persistent compilation cache. The rest is running, Python (the
plain-Python references, hypothesis) and waiting on subprocesses: a command-line test's runs compile in their own
processes, so their compiling shows there, in the remainder.

    python tools/suite_profile.py                      # the whole suite, as the README runs it (-n 2)
    python tools/suite_profile.py tests/test_cmlm.py -n 0 --top 30

Arguments other than --top go to pytest. Prints markdown tables: the totals, the files, the programs (by the
name jax gives them: ``jit(init)`` is every model's initialisation), the slowest tests. The same module is the
pytest plugin that records them (``-p suite_profile`` with tools/ on PYTHONPATH), one JSON file per worker.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time

import pytest

OUT = "SUITE_PROFILE_DIR"  # where the plugin writes, one file per pytest process
KINDS = {"tracing": "trace", "jaxpr to MLIR module conversion": "lower", "XLA compilation of": "xla"}
FINISHED = re.compile(r"Finished (tracing|jaxpr to MLIR module conversion|XLA compilation of) (.+?) in ([0-9.e-]+) sec")
FIELDS = ("wall", "trace", "lower", "xla", "programs", "hits")

# ----------------------------------------------------------------------------------------------- the plugin
_current: dict | None = None  # the running test's record
_records: dict[str, dict] = {}


class _CompileLog(logging.Handler):
    def emit(self, record):
        if _current is None:
            return
        message = record.getMessage()
        found = FINISHED.search(message)
        if found:
            kind = KINDS[found.group(1)]
            _current[kind] += float(found.group(3))
            if kind == "xla":
                _current["programs"] += 1
                _current["compiled"].append([found.group(2), float(found.group(3))])
        elif message.startswith("Persistent compilation cache hit"):
            _current["hits"] += 1


def pytest_configure(config):
    import jax

    jax.config.update("jax_log_compiles", True)  # the "Finished ..." lines, at WARNING
    logging.getLogger("jax._src.compiler").setLevel(logging.DEBUG)  # its cache hits are DEBUG lines
    logging.getLogger("jax").addHandler(_CompileLog())  # the children's records propagate to it


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    global _current
    _current = _records[item.nodeid] = {**dict.fromkeys(FIELDS, 0.0), "compiled": []}
    _current["start"] = time.perf_counter()


def pytest_runtest_logfinish(nodeid, location):
    global _current
    if _current is not None:
        _current["wall"] = time.perf_counter() - _current.pop("start")
        _current = None


def pytest_sessionfinish(session):
    if os.environ.get(OUT) and _records:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(os.path.join(os.environ[OUT], f"{worker}.json"), "w") as f:
            json.dump(_records, f)


# ----------------------------------------------------------------------------------------------- the tables
def _row(name: str, r: dict) -> str:
    rest = r["wall"] - r["trace"] - r["lower"] - r["xla"]
    return (f"| {name} | {r['wall']:.1f} | {r['trace']:.1f} | {r['lower']:.1f} | {r['xla']:.1f} | "
            f"{int(r['programs'])} | {int(r['hits'])} | {rest:.1f} |")


def tables(records: dict[str, dict], top: int) -> list[str]:
    header = ["| {} | wall (s) | tracing (s) | lowering (s) | XLA compiling (s) | programs | cache hits | rest (s) |",
              "|---|---|---|---|---|---|---|---|"]
    files: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    programs, counts = collections.Counter(), collections.Counter()
    for test, r in records.items():
        files[test.split("::")[0]].update({k: r[k] for k in FIELDS})
        for name, seconds in r["compiled"]:
            programs[name] += seconds
            counts[name] += 1
    total = collections.Counter()
    for r in files.values():
        total.update(r)
    lines = [f"{len(records)} tests", "", header[0].format(""), header[1], _row("all", total), "",
             f"## The {min(top, len(files))} longest files", "", header[0].format("file"), header[1]]
    lines += [_row(f, r) for f, r in sorted(files.items(), key=lambda fr: -fr[1]["wall"])[:top]]
    lines += ["", f"## The {min(top, len(programs))} programs of most XLA compiling", "",
              "| program | compiles | XLA compiling (s) |", "|---|---|---|"]
    lines += [f"| {name} | {counts[name]} | {seconds:.1f} |" for name, seconds in programs.most_common(top)]
    lines += ["", f"## The {min(top, len(records))} longest tests", "", header[0].format("test"), header[1]]
    lines += [_row(t, r) for t, r in sorted(records.items(), key=lambda tr: -tr[1]["wall"])[:top]]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--top", type=int, default=20, help="rows in each table")
    args, pytest_args = parser.parse_known_args(argv)
    here = os.path.dirname(os.path.abspath(__file__))  # tools/: pytest imports this module as its plugin from it
    root = os.path.dirname(here)
    with tempfile.TemporaryDirectory(prefix="suite-profile-") as out:
        env = dict(os.environ, **{OUT: out}, PYTHONPATH=os.pathsep.join(
            [here, *filter(None, [os.environ.get("PYTHONPATH")])]))
        started = time.perf_counter()
        result = subprocess.run([sys.executable, "-m", "pytest", "-p", "suite_profile", "-q",
                                 *(pytest_args or ["-n", "2", "tests"])], cwd=root, env=env)
        elapsed = time.perf_counter() - started
        records = {}
        for path in glob.glob(os.path.join(out, "*.json")):
            with open(path) as f:
                records.update(json.load(f))
    if not records:
        print("suite_profile: pytest recorded no test", file=sys.stderr)
        return result.returncode or 1
    print(f"# The test suite's time: pytest {elapsed:.0f} s of wall time, exit status {result.returncode}\n")
    print("\n".join(tables(records, args.top)))
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
