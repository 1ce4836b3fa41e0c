"""launch/post_edit.py, the post-editing protocol of Gu et al. 2019 (Appendix C.2), end to end on a tiny text corpus:
the halves of the training set, the MT output of the post-editing corpus, the table with every row scored, a
second start that runs nothing again, and one-line errors for bad options."""

import json
import os
import sys

import pytest

from tests import cli

pytestmark = pytest.mark.slow  # the quick tier (-m 'not slow') leaves this file out

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "launch", "post_edit.py")
# tiny runs (tests/configs/tiny.py's sizes): one batch shape, one evaluation batch, four steps each
TINY = ["model.d_model=32", "model.ffn_dim=64", "model.num_heads=2", "model.enc_layers=1", "model.dec_layers=1",
        "model.max_len=48", "data.vocab_size=200", "data.byte_fallback=false", "data.max_len=48",
        "data.batch_tokens=512", "data.bucket_multiple=48", "train.steps=4", "train.eval_every=4",
        "train.checkpoint_every=4", "train.log_every=2", "train.warmup_steps=2", "train.valid_bleu_sentences=8",
        "train.peak_tflops=0.1", "train.plot_curves=false", "eval.latency_sentences=0", "eval.batch_size=16"]
# the untrained MT model's output kept short (a longer one is cut to the LevT's model.max_len); the LevT decodes
# plainly and with the paper's roll-in (the Multi30k config's additions off)
MT = ["eval.beam_size=1", "eval.max_len_a=1.0", "eval.max_len_b=2"]
LEVT = ["levt.max_iter=2", "eval.constraints=", "eval.diagnostic=false",
        "levt.own_insertion_roll_in=0", "levt.global_shuffle=0"]
ROWS = ["do nothing: the MT output", "LevT (translation), from scratch",
        "LevT (translation), post-editing the MT output",
        "LevT fine-tuned to post-edit, post-editing the MT output", "LevT fine-tuned to post-edit, from scratch"]


def _script(*args):
    return cli.run([sys.executable, SCRIPT, *args], cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=600)


def _options(data, runs):
    sets = [f"--set={kv}" for kv in TINY] + [f"--mt-set={kv}" for kv in MT] + [f"--levt-set={kv}" for kv in LEVT]
    return ["--data-dir", str(data), "--runs", str(runs), "--valid-split", "valid", "--test-splits", "test", *sets]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """400 training pairs of the embedded language as text files, 16 valid and 16 test pairs."""
    from jaxnat.data.synthetic import generate_corpus

    data = tmp_path_factory.mktemp("corpus")
    for split, (src, tgt) in generate_corpus(0, {"train": 400, "valid": 16, "test": 16}).items():
        (data / f"{split}.en").write_text("".join(s + "\n" for s in src))
        (data / f"{split}.de").write_text("".join(t + "\n" for t in tgt))
    return data


@pytest.fixture(scope="module")
def pipeline(corpus, tmp_path_factory):
    runs = tmp_path_factory.mktemp("post-edit") / "runs"
    # the jobs' four `python -m jaxnat.main` runs forked from a server that has imported jax (`cli.forking_python`):
    # the same commands, without 2.5 s of imports each
    with cli.forking_python(tmp_path_factory.mktemp("python")) as python:
        result = _script(*_options(corpus, runs), "--python", python)
    assert result.returncode == 0, result.stdout + result.stderr
    return runs, result.stdout


def test_every_job_runs_once_and_the_table_has_every_row(corpus, pipeline):
    runs, stdout = pipeline
    started = [line.split()[3] for line in stdout.splitlines() if line.split()[2:3] == ["start"]]
    assert started == ["split", "mt", "pe-data", "levt", "levt-pe", "levt-ft", "report"]
    # the halves: every training pair in exactly one, in corpus order
    train = (corpus / "train.en").read_text().splitlines()
    a = (runs / "data" / "mt" / "train.en").read_text().splitlines()
    b = (runs / "data" / "pe" / "train.en").read_text().splitlines()
    assert len(a) == len(b) == 200 and sorted(a + b) == sorted(train)
    assert [s for s in train if s in set(a)] == a
    # the post-editing corpus: the MT output, line for line
    for split, n in (("train", 200), ("valid", 16), ("test", 16)):
        assert len((runs / "data" / "pe" / f"{split}.mt").read_text().splitlines()) == n
    assert (runs / "data" / "pe" / "test.mt").read_text() == (runs / "mt" / "hyps" / "test.txt").read_text()
    report = json.loads((runs / "post_edit.json").read_text())
    rows = report["tables"]["test"]
    assert [r["row"] for r in rows] == ROWS
    for r in rows:
        assert isinstance(r["bleu"], float) and isinstance(r["ter"], float) and r["config"].endswith(".py")
    # the evaluation's BLEU of the fine-tuned LevT's initial hypotheses is the MT run's own test BLEU
    assert rows[3]["init_bleu"] == pytest.approx(rows[0]["bleu"])
    ft = report["commands"]["levt-ft"][0]
    assert f"--config.train.init_from={runs}/levt" in ft and "--config.data.init_lang=mt" in ft
    table = (runs / "post_edit.md").read_text()
    assert all(f"| {row} | " in table for row in ROWS) and "## Commands" in table


def test_a_second_start_runs_nothing(corpus, pipeline):
    runs, _ = pipeline
    again = _script(*_options(corpus, runs))
    assert again.returncode == 0, again.stderr
    assert " start " not in again.stdout and "post_edit.md" in again.stdout
    status = _script(*_options(corpus, runs), "--status").stdout.splitlines()
    assert len(status) == 7 and all(line.split()[1] == "done" for line in status)


@pytest.mark.parametrize("args, message", [
    (["--set", "train.steps"], "expected KEY=VALUE"),
    (["--set", "data.dir=/elsewhere"], "sets data.dir itself"),
    (["--mt-config", "configs/ar/nope.py"], "no config file"),
    (["--levt-from", "/nonexistent/run"], "not a trained workdir"),
    (["--test-splits", "train"], "distinct"),
    (["--test-splits", "mt-valid"], "not starting with 'mt-'"),
])
def test_bad_options_are_one_line_errors(tmp_path, corpus, args, message):
    result = _script("--data-dir", str(corpus), "--runs", str(tmp_path / "runs"), "--valid-split", "valid",
                     "--test-splits", "test", *args)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1 and message in result.stderr, result.stderr
    assert not (tmp_path / "runs").exists()


def test_levt_from_names_a_levt(tmp_path, corpus):
    """Another model's workdir was taken and failed only inside the post-editing jobs, after the MT model's."""
    run = tmp_path / "ar-run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"model": {"name": "ar"}}))
    result = _script("--data-dir", str(corpus), "--runs", str(tmp_path / "runs"), "--valid-split", "valid",
                     "--test-splits", "test", "--levt-from", str(run))
    assert result.returncode == 2 and "a workdir of model 'ar', not a LevT" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("missing, message", [(None, "no data directory"), ("valid.de", "no valid.de[.gz] in")])
def test_missing_data_is_a_one_line_error(tmp_path, corpus, missing, message):
    data = tmp_path / "data"
    if missing:
        data.mkdir()
        for name in os.listdir(corpus):
            if name != missing:
                os.symlink(corpus / name, data / name)
    result = _script("--data-dir", str(data), "--runs", str(tmp_path / "runs"), "--valid-split", "valid",
                     "--test-splits", "test")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1 and message in result.stderr, result.stderr
