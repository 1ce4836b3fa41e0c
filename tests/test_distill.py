"""`--mode distill`: the output is a complete text corpus, an interrupted run resumes to the same result, a
finished one is not redone, and nothing that is not this distillation's is overwritten.

The teacher is the tiny config trained for 4 steps with a single bucket shape (data.max_len 24), so that it
compiles one train step; its translations are poor, which does not matter here, and about a third of the
sources are longer than 24 tokens, which exercises the dropping of sources too long for the teacher.
"""

import filecmp
import json
import os
import shutil
import sys

import pytest

import jaxnat.data.distilled as distilled_mod
import jaxnat.distill as distill_mod
from jaxnat.config import build_config
from jaxnat.data.sources import load_corpus
from jaxnat.errors import ConfigError, DataError
from tests import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "tests", "configs", "tiny.py")
OVERRIDES = [
    "--config.data.synthetic_train=300", "--config.data.synthetic_valid=10", "--config.data.synthetic_test=12",
    "--config.data.max_len=24", "--config.data.bucket_multiple=24",  # one bucket: one shape to compile
    "--config.train.steps=4", "--config.train.eval_every=4", "--config.eval.latency_sentences=0",
]
CHUNK = 128  # 300 sentences: chunks of 128, 128 and 44
FILES = ["train.en", "train.de", "valid.en", "valid.de", "test.en", "test.de"]


def _config(*extra):
    return build_config(TINY, [*OVERRIDES, *extra])


def _lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def _fitting_sources(teacher, sources):
    """The sources whose ids with BOS and EOS fit data.max_len (24), and how many do not."""
    from jaxnat.data.tokenizer import Tokenizer

    ids = Tokenizer.load(teacher).encode(sources, "src")
    kept = [s for s, x in zip(sources, ids) if len(x) + 2 <= 24]
    return kept, len(sources) - len(kept)


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    from jaxnat.main import enable_compilation_cache
    from jaxnat.training.trainer import Trainer

    enable_compilation_cache()  # the session's cache (conftest): later distillations skip compiling
    workdir = str(tmp_path_factory.mktemp("teacher") / "run")
    Trainer(_config(), workdir).train()
    return workdir


@pytest.fixture(scope="module")
def distilled(teacher, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("distilled") / "out")
    manifest = distill_mod.distill(_config(), teacher, out, config_path=TINY, chunk_size=CHUNK)
    return out, manifest


@pytest.mark.slow
def test_output_is_a_complete_text_corpus(teacher, distilled):
    out, manifest = distilled
    corpus = load_corpus(_config().data)
    assert sorted(os.listdir(out)) == sorted(FILES + ["distill.json"])  # parts removed
    # Sources too long for the teacher (more than data.max_len ids with BOS and EOS) are left out.
    kept, dropped = _fitting_sources(teacher, corpus["train"][0])
    assert 0 < dropped < 300 and manifest["dropped_too_long"] == dropped
    assert _lines(os.path.join(out, "train.en")) == kept
    hyps = _lines(os.path.join(out, "train.de"))
    assert len(hyps) == 300 - dropped and all("\n" not in h for h in hyps)
    for split, n in (("valid", 10), ("test", 12)):
        assert _lines(os.path.join(out, f"{split}.en")) == corpus[split][0]
        assert _lines(os.path.join(out, f"{split}.de")) == corpus[split][1]  # original references
        assert len(corpus[split][1]) == n
    # Another config reads it back as data.source=text, with the teacher's translations as targets.
    student = _config("--config.data.source=text", f"--config.data.dir={out}").data
    text = load_corpus(student)
    assert text["train"] == (kept, hyps)
    assert text["valid"] == corpus["valid"] and text["test"] == corpus["test"]

    assert manifest["teacher_workdir"] == os.path.realpath(teacher)
    assert manifest["checkpoint"] == {"kind": "best", "step": 4, "valid_bleu": manifest["checkpoint"]["valid_bleu"]}
    assert manifest["beam_size"] == 2 and manifest["sentences"] == 300 and manifest["chunk_size"] == CHUNK
    assert manifest["config"] == TINY and manifest["seconds"] > 0 and manifest["length_ratio"] > 0
    assert manifest["too_long_sources"] == "dropped" and "cut_sources" not in manifest


def test_each_target_translates_the_whole_source_beside_it(teacher, tmp_path, monkeypatch):
    # A teacher that copies its input ids: each written target must then be the whole source next to it, which
    # fails if a cut source were translated or if the targets were shifted against the kept sources.
    from jaxnat.data.tokenizer import Tokenizer
    from jaxnat.decoding.translator import Translator

    monkeypatch.setattr(Translator, "translate_ids", lambda self, src, *a, **k: [{"tokens": ids} for ids in src])
    out = str(tmp_path / "out")
    manifest = distill_mod.distill(_config(), teacher, out, chunk_size=CHUNK)
    tok = Tokenizer.load(teacher)
    sources, targets = _lines(os.path.join(out, "train.en")), _lines(os.path.join(out, "train.de"))
    kept, dropped = _fitting_sources(teacher, load_corpus(_config().data)["train"][0])
    assert sources == kept and manifest["dropped_too_long"] == dropped > 0
    assert targets == [tok.decode(ids, "tgt").strip() for ids in tok.encode(sources, "src")]


def test_interrupted_run_resumes_to_the_same_result(teacher, distilled, tmp_path, monkeypatch):
    out = str(tmp_path / "out")
    real = distill_mod.translate_chunk
    calls = []

    def crash_after_first(*args, **kwargs):
        if calls:
            raise KeyboardInterrupt  # what Ctrl-C does in the middle of the second chunk
        calls.append(len(args[1]))
        return real(*args, **kwargs)

    monkeypatch.setattr(distill_mod, "translate_chunk", crash_after_first)
    with pytest.raises(KeyboardInterrupt):
        distill_mod.distill(_config(), teacher, out, chunk_size=CHUNK)
    parts = os.path.join(out, ".distill_parts")
    assert sorted(os.listdir(parts)) == ["000000.json", "meta.json"]
    assert not os.path.exists(os.path.join(out, "train.de")) and not os.path.exists(os.path.join(out, "distill.json"))

    def count(*args, **kwargs):
        calls.append(len(args[1]))
        return real(*args, **kwargs)

    monkeypatch.setattr(distill_mod, "translate_chunk", count)
    # A different chunk size on resume must not misalign the parts: the unfinished run's size is kept.
    manifest = distill_mod.distill(_config(), teacher, out, chunk_size=50)
    assert calls == [128, 128, 44]  # only the two missing chunks were translated on resume
    assert manifest["chunk_size"] == CHUNK and not os.path.exists(parts)
    # The first chunk's dropped sources, read back from its part, are counted with the others.
    assert manifest["dropped_too_long"] == distilled[1]["dropped_too_long"] > 0
    for name in FILES:
        assert filecmp.cmp(os.path.join(out, name), os.path.join(distilled[0], name), shallow=False), name


def test_a_damaged_chunk_is_translated_again(tmp_path, caplog):
    parts = distill_mod.Parts(str(tmp_path), {"teacher": "t"}, chunk_size=2)
    part = {"start": 0, "end": 2, "hyps": ["a", None], "dropped": 1}
    parts.save(0, part)
    assert parts.load(0, 0, 2) == part
    with open(parts.path(0), "r+b") as f:  # cut short, as by a full disk
        f.truncate(10)
    assert parts.load(0, 0, 2) is None
    assert "000000.json is unreadable; translating that chunk again" in caplog.text


def test_a_student_refuses_an_unfinished_distillation(tmp_path):
    """An interrupted distillation holds only its parts: a student's config naming it stopped on "no file
    train.en (found: nothing)", and one interrupted while the files were written could train on a part of them."""
    out = tmp_path / "kd"
    parts = distill_mod.Parts(str(out), {"sentences": 300}, chunk_size=CHUNK)
    parts.save(0, {"start": 0, "end": CHUNK, "hyps": ["a"] * CHUNK, "dropped": 0})
    (out / "train.en").write_text("a\n")
    student = _config("--config.data.source=text", f"--config.data.dir={out}").data
    with pytest.raises(DataError, match=r"kd holds an unfinished distillation \(1 of 3 chunks translated, no "
                                        r"distill.json yet\): run its --mode distill command again"):
        load_corpus(student)
    (out / "distill.json").write_text("{}")  # finished: the parts left by a crash after the manifest do not count
    distilled_mod.check_finished(str(out))


@pytest.mark.slow
def test_a_student_trainer_copies_the_manifest(teacher, distilled, tmp_path):
    from jaxnat.training.trainer import Trainer

    out, manifest = distilled
    Trainer(_config("--config.data.source=text", f"--config.data.dir={out}"), str(tmp_path / "student"))
    assert json.loads((tmp_path / "student" / "distill.json").read_text()) == manifest
    # a run with training states (the teacher's, as a student's stand-in) that recorded another distillation
    resumed = tmp_path / "resumed"
    shutil.copytree(teacher, resumed)
    (resumed / "distill.json").write_text(json.dumps({**manifest, "teacher_workdir": "/elsewhere"}))
    with pytest.raises(DataError, match="trained on the distillation by /elsewhere"):
        Trainer(_config("--config.data.source=text", f"--config.data.dir={out}"), str(resumed))


def test_a_student_keeps_the_record_of_its_teacher(tmp_path, caplog):
    """A student's workdir said nothing of the distillation it trained on but data.dir's path, whose directory may
    be deleted or distilled again by another teacher; its own vocabulary, trained on the teacher's output, went
    without a word where the docs' students take the teacher's (data.spm_from)."""
    caplog.set_level("INFO", logger="jaxnat")
    kd, run = tmp_path / "kd", tmp_path / "run"
    kd.mkdir()
    run.mkdir()
    assert distilled_mod.record_teacher(str(kd), str(run), own_vocabulary=True) is None  # no distillation: nothing
    assert not (run / "distill.json").exists() and not caplog.text
    manifest = {"teacher_workdir": "/runs/ar", "checkpoint": {"kind": "best", "step": 1200}, "beam_size": 4}
    (kd / "distill.json").write_text(json.dumps(manifest))
    assert distilled_mod.record_teacher(str(kd), str(run), own_vocabulary=True) == manifest
    assert json.loads((run / "distill.json").read_text()) == manifest
    assert "targets by the teacher /runs/ar (best checkpoint of step 1200, beam 4)" in caplog.text
    assert "--config.data.spm_from=/runs/ar takes the teacher's instead" in caplog.text
    caplog.clear()
    distilled_mod.record_teacher(str(kd), str(run), own_vocabulary=False)
    assert "spm_from" not in caplog.text


def test_each_chunk_says_how_far_the_corpus_is_and_the_time_left(tmp_path, monkeypatch, caplog):
    """In a log file (no progress bar) a distillation said how far each chunk was, never the corpus nor when it
    would end; a resumed run counts the chunks done before it, its pace only its own."""
    caplog.set_level("INFO", logger="jaxnat")
    parts = distill_mod.Parts(str(tmp_path), {"sentences": 5}, chunk_size=2)
    parts.save(0, {"start": 0, "end": 2, "hyps": ["a", "b"], "dropped": 0})
    clock = iter(range(0, 1000, 10))  # each reading of the clock 10 s after the one before
    monkeypatch.setattr(distill_mod.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(distill_mod, "translate_chunk", lambda tr, src, *a: {"hyps": src, "dropped": 0})
    distill_mod.run_chunks(None, parts, list("abcde"), list("abcde"), 1, 1)
    # the pace: 2 sentences in the 30 s since the run began (the chunk 10 to 20, read at 30): 1 left, 15 s
    assert "chunk 2/3: sentences 2-3 in 10.0 s (0.2 sentences/s); 4 of 5 sentences done, about 15 s left" in caplog.text
    assert "chunk 3/3: sentences 4-4 in 10.0 s (0.1 sentences/s); 5 of 5 sentences done\n" in caplog.text + "\n"
    assert [distill_mod.duration(s) for s in (40.4, 719, 11_100)] == ["40 s", "12 min", "3 h 05 min"]


def test_a_student_does_not_resume_on_another_distillation(tmp_path):
    kd, run = tmp_path / "kd", tmp_path / "run"
    kd.mkdir()
    run.mkdir()
    manifest = {"teacher_workdir": "/runs/ar", "checkpoint": {"kind": "best", "step": 1200},
                "decoding": {"beam_size": 4}, "sentences": 3, "sources_sha256": "s", "too_long_sources": "dropped"}
    (kd / "distill.json").write_text(json.dumps(manifest))
    distilled_mod.check_same_teacher(str(kd), str(run))  # a run that recorded none
    distilled_mod.record_teacher(str(kd), str(run), own_vocabulary=False)
    distilled_mod.check_same_teacher(str(kd), str(run))  # the same one
    # kd deleted and distilled again from a later checkpoint of the teacher
    (kd / "distill.json").write_text(json.dumps({**manifest, "checkpoint": {"kind": "best", "step": 2000}}))
    with pytest.raises(DataError, match=r"run trained on the distillation by /runs/ar that .*run/distill.json records, "
                                        r"and data.dir=.*kd holds another distillation \(checkpoint .*'step': 1200"):
        distilled_mod.check_same_teacher(str(kd), str(run))
    # the same teacher and decoding, run on other training sources
    (kd / "distill.json").write_text(json.dumps({**manifest, "sources_sha256": "other"}))
    with pytest.raises(DataError, match=r"another distillation \(the training sources differ\)"):
        distilled_mod.check_same_teacher(str(kd), str(run))
    with pytest.raises(DataError, match="holds no distillation"):  # the original corpus instead
        distilled_mod.check_same_teacher(str(tmp_path), str(run))
    assert json.loads((run / "distill.json").read_text()) == manifest  # the record of what it trained on stays


@pytest.mark.parametrize("text", ["[1, 2]", '"distill"', "null", '{"sentences": ', ""])
def test_a_manifest_that_is_not_a_whole_object_reads_as_none(tmp_path, text):
    """Not a record of finished work: its readers call .get on what read_json returns."""
    (tmp_path / "distill.json").write_text(text)
    assert distilled_mod.read_json(str(tmp_path / "distill.json")) is None


def test_finished_output_is_not_redone(teacher, distilled, monkeypatch):
    out, manifest = distilled
    before = {name: os.stat(os.path.join(out, name)).st_mtime_ns for name in FILES + ["distill.json"]}
    monkeypatch.setattr(distill_mod, "translate_chunk", lambda *a, **k: pytest.fail("translated again"))
    assert distill_mod.distill(_config(), teacher, out, chunk_size=CHUNK) == manifest
    assert before == {name: os.stat(os.path.join(out, name)).st_mtime_ns for name in before}


def test_a_finished_output_takes_the_other_splits_as_they_are_now(teacher, distilled, tmp_path, monkeypatch):
    """A test split added to data.test_splits, or a valid or test file edited, since the distillation: its copies
    are written again (a student trained there would miss the split, or test on the old file), the distilled
    training split is not translated again nor changed."""
    out = str(tmp_path / "out")
    shutil.copytree(distilled[0], out)
    corpus = load_corpus(_config().data)
    now = {**corpus, "test": (corpus["test"][0][:-1], corpus["test"][1][:-1]), "extra": (["a b"], None)}
    monkeypatch.setattr(distill_mod, "load_corpus", lambda data: now)
    monkeypatch.setattr(distill_mod, "translate_chunk", lambda *a, **k: pytest.fail("translated again"))
    train = {name: open(os.path.join(out, name), "rb").read() for name in ("train.en", "train.de")}
    manifest = distill_mod.distill(_config(), teacher, out, chunk_size=CHUNK)
    assert _lines(os.path.join(out, "test.de")) == corpus["test"][1][:-1]
    assert _lines(os.path.join(out, "extra.en")) == ["a b"] and not os.path.exists(os.path.join(out, "extra.de"))
    assert train == {name: open(os.path.join(out, name), "rb").read() for name in train}
    assert manifest["splits"]["test"] == ["test", "extra"] and "extra.en" in manifest["files"]
    assert json.loads(open(os.path.join(out, "distill.json")).read()) == manifest


def test_command_line_on_a_finished_output(teacher, distilled):
    cmd = [sys.executable, "-m", "jaxnat.main", "--mode", "distill", "--config", TINY, "--workdir", teacher,
           "--output", distilled[0], *OVERRIDES]
    result = cli.run(cmd, cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=300)
    assert result.returncode == 0, result.stderr
    assert "already holds this distillation" in result.stderr


def test_refuses_another_teacher_or_other_sources(teacher, distilled, tmp_path):
    out = distilled[0]
    before = {name: open(os.path.join(out, name), "rb").read() for name in FILES + ["distill.json"]}
    other = str(tmp_path / "other-teacher")
    shutil.copytree(teacher, other)
    with pytest.raises(DataError, match="already holds a different distillation .teacher_workdir"):
        distill_mod.distill(_config(), other, out, chunk_size=CHUNK)
    with pytest.raises(DataError, match="sentences 300 there, 200 now"):
        distill_mod.distill(_config("--config.data.synthetic_train=200"), teacher, out, chunk_size=CHUNK)
    with pytest.raises(ConfigError, match="^eval.mbr=chrf chooses outputs in translate and eval; distillation"):
        distill_mod.distill(_config("--config.eval.mbr=chrf"), teacher, out, chunk_size=CHUNK)
    # sampled outputs are another distillation too (it was taken for the beam's, and nothing was translated)
    with pytest.raises(DataError, match="already holds a different distillation .decoding.*'sampling': "):
        distill_mod.distill(_config("--config.eval.sampling=true"), teacher, out, chunk_size=CHUNK)
    assert before == {name: open(os.path.join(out, name), "rb").read() for name in before}
    # A distillation written before too-long sources were dropped holds inconsistent pairs: not reused.
    old = tmp_path / "old"
    shutil.copytree(out, old)
    manifest = json.loads((old / "distill.json").read_text())
    del manifest["too_long_sources"]
    (old / "distill.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="kept sources longer than data.max_len"):
        distill_mod.distill(_config(), teacher, str(old), chunk_size=CHUNK)


def test_refuses_to_overwrite_other_data(teacher, tmp_path):
    # A directory of the user's own files (say, the corpus itself), not written by a distillation.
    out = tmp_path / "corpus"
    out.mkdir()
    (out / "train.de").write_text("mine\n")
    with pytest.raises(DataError, match="train.de not written by a distillation"):
        distill_mod.distill(_config(), teacher, str(out), chunk_size=CHUNK)
    assert (out / "train.de").read_text() == "mine\n" and sorted(os.listdir(out)) == ["train.de"]
    # Unfinished parts of another run are not mixed in either.
    out = tmp_path / "parts"
    (out / ".distill_parts").mkdir(parents=True)
    (out / ".distill_parts" / "meta.json").write_text('{"teacher_workdir": "/elsewhere"}')
    with pytest.raises(DataError, match="holds an unfinished distillation of a different run"):
        distill_mod.distill(_config(), teacher, str(out), chunk_size=CHUNK)


def test_missing_output_is_a_one_line_error(tmp_path):
    cmd = [sys.executable, "-m", "jaxnat.main", "--mode", "distill", "--config", TINY, "--workdir", str(tmp_path)]
    result = cli.run(cmd, cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jaxnat: error: --mode distill needs --output"), result.stderr
