"""The evaluation report: word F1 by frequency bin against a hand count, and the command end to end on two
evaluated workdirs (the tiny AR run, and a copy of it whose hypotheses are the references)."""

import json
import os
import shutil
import sys
from types import SimpleNamespace

import pytest

from jaxnat.evaluation.metrics import bleu, chrf
from jaxnat.errors import ConfigError, JaxnatError, Terminated
from jaxnat.report import (FREQUENCY_BINS, bin_label, bleu_by_source_length, constraint_overlap, convergence,
                           curve_points, default_names, iteration_statistics, lookup, paired_test, parse_column,
                           parse_names, seed_rows, seed_statistics, valid_curve, word_f1_by_frequency)
from tests import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_word_f1_by_frequency_by_hand():
    train = ["a a a b", "b c"]  # counts: a 3, b 2, c 1, others 0
    refs = ["a b c d", "a a"]
    hyps = ["a c c e", "a b"]
    out = word_f1_by_frequency(hyps, refs, train)
    assert list(out) == [bin_label(lo, hi) for lo, hi in FREQUENCY_BINS]
    # bin 3 (a): hyp a×2 (1 per sentence), ref a×3, matched 2 -> P 100, R 66.7
    assert out["3"]["hyp_words"] == 2 and out["3"]["ref_words"] == 3
    assert out["3"]["precision"] == pytest.approx(100) and out["3"]["recall"] == pytest.approx(200 / 3)
    # bin 1 (c): hyp c×2, ref c×1, clipped match 1 -> P 50, R 100, F1 66.7
    assert out["1"]["f1"] == pytest.approx(2 * 50 * 100 / 150)
    # bin 2 (b): hyp b in sentence 2, ref b in sentence 1: no match
    assert out["2"]["f1"] == 0.0 and out["2"]["ref_words"] == 1
    # bin 0 (unseen: d in the reference, e in the hypothesis)
    assert out["0"]["precision"] == 0.0 and out["0"]["ref_words"] == 1 and out["0"]["hyp_words"] == 1
    assert out["1000+"] == {"ref_words": 0, "hyp_words": 0, "precision": 0.0, "recall": 0.0, "f1": 0.0}
    # a bin's bounds are inclusive: 9 training occurrences are in 5-9, 10 in 10-99
    out = word_f1_by_frequency(["n t"], ["n t"], ["n " * 9 + "t " * 10])
    assert out["5-9"]["ref_words"] == 1 and out["10-99"]["ref_words"] == 1


def test_bleu_by_source_length_is_bleu_of_each_bucket():
    srcs = ["a b", "a b c d e f g h i j k l", "x", "one two three four five six seven eight nine ten eleven"]
    refs = ["the cat sat on the mat", "a dog ran in the park today", "hello", "red cars are fast and loud"]
    hyps = ["the cat sat on a mat", "a dog ran in the park", "hello", "blue cars are slow"]
    out = bleu_by_source_length(hyps, refs, srcs)
    assert out["1-10"]["sentences"] == 2 and out["11-20"]["sentences"] == 2 and out["51+"]["bleu"] is None
    assert out["1-10"]["bleu"] == bleu([hyps[0], hyps[2]], [refs[0], refs[2]])[0]
    assert out["11-20"]["bleu"] == bleu([hyps[1], hyps[3]], [refs[1], refs[3]])[0]


# a source and its length bucket: 13a words (the commas count), both bounds inclusive, an empty source in the first
SOURCE_BUCKETS = (("", "1-10"), ("a b c d e f g h i j", "1-10"), ("one, two, three, four, five, six", "11-20"),
                  (" ".join("w" * k for k in range(1, 21)), "11-20"),
                  (" ".join("w" * k for k in range(1, 22)), "21-30"))


@pytest.mark.parametrize("src, bucket", SOURCE_BUCKETS)
def test_a_source_is_in_the_bucket_of_its_13a_words(src, bucket):
    assert bleu_by_source_length(["a b"], ["a b"], [src])[bucket] == {"sentences": 1, "bleu": bleu(["a b"], ["a b"])[0]}
    assert iteration_statistics([3], [src])["by_length"][bucket] == 3.0


def test_a_source_in_an_unspaced_language_counts_its_characters():
    src = "我们住在北京的东边。" * 2  # one 13a word, 20 characters
    assert bleu_by_source_length(["我"], ["我"], [src], "zh", "zh")["11-20"]["sentences"] == 1
    assert iteration_statistics([3], [src], "zh")["by_length"]["11-20"] == 3.0
    assert iteration_statistics([3], [src], "en")["by_length"]["1-10"] == 3.0


def test_iteration_statistics_by_hand():
    srcs = ["a b", "a b c d e f g h i j k l", "x", "one two three four five six seven eight nine ten eleven"]
    out = iteration_statistics([2, 4, 2, 3], srcs)
    assert out["histogram"] == {"2": 2, "3": 1, "4": 1}
    assert out["by_length"]["1-10"] == 2.0 and out["by_length"]["11-20"] == 3.5 and out["by_length"]["21-30"] is None


def test_constraint_overlap_by_hand():
    train = [[("rot", "red"), ("Hund", "dog")], [("Katze", "cat")]]
    test = [[("rot", "red"), ("Haus", "house")], [], [("Hund", "dog")]]
    hyps = {"plain": ["a red car", "nothing", "a cat"], "pairs": ["a red house", "x", "the dog"]}
    out = constraint_overlap(train, test, hyps, "en")
    assert out["pairs"] == 3 and out["seen"] == pytest.approx(200 / 3)
    assert out["rows"]["plain"] == {"csr_seen": 50.0, "csr_unseen": 0.0}
    assert out["rows"]["pairs"] == {"csr_seen": 100.0, "csr_unseen": 100.0}
    assert constraint_overlap(train, [[("Rot", "Red")]], {"plain": ["Red"]}, "en")["seen"] == 0.0  # case kept
    assert constraint_overlap(train, [[]], {"plain": ["x"]}, "en") == {"pairs": 0, "seen": None, "rows": {
        "plain": {"csr_seen": None, "csr_unseen": None}}}


@pytest.mark.parametrize("test, samples", [("bs", 100), ("ar", 20)])
def test_paired_test_scores_each_system_against_the_first(test, samples):
    """sacreBLEU's paired test of each system in the given order, the first the baseline (no p-value), with the
    test and the number of samples asked for; bootstrap resampling gives a confidence interval, randomisation none."""
    refs = ["the cat sat on the mat", "a dog ran in the park today", "hello there my friend"]
    systems = [SimpleNamespace(name="base", hyps=["the cat sat on a mat", "a dog ran in the park", "hello there"]),
               SimpleNamespace(name="oracle", hyps=list(refs))]
    signatures, results = paired_test(systems, refs, test, samples)
    assert set(signatures) == set(results) == {"BLEU", "chrF2"}
    assert all(f"{test}:{samples}|" in signature for signature in signatures.values())
    for k, s in enumerate(systems):
        assert results["BLEU"][k].score == pytest.approx(bleu(s.hyps, refs)[0])
        assert results["chrF2"][k].score == pytest.approx(chrf(s.hyps, refs))
        assert (results["BLEU"][k].p_value is None) == (k == 0)
        assert (results["BLEU"][k].ci is None) == (test == "ar")


def test_seed_statistics_by_hand():
    """Mean, sample standard deviation and Student's t of two configurations' runs (pooled variance)."""
    a, b = [30.0, 31.0, 32.5], [33.0, 34.5]
    out = seed_statistics(["a", "b", "a", "a", "b"], [a[0], b[0], a[1], a[2], b[1]], "a")
    mean_a, mean_b = sum(a) / 3, sum(b) / 2
    var_a, var_b = sum((x - mean_a) ** 2 for x in a) / 2, sum((x - mean_b) ** 2 for x in b) / 1
    pooled = (2 * var_a + 1 * var_b) / 3
    t = (mean_b - mean_a) / (pooled * (1 / 2 + 1 / 3)) ** 0.5
    assert out["a"] == {"runs": 3, "mean": pytest.approx(mean_a), "std": pytest.approx(var_a ** 0.5), "t": None,
                        "p": None}
    assert out["b"]["t"] == pytest.approx(t) and 0 < out["b"]["p"] < 0.1
    assert seed_statistics(["a", "b"], [1.0, 2.0], "a")["b"] == {"runs": 1, "mean": 2.0, "std": None, "t": None,
                                                                 "p": None}
    # one run on either side alone is no test either (scipy would give NaN)
    for names in (["a", "b", "b"], ["a", "a", "b"]):
        out = seed_statistics(names, [1.0, 2.0, 4.0], "a")
        assert out["b"]["t"] is None and out["b"]["p"] is None


def test_convergence_by_hand():
    """The best validation BLEU of the last fifth of training (after 0.8 × the last validated step) against the
    best before it: the CPU Multi30k AR run's curve still rises; a curve whose last fifth gains 0.2 BLEU is flat
    within 0.5 and not within 0.1; one validation, or none, says nothing of it."""
    rising = [(500, 5.0), (1000, 18.08), (1500, 26.11), (2000, 30.9), (2500, 33.22)]
    assert convergence(rising, 0.5) == {"best": 33.22, "best_step": 2500, "gain": pytest.approx(2.32), "flat": False}
    flat = [(100, 10.0), (200, 20.0), (300, 30.0), (400, 30.2), (450, 30.4), (500, 30.1)]
    assert convergence(flat, 0.5) == {"best": 30.4, "best_step": 450, "gain": pytest.approx(0.2), "flat": True}
    assert convergence(flat, 0.1)["flat"] is False
    assert convergence([(100, 30.0), (500, 30.5)], 0.5)["flat"] is True  # a gain of exactly ``within``: flat
    falling = [(100, 12.0), (200, 12.0), (1000, 11.0)]  # the first of equal bests; a loss is a gain below 0
    assert convergence(falling, 0.0) == {"best": 12.0, "best_step": 100, "gain": -1.0, "flat": True}
    assert convergence([(4, 3.0)], 0.5) == {"best": 3.0, "best_step": 4, "gain": None, "flat": None}
    assert convergence([], 0.5) == {"best": None, "best_step": None, "gain": None, "flat": None}
    assert curve_points(rising) == rising
    assert curve_points([(100, 1.0), (200, 2.0), (400, 3.0)], 4) == [(100, 1.0), (200, 2.0), (200, 2.0), (400, 3.0)]
    assert curve_points([(4, 3.0)]) == [(4, 3.0)] * 5


def test_valid_curve_reads_the_validations_of_the_history(tmp_path):
    entries = [{"step": 2, "loss": 5.0}, {"step": 4, "valid_loss": 4.0, "valid_bleu": 1.5}, {"step": 6, "loss": 3.0},
               {"step": 8, "valid_loss": 3.0, "valid_bleu": 2.5}, {"step": 8, "valid_loss": 3.0}]
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries) + '{"step": 1')
    assert valid_curve(str(tmp_path)) == [(4, 1.5), (8, 2.5)]  # (and the line a killed process left unfinished)
    assert valid_curve(str(tmp_path / "none")) == []
    for bad in ('"30.1"', "true", "NaN"):  # a hand-edited score: one line naming the file and step, not a max() of str
        lines = f'{{"step": 3, "valid_bleu": 1.0}}\n{{"step": 5, "valid_bleu": {bad}}}\n'
        (tmp_path / "history.jsonl").write_text(lines)
        with pytest.raises(JaxnatError, match=r"history.jsonl: step 5's valid_bleu is .*, not a number"):
            valid_curve(str(tmp_path))


def test_columns_name_paths_into_a_systems_entry():
    assert parse_column("BLEU=bleu") == ("BLEU", "bleu")
    assert parse_column(" soft: BLEU (CPR %) = rows.soft.bleu/rows.soft.cpr") == ("soft: BLEU (CPR %)",
                                                                                  "rows.soft.bleu/rows.soft.cpr")
    assert parse_column("a=b=c") == ("a=b", "c")  # the key is after the last '='
    for bad in ("bleu", "=bleu", "BLEU=", "BLEU=bleu/", "BLEU=/cpr"):
        with pytest.raises(ConfigError, match="LABEL=KEY"):
            parse_column(bad)
    entry = {"bleu": 30.0, "rows": {"soft": {"bleu": 31.0}}, "training": {"gain": None}}
    assert lookup(entry, "rows.soft.bleu") == 31.0 and lookup(entry, "bleu") == 30.0
    assert lookup(entry, "rows.hard.bleu") is None and lookup(entry, "bleu.x") is None
    assert lookup(entry, "training.gain", missing=KeyError) is None  # there, and None
    assert lookup(entry, "training.flat", missing=KeyError) is KeyError


def _report(*args):
    return cli.run([sys.executable, "-m", "jaxnat.report", *map(str, args)], cwd=ROOT,
                   env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=300)


def test_repetition_histogram_and_curves_by_hand():
    from jaxnat.report import count_curves, repetition_histogram, sweep_curves

    # "a a a b b" repeats a twice and b once; "c c d c c" repeats c once (counted once per sentence)
    assert repetition_histogram(["a a a b b", "c c d c c", "e f"]) == {"1": 2, "2": 1}
    rows = {"T1": {"bleu": 1}, "T10": {"bleu": 3}, "I2_oracle_deletion": {"bleu": 2}, "hard_c4": {"bleu": 5},
            "soft_c0": {"bleu": 4}, "pairs": {"bleu": 6}, "hard": {"bleu": 7}}
    assert sweep_curves(rows) == {"": {1: {"bleu": 1}, 10: {"bleu": 3}}, "oracle_deletion": {2: {"bleu": 2}}}
    assert count_curves(rows) == {"hard": {4: {"bleu": 5}}, "soft": {0: {"bleu": 4}}}


def _add_analysis_rows(workdir, refs):
    """An iteration sweep with an oracle curve and constraint-count rows, as eval.iteration_sweep, eval.oracle and
    eval.constraint_counts write them, with a first pass that repeats a word."""
    metrics = json.loads((workdir / "metrics.json").read_text())
    for name, score in (("I1", 20.0), ("I3", 25.0), ("I1_oracle_deletion", 30.0), ("I3_oracle_deletion", 40.0),
                        ("hard_c0", 25.0), ("hard_c2", 28.0)):
        metrics[f"test+{name}"] = {"bleu": score, "ter": 100 - score, "cpr": 100.0, "seconds": 1.0}
    (workdir / "metrics.json").write_text(json.dumps(metrics))
    (workdir / "hyps" / "test.I1.txt").write_text("".join(f"{r} {r.split()[-1]}\n" for r in refs))


def test_seed_rows_by_hand():
    """Per evaluation row every run has: BLEU, and CPR where each run has it; sweeps and per-count rows left out."""
    def system(plain, soft, hard_cpr=None):
        rows = {"soft": {"bleu": soft, "cpr": 90.0 + soft / 10}, "T1": {"bleu": 1.0}, "hard_c2": {"bleu": 2.0}}
        if hard_cpr is not None:
            rows["hard"] = {"bleu": plain, "cpr": hard_cpr}
        return {"bleu": plain, "rows": rows}

    systems = [system(30, 31, 100.0), system(32, 33, 100.0), system(35, 36, 99.0), system(36, 38)]
    out = seed_rows(["a", "a", "b", "b"], systems)
    assert list(out) == ["soft"] and list(out["soft"]) == ["bleu", "cpr"]  # one run has no hard row
    assert out["soft"]["bleu"] == seed_statistics(["a", "a", "b", "b"], [31, 33, 36, 38], "a")
    assert out["soft"]["cpr"]["b"]["mean"] == pytest.approx(93.7)
    out = seed_rows(["a", "a", "b"], systems[:3])
    assert list(out) == ["soft", "hard"] and out["hard"]["cpr"]["a"]["std"] == 0.0


TINY = os.path.join(ROOT, "tests", "configs", "tiny.py")


def _evaluated(workdir, config, hyps: list[str]) -> str:
    """A workdir as an evaluation leaves it (config.json, metrics.json, hyps/test.txt), with no model."""
    (workdir / "hyps").mkdir(parents=True)
    (workdir / "config.json").write_text(config.to_json_best_effort(sort_keys=True))
    (workdir / "metrics.json").write_text(json.dumps({"test": {"bleu": 1.0}}))
    (workdir / "hyps" / "test.txt").write_text("".join(h + "\n" for h in hyps))
    return str(workdir)


def test_constraint_pairs_of_a_system_that_is_not_the_baseline(tmp_path):
    """The vanilla AR model as the baseline of the vectorized one: the pairs seen in training (Wang et al. 2022,
    Table 8) were read from the baseline's data only, so that section was left out without a word."""
    from jaxnat.config import build_config
    from jaxnat.data.sources import load_corpus
    from jaxnat.report import build_report

    vanilla = build_config(TINY, [])
    paired = build_config(TINY, ["--config.model.name=vecconst", "--config.data.pairs_dir=synthetic"])
    refs = load_corpus(vanilla.data)["test"][1]
    workdirs = [_evaluated(tmp_path / name, config, refs) for name, config in (("ar", vanilla), ("vc", paired))]
    report = build_report(workdirs, "test", samples=10)
    assert [s["constraint_overlap"]["rows"]["plain"]["csr_seen"] for s in report["systems"]] == [100.0, 100.0]


def test_a_run_whose_constrained_rows_drew_other_constraints_is_marked(tmp_path, caplog):
    """Two runs evaluated with soft constraints drawn with other seeds (or, for a Chinese target, one with its
    segmenter's words and one with characters): their constrained rows sat side by side in the report without a
    word. The sets written beside the hypotheses are compared."""
    from jaxnat.config import build_config
    from jaxnat.data.sources import load_corpus
    from jaxnat.report import build_report, to_markdown

    config = build_config(TINY, [])
    refs = load_corpus(config.data)["test"][1]
    workdirs = [_evaluated(tmp_path / name, config, refs) for name in ("base", "same", "other", "none")]
    for name, words in (("base", "Mann"), ("same", "Mann"), ("other", "Frau")):
        (tmp_path / name / "hyps" / "test.constraints.jsonl").write_text(f'["{words}"]\n')
    report = build_report(workdirs, "test", samples=10)
    assert [s.get("other_constraints") for s in report["systems"]] == [None, None, True, None]
    assert "other drew other constraints from the references of test than the baseline" in caplog.text
    assert "Evaluated with other constraints drawn from the references than the baseline" in to_markdown(report)
    assert "other constraints" not in to_markdown(build_report(workdirs[:2], "test", samples=10))


def test_a_post_editing_row_shows_what_it_started_from(tmp_path):
    """The `+init` row's initial hypotheses scored as they are (init_bleu, init_ter: the do-nothing baseline that
    post-editing must beat) were left out of the report, which showed only the post-edited BLEU and TER. Columns
    that no row has are left out, as before these two."""
    from jaxnat.config import build_config
    from jaxnat.data.sources import load_corpus
    from jaxnat.report import build_report, to_markdown

    config = build_config(TINY, [])
    workdir = _evaluated(tmp_path / "run", config, load_corpus(config.data)["test"][1])
    metrics = {"test": {"bleu": 1.0}, "test+init": {"bleu": 30.5, "ter": 50.5, "init_bleu": 25.5, "init_ter": 55.5,
                                                     "mean_length": 9.5}}
    (tmp_path / "run" / "metrics.json").write_text(json.dumps(metrics))
    report = build_report([workdir], "test", samples=10)
    assert report["systems"][0]["rows"]["init"] == metrics["test+init"]
    markdown = to_markdown(report)
    assert "| system | row | bleu | ter | init_bleu | init_ter | mean_length |" in markdown
    assert "| run | init | 30.50 | 50.50 | 25.50 | 55.50 | 9.50 |" in markdown


def test_a_report_rewritten_leaves_no_picture_of_the_earlier_one(tmp_path, capsys):
    """A report written again into its --out kept the earlier report's curves.png and cmlm_analysis.png where the
    new one had no sweeps or analyses to draw (or no matplotlib), beside a report.md that had none of them."""
    from jaxnat.config import build_config
    from jaxnat.data.sources import load_corpus
    from jaxnat.report import main

    config = build_config(TINY, [])
    workdir = _evaluated(tmp_path / "ar", config, load_corpus(config.data)["test"][1])
    out = tmp_path / "report"
    out.mkdir()
    for name in ("curves.png", "cmlm_analysis.png", "valid_bleu.png", "notes.png"):
        (out / name).write_text("an earlier report's")
    assert main([workdir, "--out", str(out), "--samples", "10"]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in out.iterdir() if p.read_text(errors="replace") == "an earlier report's") == [
        "notes.png"]  # (not the report's: kept)
    assert not (out / "curves.png").exists() and not (out / "cmlm_analysis.png").exists()


def test_model_analyses_say_which_systems_have_none(tmp_path):
    """--model-analyses on systems whose family has no analysis of its own left the report without a word of it."""
    from jaxnat.config import build_config
    from jaxnat.data.sources import load_corpus
    from jaxnat.report import build_report, to_markdown

    config = build_config(TINY, [])
    workdir = _evaluated(tmp_path / "ar", config, load_corpus(config.data)["test"][1])
    report = build_report([workdir], "test", samples=10, model_analyses=True)
    assert report["unanalysed"] == ["ar"]
    assert ("Model analyses (--model-analyses): none of ar, whose families have no analysis of their own (analyses: "
            "model.name=") in to_markdown(report)
    assert "unanalysed" not in build_report([workdir], "test", samples=10)


def test_a_run_trained_on_after_its_evaluation_is_marked(tmp_path):
    """A run evaluated at step 40, then resumed to step 110 (or still training): the report showed its step-40 scores
    beside the 110 steps and the validation curve of its runs.jsonl and history, without a word."""
    from jaxnat.config import build_config
    from jaxnat.data.sources import load_corpus
    from jaxnat.evaluate import trained_since_evaluation
    from jaxnat.report import build_report, to_markdown

    config = build_config(TINY, [])
    workdir = _evaluated(tmp_path / "run", config, load_corpus(config.data)["test"][1])
    assert not trained_since_evaluation(workdir)  # no record: evaluated before records existed, or copied in
    for kind, steps in (("best", ["20"]), ("last", ["20", "40"])):
        for step in steps:
            (tmp_path / "run" / "checkpoints" / kind / step).mkdir(parents=True)
    record = {"config": {}, "checkpoints": {"best": ["20"], "last": ["20", "40"]}}
    (tmp_path / "run" / "metrics.record.json").write_text(json.dumps(record))
    assert not trained_since_evaluation(workdir) and "Trained on after" not in to_markdown(
        build_report([workdir], "test", samples=10))
    (tmp_path / "run" / "checkpoints" / "averaged" / "40").mkdir(parents=True)  # --mode average: no training
    assert not trained_since_evaluation(workdir)
    (tmp_path / "run" / "checkpoints" / "last" / "110").mkdir()
    assert trained_since_evaluation(workdir)
    report = build_report([workdir], "test", samples=10)
    assert report["systems"][0]["trained_since_evaluation"] is True
    assert "Trained on after their evaluation, so their scores are of earlier checkpoints" in to_markdown(report)


def test_a_run_evaluated_with_another_bleu_tokenizer_is_marked(tmp_path, caplog):
    """A Chinese baseline evaluated with eval.bleu_tokenize=13a (to compare with a paper) and a run evaluated with
    the language's own (zh): the Scores table rescored both with 13a, while the other rows' BLEU (metrics.json)
    stayed zh's (28.28 beside 0.00), without a word."""
    from jaxnat.config import build_config
    from jaxnat.data.sources import load_corpus
    from jaxnat.report import build_report, to_markdown

    configs = [build_config(TINY, [f"--config.eval.bleu_tokenize={name}"]) for name in ("13a", "char")]
    refs = load_corpus(configs[0].data)["test"][1]
    workdirs = [_evaluated(tmp_path / name, c, refs) for name, c in (("base", configs[0]), ("other", configs[1]))]
    report = build_report(workdirs, "test", samples=10)
    assert [s.get("bleu_tokenize") for s in report["systems"]] == [None, "char"]
    assert "evaluated with BLEU tokenized by char, the baseline with 13a" in caplog.text
    assert "Evaluated with BLEU tokenized otherwise than the baseline" in to_markdown(report)
    assert "otherwise than the baseline" not in to_markdown(build_report(workdirs[:1], "test", samples=10))


def test_analyse_checks_every_workdir_before_it_measures_one(tmp_path, monkeypatch, capsys):
    """python -m jaxnat.analyse A B: B of a family without an analysis was refused only after A's analysis (minutes
    on a real model's 500 sentences)."""
    from jaxnat import analyse
    from jaxnat.config import build_config

    measured = []
    monkeypatch.setattr(analyse, "measure", lambda workdir, *args, **options: measured.append(workdir) or {})
    workdirs = [_evaluated(tmp_path / name, build_config(TINY, args), []) for name, args in (
        ("cmlm", ["--config.model.name=cmlm", "--config.eval.beam_size=1"]), ("ar", []))]
    assert analyse.main(workdirs) == 2 and measured == []
    assert capsys.readouterr().err == (f"jaxnat: error: {workdirs[1]}: its family (model.name=ar) has no analysis of "
                                       f"its own (analyses: {analyse.with_analysis()})\n")


def test_a_run_evaluated_on_other_data_is_refused_for_its_data(tmp_path):
    """A copy evaluated on 20 test sentences beside a run evaluated on 40: refused as "20 hypotheses for the 40
    references", which left the cause (its evaluation's data) to be guessed."""
    from jaxnat.config import build_config
    from jaxnat.data.sources import load_corpus
    from jaxnat.report import build_report

    workdirs = []
    for name, sentences in (("ar", 40), ("other", 20)):
        config = build_config(TINY, [f"--config.data.synthetic_test={sentences}"])
        workdirs.append(_evaluated(tmp_path / name, config, load_corpus(config.data)["test"][1]))
    with pytest.raises(JaxnatError, match=r"other was evaluated on other references of 'test' than the baseline \(its "
                                          r"evaluation's data / the baseline's: synthetic_test 20 / 40\)"):
        build_report(workdirs, "test", samples=10)


@pytest.mark.parametrize("cpr", ["NaN", "null"])  # a metrics.json of before it was standard JSON, and of now
def test_report_json_is_strict_json(tmp_path, capsys, cpr):
    """NaN (a t-test of seeds with equal scores, a CPR of no constraints in metrics.json) was written as NaN, which
    is no JSON: jq and JavaScript's JSON.parse refuse the file. Now null, as "–" in report.md."""
    from jaxnat.config import build_config
    from jaxnat.data.sources import load_corpus
    from jaxnat.report import main
    from jaxnat.strict_json import strict

    assert strict({"a": [1.0, float("nan"), (float("inf"), "x")], "b": {"c": -float("inf"), "d": None}, "e": 2}) == {
        "a": [1.0, None, [None, "x"]], "b": {"c": None, "d": None}, "e": 2}
    config = build_config(TINY, [])
    workdir = _evaluated(tmp_path / "ar", config, load_corpus(config.data)["test"][1])
    (tmp_path / "ar" / "metrics.json").write_text(f'{{"test": {{"bleu": 1.0, "cpr": {cpr}}}}}')
    assert main([workdir, "--out", str(tmp_path / "report"), "--samples", "10"]) == 0
    capsys.readouterr()
    report = json.loads((tmp_path / "report" / "report.json").read_text(), parse_constant=lambda name: name)
    assert report["systems"][0]["cpr"] is None and report["systems"][0]["metrics"]["cpr"] is None


def test_metrics_json_and_the_history_are_standard_json(tmp_path):
    """metrics.json held NaN for a CPR of no constraints (eval.constraint_counts=0), and history.jsonl would for a
    loss that overflowed: Python's token, which JavaScript's JSON.parse and other strict readers refuse. Now null,
    which the report reads as a value not measured (test_report_json_is_strict_json) and curves.png as a gap."""
    from jaxnat.config import build_config
    from jaxnat.evaluate import write_metrics
    from jaxnat.training.history import History

    def strict_loads(text):
        return json.loads(text, parse_constant=lambda token: pytest.fail(f"{token} is no JSON"))

    write_metrics(build_config(TINY, []), str(tmp_path), {"test": {"bleu": 1.0},
                                                          "test+hard_c0": {"bleu": 1.0, "cpr": float("nan")}})
    assert strict_loads((tmp_path / "metrics.json").read_text())["test+hard_c0"] == {"bleu": 1.0, "cpr": None}
    History(str(tmp_path), 0).append({"step": 4, "loss": float("nan"), "grad_norm": float("inf")})
    assert strict_loads((tmp_path / "history.jsonl").read_text()) == {"step": 4, "loss": None, "grad_norm": None}


def test_rows_of_an_earlier_evaluation_are_not_read(tmp_path):
    """A run evaluated with constraint pairs, then again without: hyps/test.pairs_hard.txt stays, and the report
    showed its CSR as a row of the evaluation that has none."""
    from jaxnat.config import build_config
    from jaxnat.report import System, row_hyps

    workdir = _evaluated(tmp_path / "ar", build_config(TINY, []), ["a b"])
    (tmp_path / "ar" / "hyps" / "test.pairs_hard.txt").write_text("an earlier evaluation's\n")
    assert row_hyps(System(workdir, "ar", "test"), ("", "pairs", "pairs_hard")) == {"plain": ["a b"]}
    (tmp_path / "ar" / "metrics.json").write_text(json.dumps({"test": {"bleu": 1.0}, "test+pairs_hard": {"bleu": 2.0}}))
    assert row_hyps(System(workdir, "ar", "test"), ("", "pairs_hard")) == {"plain": ["a b"], "pairs_hard": [
        "an earlier evaluation's"]}


def test_an_interrupted_evaluation_leaves_no_earlier_scores_beside_its_hypotheses(tmp_path, monkeypatch):
    """Ctrl-C during --mode eval, after hyps/test.txt was rewritten: metrics.json and its record stayed the earlier
    evaluation's, so the report showed the new hypotheses' chrF and TER beside the old latency and ECE, and the
    training command took the workdir for evaluated. Now the evaluation removes them before it writes anything."""
    from jaxnat import evaluate as evaluate_module
    from jaxnat.config import build_config

    config = build_config(TINY, [])
    workdir = _evaluated(tmp_path / "ar", config, ["a b"])
    (tmp_path / "ar" / evaluate_module.EVALUATED).write_text("{}")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    supports = SimpleNamespace(hard_constraints=False)  # no model: the interruption comes at the first decoding
    translator = SimpleNamespace(spec=SimpleNamespace(supports=supports), translate=interrupted)
    monkeypatch.setattr(evaluate_module, "load_translator", lambda config, workdir: translator)
    with pytest.raises(KeyboardInterrupt):
        evaluate_module.evaluate(config, workdir)
    assert not (tmp_path / "ar" / "metrics.json").exists()
    assert not (tmp_path / "ar" / evaluate_module.EVALUATED).exists()


@pytest.mark.parametrize("interruption, status", [(KeyboardInterrupt, 130), (Terminated, 143)])
def test_an_interrupted_report_or_analysis_is_one_line(tmp_path, monkeypatch, capsys, interruption, status):
    """Ctrl-C during the resampling of python -m jaxnat.report or the measuring of jaxnat.analyse printed a
    traceback, and SIGTERM ended them without a word: now one line, exit 130 or 143."""
    from jaxnat import analyse, evaluate, report

    def interrupted(*args, **kwargs):
        raise interruption

    monkeypatch.setattr(report, "build_report", interrupted)
    monkeypatch.setattr(evaluate, "evaluated_config", interrupted)
    assert report.main([str(tmp_path), "--out", str(tmp_path / "report")]) == status
    assert capsys.readouterr().err == ("jaxnat: interrupted; the same command makes the report again (--out is "
                                       "written at its end)\n")
    assert analyse.main([str(tmp_path)]) == status
    assert capsys.readouterr().err == ("jaxnat: interrupted; nothing was measured to keep: the same command measures "
                                       "again\n")


def test_a_damaged_evaluation_is_one_line(tmp_path):
    """A metrics.json cut short, not of rows or nested past Python's recursion limit, a hyps or counts file that is
    not UTF-8 or JSON: tracebacks (JSONDecodeError, TypeError, AttributeError, UnicodeDecodeError, RecursionError)."""
    from jaxnat.config import build_config
    from jaxnat.report import System

    workdir = _evaluated(tmp_path / "ar", build_config(TINY, []), ["a b"])
    run = tmp_path / "ar"
    for name, content in (("metrics.json", b'{"test": {"bleu": 3'), ("metrics.json", b"[1, 2]"),
                          ("metrics.json", b'{"test": 5}'), ("metrics.json", b"[" * 100_000 + b"]" * 100_000),
                          ("hyps/test.txt", b"\xff\xfe\n"),
                          ("hyps/test.counts.jsonl", b'{"iterations": 2\n')):
        saved = {p: (run / p).read_bytes() for p in ("metrics.json", "hyps/test.txt")}
        (run / name).write_bytes(content)
        with pytest.raises(JaxnatError, match=f"{run / name} (cannot be read|is not an evaluation's).*--mode eval"):
            System(workdir, "ar", "test")
        for p, data in saved.items():
            (run / p).write_bytes(data)


def test_an_imported_model_is_analysed_on_its_evaluation_data_only(tmp_path):
    """python -m jaxnat.analyse of an imported CMLM read its config.json's placeholder data, the embedded synthetic
    corpus its vocabulary does not speak, and printed figures of that (the report's --model-analyses too, even after
    --mode eval on its own data); --mode eval refuses that corpus for an import."""
    from jaxnat.analyse import analysis_of
    from jaxnat.config import build_config
    from jaxnat.data import piece_vocab
    from jaxnat.evaluate import EVALUATED, evaluated_config

    config = build_config(TINY, ["--config.model.name=cmlm", "--config.eval.beam_size=1"])
    workdir = _evaluated(tmp_path / "imported", config, [])
    os.makedirs(os.path.dirname(piece_vocab.settings_path(workdir)))
    (tmp_path / "imported" / os.path.relpath(piece_vocab.settings_path(workdir), workdir)).write_text("{}")
    with pytest.raises(ConfigError, match="holds an imported model, which the embedded synthetic corpus does not "
                                          "speak: evaluate it on its data first"):
        analysis_of(evaluated_config(workdir), workdir)
    record = {"config": {"data": {"source": "text", "dir": str(tmp_path)}}, "checkpoints": {}}
    (tmp_path / "imported" / EVALUATED).write_text(json.dumps(record))  # evaluated on its own data
    assert analysis_of(evaluated_config(workdir), workdir).title.startswith("Position embeddings")


def test_runs_of_one_name_must_have_other_seeds(tmp_path):
    """--names a,a averages runs as seeds of one configuration (mean ± std, t-test): two runs of one train.seed
    (the same workdir twice, a copy, a run given the wrong name) made a mean over seeds of what is not."""
    from jaxnat.config import build_config
    from jaxnat.report import build_report

    tiny = build_config(TINY, [])
    one, two = (_evaluated(tmp_path / name, tiny, ["a b"]) for name in ("one", "two"))
    with pytest.raises(ConfigError, match=f"--names: {one} and {two} share the name 'a' and train.seed=0; runs "
                                          f"of one name are seeds"):
        build_report([one, two], "test", names=["a", "a"])
    with pytest.raises(ConfigError, match="share the name 'a' and train.seed=0"):
        build_report([one, one], "test", names=["a", "a"])


def test_names_are_read_without_the_spaces_around_them():
    """--names "ar, ar, ar" made "ar" and " ar" two configurations: the baseline alone, and two seeds of " ar"."""
    assert parse_names("ar, ar ,ar") == ["ar", "ar", "ar"]
    assert parse_names("a#b,c") == ["a#b", "c"]
    for bad in ("a,,b", "a, ", ","):
        with pytest.raises(ConfigError, match="--names has an empty name"):
            parse_names(bad)


def test_workdirs_of_one_name_are_seeds_only_by_names():
    """Without --names the systems are named after their workdirs: two of one name (runs/ar/run and runs/levt/run)
    were averaged as seeds of one configuration; now refused in one line that asks for --names."""
    assert default_names(["runs/ar", "runs/levt/", "other/ar-s2"]) == ["ar", "levt", "ar-s2"]
    with pytest.raises(ConfigError, match="the workdirs runs/ar/run and runs/levt/run are both named 'run': name the "
                                          "systems with --names"):
        default_names(["runs/ar/run", "x", "runs/levt/run"])


@pytest.mark.slow
def test_report_of_two_runs(ar_run, tmp_path):
    from jaxnat.config import workdir_config
    from jaxnat.data.sources import load_corpus

    oracle, near = tmp_path / "oracle", tmp_path / "near-oracle"
    shutil.copytree(ar_run, oracle)
    refs = load_corpus(workdir_config(str(ar_run)).data)["test"][1]
    (oracle / "hyps" / "test.txt").write_text("".join(r + "\n" for r in refs))
    _add_analysis_rows(oracle, refs)
    curve = [(100, 10.0), (200, 20.0), (300, 30.0), (400, 30.2), (500, 30.4)]
    (oracle / "history.jsonl").write_text("".join(json.dumps({"step": s, "valid_bleu": b}) + "\n" for s, b in curve))
    shutil.copytree(oracle, near)  # a second "seed" of the oracle: one sentence off
    config = json.loads((near / "config.json").read_text())
    config["train"]["seed"] += 1  # runs of one name are seeds (the report refuses two of one seed)
    (near / "config.json").write_text(json.dumps(config))
    (near / "hyps" / "test.txt").write_text("".join(r + "\n" for r in ["x"] + refs[1:]))
    out = tmp_path / "report"
    columns = [["BLEU", "bleu"], ["hard, 2 words: BLEU (CPR %)", "rows.hard_c2.bleu/rows.hard_c2.cpr"],
               ["best valid BLEU", "training.best"]]
    result = _report(ar_run, oracle, near, "--out", out, "--names", "ar,oracle,oracle", "--samples", "200",
                     *(arg for label, key in columns for arg in ("--column", f"{label}={key}")))
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    base, other, _ = report["systems"]
    assert [s["name"] for s in report["systems"]] == ["ar", "oracle#1", "oracle#2"]
    assert report["seeds"]["oracle"]["runs"] == 2 and report["seeds"]["oracle"]["std"] > 0
    assert report["seeds"]["oracle"]["p"] is None  # one run of the baseline: no t-test
    assert sum(b["sentences"] for b in base["by_length"].values()) == len(refs)
    assert report["baseline"] == "ar" and base["bleu_p"] is None
    assert 0 <= base["ece"] <= 100 and 0 < base["ece_confidence"] <= 100  # calibration of the AR model's tokens
    assert base["bleu"] == pytest.approx(json.loads((ar_run / "metrics.json").read_text())["test"]["bleu"])
    assert other["bleu"] == pytest.approx(100) and other["bleu_p"] < 0.05 and other["word_f1"]["5-9"]["f1"] == 100
    assert "bs:200" in report["signatures"]["BLEU"]
    assert sum(b["ref_words"] for b in base["word_f1"].values()) > 0
    md = (out / "report.md").read_text()
    assert "| oracle#1 | ar | 100.00* |" in md and "Target-word F1" in md and "bs:200" in md
    assert "## BLEU by source length" in md and "| oracle | plain | BLEU | 2 | " in md
    assert (out / "bleu_latency.png").stat().st_size > 5_000 and (out / "bleu_by_length.png").stat().st_size > 5_000
    assert "## Iteration sweeps" in md and "| oracle#1 | oracle_deletion | 30.00 / 70.00 | 40.00 / 60.00 |" in md
    assert "## BLEU and CPR by number of constraints" in md
    assert "| oracle#1 | hard | 25.00 / 100.0 | 28.00 / 100.0 |" in md
    assert other["repetitions"]["first pass (I1)"]["1"] > 0 and "## Repeated words per sentence" in md
    assert (out / "curves.png").stat().st_size > 5_000
    # each row's training from its workdir's runs.jsonl (the copies: the AR run's)
    assert base["runs"]["steps"] == 4 and base["runs"]["train_seconds"] > 0
    assert "## Runs" in md and f"| ar | 4 | {base['runs']['train_seconds'] / 60:.1f} min | " in md
    # each row's validation BLEU over training (history.jsonl), and whether it had stopped improving
    assert other["training"] == {"valid_bleu": [list(sb) for sb in curve], "best": 30.4, "best_step": 500,
                                 "gain": pytest.approx(0.2), "flat": True}
    assert base["training"]["valid_bleu"][0][0] == 4 and base["training"]["flat"] is None  # one validation
    assert "## Training curves" in md and report["flat_within"] == 0.5
    assert ("| oracle#1 | 5 | 30.40 (500) | 10.00 (100) | 20.00 (200) | 30.00 (300) | 30.20 (400) | 30.40 (500) | "
            "0.20 | yes |") in md
    assert (out / "valid_bleu.png").stat().st_size > 5_000
    # the table of --column: first, with each row's training and convergence ("–" where a system lacks a value)
    assert report["columns"] == columns
    assert md.index("## Table") < md.index("## Scores") < md.index("| oracle#1 | ar | 100.00* |")
    assert "| system | BLEU | hard, 2 words: BLEU (CPR %) | best valid BLEU | steps | training time | " in md
    table = {line.split(" | ")[0][2:]: line for line in md[md.index("## Table"):md.index("## Scores")].splitlines()
             if line.startswith("| ")}
    assert table["ar"].startswith(f"| ar | {base['bleu']:.2f} | – | {base['training']['best']:.2f} | 4 | ")
    assert table["ar"].endswith(" | – |")  # one validation: no verdict
    assert table["oracle#1"].startswith("| oracle#1 | 100.00 | 28.00 (100.00) | 30.40 | 4 | ")
    assert table["oracle#1"].endswith(" | yes |")

    # the baseline may be any of them; it is listed first. A column no system has a value for (a typo, or
    # constraints not evaluated): said, and shown as "–"
    result = _report(ar_run, oracle, "--out", tmp_path / "r2", "--baseline", oracle, "--test", "ar", "--samples", "50",
                     "--flat-within", "0.1", "--column", "soft=rows.soft.bleu")
    assert result.returncode == 0, result.stderr
    r2 = json.loads((tmp_path / "r2" / "report.json").read_text())
    assert r2["baseline"] == "oracle" and r2["systems"][0]["training"]["flat"] is False
    assert "--column soft=rows.soft.bleu: no system has 'rows.soft.bleu'" in result.stderr
    assert "| oracle | – | 4 | " in (tmp_path / "r2" / "report.md").read_text()  # (names: the workdirs')

    # the references are those of each run's evaluation (metrics.record.json): a copy trained on other data but
    # evaluated on the baseline's (--mode eval with --config.data overrides) is compared; one evaluated on other
    # data (the same number of test sentences, other references) is refused in one line, exit 2
    def other_seed(path, *keys):
        record = json.loads(path.read_text())
        data = record
        for key in keys:
            data = data[key]
        data["synthetic_seed"] += 1
        path.write_text(json.dumps(record))

    trained_elsewhere, other_data = tmp_path / "trained-elsewhere", tmp_path / "other-data"
    for copy in (trained_elsewhere, other_data):
        shutil.copytree(oracle, copy)
        other_seed(copy / "config.json", "data")
    result = _report(ar_run, trained_elsewhere, "--out", tmp_path / "r4", "--samples", "20")
    assert result.returncode == 0, result.stderr
    other_seed(other_data / "metrics.record.json", "config", "data")
    result = _report(ar_run, other_data, "--out", tmp_path / "r3")
    assert result.returncode == 2 and "other references" in result.stderr, result.stderr
    (oracle / "hyps" / "test.txt").write_text("only one line\n")
    for args in ([ar_run, oracle, "--out", tmp_path / "r3"], [ar_run, tmp_path, "--out", tmp_path / "r3"],
                 [ar_run, "--out", tmp_path / "r3", "--baseline", tmp_path],
                 [ar_run, "--out", tmp_path / "r3", "--flat-within", "-1"],
                 [ar_run, "--out", tmp_path / "r3", "--column", "BLEU"]):
        result = _report(*args)
        assert result.returncode == 2 and result.stderr.startswith("jaxnat: error: "), result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_an_out_that_cannot_be_a_directory_is_refused_first(tmp_path, capsys):
    """--out naming a file (or a path under one) was found only when the report was written, after the workdirs
    were read and resampled, as `[Errno 17] File exists: ...`."""
    from jaxnat.report import main

    (tmp_path / "taken").write_text("")
    for out in (tmp_path / "taken", tmp_path / "taken" / "report"):
        assert main([str(tmp_path / "no-such-run"), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"jaxnat: error: --out {out} ") and "not a directory" in err
        assert len(err.strip().splitlines()) == 1
