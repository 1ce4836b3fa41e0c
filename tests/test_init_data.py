"""Training data with an initial hypothesis y0 per pair (data.init_lang, post-editing as in LevT §5): reading the
`{split}.{init_lang}` files, filtering, batches carrying 'init', config checks and the `<split>+init` row."""

import gzip
import json
import os
import sys
import types

import ml_collections
import numpy as np
import pytest

from jaxnat.config import default_config, validate
from jaxnat.data import batching, sources
from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID
from jaxnat.decoding.request import Supports
from jaxnat.errors import ConfigError, DataError
from tests import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_EN = ["the cat sees the dog", "a dog runs", "the man reads a book", "a woman sees the cat", "the dog sleeps",
       "a man runs to the house", "the woman reads", "a cat sleeps in the house", "the man sees a dog",
       "the book is red"]
_DE = ["die katze sieht den hund", "ein hund rennt", "der mann liest ein buch", "eine frau sieht die katze",
       "der hund schläft", "ein mann rennt zum haus", "die frau liest", "eine katze schläft im haus",
       "der mann sieht einen hund", "das buch ist rot"]
# MT-like hypotheses: near misses, one empty (kept: [BOS, EOS] is the ordinary start), one much longer than its
# target (so the init side alone decides that pair's bucket).
_MT = ["die katze sah hund", "hund rennt", "der mann liest buch", "",
       "der hund der hund schläft schläft im haus und die katze sieht den mann und die frau liest ein rotes buch",
       "ein mann rennt haus", "frau liest", "eine katze schläft haus", "der mann sieht hund", "buch ist rot"]


def _write(path, lines, gz=False):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)


@pytest.fixture
def corpus_dir(tmp_path):
    """train/val/test with .en, .de and .mt (train.mt gzipped: the init side takes [.gz] like the others)."""
    d = tmp_path / "data"
    d.mkdir()
    for split, n in (("train", 10), ("val", 4), ("test", 3)):
        _write(d / f"{split}.en", _EN[:n])
        _write(d / f"{split}.de", _DE[:n])
        _write(d / (f"{split}.mt.gz" if split == "train" else f"{split}.mt"), _MT[:n], gz=split == "train")
    return d


def _data_cfg(directory, **kw):
    base = dict(source="text", dir=str(directory), src_lang="en", tgt_lang="de", train_split="train",
                valid_split="val", test_splits="test", init_lang="mt", tfds_name="", tfds_data_dir="")
    base.update(kw)
    return ml_collections.ConfigDict(base)


def _one_line(err, *fragments):
    msg = str(err.value)
    assert "\n" not in msg
    for fragment in fragments:
        assert fragment in msg, msg


# ---------------------------------------------------------------------------------------------- files


def test_load_inits_reads_every_split_that_has_one(corpus_dir):
    cfg = _data_cfg(corpus_dir)
    corpus = sources.load_corpus(cfg)
    inits = sources.load_inits(cfg, corpus)
    assert inits == {"train": _MT[:10], "valid": _MT[:4], "test": _MT[:3]}
    assert sources.load_inits(_data_cfg(corpus_dir, init_lang=""), corpus) == {}
    os.remove(corpus_dir / "test.mt")  # a test split may lack one: it is then only translated from scratch
    assert set(sources.load_inits(cfg, corpus)) == {"train", "valid"}


@pytest.mark.parametrize("split, name", [("train", "train.mt.gz"), ("val", "val.mt")])
def test_missing_init_file_is_one_line_naming_the_path(corpus_dir, split, name):
    cfg = _data_cfg(corpus_dir)
    corpus = sources.load_corpus(cfg)
    os.remove(corpus_dir / name)
    with pytest.raises(DataError) as e:
        sources.load_inits(cfg, corpus)
    _one_line(e, os.path.join(str(corpus_dir), f"{split}.mt"), "not found", "data.init_lang")


def test_misaligned_init_file_is_one_line_naming_both_files(corpus_dir):
    cfg = _data_cfg(corpus_dir)
    corpus = sources.load_corpus(cfg)
    _write(corpus_dir / "val.mt", _MT[:3])
    with pytest.raises(DataError) as e:
        sources.load_inits(cfg, corpus)
    _one_line(e, str(corpus_dir / "val.en"), "4 lines", str(corpus_dir / "val.mt"), "has 3")


def test_an_init_file_of_empty_hypotheses_only_is_read(corpus_dir):
    """An empty line is an ordinary start ([BOS, EOS]), so a file of only empty ones (an MT system that wrote
    nothing, e.g. a barely trained one in a pipeline's quick check) is data, not an empty file, which it was
    refused as; the source and target files still need a sentence."""
    cfg = _data_cfg(corpus_dir)
    corpus = sources.load_corpus(cfg)
    _write(corpus_dir / "val.mt", ["", " ", "", ""])
    assert sources.load_inits(cfg, corpus)["valid"] == ["", "", "", ""]
    _write(corpus_dir / "val.mt", [])  # no line at all: still one line naming the file
    with pytest.raises(DataError) as e:
        sources.load_inits(cfg, corpus)
    _one_line(e, str(corpus_dir / "val.mt"), "file is empty")
    _write(corpus_dir / "val.de", ["", "", "", ""])
    with pytest.raises(DataError) as e:
        sources.load_corpus(cfg)
    _one_line(e, str(corpus_dir / "val.de"), "file is empty")


def test_an_evaluation_reads_the_test_inits_alone_and_first(corpus_dir, caplog):
    """Evaluating a model from a test split's initial hypotheses (a translation model post-editing an MT system's
    output) needed train and valid files too, and read them after every other pass: the missing train file, or a
    misaligned test file, failed minutes after the start. `evaluation_inits` reads the test splits' alone, and
    says so when none has one."""
    import logging

    from jaxnat.evaluate import evaluation_inits

    cfg = _data_cfg(corpus_dir)
    corpus = sources.load_corpus(cfg)
    os.remove(corpus_dir / "train.mt.gz")
    os.remove(corpus_dir / "val.mt")
    assert evaluation_inits(cfg, corpus) == {"test": _MT[:3]}
    _write(corpus_dir / "test.mt", _MT[:2])
    with pytest.raises(DataError) as e:
        evaluation_inits(cfg, corpus)
    _one_line(e, str(corpus_dir / "test.mt"), "has 2")
    os.remove(corpus_dir / "test.mt")
    with caplog.at_level(logging.WARNING, logger="jaxnat"):
        assert evaluation_inits(cfg, corpus) == {}
    assert "no test split has a file of initial hypotheses (test.mt[.gz])" in caplog.text


def test_init_lang_needs_text_source(corpus_dir):
    with pytest.raises(ConfigError) as e:
        sources.load_inits(_data_cfg(corpus_dir, source="synthetic"), {})
    _one_line(e, "data.init_lang", "data.source=text")


def _config(directory, **data):
    c = default_config()
    c.model.update(name="levt", d_model=16, ffn_dim=32, num_heads=2, enc_layers=1, dec_layers=1, max_len=64)
    c.data.update(source="text", dir=str(directory), src_lang="en", tgt_lang="de", train_split="train",
                  valid_split="val", test_splits="test", init_lang="mt", vocab_size=60, max_len=56, byte_fallback=False,
                  batch_tokens=112, bucket_growth=2.0, bucket_multiple=8)
    c.data.update(**data)
    c.levt.update(roll_in_alpha=0.5, roll_in_beta=0.5)  # the heads see y0 (post-editing training)
    c.eval.beam_size = 1  # refinement is greedy
    return c


@pytest.mark.parametrize("key, value, message", [
    ("model.name", "ar", "refining model"),
    ("data.source", "tfds", "data.source=text"),
    ("data.init_lang", "de", "must differ"),
    # with roll_in_beta 0 too: y0 never seen; the line says an evaluation, which trains nothing, needs the key too
    ("levt.roll_in_alpha", 0.0, "plain translation training"),
    ("levt.roll_in_alpha", 0.0, "--mode eval of a model trained without them needs it too"),
])
def test_config_validation(tmp_path, key, value, message):
    c = _config(tmp_path)
    validate(c)  # levt with text files: fine
    section, name = key.split(".")
    c[section][name] = value
    if key == "levt.roll_in_alpha":
        c.levt.roll_in_beta = 0.0
    with pytest.raises(ConfigError) as e:
        validate(c)
    _one_line(e, message)


def test_cli_missing_init_file_exits_2_with_one_line(tmp_path, corpus_dir):
    os.remove(corpus_dir / "train.mt.gz")
    result = cli.run(
        [sys.executable, "-m", "jaxnat.main", "--config", "configs/levt/demo.py", "--workdir", str(tmp_path / "run"),
         "--config.data.source=text", f"--config.data.dir={corpus_dir}", "--config.data.valid_split=val",
         "--config.data.init_lang=mt", "--config.levt.roll_in_beta=0.5"],
        cwd=ROOT, timeout=300)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and lines[-1].startswith("jaxnat: error: "), result.stderr
    assert os.path.join(str(corpus_dir), "train.mt") in lines[-1] and "Traceback" not in result.stderr


# ---------------------------------------------------------------------------------------------- filtering


def test_max_len_filters_and_truncates_on_the_init_side_too():
    src, tgt = [[7, 8], [7], [7, 8]], [[9], [9, 9], [9]]
    init = [[5, 5, 5, 5, 5], [], [5]]  # 7 tokens with BOS/EOS > max_len 6; an empty init; a short one
    s, t, y0, counts, _ = batching.prepare_with_init(src, tgt, init, max_len=6, truncate=False)
    assert counts == {"kept": 2, "too_long": 1, "truncated": 0, "empty": 0}
    assert [x.tolist() for x in y0] == [[BOS_ID, EOS_ID], [BOS_ID, 5, EOS_ID]]
    assert [x.tolist() for x in t] == [[BOS_ID, 9, 9, EOS_ID], [BOS_ID, 9, EOS_ID]]
    s, t, y0, counts, _ = batching.prepare_with_init(src, tgt, init, max_len=6, truncate=True)
    assert counts == {"kept": 3, "too_long": 0, "truncated": 1, "empty": 0}
    assert y0[0].tolist() == [BOS_ID, 5, 5, 5, 5, EOS_ID] and y0[0].dtype == np.int32
    assert batching.prepare_with_init(src, tgt, None, 6, False)[2] is None
    with pytest.raises(DataError):
        batching.prepare_with_init(src, tgt, init[:2], 6, False)


# ---------------------------------------------------------------------------------------------- batches


def test_batches_without_init_are_unchanged():
    """The plan below was recorded from the batcher before init existed (a bucket's last batch then ended in a row of
    PAD, now in the bucket's first pair again); the arrays are built here by hand."""
    lens_src, lens_tgt = [3, 5, 9, 4, 12, 6, 3], [4, 3, 7, 10, 5, 6, 14]
    src = [np.arange(10, 10 + n, dtype=np.int32) for n in lens_src]
    tgt = [np.arange(50, 50 + n, dtype=np.int32) for n in lens_tgt]
    recorded = [(8, [0, 5, 1, 0]), (16, [6, 3]), (16, [4, 2]), (16, [3, 2]), (16, [4, 6]), (8, [0, 5, 1, 0])]
    tb = batching.TrainBatcher(src, tgt, 32, [8, 16], seed=7)
    assert tb.keys == ("src", "tgt")
    for step, (length, rows) in enumerate(recorded):
        want = {k: np.zeros((len(rows), length), np.int32) for k in ("src", "tgt")}  # PAD_ID == 0
        for r, i in enumerate(rows):
            if i >= 0:
                want["src"][r, : lens_src[i]] = np.arange(10, 10 + lens_src[i])
                want["tgt"][r, : lens_tgt[i]] = np.arange(50, 50 + lens_tgt[i])
        got = tb.batch(step)
        assert set(got) == {"src", "tgt"}
        for k in want:
            assert got[k].dtype == np.int32 and got[k].tobytes() == want[k].tobytes(), (step, k)


def test_init_decides_the_bucket_when_it_is_the_longest_side():
    src, tgt, init = [np.full(4, 7, np.int32)], [np.full(4, 9, np.int32)], [np.full(12, 5, np.int32)]
    assert batching.TrainBatcher(src, tgt, 32, [8, 16], seed=0).shapes == {(4, 8)}
    tb = batching.TrainBatcher(src, tgt, 32, [8, 16], seed=0, init=init)
    assert tb.shapes == {(2, 16)} and tb.keys == ("src", "tgt", "init")
    b = tb.batch(0)
    assert b["init"].shape == b["tgt"].shape == (2, 16)
    assert (b["init"][:, :12] == 5).all() and not b["init"][:, 12:].any()  # the one pair, twice
    ((rows, b),) = batching.eval_batches(src, tgt, 2, [8, 16], init=init)
    assert rows.tolist() == [0, -1] and b["init"].shape == b["tgt"].shape == (2, 16)
    with pytest.raises(DataError):
        batching.TrainBatcher(src, tgt, 32, [8], seed=0, init=init)  # 12 > largest bucket
    with pytest.raises(DataError):
        batching.TrainBatcher(src, tgt, 32, [16], seed=0, init=init * 2)


@pytest.fixture
def trainer_factory(tmp_path, corpus_dir):
    """Trainers sharing one workdir, so the SentencePiece model is trained once."""
    from jaxnat.training.trainer import Trainer

    return lambda **data: Trainer(_config(corpus_dir, **data), str(tmp_path / "run"))


def _check_rows(batch, rows, tok, lines):
    """Every side of batch row r holds line rows[r] of its file as [BOS, pieces, EOS, PAD...]; filler rows PAD."""
    for side, key in (("src", "src"), ("tgt", "tgt"), ("tgt", "init")):
        assert batch[key].shape == batch["tgt"].shape and batch[key].dtype == np.int32
        for r, i in enumerate(rows):
            row = batch[key][r]
            if i < 0:
                assert (row == PAD_ID).all()
                continue
            pieces = tok.encode([lines[key][i]], side)[0]
            assert row.tolist() == [BOS_ID, *pieces, EOS_ID] + [PAD_ID] * (row.size - len(pieces) - 2)
            assert tok.decode(row, side) == lines[key][i]


def test_train_and_valid_batches_carry_init(trainer_factory):
    trainer = trainer_factory()
    tok = trainer.tokenizer
    batcher = trainer.make_batcher()
    assert batcher.num_examples == 10 and batcher.keys == ("src", "tgt", "init")
    lines = {"src": _EN, "tgt": _DE, "init": _MT}
    seen = set()
    for step in range(batcher.steps_per_epoch):
        batch, rows = batcher.batch(step), batcher.batch_indices(step)
        assert tuple(batch) == batcher.keys  # what compile_train_steps compiles for
        assert batch["tgt"].shape in batcher.shapes
        _check_rows(batch, rows, tok, lines)
        seen.update(int(i) for i in rows if i >= 0)
    assert seen == set(range(10))
    # Pair 4's bucket is set by its long MT line, not by its short source and target.
    lengths = {k: len(tok.encode([lines[k][4]], side)[0]) + 2 for k, side in (("src", "src"), ("tgt", "tgt"),
                                                                                ("init", "tgt"))}
    (step,) = [s for s in range(batcher.steps_per_epoch) if 4 in batcher.batch_indices(s)]
    bucket = batcher.batch(step)["tgt"].shape[1]
    assert lengths["init"] <= bucket and max(lengths["src"], lengths["tgt"]) <= trainer.buckets[0] < bucket

    src, tgt, init, _, _ = trainer.encoded_split("valid")
    for rows, batch in batching.eval_batches(src, tgt, 3, trainer.buckets, init=init):
        assert set(batch) == {"src", "tgt", "init"}
        _check_rows(batch, rows, tok, {k: v[:4] for k, v in lines.items()})


def test_max_len_counts_the_init_side_in_the_trainer(trainer_factory):
    trainer = trainer_factory(max_len=16)  # the long MT line (48 tokens) is the only side over 16 tokens
    _, _, init, counts, _ = trainer.encoded_split("train")
    assert counts["too_long"] == 1 and counts["kept"] == 9 and len(init) == 9
    _, _, init, counts, _ = trainer_factory(max_len=16, truncate=True).encoded_split("train")
    assert counts["truncated"] == 1 and len(init[4]) == 16 and init[4][-1] == EOS_ID


def test_without_init_lang_trainer_batches_have_no_init(trainer_factory):
    trainer = trainer_factory(init_lang="")
    batcher = trainer.make_batcher()
    assert batcher.keys == ("src", "tgt") and trainer.encoded_split("valid")[2] is None
    for step in range(batcher.steps_per_epoch):
        batch = batcher.batch(step)
        assert set(batch) == {"src", "tgt"}
        for r, i in enumerate(batcher.batch_indices(step)):
            if i >= 0:
                ids = trainer.tokenizer.encode([_DE[i]], "tgt")[0]
                assert batch["tgt"][r, : len(ids) + 2].tolist() == [BOS_ID, *ids, EOS_ID]


def test_resumed_run_sees_the_same_init_batches(trainer_factory):
    batcher = trainer_factory().make_batcher()
    steps = 2 * batcher.steps_per_epoch + 1  # across epoch boundaries
    with batching.prefetch(batcher.batch, 0) as it:
        straight = [b for _, b in zip(range(steps), it)]
    for start in (1, batcher.steps_per_epoch, steps - 1):
        fresh = trainer_factory().make_batcher()  # a resumed run builds everything again
        with batching.prefetch(fresh.batch, start) as it:
            got = next(it)
        for k in ("src", "tgt", "init"):
            np.testing.assert_array_equal(got[k], straight[start][k])


# ---------------------------------------------------------------------------------------------- evaluation


class _EchoTranslator:
    """Returns each initial hypothesis unchanged, so the `+init` row must score exactly the init file."""

    def __init__(self):
        self.calls = []
        self.spec = types.SimpleNamespace(supports=Supports(init=True, counts=("iterations",)))

    def translate(self, texts, beam_size, batch_size, inits=None, cut_long_inits=False, label=""):
        assert cut_long_inits  # another system's output may be longer than the model holds: cut, not refused
        assert label.endswith("+init")  # the pass's progress lines name its row
        self.calls.append((list(texts), inits))
        return [{"hyp": y0, "score": -1.0, "iterations": 2} for y0 in inits]


def test_evaluation_adds_a_post_editing_row(tmp_path, corpus_dir):
    from jaxnat.evaluate import evaluation_inits, post_edit_rows

    config = _config(corpus_dir)
    corpus = sources.load_corpus(config.data)
    os.makedirs(tmp_path / "hyps")
    echo = _EchoTranslator()
    rows = post_edit_rows(config, corpus, evaluation_inits(config.data, corpus), echo, str(tmp_path))
    assert echo.calls == [(_EN[:3], _MT[:3])]
    assert set(rows) == {"test+init"}
    row = rows["test+init"]
    assert row["bleu"] == row["init_bleu"] and row["mean_iterations"] == 2.0 and row["mean_score"] == -1.0
    assert row["ter"] == row["init_ter"]  # the do-nothing TER: the echoed hypotheses are the initial ones
    assert (tmp_path / "hyps" / "test.init.txt").read_text().splitlines() == _MT[:3]
    json.dumps(rows)  # goes into metrics.json
    os.remove(corpus_dir / "test.mt")
    assert post_edit_rows(config, corpus, evaluation_inits(config.data, corpus), echo, str(tmp_path)) == {}


def test_the_edit_trace_shows_the_post_editing_from_each_initial_hypothesis():
    """trace.html showed plain and constrained decoding only: how a model edited a given hypothesis (the
    `<split>+init` row's decoding) could not be seen. With initial hypotheses the trace has an "init" run per
    sentence, starting from that sentence's hypothesis."""
    from jaxnat.config import build_config
    from jaxnat.decoding.translator import Translator
    from jaxnat.evaluate import trace_page
    from jaxnat.models import build_model

    words = {"ein": 10, "hund": 11, "katze": 12}

    class Words:  # one piece a word
        languages = ()

        def encode(self, texts, side):
            return [[words.get(w, 13) for w in text.split()] for text in texts]

        def decode(self, ids, side):
            return " ".join(self.id_to_piece(i, side) for i in ids if i > EOS_ID)

        def id_to_piece(self, i, side):
            return {v: k for k, v in words.items()}.get(int(i), "?")

        def unrepresentable(self, text, side):
            return []

    config = build_config(os.path.join(ROOT, "tests", "configs", "tiny.py"),
                          ["--config.model.name=editor", "--config.eval.beam_size=1"])
    translator = Translator(build_model(config, 40, 40), None, Words(), config)
    asked = []

    def translate_ids(src, beam_size, batch_size, starts=None, trace=False):  # each output is its start, unedited
        asked.append(starts)
        rows = [[BOS_ID, *(s.pieces() if s else []), EOS_ID] for s in starts or [None] * len(src)]
        return [{"tokens": np.asarray(r), "iterations": 1, "trace": np.asarray([[r, r, r]])} for r in rows]

    translator.translate_ids = translate_ids
    page = trace_page(translator, ["a dog", "a cat"], None, None, [], inits=["ein hund", "katze"])
    assert [s is None for s in asked] == [True, False]
    assert [s.init for s in asked[1]] == [[10, 11], [12]]
    assert page.count("<h3>plain") == page.count("<h3>init") == 2
    assert "output: <b>ein hund</b>" in page and "output: <b>katze</b>" in page
