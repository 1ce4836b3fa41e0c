"""Reading text corpora (jaxnat.data.text) and choosing a corpus from the config (jaxnat.data.sources)."""

import gzip
import sys
import types

import ml_collections
import pytest

from jaxnat.data import sources, text
from jaxnat.errors import ConfigError, DataError


def _write(path, content: bytes, gz: bool = False):
    path.write_bytes(gzip.compress(content) if gz else content)
    return str(path)


def _assert_one_line(err: pytest.ExceptionInfo, *fragments: str):
    msg = str(err.value)
    assert "\n" not in msg
    for fragment in fragments:
        assert fragment in msg, msg


@pytest.mark.parametrize("gz", [False, True])
def test_read_lines_plain_and_gz(tmp_path, gz):
    path = _write(tmp_path / ("a.en.gz" if gz else "a.en"), "héllo wörld \r\n\n日本語\tx\x0cy\n".encode(), gz)
    assert text.read_lines(path) == ["héllo wörld", "", "日本語\tx\x0cy"]


def test_read_lines_no_final_newline_and_bom(tmp_path):
    path = _write(tmp_path / "a.txt", b"\xef\xbb\xbfone\ntwo")
    assert text.read_lines(path) == ["one", "two"]
    # files joined with cat: each one's byte-order mark leads a line, not a sentence's first word
    path = _write(tmp_path / "b.txt", b"\xef\xbb\xbfone\n\xef\xbb\xbftwo\nthree\xef\xbb\xbf four\n")
    assert text.read_lines(path) == ["one", "two", "three\ufeff four"]


def test_missing_file(tmp_path):
    with pytest.raises(DataError) as e:
        text.read_lines(str(tmp_path / "nope.en"))
    _assert_one_line(e, "nope.en", "not found")


@pytest.mark.parametrize("content", [b"", b"\n\n  \n"])
@pytest.mark.parametrize("gz", [False, True])
def test_empty_file(tmp_path, content, gz):
    path = _write(tmp_path / "empty.de", content, gz)
    with pytest.raises(DataError) as e:
        text.read_lines(path)
    _assert_one_line(e, "empty.de", "empty")


@pytest.mark.parametrize("gz", [False, True])
def test_non_utf8_names_line(tmp_path, gz):
    path = _write(tmp_path / "latin1.de", "gut\nschön\n".encode("latin-1"), gz)
    with pytest.raises(DataError) as e:
        text.read_lines(path)
    _assert_one_line(e, "latin1.de", "line 2", "UTF-8")


@pytest.mark.parametrize("content, line", [
    ("one\ntwo\n".encode("utf-16-le"), 1),  # no byte-order mark: valid UTF-8, a NUL after every letter
    ("one\ntwo\n".encode("utf-16"), 1),  # with one (0xff 0xfe): said to be UTF-16, not just "not UTF-8"
    (b"one\ntwo\x00 dogs\n", 2),  # a NUL inside a sentence: a corrupted file
])
def test_a_nul_byte_names_its_line(tmp_path, content, line):
    """An English file saved as UTF-16 without a byte-order mark was read as sentences with a NUL after every letter
    (a test split's source: translated as such without a word; a side of a pair: a line-count error off by one,
    from the NUL after the last line break), and a NUL inside a sentence became UNK."""
    path = _write(tmp_path / "train.en", content)
    with pytest.raises(DataError) as e:
        text.read_lines(path)
    _assert_one_line(e, path, f"line {line} holds a NUL byte", "UTF-16", "re-encode the file as UTF-8")


@pytest.mark.parametrize("gz", [False, True])
def test_carriage_return_line_breaks_are_refused(tmp_path, gz):
    """A file with classic Mac line breaks (\\r alone) was read as one sentence: a test split of 30 such lines in
    both languages was evaluated as one pair, without a word. A \\r inside a line of a \\n file stays data."""
    path = _write(tmp_path / "test.en", b"a man .\rtwo dogs .\rthe end .\r", gz)
    with pytest.raises(DataError) as e:
        text.read_lines(path)
    _assert_one_line(e, path, "carriage returns")
    assert text.read_lines(_write(tmp_path / "one.en", b"one line\r", gz)) == ["one line"]
    assert text.read_lines(_write(tmp_path / "mixed.en", b"a\rb\nc\r\n", gz)) == ["a\rb", "c"]


def test_corrupt_gzip(tmp_path):
    path = _write(tmp_path / "bad.en.gz", gzip.compress(b"hello\n" * 100)[:30])
    with pytest.raises(DataError) as e:
        text.read_lines(path)
    _assert_one_line(e, "bad.en.gz")


def test_read_parallel_mismatch(tmp_path):
    src = _write(tmp_path / "x.en", b"a\nb\nc\n")
    tgt = _write(tmp_path / "x.de.gz", b"a\nb\n", gz=True)
    with pytest.raises(DataError) as e:
        text.read_parallel(src, tgt)
    _assert_one_line(e, "x.en", "x.de.gz", "3", "2")
    with pytest.raises(DataError) as e:  # the longer file second: refused as well, not cut to the shorter
        text.read_parallel(tgt, src)
    _assert_one_line(e, "x.de.gz has 2 lines but", "x.en has 3")
    assert text.read_parallel(src, src) == (["a", "b", "c"], ["a", "b", "c"])


def test_find_split_files(tmp_path):
    _write(tmp_path / "train.en.gz", b"a\n", gz=True)
    _write(tmp_path / "train.de", b"b\n")
    assert text.find_split_files(str(tmp_path), "train", "en", "de") == (
        str(tmp_path / "train.en.gz"),
        str(tmp_path / "train.de"),
    )
    with pytest.raises(DataError) as e:
        text.find_split_files(str(tmp_path), "val", "en", "de")
    _assert_one_line(e, "val.en", "train.de", "train.en.gz")
    with pytest.raises(DataError) as e:
        text.find_split_files(str(tmp_path / "nodir"), "train", "en", "de")
    _assert_one_line(e, "nodir")
    _write(tmp_path / "train.en", b"plain\n")  # both there: the plain file, as documented
    assert text.find_split_file(str(tmp_path), "train", "en") == str(tmp_path / "train.en")


def test_corpus_fingerprint_samples_the_last_pair():
    """Six pairs sampled every third: pairs 0 and 3, and the last, whose edit (same size) must show."""
    src, tgt = [f"s{i}" for i in range(6)], [f"t{i}" for i in range(6)]
    before = text.corpus_fingerprint(src, tgt, samples=2)
    assert before["pairs"] == 6 and before["chars"] == [12, 12]
    assert text.corpus_fingerprint(src, tgt[:-1] + ["t9"], samples=2)["sample_sha256"] != before["sample_sha256"]
    assert text.corpus_fingerprint(src, tgt[:1] + ["t9"] + tgt[2:], samples=2) == before  # pair 1: not sampled


def test_lines_sha256_ends_each_line():
    import hashlib

    assert text.lines_sha256(["a", "b"]) == hashlib.sha256(b"a\nb\n").hexdigest()
    assert text.lines_sha256(["ab"]) != text.lines_sha256(["a", "b"])


def _cfg(**kw):
    base = dict(
        source="text", dir="", src_lang="en", tgt_lang="de", train_split="train", valid_split="val",
        test_splits="", synthetic_seed=0, synthetic_train=5, synthetic_valid=2, synthetic_test=3,
        tfds_name="", tfds_data_dir="",
    )
    base.update(kw)
    return ml_collections.ConfigDict(base)


def test_load_corpus_text(tmp_path, caplog):
    for split, n in (("train", 3), ("val", 2), ("test_a", 1), ("test_b", 2)):
        _write(tmp_path / f"{split}.en.gz", "".join(f"{split} en {i}\n" for i in range(n)).encode(), gz=True)
        if split != "test_b":
            _write(tmp_path / f"{split}.de", "".join(f"{split} de {i}\n" for i in range(n)).encode())
    with caplog.at_level("WARNING"):
        corpus = sources.load_corpus(_cfg(dir=str(tmp_path), test_splits="test_a, test_b"))
    assert sorted(corpus) == ["test_a", "test_b", "train", "valid"]
    assert corpus["train"] == (["train en 0", "train en 1", "train en 2"], ["train de 0", "train de 1", "train de 2"])
    assert corpus["valid"][1] == ["val de 0", "val de 1"]
    assert corpus["test_b"] == (["test_b en 0", "test_b en 1"], None)
    # said at the start: a misnamed reference (test_b.deu) gave a metrics table without scores at the end, silently
    assert caplog.messages == [f"{tmp_path}: no test_b.de or test_b.de.gz there: test split 'test_b' will be "
                               f"translated, not scored"]


def test_load_corpus_errors(tmp_path):
    with pytest.raises(ConfigError):
        sources.load_corpus(_cfg(source="csv"))
    with pytest.raises(DataError) as e:
        sources.load_corpus(_cfg(dir=str(tmp_path / "missing")))
    _assert_one_line(e, "missing")
    with pytest.raises(DataError) as e:  # dir exists but has no train files
        sources.load_corpus(_cfg(dir=str(tmp_path)))
    _assert_one_line(e, "train.en")
    with pytest.raises(ConfigError):
        sources.load_corpus(_cfg(dir=str(tmp_path), tgt_lang="en"))


@pytest.mark.parametrize("splits, message", [("test,dev,test", "names a split twice"),
                                             ("test,valid", "'valid' is reserved"), ("train", "'train' is reserved")])
def test_test_splits_that_would_overwrite_another_are_refused(splits, message):
    """A split named twice would be translated twice into one file; one named valid or train would replace that
    split of the corpus (its key)."""
    with pytest.raises(ConfigError, match=message):
        sources.named_test_splits(_cfg(test_splits=splits))
    assert sources.named_test_splits(_cfg(test_splits=" test , dev ,")) == ["test", "dev"]


def test_config_strings_are_read_without_surrounding_spaces(tmp_path):
    for lang in ("en", "de"):
        _write(tmp_path / f"train.{lang}", b"a\n")
        _write(tmp_path / f"val.{lang}", b"b\n")
    corpus = sources.load_corpus(_cfg(dir=f" {tmp_path} ", src_lang=" en", tgt_lang="de ", valid_split="val "))
    assert corpus == {"train": (["a"], ["a"]), "valid": (["b"], ["b"])}


@pytest.mark.parametrize("key", ["synthetic_train", "synthetic_valid", "synthetic_test"])
def test_an_empty_synthetic_split_is_a_config_error_naming_its_field(key):
    with pytest.raises(ConfigError, match=f"config.data.{key} must be an integer >= 1, got 0"):
        sources.load_corpus(_cfg(source="synthetic", **{key: 0}))


def test_load_corpus_synthetic(monkeypatch):
    calls = []

    def generate_corpus(seed=0, sizes=None, variant=None):
        calls.append((seed, dict(sizes), variant))
        return {k: ([f"s{i}" for i in range(n)], [f"t{i}" for i in range(n)]) for k, n in sizes.items()}

    from jaxnat.data import synthetic as real

    fake = types.ModuleType("jaxnat.data.synthetic")
    fake.generate_corpus, fake.parse_kinds, fake.Variant = generate_corpus, real.parse_kinds, real.Variant
    monkeypatch.setitem(sys.modules, "jaxnat.data.synthetic", fake)
    import jaxnat.data

    monkeypatch.setattr(jaxnat.data, "synthetic", fake, raising=False)
    corpus = sources.load_corpus(_cfg(source="synthetic", synthetic_seed=7, test_splits="ignored"))
    assert calls == [(7, {"train": 5, "valid": 2, "test": 3}, real.Variant(real.KINDS, 1.0, True))]
    assert sorted(corpus) == ["test", "train", "valid"]
    assert corpus["test"] == (["s0", "s1", "s2"], ["t0", "t1", "t2"])
