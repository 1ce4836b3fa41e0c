"""TFDS ArrayRecord build -> tfds.data_source round trip, without TensorFlow."""

import gzip
import json
import os
import tempfile

import ml_collections
import pytest

from jaxnat.data import sources, tfds_builder
from jaxnat.errors import ConfigError, DataError

SPLITS = {
    "train": (["héllo wörld", "a b c", "", "日本語 🙂"], ["Hallo Welt", "A B C", "leer", "japanisch"]),
    "val": (["one"], ["eins"]),
}


@pytest.fixture(autouse=True)
def _temp_in_tmp_path(tmp_path, monkeypatch):
    """TFDS leaves an empty temporary directory behind at every build (its DatasetInfo's look-up of published
    metadata): under the test's own directory, not in /tmp."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


@pytest.fixture
def text_dir(tmp_path):
    d = tmp_path / "text"
    d.mkdir()
    for split, (src, tgt) in SPLITS.items():
        (d / f"{split}.en.gz").write_bytes(gzip.compress(("\n".join(src) + "\n").encode()))
        (d / f"{split}.de").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    return d


def _files(d):
    return {s: (str(d / f"{s}.en.gz"), str(d / f"{s}.de")) for s in SPLITS}


def test_build_and_load_round_trip(tmp_path, text_dir):
    data_dir = str(tmp_path / "tfds")
    path = tfds_builder.build_parallel_tfds("tiny_en_de", data_dir, _files(text_dir), "en", "de")
    assert path == os.path.join(data_dir, "tiny_en_de", "1.0.0")
    with open(os.path.join(path, "dataset_info.json")) as f:
        assert json.load(f)["fileFormat"] == "array_record"
    loaded = tfds_builder.load_tfds_splits("tiny_en_de", data_dir, ["train", "val", "train[1:3]"], "en", "de")
    assert loaded["train"] == SPLITS["train"]  # line order kept
    assert loaded["val"] == SPLITS["val"]
    assert loaded["train[1:3]"] == (SPLITS["train"][0][1:3], SPLITS["train"][1][1:3])
    # Languages swapped: same data, other direction.
    assert tfds_builder.load_tfds_splits("tiny_en_de", data_dir, ["val"], "de", "en")["val"] == (["eins"], ["one"])

    # Rebuilding from the same files reuses the dataset; from other files is an error.
    mtime = os.path.getmtime(os.path.join(path, "dataset_info.json"))
    assert tfds_builder.build_parallel_tfds("tiny_en_de", data_dir, _files(text_dir), "en", "de") == path
    assert os.path.getmtime(os.path.join(path, "dataset_info.json")) == mtime
    (text_dir / "val.de").write_text("zwei\n", encoding="utf-8")
    with pytest.raises(DataError, match="other files"):
        tfds_builder.build_parallel_tfds("tiny_en_de", data_dir, _files(text_dir), "en", "de")
    (text_dir / "val.de").write_text("eins\n", encoding="utf-8")  # the target as built, the source edited
    (text_dir / "val.en.gz").write_bytes(gzip.compress(b"two\n"))
    with pytest.raises(DataError, match="other files"):
        tfds_builder.build_parallel_tfds("tiny_en_de", data_dir, _files(text_dir), "en", "de")


def test_examples_are_read_as_stripped_text():
    """A prepared dataset's text (bytes or a numpy value, as tfds.data_source gives it) is read as the text files
    are: without surrounding whitespace."""
    import numpy as np

    examples = [{"en": b" a man .\n", "de": np.array(b"ein Mann . ")}, {"en": "x", "de": np.bytes_(b"\ty")}]
    assert tfds_builder._read_source(examples, "en", "de", "here") == (["a man .", "x"], ["ein Mann .", "y"])


def test_load_errors(tmp_path, text_dir):
    data_dir = str(tmp_path / "tfds")
    with pytest.raises(DataError) as e:
        tfds_builder.load_tfds_splits("wmt14_translate/de-en", data_dir, ["train"], "de", "en")
    assert "not prepared" in str(e.value) and "array_record" in str(e.value) and "\n" not in str(e.value)
    tfds_builder.build_parallel_tfds("tiny_en_de", data_dir, _files(text_dir), "en", "de")
    with pytest.raises(DataError, match="no split 'test'"):
        tfds_builder.load_tfds_splits("tiny_en_de", data_dir, ["test"], "en", "de")
    with pytest.raises(DataError, match="features"):
        tfds_builder.load_tfds_splits("tiny_en_de", data_dir, ["val"], "en", "fr")
    with pytest.raises(ConfigError):
        tfds_builder.build_parallel_tfds("Bad-Name", data_dir, _files(text_dir), "en", "de")
    (text_dir / "val.de").write_text("a\nb\n", encoding="utf-8")  # 1 vs 2 lines
    with pytest.raises(DataError, match="lines"):
        tfds_builder.build_parallel_tfds("other_en_de", data_dir, _files(text_dir), "en", "de")


def test_load_corpus_tfds(tmp_path, text_dir):
    cfg = ml_collections.ConfigDict(
        dict(
            source="tfds", dir=str(text_dir), src_lang="en", tgt_lang="de", train_split="train",
            valid_split="val", test_splits="val", synthetic_seed=0, synthetic_train=1, synthetic_valid=1,
            synthetic_test=1, tfds_name="tiny_en_de", tfds_data_dir=str(tmp_path / "tfds"),
        )
    )
    corpus = sources.load_corpus(cfg)
    assert corpus == {"train": SPLITS["train"], "valid": SPLITS["val"], "val": SPLITS["val"]}
    cfg.dir = ""  # already prepared: load only
    assert sources.load_corpus(cfg) == corpus
    cfg.tfds_name = "not_built"
    with pytest.raises(DataError, match="not prepared"):
        sources.load_corpus(cfg)
