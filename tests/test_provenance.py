"""jaxnat.provenance: each command's line in runs.jsonl, and a workdir's summary for the results tables."""

import json
import os

import jax
import pytest

from jaxnat import provenance
from jaxnat.errors import JaxnatError


def _lines(workdir):
    return [json.loads(line) for line in (workdir / provenance.FILE).read_text().splitlines()]


def test_a_resumed_runs_parts_are_summed_and_its_last_step_kept(tmp_path):
    args = ["--config", "configs/ar/demo.py", "--workdir", "runs/my run"]
    provenance.record(str(tmp_path), "train", 61.04, args, steps=400)  # stopped by SIGTERM at step 400
    provenance.record(str(tmp_path), "train", 100.0, args, steps=1000)  # the same command, resumed
    provenance.record(str(tmp_path), "eval", 12.0, ["--mode", "eval", *args])
    first = _lines(tmp_path)[0]
    assert first["command"] == "python -m jaxnat.main --config configs/ar/demo.py --workdir 'runs/my run'"
    assert first["devices"] == f"{jax.device_count()} × {jax.devices()[0].device_kind}"
    assert first["seconds"] == 61.0 and first["steps"] == 400 and first["ended"].endswith("UTC")
    assert "steps" not in _lines(tmp_path)[2]
    summary = provenance.summary(str(tmp_path))
    assert summary["steps"] == 1000 and summary["train_seconds"] == 161.0
    assert summary["command"] == first["command"] and len(summary["commits"]) == 1
    with open(tmp_path / provenance.FILE, "a") as f:  # a line a killed process left unfinished is not read
        f.write('{"mode": "train", "seco')
    assert provenance.summary(str(tmp_path)) == summary


def test_an_evaluated_copy_without_training_lines(tmp_path):
    provenance.record(str(tmp_path), "eval", 3.0, ["--mode", "eval"])
    summary = provenance.summary(str(tmp_path))
    assert summary["steps"] is None and summary["train_seconds"] is None
    assert summary["command"] == "python -m jaxnat.main --mode eval"
    assert provenance.summary(str(tmp_path / "elsewhere")) is None
    for line, why in (({"command": "x"}, "line 2 has no mode"),  # hand-edited lines: one line saying which
                      ({**_lines(tmp_path)[0], "seconds": "3"}, "line 2's seconds is '3', not .* \\(int or float\\)"),
                      ({**_lines(tmp_path)[0], "steps": True}, "line 2's steps is True")):
        (tmp_path / provenance.FILE).write_text(json.dumps(_lines(tmp_path)[0]) + "\n" + json.dumps(line) + "\n")
        with pytest.raises(JaxnatError, match=why):
            provenance.summary(str(tmp_path))


def test_the_commit_of_the_checkout_else_the_variable(tmp_path, monkeypatch):
    import subprocess

    monkeypatch.setattr(provenance, "SOURCE", str(tmp_path))  # not a git checkout
    monkeypatch.setenv("JAXNAT_COMMIT", "abc123")
    assert provenance.commit() == "abc123"
    monkeypatch.delenv("JAXNAT_COMMIT")
    assert provenance.commit() is None

    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    with monkeypatch.context() as m:  # a machine without git
        m.setattr(provenance.subprocess, "run", no_git)
        m.setenv("JAXNAT_COMMIT", "def456")
        assert provenance.commit() == "def456"
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "f.txt").write_text("a\n")
    subprocess.run([*git, "add", "f.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert provenance.commit() == head
    (tmp_path / "f.txt").write_text("b\n")
    assert provenance.commit() == head + "+changes"


def test_the_machine_line_names_the_command_as_typed_in_the_repository(monkeypatch):
    """A benchmark's table carries its command (`provenance.machine`), the script relative to the repository."""
    import sys

    from jaxnat import provenance

    root = os.path.dirname(os.path.dirname(os.path.abspath(provenance.__file__)))
    monkeypatch.setattr(sys, "argv", [os.path.join(root, "bench", "oracle.py"), "--repeats", "5", "--out", "a b"])
    assert provenance._command() == "; command: python bench/oracle.py --repeats 5 --out 'a b'"
    monkeypatch.setattr(sys, "argv", ["-c"])  # python -c: no command to name
    assert provenance._command() == ""
