"""`--mode translate` and `--mode eval` on a trained tiny workdir: round trip, JSON lines, and bad inputs."""

import json
import os
import re
import shutil
import signal
import sys

import pytest

from jaxnat.decoding.request import Supports
from tests import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "tests", "configs", "tiny.py")


def _main(workdir, *args, stdin=None):
    cmd = [sys.executable, "-m", "jaxnat.main", "--config", TINY, "--workdir", str(workdir), *args]
    return cli.run(cmd, cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu"), input=stdin, timeout=600)


def stub_config(**eval_options):
    """What `--mode translate`'s streaming and its line checks read of a config, for a stub translator."""
    from types import SimpleNamespace

    e = dict(beam_size=1, batch_size=4, nbest=1, mbr="", alignment="", glossary="", glossary_hard=True,
             glossary_ignore_case=False)
    return SimpleNamespace(eval=SimpleNamespace(**{**e, **eval_options}), data=SimpleNamespace(src_lang="en"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory, ar_run):
    """A copy of the session's tiny AR run (conftest.py; trained by this CLI), which these tests may change."""
    workdir = tmp_path_factory.mktemp("tiny") / "run"
    shutil.copytree(ar_run, workdir)
    return workdir


def test_workdir_contents(trained):
    for name in ("config.json", "metrics.json", "spm/joint.model", "hyps/test.txt", "tensorboard"):
        assert (trained / name).exists(), name
    metrics = json.loads((trained / "metrics.json").read_text())
    assert {"bleu", "bleu_signature", "chrf", "ter", "ribes"} <= set(metrics["test"])
    assert len((trained / "hyps" / "test.txt").read_text().splitlines()) == 40
    # runs.jsonl: the training command with its last step, then its evaluation
    runs = [json.loads(line) for line in (trained / "runs.jsonl").read_text().splitlines()]
    assert [(r["mode"], r.get("steps")) for r in runs] == [("train", 4), ("eval", None)]
    assert runs[0]["command"].startswith("python -m jaxnat.main --config ") and "--config.train.steps=4" in runs[0][
        "command"] and runs[0]["seconds"] > 0


def test_translate_plain_and_json_lines_round_trip(trained, tmp_path):
    lines = ["the dog sees the cat .", '{"src": "a small house .", "id": 7}', "", '{"src": "a dog .", "prefix": "ke"}']
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    result = _main(trained, "--mode", "translate", "--input", str(src), "--output", str(out))
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["src"] for r in rows] == ["the dog sees the cat .", "a small house .", "", "a dog ."]
    assert rows[3]["hyp"].startswith("ke")  # a word typed in part, spelt on
    assert rows[1]["id"] == 7
    assert all(isinstance(r["hyp"], str) and isinstance(r["score"], float) for r in rows[:2])
    assert (rows[2]["hyp"], rows[2]["score"]) == ("", None)  # a blank line: an empty line out, untranslated
    # stdin -> stdout gives the same translations
    piped = _main(trained, "--mode", "translate", stdin="\n".join(lines) + "\n")
    assert piped.returncode == 0, piped.stderr
    assert [json.loads(line) for line in piped.stdout.splitlines()] == rows


@pytest.mark.slow
def test_hard_constraints_stay_with_their_sentence(trained, tmp_path):
    """An AR model decodes "hard" constraints with constrained beam search (VDBA): each sentence's output has
    its own phrases, though bucketing sorts the sentences by length. (A glossary's terms decoded so:
    test_eval_mode_rewrites_metrics; their lines: tests/test_glossary.py.)"""
    words = ["house", "dog", "red cat", "small", "sees the", "garden"]
    sources = ["a dog .", "the small red cat sees the big dog in the garden .", "the house .",
               "the cat sees a dog and a house and a small garden .", "a garden .", "the man sees the house ."]
    lines = [json.dumps({"src": s, "constraints": [w], "hard": True}) for s, w in zip(sources, words)]
    lines.append(json.dumps({"src": "the dog .", "constraints": ["small", "red"], "hard": True}))
    result = _main(trained, "--mode", "translate", "--config.eval.beam_size=3", "--config.eval.batch_size=3",
                   stdin="\n".join(lines) + "\n")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    for row, want in zip(rows, words + ["small red"]):
        assert all(w in row["hyp"] for w in want.split()), (row, want)


def test_sampled_translations_their_lists_and_mbr(trained):
    """`--config.eval.sampling=true`: eval.beam_size samples a sentence, the best-scoring one the output and the
    n-best list the samples by score; the same command samples the same, and with `eval.mbr=bleu` outputs the sample
    of highest mean sentence BLEU against the others (`mbr.choose`); a hard constraint is refused in one line before
    anything is translated."""
    from jaxnat.decoding import mbr

    lines = "the dog sees the cat .\nthe small house .\nthe big red cat sees a small dog in the garden .\n"
    args = ("--mode", "translate", "--config.eval.sampling=true", "--config.eval.beam_size=4", "--config.eval.nbest=4",
            "--config.eval.temperature=1.5")
    result = _main(trained, *args, stdin=lines)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    for row in rows:
        assert len(row["nbest"]) == 4 and row["nbest"][0] == {"hyp": row["hyp"], "score": row["score"]}
        assert [n["score"] for n in row["nbest"]] == sorted((n["score"] for n in row["nbest"]), reverse=True)
    chosen = _main(trained, *args, "--config.eval.mbr=bleu", stdin=lines)
    assert chosen.returncode == 0, chosen.stderr
    for row, again in zip(rows, (json.loads(line) for line in chosen.stdout.splitlines())):
        assert again["nbest"] == row["nbest"]  # the same samples
        best, utility = mbr.choose([n["hyp"] for n in row["nbest"]], "bleu")
        assert (again["hyp"], again["score"]) == (row["nbest"][best]["hyp"], row["nbest"][best]["score"])
        assert again["mbr_utility"] == pytest.approx(utility)
    hard = _main(trained, *args, stdin=json.dumps({"src": "a dog .", "constraints": ["dog"], "hard": True}) + "\n")
    assert hard.returncode == 2 and hard.stderr.strip().splitlines()[-1].endswith(
        "does not take hard constraints (eval.sampling=true samples without constraints)"), hard.stderr


def test_eval_mode_rewrites_metrics(trained, tmp_path):
    """And with a glossary, its row: the terms found in the test sources (the read, the match and the constraints
    translate gives them, `glossary.constraints_of`), hard constraints, all in the outputs."""
    os.remove(trained / "metrics.json")
    (tmp_path / "terms.tsv").write_text("the\tsmall\n")
    result = _main(trained, "--mode", "eval", "--config.eval.latency_sentences=0",
                   f"--config.eval.glossary={tmp_path / 'terms.tsv'}")
    assert result.returncode == 0, result.stderr
    metrics = json.loads((trained / "metrics.json").read_text())
    assert "bleu" in metrics["test"] and metrics["test+glossary"]["term_sentences"] > 50
    assert metrics["test+glossary"]["cpr"] == 100.0


@pytest.mark.parametrize(
    "content, message",
    [
        (b'{"src": 1}\n', 'in.txt:1: a JSON line needs a string "src" field'),
        (b'{"src": "x"\n', "in.txt:1: invalid JSON"),
        (b"caf\xe9\n", "in.txt: line 1 is not valid UTF-8"),
        (b"", "is empty"),
    ],
)
def test_bad_translate_input(trained, tmp_path, content, message):
    src = tmp_path / "in.txt"
    src.write_bytes(content)
    result = _main(trained, "--mode", "translate", "--input", str(src))
    assert result.returncode == 2
    assert message in result.stderr.strip().splitlines()[-1], result.stderr
    assert "Traceback" not in result.stderr


def test_deeply_nested_json_input_is_one_line():
    """json's decoder recurses per nesting level: a line nested 100,000 deep ended in RecursionError's traceback."""
    from jaxnat.decoding.translate_io import parse_requests
    from jaxnat.errors import DataError

    line = '{"src": "a", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(DataError, match=r"^in.txt:2: invalid JSON \(nested too deeply\)$"):
        parse_requests(['{"src": "b"}', line], "in.txt")


def test_a_plain_sentence_that_starts_with_a_brace_is_told_how_to_pass():
    """A sentence such as "{braces} are nice" is read as a JSON request: the error said only "invalid JSON
    (Expecting property name ...)"; now it says why the line was JSON and how to give such a sentence."""
    from jaxnat.decoding.translate_io import parse_requests
    from jaxnat.errors import DataError

    with pytest.raises(DataError, match=r"^in:2: invalid JSON \(Expecting property name enclosed in double quotes\); "
                                        r"a line that starts with '\{' is read as a JSON request: give such a sentence "
                                        r'as \{"src": "\.\.\."\}$'):
        parse_requests(["A dog.", "{braces} are nice"], "in")
    assert parse_requests(['{"src": "{braces} are nice"}'], "in") == [{"src": "{braces} are nice"}]


def test_translate_missing_input_and_untrained_workdir(trained, tmp_path):
    result = _main(trained, "--mode", "translate", "--input", str(tmp_path / "nope.txt"))
    assert result.returncode == 2 and "nope.txt" in result.stderr
    result = _main(tmp_path / "missing", "--mode", "translate", stdin="hello\n")
    assert result.returncode == 2 and "missing does not exist" in result.stderr
    (tmp_path / "empty").mkdir()
    result = _main(tmp_path / "empty", "--mode", "translate", stdin="hello\n")
    assert result.returncode == 2 and "holds no trained run" in result.stderr


def test_eval_hard_constraints_the_vocabulary_cannot_write_fail_before_anything_decodes(ar_run, monkeypatch):
    """eval.constraints=hard draws reference words as phrases; one the model cannot guarantee (a character its
    vocabulary lacks) stops the evaluation before its plain pass, not after it."""
    from jaxnat import evaluate
    from jaxnat.config import build_config
    from jaxnat.decoding.translator import Translator
    from jaxnat.errors import DataError

    config = build_config(os.path.join(ar_run, "config.json"), ["--config.eval.constraints=hard"])
    monkeypatch.setattr(evaluate, "load_corpus", lambda data: {"test": (["a b", "a b"], ["a b", "東"])})
    monkeypatch.setattr(Translator, "translate", lambda *args, **kwargs: pytest.fail("decoded before the check"))
    with pytest.raises(DataError, match=r"^test, eval.constraints=hard \(reference words as phrases\): sentence 2: "
                                        r"the hard constraint '東' has characters .* cannot represent \(東\)"):
        evaluate.evaluate(config, str(ar_run))


def test_pair_targets_the_vocabulary_cannot_write_fail_before_anything_decodes(ar_run, monkeypatch):
    """With data.pairs_dir, row <split>+pairs_hard guarantees the pairs' target phrases; one the model cannot write
    (a character its vocabulary lacks) stopped the evaluation only after the plain and the other rows' passes."""
    from jaxnat import evaluate
    from jaxnat.config import build_config
    from jaxnat.decoding.translator import Translator
    from jaxnat.errors import DataError

    config = build_config(os.path.join(ar_run, "config.json"), ["--config.data.pairs_dir=/pairs"])
    monkeypatch.setattr(evaluate, "load_corpus", lambda data: {"test": (["a b", "a b"], ["a b", "a b"])})
    monkeypatch.setattr(evaluate, "load_pairs", lambda data, corpus: {"test": [[("a", "b")], [("b", "東")]]})
    monkeypatch.setattr(Translator, "translate", lambda *args, **kwargs: pytest.fail("decoded before the check"))
    with pytest.raises(DataError, match=r"^test, data.pairs_dir's target phrases as hard constraints "
                                        r"\(test\+pairs_hard\): sentence 2: the hard constraint '東' has characters"):
        evaluate.evaluate(config, str(ar_run))


def test_a_timing_warm_up_runs_only_shapes_not_run_before(ar_run, monkeypatch, caplog):
    """`seconds_per_sentence` warms up with ``warm_up``: one batch of each request shape the translator has not
    run, none after an evaluation's own pass at that batch size, so that timing a test set does not decode it
    twice more. A pass that takes long logs how far it is (every PROGRESS_SECONDS; here 0: after each batch but
    the last), named as its caller labels it (an evaluation's row), and the time left at its pace."""
    import logging

    from jaxnat.config import build_config
    from jaxnat.data.batching import eval_batches
    from jaxnat.decoding import translator as translator_module
    from jaxnat.restore import load_translator

    # the run decodes in one bucket (conftest.py); three here, so that the batches take more than one shape
    t = load_translator(build_config(os.path.join(ar_run, "config.json"), ["--config.data.bucket_multiple=16"]),
                        str(ar_run))
    shapes, generate = [], t._generate
    t._generate = lambda params, request: shapes.append(request.src.shape) or generate(params, request)
    src, _ = t.encode(["a .", "a .", "the cat .", "the cat .", "a dog sees the small red cat in the big garden ."] * 2)
    batches = [b["src"].shape for _, b in eval_batches(src, None, 2, t.buckets)]
    assert len(batches) == 5 and len(set(batches)) >= 2, batches  # the test's premise: batches of one shape
    warm = t.translate_ids(src, 1, 2, warm_up=True)
    assert shapes == list(dict.fromkeys(batches))
    assert sum(w is not None for w in warm) == 2 * len(set(batches))
    shapes.clear()
    assert all(w is None for w in t.translate_ids(src, 1, 2, warm_up=True)) and shapes == []
    monkeypatch.setattr(translator_module, "PROGRESS_SECONDS", 0.0)
    with caplog.at_level(logging.INFO, logger="jaxnat"):
        full = t.translate_ids(src, 1, 2, label="test+hard")
    assert shapes == batches and all(f is not None for f in full)
    progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith("test+hard: translated ")]
    assert [line.split(" in ")[0] for line in progress] == [f"test+hard: translated {n} of 10 sentences"
                                                            for n in (2, 4, 6, 8)]
    assert all(re.search(r" s, about \d+ s left$", line) for line in progress), progress  # as a distillation's
    assert all((w["tokens"] == f["tokens"]).all() for w, f in zip(warm, full) if w is not None)


def test_a_score_that_is_no_finite_number_is_written_as_null(tmp_path):
    """The JSON lines stay strict JSON (no NaN or -Infinity, which strict readers refuse)."""
    from types import SimpleNamespace

    from jaxnat.decoding.translate_io import translate_stream

    class Stub:
        spec = SimpleNamespace(name="m", supports=Supports())
        config = stub_config()

        def translate(self, texts, beam_size, batch_size, **options):
            return [{"hyp": t, "score": s} for t, s in zip(texts, (float("-inf"), float("nan"), -1.5))]

    (tmp_path / "in.txt").write_text("a\nb\nc\n")
    config = stub_config()
    translate_stream(Stub, config, str(tmp_path / "in.txt"), str(tmp_path / "out.jsonl"))
    assert [json.loads(line)["score"] for line in (tmp_path / "out.jsonl").read_text().splitlines()] == [
        None, None, -1.5]


def test_a_request_the_model_cannot_honour_is_named_by_its_line(tmp_path):
    """One request asking what the model cannot do (soft constraints of a beam-search model) stopped the whole
    stream with a line that named no line of the input: now its line, before anything is translated."""
    from types import SimpleNamespace

    from jaxnat.decoding.translate_io import translate_stream
    from jaxnat.errors import DataError

    class Stub:
        spec = SimpleNamespace(name="m", supports=Supports(hard_constraints=True))
        config = stub_config()

        def start(self, *asked, tgt_lang=None, given=None):  # every constraint fits
            pass

        def translate(self, *args, **options):
            pytest.fail("translated")

    (tmp_path / "in.txt").write_text('a\n{"src": "b", "constraints": ["x"], "hard": true}\n'
                                     '{"src": "c", "constraints": ["x"]}\n')
    with pytest.raises(DataError, match=r"in.txt:3: model 'm' does not take soft constraints$"):
        translate_stream(Stub, stub_config(), str(tmp_path / "in.txt"), str(tmp_path / "out.jsonl"))


def test_a_start_the_model_cannot_hold_is_named_by_its_input_line_before_anything_is_written(tmp_path):
    """An initial hypothesis longer than the model holds (or any start `Translator.starts` refuses) was refused when
    its chunk was translated, after the chunks before it were written, and named "sentence N", N counting the
    lines of its chunk left after the blank ones: now its file and line, before anything is translated."""
    from jaxnat.config import build_config
    from jaxnat.decoding.translate_io import translate_stream
    from jaxnat.decoding.translator import Translator
    from jaxnat.errors import DataError
    from jaxnat.models import build_model

    class Words:  # a tokenizer of one piece a word, every character known
        languages = ()

        def encode(self, texts, side):
            return [[7] * len(text.split()) for text in texts]

        def unrepresentable(self, text, side):
            return []

    config = build_config(TINY, ["--config.model.name=levt", "--config.eval.beam_size=1"])
    translator = Translator(build_model(config, 40, 40), None, Words(), config)
    translator.translate = lambda *args, **kwargs: pytest.fail("translated")
    long = " ".join(["Hund"] * config.model.max_len)
    (tmp_path / "in.jsonl").write_text(f'\n\n{{"src": "a", "init": "Hund"}}\n{{"src": "b", "init": "{long}"}}\n')
    with pytest.raises(DataError, match=r"in.jsonl:4: the initial hypothesis has 64 target pieces, more than the 62"):
        translate_stream(lambda: translator, config, str(tmp_path / "in.jsonl"), str(tmp_path / "out.jsonl"),
                         chunk_lines=3)
    assert not (tmp_path / "out.jsonl").exists()


def test_translation_refuses_several_processes(tmp_path, monkeypatch):
    """Every process of a multi-process launch translated every line and wrote the same --output (or its own
    stdout): one line instead, before the input is read or the model loaded."""
    import jax

    from jaxnat.decoding.translate_io import translate_stream
    from jaxnat.errors import ConfigError

    monkeypatch.setattr(jax, "process_count", lambda: 2)
    with pytest.raises(ConfigError, match="--mode translate runs in a single process"):
        translate_stream(None, stub_config(), str(tmp_path / "absent.txt"), str(tmp_path / "out.jsonl"))
    assert not (tmp_path / "out.jsonl").exists()


def test_a_request_names_its_languages_as_non_empty_strings():
    from jaxnat.decoding.translate_io import parse_requests
    from jaxnat.errors import DataError

    for bad in ('{"src": "x", "tgt_lang": ""}', '{"src": "x", "src_lang": 5}', '{"src": "x", "tgt_lang": null}'):
        with pytest.raises(DataError, match=r'in:1: "(src|tgt)_lang" must be a non-empty string, a language'):
            parse_requests([bad], "in")
    assert parse_requests(['{"src": "x", "tgt_lang": "de"}'], "in")[0]["tgt_lang"] == "de"


def test_an_input_key_the_output_writes_is_refused():
    """An MT system's output line fed in as it is ({"src", "hyp", "score"}: the natural chain from one translate
    to a post-editing one) was translated from scratch and its "hyp" replaced, silently: the MT output was lost
    and nothing said it was not refined. One line instead, pointing at "init"."""
    from jaxnat.decoding.translate_io import parse_requests
    from jaxnat.errors import DataError

    for key in ("hyp", "score"):
        with pytest.raises(DataError, match=rf'in:2: "{key}" is a key translate writes, .* goes in "init"\)$'):
            parse_requests(['{"src": "x"}', json.dumps({"src": "x", key: "Ein Hund."})], "in")
    assert parse_requests(['{"src": "x", "init": "Ein Hund.", "id": 1}'], "in")[0]["id"] == 1


def test_hard_without_constraints_is_refused():
    """"hard": true beside an "init" (keep this hypothesis?) or alone asked nothing and was silently ignored."""
    from jaxnat.decoding.translate_io import parse_requests
    from jaxnat.errors import DataError

    for line in ('{"src": "x", "init": "Ein Hund.", "hard": true}', '{"src": "x", "hard": true}',
                 '{"src": "x", "constraints": [], "hard": true}'):
        with pytest.raises(DataError, match=r'^in:1: "hard": true needs "constraints", the phrases it guarantees'):
            parse_requests([line], "in")
    assert parse_requests(['{"src": "x", "init": "Ein Hund.", "hard": false}'], "in")[0]["hard"] is False


def test_a_request_with_a_number_strict_json_lacks_is_refused_before_translating():
    """An echoed key holding NaN, Infinity or a float beyond float64 (Python's json reads them) could not be written
    back as strict JSON: one line naming the line, before the model is loaded, not a traceback after translating."""
    from jaxnat.decoding.translate_io import parse_requests
    from jaxnat.errors import DataError

    for bad, shown in (("NaN", "NaN"), ("-Infinity", "-Infinity"), ("[1, 1e999]", "1e999")):
        with pytest.raises(DataError, match=rf"in:2: invalid JSON \({shown} is not a finite number\)"):
            parse_requests(['{"src": "x"}', f'{{"src": "x", "weight": {bad}}}'], "in")
    assert parse_requests(['{"src": "x", "weight": [1.5, -2, 3e10]}'], "in")[0]["weight"] == [1.5, -2, 3e10]


def test_a_request_key_near_a_known_one_is_a_typo_not_an_echoed_key():
    """"constraint" for "constraints" would be echoed back and its hard constraint silently dropped."""
    from jaxnat.decoding.translate_io import parse_requests
    from jaxnat.errors import DataError

    for key, near in (("constraint", "constraints"), ("Hard", "hard"), ("constraint_pair", "constraint_pairs"),
                      ("tgt-lang", "tgt_lang"), ("inits", "init")):
        with pytest.raises(DataError, match=rf'^in:1: unknown key "{key}"; did you mean "{near}"\?'):
            parse_requests([f'{{"src": "x", "{key}": ["a"], "hard": true}}'], "in")
    echoed = parse_requests(['{"src": "x", "id": 3, "doc": "d1", "source": "s", "weight": 1}'], "in")[0]
    assert echoed == {"src": "x", "id": 3, "doc": "d1", "source": "s", "weight": 1}


def test_a_prefix_is_a_string_and_a_model_without_prefixes_refuses_it_by_its_line(tmp_path):
    """A line's "prefix" (the start of its translation) is a string; a blank one asks nothing; a model that does not
    continue given starts (a non-autoregressive one) refuses it in one line naming the line, before translating."""
    from types import SimpleNamespace

    from jaxnat.decoding.translate_io import parse_requests, translate_stream
    from jaxnat.errors import DataError

    with pytest.raises(DataError, match=r'^in:1: "prefix" must be a string \(the start of the translation\)$'):
        parse_requests(['{"src": "x", "prefix": ["ein"]}'], "in")
    asked = []

    class Stub:
        spec = SimpleNamespace(name="m", supports=Supports(hard_constraints=True))
        config = stub_config()

        def start(self, *asked_, tgt_lang=None, given=None):
            asked.append(given)

        def translate(self, texts, beam_size, batch_size, **options):
            asked.append(options["prefixes"])
            return [{"hyp": t, "score": -1.0} for t in texts]

    (tmp_path / "in.txt").write_text('{"src": "a", "prefix": "  "}\nb\n')
    translate_stream(Stub, stub_config(), str(tmp_path / "in.txt"), str(tmp_path / "out.jsonl"))
    assert asked == [[None, None]]  # no start to check, and no prefix
    (tmp_path / "in.txt").write_text('a\n{"src": "b", "prefix": "ein"}\n')
    with pytest.raises(DataError, match=r"in.txt:2: model 'm' does not take target prefixes \(a given start"):
        translate_stream(Stub, stub_config(), str(tmp_path / "in.txt"), str(tmp_path / "out.jsonl"))


def test_a_blank_line_is_an_empty_line_out_untranslated(tmp_path):
    """A blank source that asks nothing else (a document's paragraph break) gives an empty hypothesis with a null
    score and zero counts (and an empty n-best list), in its place; the model decodes only the others (a blank source
    with an initial hypothesis is a request like any). A file of blank lines only is read, and nothing is decoded."""
    from types import SimpleNamespace

    from jaxnat.decoding.translate_io import translate_stream

    asked = []

    class Stub:
        spec = SimpleNamespace(name="m", supports=Supports(init=True, counts=("iterations",)))
        config = stub_config()

        def translate(self, texts, beam_size, batch_size, **options):
            asked.append((texts, options))
            return [{"hyp": f"<{t}>", "score": -1.0, "iterations": 2} for t in texts]

        def start(self, init, phrases, is_hard, pairs, tgt_lang=None, given=None):  # each line's, before translating
            asked.append(init)

    config = stub_config()
    (tmp_path / "in.txt").write_text('a\n\n   \n{"src": "", "id": 7}\n{"src": " ", "init": "x"}\nb\n')
    translate_stream(Stub, config, str(tmp_path / "in.txt"), str(tmp_path / "out.jsonl"))
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [(r["hyp"], r["score"], r["iterations"]) for r in rows] == [
        ("<a>", -1.0, 2), ("", None, 0), ("", None, 0), ("", None, 0), ("< >", -1.0, 2), ("<b>", -1.0, 2)]
    assert rows[3]["id"] == 7 and asked == ["x", (["a", " ", "b"], {"nbest": 1, "mbr": "", "alignment": "",
                                                                     "inits": [None, "x", None],
                                                                     "constraints": [None] * 3, "hard": [False] * 3})]
    asked.clear()
    (tmp_path / "blank.txt").write_text("\n \n")
    translate_stream(Stub, config, str(tmp_path / "blank.txt"), str(tmp_path / "blank.jsonl"))
    assert (tmp_path / "blank.jsonl").read_text().splitlines() == ['{"src": "", "hyp": "", "score": null, '
                                                                   '"iterations": 0}'] * 2 and asked == []
    # with n-best lists asked for, a blank line's is empty
    config.eval.nbest = 2
    translate_stream(Stub, config, str(tmp_path / "blank.txt"), str(tmp_path / "blank.jsonl"))
    assert [json.loads(line)["nbest"] for line in (tmp_path / "blank.jsonl").read_text().splitlines()] == [[], []]
    # and so are its alignment and the pieces it counts
    config.eval.alignment = "pieces"
    translate_stream(Stub, config, str(tmp_path / "blank.txt"), str(tmp_path / "blank.jsonl"))
    assert [json.loads(line)["alignment"] for line in (tmp_path / "blank.jsonl").read_text().splitlines()] == [""] * 2
    assert json.loads((tmp_path / "blank.jsonl").read_text().splitlines()[0])["src_pieces"] == []


def test_a_reader_that_closes_stdout_ends_translation_quietly(monkeypatch):
    """`... --mode translate | head -3`: the reader closes the pipe early. The write (or, for an output short enough
    to sit in the buffer, the interpreter's flush at exit) raised BrokenPipeError, a traceback; now translation
    stops quietly and stdout goes nowhere from then on."""
    import io
    from types import SimpleNamespace

    from jaxnat.decoding.translate_io import translate_stream

    class Stub:
        spec = SimpleNamespace(name="m", supports=Supports())
        config = stub_config()

        def translate(self, texts, beam_size, batch_size, **options):
            return [{"hyp": t, "score": -1.0} for t in texts]

    read, write = os.pipe()
    os.close(read)
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(b"a\nb\n"), isatty=lambda: False))
    stdout = open(write, "w", encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", stdout)
    config = stub_config()
    translate_stream(Stub, config, None, None)
    stdout.write("more\n")
    stdout.close()  # flushes: no error either


def test_ctrl_c_says_what_the_output_holds_and_that_nothing_resumes(tmp_path, monkeypatch, caplog):
    """Ctrl-C printed training's and distillation's resume message ('the same command resumes ...'), and translation
    resumes nothing. Now one line: before any writing, nothing was written and an earlier --output is as it was;
    later, how many lines --output holds. The output is written a chunk at a time as it is translated (it was written
    only once the whole input was: an interruption or a crash at the end of a long input lost everything). A full
    disk names --output."""
    from types import SimpleNamespace

    from jaxnat.decoding import translate_io
    from jaxnat.errors import Interrupted, Terminated

    chunks = []

    class Stub:
        spec = SimpleNamespace(name="m", supports=Supports())
        config = stub_config()

        def translate(self, texts, beam_size, batch_size, **options):
            if len(chunks) == 2:
                raise KeyboardInterrupt
            chunks.append(texts)
            return [{"hyp": t, "score": -1.0} for t in texts]

    config = stub_config()
    (tmp_path / "in.txt").write_text("a\nb\nc\nd\ne\n")
    out = tmp_path / "out.jsonl"
    out.write_text("earlier\n")
    chunks.extend([None, None])
    with pytest.raises(Interrupted, match=rf"^interrupted before anything was written to {out}, which is left as it "
                                          rf"was; the same command translates the input again from its start$") as e:
        translate_io.translate_stream(Stub, config, str(tmp_path / "in.txt"), str(out))
    assert e.value.exit_code == 130 and out.read_text() == "earlier\n"

    chunks.clear()
    with caplog.at_level("INFO", logger="jaxnat"), \
            pytest.raises(Interrupted, match=rf"^interrupted: {out} holds the translations of the first 4 of the 5 "
                                             rf"lines; the same command translates the input again from its start$"):
        translate_io.translate_stream(Stub, config, str(tmp_path / "in.txt"), str(out), chunk_lines=2)
    assert chunks == [["a", "b"], ["c", "d"]] and [json.loads(line)["hyp"] for line in out.read_text().splitlines()] \
        == ["a", "b", "c", "d"]
    assert f"wrote 4 of 5 lines to {out}" in caplog.text

    Stub.translate = lambda self, texts, beam_size, batch_size, **options: [{"hyp": t, "score": -1.0} for t in texts]
    dumps = translate_io.json.dumps
    lines = iter([dumps, dumps, KeyboardInterrupt])

    def interrupted_dumps(*args, **kwargs):
        step = next(lines)
        if step is KeyboardInterrupt:
            raise KeyboardInterrupt
        return step(*args, **kwargs)

    monkeypatch.setattr(translate_io.json, "dumps", interrupted_dumps)
    with pytest.raises(Interrupted, match=rf"^interrupted: {out} holds the translations of the first 2 of the 5 "):
        translate_io.translate_stream(Stub, config, str(tmp_path / "in.txt"), str(out))
    assert len(out.read_text().splitlines()) == 2

    # a full disk: the buffered write's error named no file, so the command's last line said "(writing)"
    monkeypatch.setattr(translate_io.json, "dumps", dumps)
    if os.path.exists("/dev/full"):
        with pytest.raises(OSError) as full:
            translate_io.translate_stream(Stub, config, str(tmp_path / "in.txt"), "/dev/full")
        assert full.value.filename == "/dev/full"

    def typing_interrupted():
        raise KeyboardInterrupt  # Ctrl-C at a terminal, for Ctrl-D

    stdin = SimpleNamespace(buffer=SimpleNamespace(read=typing_interrupted), isatty=lambda: True)
    monkeypatch.setattr(translate_io.sys, "stdin", stdin)
    with pytest.raises(Interrupted, match=r"^interrupted before anything was written to stdout; the same command "):
        translate_io.translate_stream(Stub, config, None, None)

    def terminated():  # SIGTERM, as jaxnat.main raises it: the same line, exit 143
        raise Terminated

    monkeypatch.setattr(translate_io.sys, "stdin", SimpleNamespace(buffer=SimpleNamespace(read=terminated),
                                                                   isatty=lambda: False))
    with pytest.raises(Interrupted, match=r"^interrupted before anything was written to stdout") as e:
        translate_io.translate_stream(Stub, config, None, None)
    assert e.value.exit_code == 128 + signal.SIGTERM


def test_parameters_that_are_not_finite_are_refused_at_load(ar_run, monkeypatch):
    """A diverged or damaged checkpoint (NaN parameters) decoded every sentence to an empty hypothesis with a null
    score, exit 0; now one line naming the first such parameter, before anything is decoded."""
    import jax
    import jax.numpy as jnp

    from jaxnat.config import workdir_config
    from jaxnat.errors import JaxnatError
    from jaxnat.restore import load_translator
    from jaxnat.training.checkpoint import Checkpoints

    restore_best = Checkpoints.restore_best

    def nan_first_bias(self, target):
        params = restore_best(self, target)
        path = jax.tree_util.tree_leaves_with_path(params)[0][0]
        return jax.tree_util.tree_map_with_path(lambda p, x: x * jnp.nan if p == path else x, params)

    monkeypatch.setattr(Checkpoints, "restore_best", nan_first_bias)
    with pytest.raises(JaxnatError, match=r"the best parameters hold NaN or infinite values \(first: params/\S+\): a "
                                          r"diverged or damaged model"):
        load_translator(workdir_config(str(ar_run)), str(ar_run))


def test_outputs_without_a_finite_score_are_counted_in_a_warning(ar_run, caplog, monkeypatch):
    """A model whose computation overflows (parameters far too large, yet finite: 1e8 times the tiny run's give NaN
    and -inf) decodes every sentence to an empty hypothesis with such a score, written as null, without a word;
    now a warning counts them. (The decoding itself is stood in for: what it hands back.)"""
    import numpy as np

    from jaxnat.config import workdir_config
    from jaxnat.data.vocab import BOS_ID, EOS_ID
    from jaxnat.decoding.translator import Translator
    from jaxnat.restore import load_translator

    translator = load_translator(workdir_config(str(ar_run)), str(ar_run))
    for scores, warned in (([-1.5, -2.0, -0.5], False), ([float("-inf"), float("nan"), -0.5], True)):
        decoded = [{"tokens": np.asarray([BOS_ID, EOS_ID]), "score": np.float32(s)} for s in scores]
        monkeypatch.setattr(Translator, "translate_ids", lambda *args, **kwargs: decoded)
        caplog.clear()
        with caplog.at_level("WARNING", logger="jaxnat"):
            translator.translate(["a b", "c", "a"], 1, 2)
        said = "2 of 3 sentences got no output with a finite score (null in translate's output)" in caplog.text
        assert said == warned, caplog.text


def test_reading_from_a_terminal_says_how_to_end_the_input(monkeypatch, caplog, capsys):
    """Without --input, at a terminal, the command waited for stdin's end without a word; now one line says what it
    reads and that Ctrl-D ends it (not said when stdin is a pipe or a file)."""
    import io
    from types import SimpleNamespace

    from jaxnat.decoding.translate_io import translate_stream

    class Stub:
        spec = SimpleNamespace(name="m", supports=Supports())
        config = stub_config()

        def translate(self, texts, beam_size, batch_size, **options):
            return [{"hyp": t, "score": -1.0} for t in texts]

    config = stub_config()
    for tty in (False, True):
        monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(b"a\n"), isatty=lambda: tty))
        caplog.clear()
        with caplog.at_level("INFO", logger="jaxnat"):
            translate_stream(Stub, config, None, None)
        said = "reading the sentences to translate from the terminal, one a line; end with Ctrl-D" in caplog.text
        assert said == tty and capsys.readouterr().out == '{"src": "a", "hyp": "a", "score": -1.0}\n'
