"""Coverage-NAT end to end on a tiny workdir: pre-training on an AR run's vocabulary, evaluation with the
repeated-token ratios and a K_dec sweep (metrics.json and the summary table), the SCA fine-tuning phase started
from the first run (train.init_from), `--mode translate`, and length-parallel decoding rescored by the AR run."""

import json
import os
import sys

import pytest

from tests import cli
from tests.test_translate import ROOT
from tests.test_translate import _main as _run  # the CLI on the tiny config, in a subprocess

pytestmark = pytest.mark.slow  # the quick tier (-m 'not slow') leaves this file out


def _main(workdir, *args, stdin=None):
    return _run(workdir, "--config.model.name=nat", "--config.nat.coverage=true", "--config.model.dec_layers=2",
                "--config.model.positions=learned", "--config.nat.train_iterations=2",
                "--config.nat.decode_iterations=2", "--config.nat.remove_repeats=true", "--config.eval.beam_size=1",
                "--config.nat.length_beam=3", "--config.nat.length_beam_mode=centred",
                "--config.data.bucket_multiple=48", *args, stdin=stdin)


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, ar_run):
    workdir = tmp_path_factory.mktemp("tiny-nat") / "run"
    result = _main(workdir, f"--config.data.spm_from={ar_run}", "--config.train.steps=8", "--config.train.eval_every=8",
                   "--config.eval.latency_sentences=1", "--config.eval.iteration_sweep=3")
    assert result.returncode == 0, result.stderr
    assert "INFO packed " in result.stderr  # trains on packed rows (data.pack): one batch shape
    return workdir, result.stdout


def test_metrics_include_repeated_token_ratios_and_the_k_sweep(pretrained):
    workdir, stdout = pretrained
    metrics = json.loads((workdir / "metrics.json").read_text())
    assert {"test", "test+K3"} <= set(metrics)
    row = metrics["test"]
    assert {"repeated", "repeated_short", "repeated_long", "mean_chosen_length", "latency_ms"} <= set(row)
    assert 0 <= row["repeated"] <= 100 and row["mean_chosen_length"] > 0
    assert "repeated" in metrics["test+K3"] and metrics["test+K3"]["seconds"] > 0
    assert {"bleu", "repeated", "repeated_short", "repeated_long"} <= set(stdout.splitlines()[0].split())


def test_sca_phase_starts_from_the_first_run(pretrained, tmp_path):
    first, _ = pretrained
    second = tmp_path / "sca"
    result = _main(second, f"--config.train.init_from={first}", "--config.nat.sca_weight=0.5",
                   "--config.train.lr_schedule=constant", "--config.train.lr=1e-5", "--config.train.warmup_steps=0",
                   "--config.train.steps=4", "--config.train.eval_every=4", "--config.eval.latency_sentences=0")
    assert result.returncode == 0, result.stderr
    assert "starting from the best parameters of" in result.stderr
    assert (second / "spm" / "joint.model").read_bytes() == (first / "spm" / "joint.model").read_bytes()
    result = _main(tmp_path / "other", f"--config.train.init_from={first}", "--config.model.dec_layers=3",
                   "--config.train.steps=4")
    assert result.returncode == 2 and "model.dec_layers=3 (trained: 2)" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_translate_plain_and_rescored(pretrained, ar_run):
    workdir, _ = pretrained
    line = json.dumps({"src": "do girls go to a garden ?"}) + "\n"
    for extra in ((), (f"--config.nat.rescorer={ar_run}",)):
        result = _main(workdir, "--mode", "translate", *extra, stdin=line)
        assert result.returncode == 0, result.stderr
        row = json.loads(result.stdout)
        assert {"hyp", "score", "chosen_length", "repeats"} <= set(row)
    hard = json.dumps({"src": "do girls go to a garden ?", "constraints": ["baste"], "hard": True}) + "\n"
    result = _main(workdir, "--mode", "translate", stdin=hard)
    assert result.returncode == 2 and "does not take hard constraints" in result.stderr


def test_speed_table(pretrained, ar_run):
    """bench/decode_speed.py, the queue's speed-nat job, on the tiny workdirs: AR greedy and beam 4, Coverage-NAT.
    On a test split of the 2 sentences timed at batch 1 (the throughput pass, here at batch 1 too, decodes all)."""
    workdir, _ = pretrained
    result = cli.run([sys.executable, "bench/decode_speed.py", "--run", str(ar_run), "--run", str(workdir),
                      "--repeats", "1", "--sentences", "2", "--batch", "1", "--config.data.synthetic_test=2"],
                     cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=600)
    assert result.returncode == 0, result.stderr
    labels = [line.split(" | ")[0][2:] for line in result.stdout.splitlines() if line.startswith(("| ar ", "| nat "))]
    # "MODEL (WORKDIR), MODE"
    assert [(label.split()[0], label.rsplit(", ", 1)[1]) for label in labels] == [
        ("ar", "greedy"), ("ar", "beam 4"), ("nat", "decoding")]
