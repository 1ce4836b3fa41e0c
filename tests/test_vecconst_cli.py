"""Vectorized constraints end to end on a tiny workdir: stage 2 started from an AR run (train.init_from: the AR
parameters by name, the new ones from their initialisation), training on the synthetic corpus's lexicon pairs,
evaluation rows with the pairs (beam search and constrained beam search, CSR), and `--mode translate` with
"constraint_pairs", with and without hard constraints."""

import json
import os
import sys

import pytest

from tests import cli
from tests.test_translate import ROOT
from tests.test_translate import _main as _run  # the CLI on the tiny config, in a subprocess

pytestmark = pytest.mark.slow  # the quick tier (-m 'not slow') leaves this file out


def _main(workdir, *args, stdin=None):
    return _run(workdir, "--config.model.name=vecconst", "--config.data.pairs_dir=synthetic",
                "--config.data.max_pair_pieces=6", "--config.data.bucket_multiple=48", *args, stdin=stdin)


@pytest.fixture(scope="module")
def stage2(tmp_path_factory, ar_run):
    workdir = tmp_path_factory.mktemp("tiny-vecconst") / "run"
    result = _main(workdir, f"--config.train.init_from={ar_run}", "--config.train.steps=6",
                   "--config.train.eval_every=6", "--config.train.lr_schedule=constant",
                   "--config.train.warmup_steps=0", "--config.eval.latency_sentences=2",
                   "--config.eval.throughput_batch=16",
                   "--config.data.synthetic_test=16")  # one evaluation batch: one constraint shape a decoding
    assert result.returncode == 0, result.stderr
    return workdir, result.stderr


def test_stage_two_starts_from_the_ar_run(stage2):
    _, log = stage2
    assert "starting from the best parameters of" in log
    new = log.split("new here, from their initialisation: ")[1].split(")")[0].split(", ")
    assert "params/pair_align" in new and "params/gate_out" in new and "params/encoder" not in new
    assert "train constraint pairs: {'pairs':" in log


def test_metrics_have_the_pair_rows(stage2):
    workdir, _ = stage2
    metrics = json.loads((workdir / "metrics.json").read_text())
    for row in ("test+pairs", "test+pairs_hard"):
        assert {"bleu", "cpr", "cpr_words", "latency_ms", "sentences_per_s"} <= set(metrics[row]), row
    assert metrics["test+pairs_hard"]["cpr"] == 100.0  # the target phrases, guaranteed
    assert 0 <= metrics["test"]["cpr"] <= 100  # the plain output's share of them
    assert (workdir / "hyps" / "test.pairs.txt").exists()


def test_report_has_the_constraint_overlap(stage2):
    """The report's train/test constraint overlap (Wang et al. 2022, Table 8): the share of test pairs seen in
    training, and CSR over seen and unseen pairs for each decoding of the split."""
    from jaxnat.report import build_report, to_markdown

    workdir, _ = stage2
    report = build_report([str(workdir)], "test", samples=10)
    overlap = report["systems"][0]["constraint_overlap"]
    assert overlap["pairs"] > 0 and 0 <= overlap["seen"] <= 100
    assert set(overlap["rows"]) == {"plain", "pairs", "pairs_hard"}
    hard = overlap["rows"]["pairs_hard"]
    assert all(v is None or v == 100.0 for v in hard.values())  # VDBA: every target phrase
    assert "## Constraint pairs seen in training" in to_markdown(report)


def test_translate_with_constraint_pairs(stage2):
    workdir, _ = stage2
    lines = [json.dumps({"src": "the dog sees a cat .", "constraint_pairs": [["dog", "kelo"], ["cat", "mirka"]]}),
             json.dumps({"src": "the dog sees a cat .", "constraint_pairs": [["dog", "kelo"]], "constraints": ["kelo"],
                         "hard": True}),
             json.dumps({"src": "a house ."})]
    result = _main(workdir, "--mode", "translate", "--config.eval.beam_size=2", "--config.eval.nbest=2",
                   stdin="\n".join(lines) + "\n")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 3 and "kelo" in rows[1]["hyp"].split()
    # its n-best lists: the output first, then the beam's other finished outputs (those that meet hard constraints)
    assert all(r["nbest"][0] == {"hyp": r["hyp"], "score": r["score"]} for r in rows)
    assert all("kelo" in n["hyp"].split() for n in rows[1]["nbest"]) and len(rows[2]["nbest"]) == 2


@pytest.mark.parametrize("line, message", [
    ({"src": "a dog .", "constraint_pairs": [["dog"]]}, "pairs of non-empty strings"),
    ({"src": "a dog .", "constraint_pairs": [["a", "b"]] * 4}, "data.max_pairs=3"),
    ({"src": "a dog .", "constraint_pairs": [["dog", " ".join(["kelo"] * 7)]]}, "data.max_pair_pieces=6"),
])
def test_bad_constraint_pairs(stage2, line, message):
    workdir, _ = stage2
    result = _main(workdir, "--mode", "translate", stdin=json.dumps(line) + "\n")
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_pairs_need_a_model_that_reads_them(ar_run):
    result = _run(ar_run, "--mode", "translate",
                  stdin=json.dumps({"src": "a dog .", "constraint_pairs": [["dog", "kelo"]]}))
    assert result.returncode == 2 and "does not take constraint pairs" in result.stderr, result.stderr


def test_speed_table_with_pairs(stage2, ar_run):
    """bench/decode_speed.py --pairs, the paper's Table 5 of the run queue, on the tiny workdirs: the AR model plain,
    beam 4 and with the pairs' targets as hard constraints; the vectorized model also with its pairs, and (--unpacked)
    over all padded constraint entries. On a test split of the 2 sentences timed at batch 1: the throughput pass
    (here at batch 1 too) over all 40 compiled a program for each of their constraint shapes."""
    workdir, _ = stage2
    result = cli.run([sys.executable, "bench/decode_speed.py", "--run", str(ar_run), "--run", str(workdir),
                      "--pairs", "--unpacked", "--repeats", "1", "--sentences", "2", "--batch", "1",
                      "--config.data.pairs_dir=synthetic", "--config.data.max_pair_pieces=6",
                      "--config.data.synthetic_test=2"],
                     cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=600)
    assert result.returncode == 0, result.stderr
    rows = [line.split(" | ")[0].lstrip("| ") for line in result.stdout.splitlines() if line.startswith("| ar ")
            or line.startswith("| vecconst ")]
    assert [row.split(", ", 1)[1] for row in rows] == [
        "greedy", "beam 4", "the pairs' targets hard (VDBA), beam 4",
        "greedy", "beam 4", "with the pairs, beam 4", "beam 4, all entries", "with the pairs, beam 4, all entries",
        "the pairs' targets hard (VDBA), beam 4"]
    assert "| 1.00× / 1.00× |" in result.stdout.splitlines()[3]  # the first beam 4 row is the reference
    progress = [line for line in result.stderr.splitlines() if line.startswith("repeat 1/1: ")]
    assert len(progress) == len(rows), result.stderr  # one progress line a timed mode
