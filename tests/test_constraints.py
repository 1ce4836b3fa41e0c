"""Constraint test sets (Post & Vilar 2018): random reference words, deterministic per sentence, and their
JSON lines file format and command line."""

import gzip
import json
import os
import subprocess
import sys

import pytest

from jaxnat.errors import ConfigError, DataError
from jaxnat.evaluation.constraints import is_punctuation, make_constraints, read_constraints, write_constraints

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFS = [
    "the old man reads a book .",
    "der alte Mann liest ein Buch , und die Frau schläft !",
    "",
    "? ! ...",
    "one",
    "a b c d e f g h i j k l",
] * 20


def test_deterministic_and_independent_of_the_other_sentences():
    a = make_constraints(REFS, seed=3)
    assert a == make_constraints(REFS, seed=3)
    assert a != make_constraints(REFS, seed=4)
    # Sentence i's constraints depend only on (seed, i, sentence i).
    assert make_constraints(REFS[:7], seed=3) == a[:7]
    changed = ["something else entirely here"] + REFS[1:]
    assert make_constraints(changed, seed=3)[1:] == a[1:]


def test_words_come_from_the_reference_within_bounds():
    for min_words, max_words in ((1, 4), (2, 2), (0, 3)):
        counts = set()
        for ref, cons in zip(REFS, make_constraints(REFS, seed=0, min_words=min_words, max_words=max_words)):
            words = [w for w in ref.split() if not is_punctuation(w)]
            assert min(min_words, len(words)) <= len(cons) <= min(max_words, len(words))
            # distinct positions: no word is used more often than it occurs
            assert all(cons.count(w) <= words.count(w) for w in cons)
            assert all(w in words and isinstance(w, str) for w in cons)
            if len(words) >= max_words:
                counts.add(len(cons))
        assert counts == set(range(min_words, max_words + 1))  # every k in range is drawn


def test_punctuation_and_empty_references():
    cons = make_constraints(["", "   ", ". , ? « » --", "word ."], seed=0, min_words=4, max_words=4)
    assert cons == [[], [], [], ["word"]]
    assert is_punctuation("...") and is_punctuation("«") and not is_punctuation("a.") and not is_punctuation("3")


def test_order_is_shuffled_sometimes():
    refs = ["a b c d e f g h i j k l"] * 200
    orders = make_constraints(refs, seed=0, min_words=3, max_words=3)
    in_reference_order = [c == sorted(c, key="abcdefghijkl".index) for c in orders]
    assert 0 < sum(in_reference_order) < 100  # 1/6 of them expected for three words


def test_bad_word_counts():
    with pytest.raises(ConfigError, match="max_words"):
        make_constraints(REFS, 0, min_words=3, max_words=2)
    with pytest.raises(ConfigError, match="min_words"):
        make_constraints(REFS, 0, min_words=-1)


def test_file_round_trip(tmp_path):
    cons = [["Mann", "liest"], [], ["schläft", "«Buch»", 'say "hi"'], ["multi word phrase"]]
    path = tmp_path / "c.jsonl"
    write_constraints(str(path), cons)
    assert read_constraints(str(path)) == cons
    assert "schläft" in path.read_text(encoding="utf-8")  # UTF-8, not \u escapes
    gz = tmp_path / "c.jsonl.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert read_constraints(str(gz)) == cons


@pytest.mark.parametrize(
    "content, message",
    [
        ('["a"]\n["b"\n', "c.jsonl:2: invalid JSON"),
        ('["a"]\n{"a": 1}\n', "c.jsonl:2: expected a JSON list of non-empty strings"),
        ('[1]\n', "c.jsonl:1: expected a JSON list of non-empty strings"),
        ('["a", ""]\n', "c.jsonl:1: expected a JSON list of non-empty strings"),
        ('["a"]\n\n["b"]\n', "c.jsonl:2: blank line"),
        ("", "is empty"),
    ],
)
def test_malformed_file(tmp_path, content, message):
    path = tmp_path / "c.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=message.replace("[", r"\[")):
        read_constraints(str(path))


def _cli(*args):
    cmd = [sys.executable, "-m", "jaxnat.evaluation.constraints", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_command_line(tmp_path):
    refs = tmp_path / "refs.de"
    refs.write_text("\n".join(REFS[:6]) + "\n", encoding="utf-8")
    out = tmp_path / "c.jsonl"
    result = _cli("--refs", str(refs), "--output", str(out), "--seed", "7")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert rows == make_constraints(REFS[:6], seed=7)

    for args, message in [
        (["--refs", str(tmp_path / "nope"), "--output", str(out)], "nope: file not found"),
        (["--refs", str(refs)], "the following arguments are required: --output"),
        (["--refs", str(refs), "--output", str(out), "--seed", "x"], "argument --seed: invalid int value"),
        (["--refs", str(refs), "--output", str(out), "--max-words", "0"], "max_words must be"),
    ]:
        result = _cli(*args)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1, result.stderr
        assert lines[0].startswith("jaxnat: error: ") and message in lines[0], lines
