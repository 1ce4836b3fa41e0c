"""CMLMC end to end on a tiny workdir: training on an AR run's vocabulary (data.spm_from), evaluation with
soft/hard constraint sets and an iteration sweep (metrics.json and the summary table), `--mode translate`
with hard constraints, and with the AR run as rescorer."""

import copy
import json
import os
import re

import numpy as np
import pytest

from jaxnat.config import workdir_config
from jaxnat.decoding.translator import Start
from jaxnat.models.cmlm.model import SUPPORTS
from jaxnat.restore import load_translator
from tests.test_translate import _main as _run  # the CLI on the tiny config, in a subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.slow  # the quick tier (-m 'not slow') leaves this file out


def _main(workdir, *args, stdin=None):
    return _run(workdir, "--config.model.name=cmlm", "--config.cmlm.masked_attn=true", "--config.cmlm.concat_pe=true",
           "--config.model.positions=learned", "--config.cmlm.correction=true", "--config.eval.beam_size=1",
           "--config.cmlm.mask_predict_iter=4", "--config.eval.run_all_iterations=true", *args, stdin=stdin)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, ar_run):
    workdir = tmp_path_factory.mktemp("tiny-cmlm") / "run"
    result = _main(workdir, f"--config.data.spm_from={ar_run}", "--config.train.steps=8", "--config.train.eval_every=8",
                   "--config.data.bucket_multiple=48", "--config.eval.latency_sentences=1",
                   "--config.eval.constraints=soft,hard", "--config.eval.iteration_sweep=2",
                   "--config.data.synthetic_test=16")  # one evaluation batch: one output width and constraint shape
    assert result.returncode == 0, result.stderr
    assert "INFO packed " in result.stderr  # trains on packed rows (data.pack): one batch shape
    return workdir, result.stdout


def test_metrics_include_constraints_iterations_and_length(trained):
    workdir, stdout = trained
    metrics = json.loads((workdir / "metrics.json").read_text())
    assert {"test", "test+soft", "test+hard", "test+T2"} <= set(metrics)
    assert metrics["test"]["mean_iterations"] == 4 and metrics["test"]["mean_length"] > 0
    assert "repetition" in metrics["test"] and metrics["test+T2"]["seconds"] > 0
    assert metrics["test+hard"]["cpr"] == 100.0  # guaranteed, however barely trained
    # every key a user reads in metrics.json is explained in docs/evaluation.md (copy_source_bleu, mean_score,
    # reference_length, seconds were not)
    with open(os.path.join(ROOT, "docs", "evaluation.md"), encoding="utf-8") as f:
        documented = set(re.findall(r"`([a-z_]+)`", f.read()))
    documented |= {f"mean_{count}" for count in SUPPORTS.counts}  # `mean_<count>`
    undocumented = {key for row in metrics.values() for key in row} - documented
    assert not undocumented, undocumented
    header = stdout.splitlines()[0].split()
    assert {"bleu", "ribes", "cpr", "repetition", "latency_ms", "mean_iterations"} <= set(header)


def test_translate_with_hard_constraints(trained):
    workdir, _ = trained
    lines = [json.dumps({"src": "do girls go to a garden ?"}),
             json.dumps({"src": "do girls go to a garden ?", "constraints": ["baste", "ka dvai"], "hard": True}),
             json.dumps({"src": "do girls go to a garden ?", "init": "ka dvai"})]
    result = _main(workdir, "--mode", "translate", stdin="\n".join(lines[:2]) + "\n")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert all({"hyp", "score", "iterations", "chosen_length"} <= set(r) for r in rows)
    hyp = " " + rows[1]["hyp"] + " "
    assert " baste " in hyp and " ka dvai " in hyp, hyp
    result = _main(workdir, "--mode", "translate", stdin=lines[2] + "\n")
    assert result.returncode == 2 and "does not take initial hypotheses" in result.stderr
    assert "Traceback" not in result.stderr
    many = json.dumps({"src": "do girls go to a garden ?", "constraints": ["ka"] * 9})
    result = _main(workdir, "--mode", "translate", stdin=many + "\n")
    assert result.returncode == 2 and "9 constraint phrases; model 'cmlm' takes at most 8" in result.stderr


def test_rescoring_with_an_ar_model_of_the_same_vocabulary(trained, ar_run):
    workdir, _ = trained
    assert (workdir / "spm" / "joint.model").read_bytes() == (ar_run / "spm" / "joint.model").read_bytes()
    line = json.dumps({"src": "do girls go to a garden ?", "constraints": ["baste"], "hard": True}) + "\n"
    result = _main(workdir, "--mode", "translate", f"--config.cmlm.rescorer={ar_run}", stdin=line)
    assert result.returncode == 0, result.stderr
    assert " baste " in " " + json.loads(result.stdout)["hyp"] + " "
    result = _main(workdir, "--mode", "translate", f"--config.cmlm.rescorer={workdir}", stdin=line)
    assert result.returncode == 2 and "is a 'cmlm' run; it must be a run of model 'ar'" in result.stderr, result.stderr


@pytest.mark.parametrize("rescored", [False, True])
def test_outputs_as_wide_as_the_plan_translate_as_the_full_width(trained, ar_run, rescored):
    """`Translator.planned`: outputs only as wide as the longest planned candidate needs (the bucket length 48
    here, instead of 64, all the model holds) translate as outputs as wide as the source allows."""
    workdir, _ = trained
    config = workdir_config(str(workdir))
    if rescored:
        config.cmlm.rescorer = str(ar_run)
    translator = load_translator(config, str(workdir))
    texts = ["do girls go to a garden ?", "the old man reads a book .", "a"]
    full = copy.copy(translator)
    full.narrow_outputs = False
    src = translator.encode(texts)[0][0]
    request = translator.request(np.pad(src, (0, 48 - len(src)))[None], [Start()], 1, False)  # the one bucket
    assert (request.max_out, translator.planned(request).max_out) == (64, 48)  # model.max_len, the bucket
    narrow_rows, full_rows = translator.translate(texts), full.translate(texts)
    for narrow_row, full_row in zip(narrow_rows, full_rows):
        assert narrow_row.pop("score") == pytest.approx(full_row.pop("score"), rel=1e-5, abs=1e-5)
        assert narrow_row == full_row  # the translation, its length and passes


def test_positions_report_on_the_trained_model(trained, ar_run, capsys, tmp_path):
    from jaxnat import analyse, report

    workdir, _ = trained
    assert analyse.main([str(workdir), "--sentences", "3", "--positions", "5"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0] == "## Position embeddings and context use (Huang et al. 2022, Figure 1(a))"
    assert len(table) == 5 and table[4].startswith(f"| {workdir} | best (step 8) |")
    assert "(of 10)" in table[4]  # the 5 positions' pairs
    # the same as a section of jaxnat.report (--model-analyses), with the report's other analyses
    assert report.main([str(workdir), "--out", str(tmp_path), "--samples", "10", "--model-analyses"]) == 0
    md = (tmp_path / "report.md").read_text()
    assert "## Position embeddings and context use" in md and f"| {workdir} | best (step 8) |" in md
    assert (tmp_path / "cmlm_analysis.png").stat().st_size > 5_000  # the binned cosine similarity (Figure 1(a))
    assert "## Iteration sweeps" in md  # the fixture's eval.iteration_sweep=2
    assert 0 < json.loads((workdir / "metrics.json").read_text())["test"]["ece_confidence"] <= 100
    capsys.readouterr()
    # another kind of model: one line, exit 2
    assert analyse.main([str(ar_run)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("jaxnat: error:") and "model.name=cmlm" in err and "\n" not in err
    # more positions than the model has: said, not silently fewer compared
    assert analyse.main([str(workdir), "--positions", "65"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("jaxnat: error:") and "model.max_len=64" in err and "\n" not in err
