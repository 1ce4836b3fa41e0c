"""launch/queue.sh schedules every job after its prerequisites, skips the dependents of a failed job, and does
not run a finished job again — checked with a stand-in Python that only records its arguments."""

import os
import re
import shutil
import stat
import subprocess

import pytest

QUEUE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "launch", "queue.sh")
# prerequisites the queue must respect (a sample of its job list)
NEEDS = {"vecconst": {"ar", "align"}, "speed-vecconst": {"vecconst"}, "vecconst-long": {"vecconst"},
         "natbase": {"distill"}, "covnat-sca": {"covnat"}, "covnat-sca-rescored": {"covnat-sca"},
         "speed-nat": {"natbase", "covnat"}, "covnat-ft": {"covnat"},
         "cmlmc-rescored": {"cmlmc"}, "speed-cmlm": {"cmlm", "cmlmc"}}
# a stand-in for python: prints its arguments (into the job's log), creates the --workdir it is given (so that the
# evaluated copies find a run to copy), fails for the Coverage-NAT pre-training job
FAKE_PYTHON = """#!/usr/bin/env bash
echo "$@"
prev=
for a in "$@"; do
  [ "$prev" = --workdir ] && mkdir -p "$a"
  prev=$a
done
case "$*" in *covnat-multi30k*--config.train.steps*) exit 1;; esac
exit 0
"""

# the queue locks jobs with flock and pins workers with taskset (util-linux, on every Debian machine and in CI);
# a system without them (macOS) cannot run the script at all, so the test has nothing to check there
pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in ("flock", "taskset", "realpath")),
                                reason="needs util-linux's flock and taskset")


def run_queue(tmp_path, script=QUEUE, *args, **env):
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, PYTHON=str(python), CORES="2", POLL="0.2", DATA=str(tmp_path / "data"), **env)
    out = subprocess.run(["bash", script, *(args or [str(tmp_path / "runs")])], env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    return re.findall(r"^\S+ \S+ (start|done|FAILED) (\S+)", out, re.M)


def test_queue_order_failures_and_resume(tmp_path):
    events = run_queue(tmp_path)
    done_at = {name: i for i, (what, name) in enumerate(events) if what == "done"}
    started = [name for what, name in events if what == "start"]
    assert len(started) == len(set(started)), "a job ran twice"
    for i, (what, name) in enumerate(events):
        if what == "start":
            for need in NEEDS.get(name, ()):
                assert done_at.get(need, len(events)) < i, f"{name} started before {need} was done"
    assert ("FAILED", "covnat") in events
    # everything that needs the failed job directly or indirectly is left alone, everything else ran
    blocked = ("covnat-sca", "covnat-rescored", "covnat-sca-rescored", "speed-nat", "covnat-ft")
    assert not set(blocked) & set(started)
    for name in ("ar", "align", "distill", "natbase", "natbase-rescored", "vecconst", "ar-pairs", "ar-pairs-cs",
                 "cmlmc", "cmlmc-rescored", "speed-cmlm", "vecconst-long", "cmlm-concatpe"):
        assert name in done_at, name
    # the evaluated and the trained-on copies, each made whole
    for copy in ("cmlmc-rescored", "vecconst-long"):
        assert os.path.isdir(tmp_path / "runs" / f"{copy}-multi30k") and not os.path.exists(
            tmp_path / "runs" / f"{copy}-multi30k.partial")
    long_log = (tmp_path / "runs" / "queue" / "vecconst-long.log").read_text()
    assert "--config.train.steps=3000" in long_log  # and otherwise the copied run's settings
    assert f"--config.train.init_from={tmp_path / 'runs' / 'ar-multi30k'} " in long_log
    # --status: one line a job, with a training job's newest checkpoint and validation BLEU
    covnat = tmp_path / "runs" / "covnat-multi30k"
    for step in ("250", "1000", "750", "1250.orbax-checkpoint-tmp-3"):  # the last one being written
        os.makedirs(covnat / "checkpoints" / "last" / step)
    (covnat / "history.jsonl").write_text('{"step": 250, "valid_loss": 2.5, "valid_bleu": 12.3456}\n'
                                          '{"step": 300, "loss": 2.1}\n')
    status = subprocess.run(["bash", QUEUE, "--status", str(tmp_path / "runs")], capture_output=True, text=True,
                            timeout=60, check=True).stdout.splitlines()
    assert len(status) == len(set(started)) + len(blocked)  # every job: the skipped ones too
    assert "natbase              done" in status
    assert [line.split(None, 1)[1] for line in status if line.startswith("covnat ")] == [
        f"FAILED (see {tmp_path}/runs/queue/covnat.log), step 1000 of 2500, valid BLEU 12.34 at step 250"]
    assert "speed-nat            to run" in status
    # a second start runs only what did not finish: the failed job again (and it fails again)
    again = run_queue(tmp_path)
    assert [name for what, name in again if what == "start"] == ["covnat"]


def test_paper_script_runs_its_jobs_and_their_prerequisites_only(tmp_path):
    """launch/multi30k_nat.sh is the queue restricted to the NAT rows (ONLY), with its STEPS argument."""
    script = os.path.join(os.path.dirname(QUEUE), "multi30k_nat.sh")
    events = run_queue(tmp_path, script, str(tmp_path / "nat-data"), str(tmp_path / "runs"), "7")
    # covnat fails (the stand-in), so neither its SCA phase nor what follows runs
    assert {name for what, name in events if what == "start"} == {
        "ar", "distill", "natbase", "covnat", "natbase-rescored"}
    logs = tmp_path / "runs" / "queue"
    assert "--config.train.steps=7 " in (logs / "natbase.log").read_text()
    assert "--config.train.steps=2500" in (logs / "ar.log").read_text()
    assert f"--config.data.dir={tmp_path / 'nat-data'} " in (logs / "ar.log").read_text()


def test_unknown_job_is_one_line_error(tmp_path):
    out = subprocess.run(["bash", QUEUE, str(tmp_path / "runs")], env=dict(os.environ, ONLY="natbase nosuchjob"),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.startswith("queue.sh: no job 'nosuchjob'") and not out.stdout
