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


# a stand-in for python under launch/multi30k_cmlm_rows.sh: prints its arguments and the cores it may run on, writes
# the metrics.json of a --workdir, prints a table for jaxnat.models.cmlm.positions; the training of FAIL_ROW fails
ROWS_PYTHON = """#!/usr/bin/env bash
echo "$* cores=$(taskset -pc $$ | sed 's/.*: //')"
case "$*" in *jaxnat.models.cmlm.positions*) echo "| positions of ${@: -1} |"; exit 0;; esac
prev=
for a in "$@"; do [ "$prev" = --workdir ] && wd=$a; prev=$a; done
case "$*" in *--mode\\ eval*) ;; *"$wd"*) [ "${wd##*/}" = "${FAIL_ROW:-}" ] && exit 1;; esac
mkdir -p "$wd" && echo '{}' > "$wd/metrics.json"
"""
ROWS = ("cmlm", "cmlm-revpos", "cmlm-corr", "cmlmc")


def run_rows(tmp_path, *args, **env):
    python = tmp_path / "python"
    python.write_text(ROWS_PYTHON)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "data").mkdir(exist_ok=True)
    script = os.path.join(os.path.dirname(QUEUE), "multi30k_cmlm_rows.sh")
    return subprocess.run(["bash", script, str(tmp_path / "data"), str(tmp_path / "runs"), *args], text=True,
                          env=dict(os.environ, PYTHON=str(python), **env), capture_output=True, timeout=60)


def test_cmlm_rows_script_trains_each_row_with_its_switches_then_diagnoses_and_evaluates(tmp_path):
    out = run_rows(tmp_path, "7", "--config.x=1", PIN="1")
    assert out.returncode == 0, out.stdout + out.stderr
    runs = tmp_path / "runs"
    switches = {"cmlm": (False, False, False), "cmlm-revpos": (True, True, False),
                "cmlm-corr": (False, False, True), "cmlmc": (True, True, True)}
    cores = len(os.sched_getaffinity(0))  # what nproc counts
    for i, row in enumerate(ROWS):
        train = (runs / f"{row}.train.log").read_text()
        assert len(train.splitlines()) == 1 and f"--workdir {runs / row} " in train
        assert "--config.train.steps=7 " in train and f"--config.data.dir={tmp_path / 'data'} " in train
        # the plain evaluation first; the user's flags come last, so they can override it
        assert train.index("--config.eval.constraints= ") < train.index("--config.x=1")
        for flag, on in zip(("cmlm.masked_attn", "cmlm.concat_pe", "cmlm.correction"), switches[row]):
            assert (f"--config.{flag}=false" not in train) == on, (row, flag)
        assert train.rstrip().endswith(f"cores={i % cores}")  # PIN=1: row i on core i mod nproc
        assert (runs / row / "metrics.plain.json").exists() and (runs / row / "metrics.full.json").exists()
        assert (runs / row / "positions.txt").read_text().endswith(f"| positions of {runs / row} |\n")
        evaluation = (runs / f"{row}.eval.log").read_text()
        assert "--mode eval" in evaluation and "--config.x=1" in evaluation and "iteration_sweep" not in evaluation
    # a second start finds every phase done and runs nothing
    again = run_rows(tmp_path, "7", "--config.x=1")
    assert again.returncode == 0
    for row in ROWS:
        for log in ("train", "eval"):
            assert len((runs / f"{row}.{log}.log").read_text().splitlines()) == 1


def test_cmlm_rows_script_trains_the_halves_of_reveal_position_on_request(tmp_path):
    # the paper's Table A.1: masked attention alone, concatenated positions alone, neither with the correction loss
    out = run_rows(tmp_path, "7", ROWS="cmlm-maskedattn cmlm-concatpe")
    assert out.returncode == 0, out.stdout + out.stderr
    halves = (("cmlm-maskedattn", "masked_attn", "concat_pe"), ("cmlm-concatpe", "concat_pe", "masked_attn"))
    for row, on, off in halves:
        train = (tmp_path / "runs" / f"{row}.train.log").read_text()
        assert f"--config.cmlm.{off}=false" in train and "--config.cmlm.correction=false" in train, row
        assert f"--config.model.{on}=false" not in train, row
    assert sorted(p.name for p in (tmp_path / "runs").iterdir() if p.is_dir()) == ["cmlm-concatpe", "cmlm-maskedattn"]


def test_cmlm_rows_script_reports_a_failed_row_and_goes_on_with_the_others(tmp_path):
    out = run_rows(tmp_path, "7", FAIL_ROW="cmlm-corr", ROWS="cmlm-corr cmlmc")
    assert out.returncode == 1 and "cmlm-corr: train failed" in out.stdout
    runs = tmp_path / "runs"
    assert (runs / "cmlmc" / "metrics.full.json").exists() and (runs / "cmlmc" / "positions.txt").exists()
    assert not (runs / "cmlm-corr.eval.log").exists() and not (runs / "cmlm-corr" / "positions.txt").exists()
    # bad arguments: one line and exit 2
    for args, env, message in (((), {"ROWS": "cmlm nosuchrow"}, "no row 'nosuchrow'"),
                               (("x",), {}, "usage: DATA_DIR RUNS_DIR")):
        script = os.path.join(os.path.dirname(QUEUE), "multi30k_cmlm_rows.sh")
        data = [str(tmp_path / "data"), str(runs)] if not args else list(args)
        bad = subprocess.run(["bash", script, *data], env=dict(os.environ, **env), capture_output=True, text=True,
                             timeout=60)
        assert bad.returncode == 2 and bad.stderr.startswith("multi30k_cmlm_rows.sh: ") and message in bad.stderr
