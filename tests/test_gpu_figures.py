"""bench/gpu_figures.py, the GPU call's figures, reads them from what a `python -m jaxnat.main` run logs and writes
(the session's tiny AR run, conftest.py): a reworded log line or a renamed history key would otherwise leave the
GPU call's table empty, found only after the call."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

from jaxnat.training.history import read_history

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _gpu_figures():
    spec = importlib.util.spec_from_file_location("gpu_figures", os.path.join(ROOT, "bench", "gpu_figures.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_runs_figures_are_read_from_its_log_and_history(ar_run, tmp_path):
    figures = _gpu_figures()
    log = (ar_run.parent / "train.log").read_text()
    # the tiny run logs once (step 4), beside its train program's compiling: four windows of that entry, the first
    # left out as the warm-up, the second as beside the compiling, the others compiled
    trained = [entry for entry in read_history(str(ar_run)) if "loss" in entry]
    assert trained[0].pop("compiling")
    workdir = tmp_path / "run"  # what read_run reads of a workdir: its metrics and the history written below
    workdir.mkdir()
    shutil.copy(ar_run / "metrics.json", workdir)
    windows = [trained[0], {**trained[0], "tokens_per_s": 1.0, "compiling": True}, trained[0], trained[0]]
    (workdir / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in windows))
    out = figures.read_run(str(workdir), log)
    assert out["first_step_s"] > 0
    assert out["tokens_per_s"] == trained[0]["tokens_per_s"] and out["mfu"] == trained[0]["mfu"] > 0
    assert out["peak_tflops"] == 0.1  # tests/configs/tiny.py's train.peak_tflops
    assert out["flops_from"] == "XLA's cost analysis, each loop's iterations counted" and out["batch"] == "[(10, 48)]"
    row = figures.table({"families": {"ar": {"rc": 0, **out}}}).splitlines()[2]
    assert row.startswith(f"| ar | [(10, 48)] | {out['first_step_s']:.0f} | {out['tokens_per_s']:.0f} | ")
    # a run that failed says why under the table
    failed = {"rc": 2, "error": "jaxnat: error: no such key"}
    assert "\nar: exit 2: jaxnat: error: no such key" in figures.table({"families": {"ar": failed}})


def test_every_core_dependency_is_in_the_gpu_image_or_carried():
    """A core dependency the GPU image lacks and bench/gpu_prepare.sh does not carry stops every command of a GPU
    call at its start (subword-nmt did, from 32c41ca until this test)."""
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    done = subprocess.run(["bash", os.path.join(ROOT, "bench", "gpu_prepare.sh"), "--check"], env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_command_is_checked_before_any_run(monkeypatch, tmp_path):
    """A flag the parser does not know goes to every family's run as an override: a typo failed each run in turn
    (exit 0, a table of dashes) unless a --variant was given; now it, a count under 1, a missing --data-dir and an
    --out that is a file stop the command with one line before the first run."""
    figures = _gpu_figures()
    monkeypatch.setattr(figures, "machine_apart", lambda env: pytest.fail("a run started"))
    afile = tmp_path / "afile"
    afile.write_text("")
    data = str(tmp_path)
    for argv, error in (([f"--data-dir={data}", "--families", "ar,levt", "--stesp", "5"],
                         "error: ar: unrecognised argument --stesp"),
                        ([f"--data-dir={data}", "--families", "ar", "--config.train.bogus=1"],
                         "error: ar: unknown config key train.bogus"),
                        ([f"--data-dir={data}", "--steps", "0"], "error: --steps and --repeats must be at least 1"),
                        (["--data-dir", str(tmp_path / "none")], "error: --data-dir .*: no such directory"),
                        ([f"--data-dir={data}", "--out", str(afile)], "error: --out .*: not a directory")):
        out = [] if "--out" in argv else ["--out", str(tmp_path / "out")]
        monkeypatch.setattr("sys.argv", ["gpu_figures.py", *argv, *out])
        with pytest.raises(SystemExit, match=f"^{error}"):
            figures.main()


def test_a_call_whose_every_run_failed_exits_non_zero(monkeypatch, tmp_path):
    """Every family failing (a broken GPU image, a bad data dir) ended the device call with exit 0 and a table of
    dashes: now its last line says so and the exit status is 1."""
    figures = _gpu_figures()
    monkeypatch.setattr(figures, "machine_apart", lambda env: "machine")
    failed = subprocess.CompletedProcess([], 1, "", "jaxnat: error: boom\n")
    monkeypatch.setattr(figures.subprocess, "run", lambda *a, **k: failed)
    monkeypatch.setattr("sys.argv", ["gpu_figures.py", f"--data-dir={tmp_path}", "--families", "ar",
                                     "--out", str(tmp_path / "out")])
    with pytest.raises(SystemExit, match="^error: no run finished"):
        figures.main()
    assert "ar: exit 1: jaxnat: error: boom" in (tmp_path / "out" / "figures.md").read_text()
