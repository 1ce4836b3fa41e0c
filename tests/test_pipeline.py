"""launch/multi30k.py runs every job after the jobs it needs, leaves the dependents of a failed job for the next
start, does not run a finished job again, and names only configs that exist — checked with a stand-in Python
that records its arguments."""

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time

import pytest

from tests import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PIPELINE = os.path.join(ROOT, "launch", "multi30k.py")
# a stand-in for python: prints its arguments (into the job's log), creates the --workdir it is given (a run the
# evaluated copies can copy), fails for the Coverage-NAT pre-training job unless ALLOW_COVNAT is set; with SLOW_AR
# the teacher's job runs until a SIGTERM, which it answers as a training run does (a line, exit 143), with SLEEP
# every job for that many seconds; the first line of a job's log is the device memory share it was given
FAKE_PYTHON = """#!/usr/bin/env bash
echo "memory fraction ${XLA_PYTHON_CLIENT_MEM_FRACTION:-unset}"
echo "$@"
if [ -n "${SLEEP:-}" ]; then trap 'echo stopped by SIGTERM; exit 143' TERM; sleep "$SLEEP" & wait; fi
prev=
for a in "$@"; do
  [ "$prev" = --workdir ] && mkdir -p "$a"
  prev=$a
done
case "$*" in *"--workdir "*/covnat" "*) [ -n "${ALLOW_COVNAT:-}" ] || exit 1;; esac
case "$*" in *"--workdir "*/ar" "*) if [ -n "${SLOW_AR:-}" ]; then
  trap 'echo stopped by SIGTERM; exit 143' TERM; sleep 60 & wait; fi;; esac
exit 0
"""


def _pipeline(tmp_path, *args, check=True, **env):
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "data").mkdir(exist_ok=True)
    result = cli.run([sys.executable, PIPELINE, "--data-dir", str(tmp_path / "data"), "--runs",
                      str(tmp_path / "runs"), "--python", str(python), *args],
                     env=dict(os.environ, **env), timeout=120)
    assert not check or result.returncode in (0, 1, 3), result.stderr
    return result, re.findall(r"^\S+ \S+ (start|done|FAILED|skip) (\S+)", result.stdout, re.M)


def test_order_failures_and_resume(tmp_path):
    result, events = _pipeline(tmp_path)
    assert result.returncode == 1  # covnat failed
    started = [name for what, name in events if what == "start"]
    done = [name for what, name in events if what == "done"]
    assert len(started) == len(set(started))
    needs = {"distill": {"ar"}, "vecconst": {"ar", "align"}, "natbase": {"distill"}, "covnat-sca": {"covnat"},
             "cmlmc-rescored": {"cmlmc"}, "speed-nat": {"natbase", "covnat"}, "report-edit": {"levt", "editor"}}
    for name, before in needs.items():
        if name in started:
            assert all(done.index(b) < started.index(name) for b in before), name
    assert ("FAILED", "covnat") in events
    blocked = {"covnat-sca", "covnat-ft", "covnat-rescored", "covnat-sca-rescored", "covnat-sca-lambda0", "speed-nat",
               "report-nat", "report-nat-seeds"}
    assert {name for what, name in events if what == "skip"} == blocked
    assert {"ar", "distill", "align", "natbase", "cmlmc", "cmlmc-rescored", "report-cmlm", "report-edit",
            "report-vecconst"} <= set(done)
    runs = tmp_path / "runs"
    assert (runs / "cmlmc-rescored").is_dir() and not (runs / "cmlmc-rescored.partial").exists()  # a whole copy
    log = (runs / "pipeline" / "cmlmc-rescored.log").read_text()
    assert f"--mode eval --config configs/cmlm/multi30k.py --workdir {runs}/cmlmc-rescored" in log
    assert f"--config.cmlm.rescorer={runs}/ar" in log
    cs = (runs / "pipeline" / "report-vecconst-cs.log").read_text()  # the code-switched rows: their own split
    assert f"{runs}/ar-pairs-cs {runs}/vecconst-cs --split test_2016_flickr.cs --out {runs}/reports/vecconst-cs" in cs
    # --status: one line a job
    status = _pipeline(tmp_path, "--status")[0].stdout.splitlines()
    assert "natbase              done" in status and "covnat-sca           to run" in status
    # the next start runs what did not finish, the failed job first, and its dependents once it succeeds
    again = _pipeline(tmp_path, ALLOW_COVNAT="1")[1]
    assert [name for what, name in again if what == "start"][0] == "covnat"
    assert {name for what, name in again if what == "done"} == {"covnat"} | blocked


def test_only_runs_a_job_and_what_it_needs(tmp_path):
    events = _pipeline(tmp_path, "--only", "speed-cmlm")[1]
    assert [name for what, name in events if what == "start"] == ["ar", "cmlm", "cmlmc", "speed-cmlm"]
    result, _ = _pipeline(tmp_path, "--only", "nope", check=False)
    assert result.returncode != 0 and "no job 'nope'" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("gpu", [False, True])
def test_every_config_it_names_exists(tmp_path, gpu):
    """... and every training and evaluation command's overrides are keys of its config, with valid values."""
    import shlex

    from jaxnat.config import build_config

    out = _pipeline(tmp_path, "--dry-run", *(["--gpu"] if gpu else []))[0].stdout
    configs = set(re.findall(r"--config (\S+)", out))
    assert len(configs) == 11 + gpu and all(os.path.isfile(os.path.join(ROOT, c)) for c in configs), configs
    assert all(c.endswith("_gpu.py") == gpu for c in configs)
    for line in out.splitlines():
        argv = shlex.split(line.split(": ", 1)[1].split(") ", 1)[-1])
        if "jaxnat.main" in argv:  # (a rescorer is checked where it is read: its run does not exist here)
            build_config(argv[argv.index("--config") + 1],
                         [a for a in argv if a.startswith("--config.") and "rescorer=" not in a])


@pytest.mark.parametrize("gpu", [False, True])
def test_a_run_started_from_another_has_its_model(tmp_path, gpu):
    """Each job that starts from another job's run (train.init_from: Coverage-NAT's SCA phase, the vectorized
    model's stage 2) names a config whose model keys (layer sizes, scanned stacks, vocabulary) are that run's, but
    for the keys of the model it extends: what the trainer checks before it loads the parameters."""
    import json
    import shlex

    from jaxnat.config import build_config, check_matches_workdir, model_keys

    out = _pipeline(tmp_path, "--dry-run", *(["--gpu"] if gpu else []))[0].stdout
    configs = {}  # workdir -> the config its job trains
    started = 0
    for line in out.splitlines():
        argv = shlex.split(line.split(": ", 1)[1].split(") ", 1)[-1])
        if "jaxnat.main" not in argv or "--mode" in argv:
            continue
        config = build_config(argv[argv.index("--config") + 1],
                              [a for a in argv if a.startswith("--config.") and "rescorer=" not in a])
        configs[argv[argv.index("--workdir") + 1]] = config
        if config.train.init_from:
            source = configs[config.train.init_from]
            workdir = tmp_path / f"source{started}"
            workdir.mkdir()
            (workdir / "config.json").write_text(json.dumps(source.to_dict()))
            own = [k for k in model_keys(config.model.name) if k not in model_keys(source.model.name)]
            check_matches_workdir(config, str(workdir), ("model.name", *own) if own else ())
            started += 1
    assert started == 8  # covnat-sca, covnat-ft, natbase-ft; vecconst, vecconst-vdba, vecconst-cs, vecconst-s1, -s2


def test_align_from_overrides_and_time_limit(tmp_path):
    """--align-from copies the pairs made elsewhere instead of aligning; --config.KEY=VALUE ends every command that
    takes a config; --time-limit stops the job running at the limit (SIGTERM) and starts no other, and the same
    command then goes on with it."""
    pairs = tmp_path / "pairs"
    pairs.mkdir()
    (pairs / "train.cs.pairs.jsonl").write_text("[]\n")
    flags = ("--align-from", str(pairs), "--config.train.steps=7", "--tables", "vecconst")
    result, events = _pipeline(tmp_path, *flags)
    assert result.returncode == 0 and ("done", "align") in events
    runs = tmp_path / "runs"
    assert (runs / "align" / "train.cs.pairs.jsonl").is_file()
    assert (runs / "pipeline" / "align.log").read_text() == ""  # nothing ran
    for job in ("ar", "vecconst", "ar-pairs", "speed-vecconst"):
        assert (runs / "pipeline" / f"{job}.log").read_text().rstrip().endswith("--config.train.steps=7"), job
    assert "--config.train.steps" not in (runs / "pipeline" / "report-vecconst.log").read_text()
    bad, _ = _pipeline(tmp_path, "--steps=7", check=False)
    assert bad.returncode == 2 and "unrecognized argument '--steps=7' (overrides are --config.KEY=VALUE)" in bad.stderr
    bad, _ = _pipeline(tmp_path, "--align-from", str(tmp_path), check=False)
    assert bad.returncode == 2 and "no train.cs.pairs.jsonl there" in bad.stderr

    limited = tmp_path / "limited"
    limited.mkdir()
    result, events = _pipeline(limited, "--time-limit", "2", "--only", "distill", SLOW_AR="1")
    assert result.returncode == 3 and "time limit reached: stopped ar" in result.stdout
    assert [e for e in events if e[0] != "skip"] == [("start", "ar")]
    assert "stopped by SIGTERM" in (limited / "runs" / "pipeline" / "ar.log").read_text()
    assert not (limited / "runs" / "pipeline" / "done" / "ar").exists()
    result, events = _pipeline(limited, "--only", "distill")
    assert result.returncode == 0 and [e for e in events if e[0] == "done"] == [("done", "ar"), ("done", "distill")]


def test_status_says_how_far_a_training_job_is(tmp_path):
    """--status said "step 250" of a training job, not of how many steps: now its config.json's train.steps too."""
    sys.path.insert(0, os.path.dirname(PIPELINE))
    try:
        from multi30k import Job, progress
    finally:
        sys.path.remove(os.path.dirname(PIPELINE))
    workdir = tmp_path / "ar"
    job = Job("ar", (), ("-m", "jaxnat.main", "--config", "c.py", "--workdir", str(workdir)))
    assert progress(job) == ""
    (workdir / "checkpoints" / "last" / "250").mkdir(parents=True)
    assert progress(job) == ", step 250"  # no config.json (yet): the step alone
    (workdir / "config.json").write_text(json.dumps({"train": {"steps": 4000}}))
    (workdir / "history.jsonl").write_text(json.dumps({"step": 250, "valid_bleu": 12.345}) + "\n")
    assert progress(job) == ", step 250 of 4000, valid BLEU 12.35 at step 250"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_pipeline_stops_its_jobs_as_a_time_limit_does(tmp_path, signum):
    """Ctrl-C killed the running training job (SIGKILL: its steps since the last checkpoint lost) and printed a
    traceback; SIGTERM ended the pipeline without a word and left the job running, orphaned, beside the next start's.
    Now each gives the job a SIGTERM (a training run checkpoints), one line, and 128 + the signal's number."""
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "data").mkdir()
    log = tmp_path / "runs" / "pipeline" / "ar.log"
    # started with Ctrl-C's default, as at a terminal: a suite started in the background (a shell's `&`) passes SIGINT
    # ignored to its children, and Python then never raises KeyboardInterrupt (an exec keeps the default it is given)
    at_default = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                  "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")
    pipeline = subprocess.Popen([sys.executable, "-c", at_default, PIPELINE, "--data-dir", str(tmp_path / "data"),
                                 "--runs", str(tmp_path / "runs"), "--python", str(python), "--only", "ar"],
                                env=dict(os.environ, SLOW_AR="1"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    deadline = time.time() + 60
    while "--workdir" not in (log.read_text() if log.exists() else "") and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the job's trap is set
    pipeline.send_signal(signum)
    out, _ = pipeline.communicate(timeout=60)
    assert pipeline.returncode == 128 + signum, out
    assert f"interrupted ({signal.Signals(signum).name}): stopped ar (the same command resumes it)" in out
    assert "Traceback" not in out and "stopped by SIGTERM" in log.read_text()
    assert not (tmp_path / "runs" / "pipeline" / "done" / "ar").exists()


@pytest.mark.slow
def test_parallel_jobs(tmp_path):
    """--parallel 3: up to three jobs at once, each started once the jobs it needs are done, each process given
    0.9/3 of the device memory (or the share the user set; none for one job at a time), a speed job with none
    beside it. A time limit stops every running job."""
    result, events = _pipeline(tmp_path, "--parallel", "3", "--tables", "nat,cmlm", SLEEP="0.1", ALLOW_COVNAT="1")
    assert result.returncode == 0
    started = [name for what, name in events if what == "start"]
    assert len(started) == len(set(started)) and {what for what, _ in events} == {"start", "done"}
    running, finished, most = set(), set(), 0
    needs = {"distill": {"ar"}, "covnat-sca": {"covnat"}, "cmlmc-rescored": {"cmlmc", "ar"},
             "speed-nat": {"natbase", "covnat"}, "report-cmlm": {"cmlm", "cmlmc", "cmlm-corr"}}
    for what, name in events:
        if what == "start":
            assert needs.get(name, set()) <= finished, name
            assert not any(r.startswith("speed-") for r in running) and not (name.startswith("speed-") and running)
            running.add(name)
            most = max(most, len(running))
        else:
            running.remove(name)
            finished.add(name)
    assert most == 3
    runs = tmp_path / "runs"
    assert (runs / "pipeline" / "covnat.log").read_text().startswith("memory fraction 0.30\n")
    for name, flags, env, share in (("set", ("--parallel", "2"), {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"}, "0.5"),
                                    ("one", (), {}, "unset")):  # the user's own share; one job: JAX's default
        (tmp_path / name).mkdir()
        assert _pipeline(tmp_path / name, *flags, "--only", "align", **env)[0].returncode == 0
        log = (tmp_path / name / "runs" / "pipeline" / "align.log").read_text()
        assert log.startswith(f"memory fraction {share}\n")

    limited = tmp_path / "limited"
    limited.mkdir()
    result, events = _pipeline(limited, "--parallel", "2", "--time-limit", "1", "--only", "distill", "vecconst",
                               SLEEP="60")
    assert result.returncode == 3 and events == [("start", "ar"), ("start", "align")]
    for job in ("ar", "align"):
        assert f"time limit reached: stopped {job}" in result.stdout
        assert "stopped by SIGTERM" in (limited / "runs" / "pipeline" / f"{job}.log").read_text()
    bad, _ = _pipeline(tmp_path, "--parallel", "0", check=False)
    assert bad.returncode == 2 and "--parallel: a number of jobs >= 1" in bad.stderr


def test_the_seeds_table(tmp_path):
    """--tables seeds: seeds 1 and 2 of each paper's comparison, each a run of its seed-0 job's command with
    train.seed set and its own workdir, started from (or a copy of) the same seed's run where that is reseeded
    too (the vectorized model's AR model); a report per comparison names the three runs of each alike."""
    out = _pipeline(tmp_path, "--dry-run", "--tables", "seeds")[0].stdout
    lines = dict(line.split(": ", 1) for line in out.splitlines())
    runs = tmp_path / "runs"
    for job in ("levt", "editor", "cmlm", "cmlmc", "natbase", "covnat", "ar", "vecconst"):
        for seed in (1, 2):
            line = lines[f"{job}-s{seed}"]
            assert line.endswith(f"--config.train.seed={seed}") and f"--workdir {runs / f'{job}-s{seed}'} " in line
            assert line.replace(f"-s{seed}", "").replace(f" --config.train.seed={seed}", "") == lines[job]
    assert f"--config.train.init_from={runs / 'ar-s1'} " in lines["vecconst-s1"]
    assert lines["ar-pairs-s2"].startswith(f"(copy {runs / 'ar-s2'} -> {runs / 'ar-pairs-s2'}) ")
    report = lines["report-edit-seeds"]
    assert f"{runs / 'levt'} {runs / 'levt-s1'} {runs / 'levt-s2'} {runs / 'editor'} " in report
    assert "--names levt,levt,levt,editor,editor,editor --column=BLEU=bleu " in report
    # the table of the paper's columns, and where each run's validation curve ended (shell-quoted: labels have spaces)
    assert report.endswith(" '--column=best valid BLEU (step)=training.best/training.best_step' "
                           "'--column=gain, last fifth=training.gain'")
    events = _pipeline(tmp_path, "--only", "vecconst-s1")[1]
    assert [name for what, name in events if what == "start"] == ["align", "ar-s1", "vecconst-s1"]


def test_the_one_pass_models_best_decodings_read_the_lms_of_their_runs(tmp_path):
    """The onepass table's papers' best decodings: `--mode lm` writes each run's 4-gram LM beside it, which a copy of
    the run evaluates with (DA-Transformer's beam, the authors' own search, with and without it, CTC's prefix beam
    with it) and bench/lm_sweep.py weighs on the validation split."""
    out = _pipeline(tmp_path, "--dry-run", "--tables", "onepass")[0].stdout
    lines = dict(line.split(": ", 1) for line in out.splitlines())
    runs = tmp_path / "runs"
    for name in ("dat", "ctc"):
        assert f"--mode lm --output {runs / name}.arpa " in lines[f"{name}-lm"]
        assert f" --workdir {runs / name} " in lines[f"{name}-lm"]
    assert lines["dat-beam-lm"].startswith(f"(copy {runs / 'dat'} -> {runs / 'dat-beam-lm'}) ")
    assert f"--config.eval.lm={runs / 'dat'}.arpa" in lines["dat-beam-lm"] and "eval.lm" not in lines["dat-beam"]
    assert all("--config.dat.decode=dagsearch" in lines[job] for job in ("dat-beam", "dat-beam-lm", "dat-lm-sweep"))
    assert f"--config.eval.lm={runs / 'ctc'}.arpa" in lines["ctc-beam-lm"]
    assert lines["ctc-lm-sweep"].startswith(f"python bench/lm_sweep.py {runs / 'ctc'} --lm {runs / 'ctc'}.arpa ")
    events = _pipeline(tmp_path, "--only", "dat-beam-lm")[1]
    assert [name for what, name in events if what == "start"] == ["ar", "dat", "dat-lm", "dat-beam-lm"]


def test_the_teacher_is_a_choice_on_a_gpu(tmp_path):
    """--teacher ar-small (with --gpu: the d 256, 3+3 AR model beside the base one) distils, lends every student
    its vocabulary, rescores and is the edit models' speed baseline; the vectorized model still starts from ar."""
    runs = tmp_path / "runs"
    for teacher in ("ar", "ar-small"):
        out = _pipeline(tmp_path, "--gpu", "--teacher", teacher, "--dry-run")[0].stdout
        lines = dict(line.split(": ", 1) for line in out.splitlines())
        assert "--config configs/ar/multi30k_small_gpu.py --workdir " + str(runs / "ar-small") in lines["ar-small"]
        other = "ar" if teacher == "ar-small" else "ar-small"
        assert lines["distill"].startswith("python -m jaxnat.main --mode distill")
        assert f"--workdir {runs / teacher} " in lines["distill"]
        for job in ("natbase", "covnat", "cmlm", "cmlmc", "levt", "editor"):
            assert f"--config.data.spm_from={runs / teacher}" in lines[job], job
        for job in ("natbase-rescored", "cmlmc-rescored"):
            assert f"rescorer={runs / teacher} " in lines[job] and f"rescorer={runs / other} " not in lines[job]
        assert f"--run {runs / teacher} " in lines["speed-edit"]
        assert f"--config.train.init_from={runs / 'ar'}" in lines["vecconst"]
        assert "--names ar,ar-small --column=BLEU=bleu '--column=tok. BLEU=tok_bleu' " in lines["report-teacher"]
    events = _pipeline(tmp_path, "--gpu", "--teacher", "ar-small", "--only", "distill")[1]
    assert [name for what, name in events if what == "start"] == ["ar-small", "distill"]
    cpu, _ = _pipeline(tmp_path, "--teacher", "ar-small", check=False)
    assert cpu.returncode == 2 and "--teacher ar-small: with --gpu only" in cpu.stderr
    assert "ar-small" not in _pipeline(tmp_path, "--dry-run")[0].stdout  # without --gpu, ar is the small model


def test_a_job_done_with_other_options_is_named(tmp_path):
    """A finished job is not run again; one finished with another command (the tiny check's overrides, then the real
    run on the same --runs) was skipped without a word, and the tables were the tiny models'. A start and --status
    now name each such job, what differed and what to delete (the distillation's output, not the teacher)."""
    tiny = "--config.train.steps=6"
    result, events = _pipeline(tmp_path, "--only", "natbase", tiny)
    assert result.returncode == 0 and [e for e in events if e[0] == "start"] == [
        ("start", "ar"), ("start", "distill"), ("start", "natbase")]
    result, events = _pipeline(tmp_path, "--only", "natbase", tiny)  # the same command: nothing to say
    assert result.returncode == 0 and not events and "note:" not in result.stdout
    result, events = _pipeline(tmp_path, "--only", "natbase")
    runs = tmp_path / "runs"
    notes = [line for line in result.stdout.splitlines() if " note: " in line]
    assert result.returncode == 0 and not events and len(notes) == 3, result.stdout
    assert f"distill is done with other options than now (then {tiny})" in notes[1]
    assert f"delete {runs}/kd and {runs}/pipeline/done/distill" in notes[1]
    status = _pipeline(tmp_path, "--only", "natbase", "--status")[0].stdout.splitlines()
    assert f"natbase              done with other options than now (then {tiny})" in status
    (runs / "pipeline" / "done" / "ar").write_text("")  # the mark of a pipeline before marks held the command
    assert "ar                   done" in _pipeline(tmp_path, "--only", "natbase", "--status")[0].stdout.splitlines()


@pytest.mark.parametrize("args, message", [
    (("--tables", "bogus"), "multi30k.py: error: unknown table 'bogus'"),
    (("--only", "nope"), "multi30k.py: error: no job 'nope'"),
    (("--parallel", "0"), "multi30k.py: error: --parallel: a number of jobs >= 1"),
    (("--parallel", "two"), "multi30k.py: error: argument --parallel: invalid int value"),
])
def test_bad_options_are_one_line_exit_2(tmp_path, args, message):
    """As post_edit.py's: one line and exit 2 (argparse printed its five-line usage block first; an unknown --only
    job exited 1)."""
    result, _ = _pipeline(tmp_path, *args, check=False)
    assert result.returncode == 2 and result.stderr.startswith(message), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
