"""The edit-based models (LevT, EDITOR) end to end on a tiny workdir: training, evaluation with soft/hard
constraint sets (metrics.json, the summary table, trace.html), and `--mode translate` JSON lines with "init",
"constraints" and "hard"."""

import json
import os
import sys

import pytest

from tests import cli

pytestmark = pytest.mark.slow  # the quick tier (-m 'not slow') leaves this file out

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "tests", "configs", "tiny.py")
COUNTS = {"levt": ("iterations", "deletions", "insertions"),
          "editor": ("iterations", "repositions", "deletions", "insertions")}


def _main(workdir, *args, stdin=None, model="levt"):
    cmd = [sys.executable, "-m", "jaxnat.main", "--config", TINY, "--workdir", str(workdir),
           f"--config.model.name={model}", "--config.eval.beam_size=1", f"--config.{model}.max_iter=3", *args]
    return cli.run(cmd, cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu"), input=stdin, timeout=600)


@pytest.fixture(scope="module", params=["levt", "editor"])
def trained(request, tmp_path_factory):
    model = request.param
    workdir = tmp_path_factory.mktemp(f"tiny-{model}") / "run"
    # one bucket (48 tokens) and one latency sentence: a third of the programs to compile
    # LevT also: the oracle's deletions and placeholders (Gu et al. 2019 Fig. 5) at the configured iteration cap,
    # and two reference words as constraints (Xu & Carpuat 2021 Fig. 5)
    analyses = ["--config.eval.oracle=deletion_placeholder", "--config.eval.constraint_counts=2"] if (
        model == "levt") else []
    result = _main(workdir, "--config.train.steps=8", "--config.train.eval_every=8",
                   "--config.data.bucket_multiple=48", "--config.eval.latency_sentences=1",
                   "--config.eval.constraints=soft,hard", "--config.eval.trace_sentences=2", *analyses, model=model)
    assert result.returncode == 0, result.stderr
    return model, workdir, result.stdout


def test_metrics_include_constraints_and_edit_counts(trained):
    model, trained, stdout = trained
    metrics = json.loads((trained / "metrics.json").read_text())
    assert {"test", "test+soft", "test+hard"} <= set(metrics)
    for key in COUNTS[model]:
        assert f"mean_{key}" in metrics["test"] and f"mean_{key}" in metrics["test+hard"]
    for row in ("test", "test+soft", "test+hard"):
        assert metrics[row]["latency_ms"] > 0
    header = stdout.splitlines()[0].split()  # the printed summary table
    assert {"bleu", "ribes", "cpr", "latency_ms", "mean_iterations", "mean_insertions"} <= set(header)
    assert 1 <= metrics["test"]["mean_iterations"] <= 4
    assert 0 <= metrics["test"]["ece"] <= 100 and 0 < metrics["test"]["ece_confidence"] <= 100  # the fills' calibration
    # the papers' count (LevT Table 6): the final pass that changes nothing is not a step
    assert metrics["test"]["mean_steps"] == pytest.approx(metrics["test"]["mean_iterations"] - 1)
    # hard constraints are guaranteed whatever the (barely trained) model does
    assert metrics["test+hard"]["cpr"] == 100.0
    assert (trained / "hyps" / "test.constraints.jsonl").exists()
    assert len((trained / "hyps" / "test.hard.txt").read_text().splitlines()) == 40
    page = (trained / "trace.html").read_text()
    assert page.startswith("<!doctype html>") and page.count("<h2>Sentence") == 2
    assert page.count("<h3>plain") == page.count("<h3>soft") == page.count("<h3>hard") == 2
    assert ("1: reposition" if model == "editor" else "1: delete") in page
    if model == "levt":
        plain, oracle = metrics["test"], metrics["test+I3_oracle_deletion_placeholder"]
        assert "test+I3" not in metrics and oracle["mean_iterations"] <= 4 and "ter" in oracle  # no sweep asked
        # with the oracle's placeholders every output has its reference's length in pieces, so about its words
        assert abs(oracle["mean_length"] - plain["reference_length"]) < abs(
            plain["mean_length"] - plain["reference_length"]) + 1
        assert metrics["test+hard_c2"]["cpr"] == 100.0 and metrics["test+soft_c2"]["constraints"] == 2
        assert len((trained / "hyps" / "test.soft_c2.txt").read_text().splitlines()) == 40


def test_translate_with_init_and_constraints(trained, tmp_path):
    model, trained, _ = trained
    lines = [
        json.dumps({"src": "do girls go to a garden ?"}),
        json.dumps({"src": "do girls go to a garden ?", "constraints": ["baste", "ka dvai"], "hard": True, "id": 3}),
        json.dumps({"src": "do girls go to a garden ?", "init": "ka dvai nilaen idan ad unan baste ?"}),
        # text the tiny vocabulary (no byte fallback) cannot hold, and a source longer than data.max_len
        json.dumps({"src": "do girls go to a 東京 garden ?", "constraints": ["baste 🦜"]}, ensure_ascii=False),
        json.dumps({"src": "do girls go to a garden " * 10}),
        json.dumps({"src": "do girls go to a garden ?", "init": "ka dvai\u0301 nilaen\u200b idan\x07 ?"}),
    ]
    result = _main(trained, "--mode", "translate", stdin="\n".join(lines) + "\n", model=model)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 6 and rows[1]["id"] == 3
    assert rows[3]["unknown_characters"] == "東京🦜" and rows[4]["source_truncated"] is True
    assert rows[5]["unknown_characters"] == "\u0301\u200b\x07"  # combining accent, zero-width, control
    assert not {"unknown_characters", "source_truncated"} & {k for r in rows[:3] for k in r}
    assert "1 of 6 sources are longer than data.max_len=48" in result.stderr
    assert "2 of 6 sentences have characters the vocabulary holds only as UNK" in result.stderr
    assert all({"hyp", "score", *COUNTS[model]} <= set(r) for r in rows)
    hyp = " " + rows[1]["hyp"] + " "  # hard constraints: whole words, however barely trained
    assert " baste " in hyp and " ka dvai " in hyp, hyp
    if model == "levt":  # LevT also keeps their order; EDITOR may move a whole constraint
        assert hyp.index(" baste ") < hyp.index(" ka dvai "), hyp


@pytest.mark.parametrize("line, message", [
    ({"src": "x", "init": 3}, '"init" must be a string'),
    ({"src": "x", "constraints": "Hund"}, '"constraints" must be a list of non-empty strings'),
    ({"src": "x", "constraints": ["Hund"], "hard": "yes"}, '"hard" must be true or false'),
    ({"src": "x", "init": "a", "constraints": ["b"]}, 'give either "init" or "constraints"'),
    ({"src": "x", "constraints": ["baste 🦜"], "hard": True},
     "stdin:1: the hard constraint 'baste 🦜' has characters the model's vocabulary cannot represent (🦜)"),
])
def test_bad_constraint_requests(trained, line, message):
    model, trained, _ = trained
    result = _main(trained, "--mode", "translate", stdin=json.dumps(line) + "\n", model=model)
    assert result.returncode == 2
    assert message in result.stderr.strip().splitlines()[-1], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("override, message", [
    ("--config.eval.constraints=firm", "eval.constraints is a comma list of soft,hard"),
    ("--config.levt.early_exit=1,9,1", "levt.early_exit must be three layer counts"),
    ("--config.eval.trace_sentences=-1", "eval.trace_sentences must be >= 0"),
])
def test_bad_edit_model_config(tmp_path, override, message):
    result = _main(tmp_path / "x", override)
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_constraints_need_a_refining_model(tmp_path):
    cmd = [sys.executable, "-m", "jaxnat.main", "--config", TINY, "--workdir", str(tmp_path / "x"),
           "--config.eval.constraints=soft"]
    result = cli.run(cmd, cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=120)
    assert result.returncode == 2 and "does not take soft constraints" in result.stderr, result.stderr


def test_report_has_the_iterations_per_sentence(trained, tmp_path):
    """The evaluation keeps each sentence's counts (hyps/test.counts.jsonl), and the report makes LevT's Table 6
    and Figure 4a of them: the histogram of iterations and the mean iterations by source length."""
    from jaxnat.report import build_report, plot_by_length, to_markdown

    model, workdir, _ = trained
    counts = [json.loads(line) for line in (workdir / "hyps" / "test.counts.jsonl").read_text().splitlines()]
    assert len(counts) == 40 and set(counts[0]) == {*COUNTS[model], "steps"}
    report = build_report([str(workdir)], "test", samples=10)
    iterations = report["systems"][0]["iterations"]
    assert sum(iterations["histogram"].values()) == 40
    assert iterations["histogram"] == {str(k): sum(c["iterations"] == k for c in counts)
                                       for k in sorted({c["iterations"] for c in counts})}
    assert "## Iterations per sentence" in to_markdown(report)
    assert os.path.getsize(plot_by_length(report, str(tmp_path / "by_length.png"))) > 5_000
