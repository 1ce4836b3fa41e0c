"""Constraint test sets (Post & Vilar 2018): random words of the Moses-tokenized reference (never punctuation; a
segmenter's words in Chinese and Japanese), deterministic per sentence, and their JSON lines file format and command
line."""

import gzip
import json
import os
import sys
import unicodedata

import pytest

from jaxnat.data import words as words_mod
from jaxnat.data.words import moses_tokenize
from jaxnat.errors import ConfigError, DataError
from jaxnat.evaluation.constraints import (
    is_word,
    main,
    make_constraints,
    read_constraints,
    reference_words,
    write_constraints,
)
from jaxnat.evaluation.metrics import constraint_preservation
from tests import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFS = [
    "the old man reads a book .",
    "der alte Mann liest ein Buch , und die Frau schläft !",
    "",
    "? ! ...",
    "one",
    "a b c d e f g h i j k l",
    "Ein Mann, der läuft.",
    '„Hallo“, sagte sie: "Komm her!"',
] * 20

# Untokenized references, their language and the words a constraint may be (Moses tokens, no punctuation).
REAL = [
    ("Ein Mann, der läuft.", "de", ["Ein", "Mann", "der", "läuft"]),
    ("„Hallo“, sagte sie.", "de", ["Hallo", "sagte", "sie"]),
    ('"Stop", he said.', "en", ["Stop", "he", "said"]),
    ("Sie sagte 'nein' und ging.", "de", ["Sie", "sagte", "nein", "und", "ging"]),
    ("Er trägt ein T-Shirt und eine blau-weiß gestreifte Mütze.", "de",
     ["Er", "trägt", "ein", "T-Shirt", "und", "eine", "blau-weiß", "gestreifte", "Mütze"]),
    ("L'homme mange.", "fr", ["homme", "mange"]),  # the elided article keeps its apostrophe: not a word
    ("I don't know Peter's dog.", "en", ["I", "don", "know", "Peter", "dog"]),  # "'t", "'s": clitics
    ("Ein T @-@ Shirt , bitte !", "de", ["Ein", "T", "Shirt", "bitte"]),  # already tokenized: "@-@" is no word
]


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
            words = reference_words(ref, "en")
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
    assert all(is_word(w) for w in ("Mann", "3", "3.50", "T-Shirt", "dit-il", "हिंदी"))  # Hindi ends in a vowel sign
    assert not any(is_word(w) for w in ("", "...", "«", "--", "@-@", "Mann,", "'s", "l'", "„Hallo"))
    assert not is_word("\u093fहिंदी")  # a vowel sign may end a word, not begin one


@pytest.mark.parametrize("ref, lang, words", REAL)
def test_words_of_real_text(ref, lang, words):
    assert reference_words(ref, lang) == words
    # Asking for more constraints than the sentence has words gives each word once.
    (cons,) = make_constraints([ref], seed=0, min_words=20, max_words=20, lang=lang)
    assert sorted(cons) == sorted(words)


def test_chosen_words_are_reference_tokens_without_punctuation():
    refs = [ref for ref, _, _ in REAL] * 5
    for lang in ("de", "en", "fr"):
        chosen = make_constraints(refs, seed=1, lang=lang)
        assert sum(len(c) for c in chosen) > len(refs)  # enough words drawn for the checks below to mean something
        for ref, cons in zip(refs, chosen):
            tokens = moses_tokenize(ref, lang)
            for word in cons:
                assert word in tokens, (ref, lang, word)
                assert word == word.strip() and not any(unicodedata.category(ch).startswith("P") and ch != "-"
                                                        for ch in word), (ref, lang, word)


CHINESE = "我住在北京。他在清华大学读书，NBA比赛很好看。"
CHINESE_WORDS = ["我", "住", "在", "北京", "他", "在", "清华大学", "读书", "NBA", "比赛", "很", "好看"]


def test_chinese_references_offer_words_of_several_characters():
    """Drawn from jieba's words (rjieba: `jaxnat[zh]`, in the test extra), not single characters; each found in the
    reference by CPR, which matches them on characters."""
    for lang in ("zh", "zh-CN", "zho_Hans"):
        assert reference_words(CHINESE, lang) == CHINESE_WORDS, lang
    assert words_mod.drawn_as("zh") == "words of jieba's dictionary (rjieba)"
    assert words_mod.drawn_as("de") == "Moses words"
    (cons,) = make_constraints([CHINESE], seed=0, min_words=20, max_words=20, lang="zh")
    assert sorted(cons) == sorted(CHINESE_WORDS)
    assert constraint_preservation([CHINESE], [["北京", "清华大学", "好看"]], lang="zh") == 100.0
    assert constraint_preservation(["他在清华读书。"], [["清华大学"]], lang="zh") == 0.0


def test_without_its_segmenter_a_language_offers_what_moses_gives_and_says_so(monkeypatch, caplog):
    """rjieba missing (and here MeCab, never installed by the test extra): Chinese and Japanese characters, Korean
    Moses words with their particles, as before, with a warning naming the extra, once per language."""
    monkeypatch.setitem(sys.modules, "rjieba", None)  # an import of it raises ImportError
    words_mod._segmenter.cache_clear()
    try:
        with caplog.at_level("WARNING", logger="jaxnat"):
            assert reference_words(CHINESE, "zh")[:5] == ["我", "住", "在", "北", "京"]
            assert reference_words("東京に行きました。", "ja") == ["東", "京", "に", "行", "き", "ま", "し", "た"]
            assert reference_words("나는 서울에 갔다.", "ko-KR") == ["나는", "서울에", "갔다"]
            assert reference_words(CHINESE, "zh-TW")[3:5] == ["北", "京"]
            assert words_mod.drawn_as("zh") == "single characters (no segmenter installed)"
        warned = [r.getMessage() for r in caplog.records]
        said = [("zh", "single characters"), ("ja", "single characters"), ("ko", "Moses words, particles attached")]
        assert [w.split(":")[0] for w in warned] == [f"constraints drawn from {lang} references are {what}"
                                                     for lang, what in said]
        assert all(f"pip install -e '.[{lang}]'" in w for lang, w in zip(("zh", "ja", "ko"), warned))
    finally:
        words_mod._segmenter.cache_clear()


def test_an_evaluation_of_drawn_chinese_constraints_is_redone_once_its_segmenter_is_installed(tmp_path, monkeypatch):
    """A run evaluated without rjieba (constraints of single characters) counted as evaluated after its install: the
    same command kept the character rows. The record says what the drawn constraints were made of, where a segmenter
    decides it; a German target's record is as before (no evaluation of it is redone)."""
    from jaxnat.config import build_config
    from jaxnat.evaluate import _evaluation_record, already_evaluated, write_metrics

    tiny = os.path.join(ROOT, "tests", "configs", "tiny.py")
    config = build_config(tiny, ["--config.data.tgt_lang=zh", "--config.model.name=editor",
                                 "--config.eval.beam_size=1", "--config.eval.constraints=soft"])
    monkeypatch.setitem(sys.modules, "rjieba", None)
    words_mod._segmenter.cache_clear()
    try:
        write_metrics(config, str(tmp_path), {"test": {"bleu": 1.0}})
        assert already_evaluated(config, str(tmp_path))
        monkeypatch.delitem(sys.modules, "rjieba")
        words_mod._segmenter.cache_clear()
        assert not already_evaluated(config, str(tmp_path))
    finally:
        words_mod._segmenter.cache_clear()
    assert _evaluation_record(config, str(tmp_path))["constraint_words"] == "jieba's dictionary (rjieba)"
    plain = build_config(tiny, ["--config.data.tgt_lang=zh"])  # an AR model draws no constraint (no diagnostic)
    assert "constraint_words" not in _evaluation_record(plain, str(tmp_path))
    german = build_config(tiny, ["--config.model.name=editor", "--config.eval.beam_size=1",
                                 "--config.eval.constraints=soft"])
    assert "constraint_words" not in _evaluation_record(german, str(tmp_path))


@pytest.mark.parametrize("lang, ref, wakati, words", [
    ("ja-JP", "東京に行きました。", "東京 に 行き まし た 。", ["東京", "に", "行き", "まし", "た"]),
    ("kor_Hang", "나는 서울에 갔다.", "나 는 서울 에 갔 다 .", ["나", "는", "서울", "에", "갔", "다"])])
def test_japanese_and_korean_references_offer_mecabs_words(monkeypatch, lang, ref, wakati, words):
    """MeCab's wakati output (sacreBLEU's ja-mecab and ko-mecab tokenizers, here a stand-in: their dictionaries are
    not in the test extra)."""
    from sacrebleu.tokenizers import tokenizer_ja_mecab, tokenizer_ko_mecab

    for module, name in ((tokenizer_ja_mecab, "TokenizerJaMecab"), (tokenizer_ko_mecab, "TokenizerKoMecab")):
        monkeypatch.setattr(module, name, lambda: {ref: wakati}.get)
    words_mod._segmenter.cache_clear()
    try:
        assert reference_words(ref, lang) == words
        assert words_mod.drawn_as(lang).startswith("words of MeCab")
    finally:
        words_mod._segmenter.cache_clear()


def test_moses_tokens_are_not_html_escaped():
    # The decoder is given these strings: "&quot;" would be a constraint no translation contains.
    assert moses_tokenize('Sie sagte: "Tom & Jerry".', "de") == [
        "Sie", "sagte", ":", '"', "Tom", "&", "Jerry", '"', "."]


def test_language_picks_the_tokenization_rules():
    # French splits an elided article off with its apostrophe, German splits the apostrophe off alone.
    assert make_constraints(["L'homme"], seed=0, min_words=2, max_words=2, lang="fr") == [["homme"]]
    assert sorted(make_constraints(["L'homme"], seed=0, min_words=2, max_words=2, lang="de")[0]) == ["L", "homme"]
    assert words_mod._moses_tokenizer("de") is words_mod._moses_tokenizer("de")  # built once


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
    return cli.run(cmd, cwd=ROOT, timeout=60)


def test_command_line(tmp_path):
    refs = tmp_path / "refs.de"
    refs.write_text("\n".join(REFS[:6]) + "\n", encoding="utf-8")
    out = tmp_path / "c.jsonl"
    result = _cli("--refs", str(refs), "--output", str(out), "--seed", "7")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert rows == make_constraints(REFS[:6], seed=7)

    french = tmp_path / "refs.fr"
    french.write_text("L'homme mange.\nLa femme lit.\n", encoding="utf-8")
    result = _cli("--refs", str(french), "--output", str(out), "--lang", "fr", "--min-words", "3", "--max-words", "3")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert sorted(rows[0]) == ["homme", "mange"] and sorted(rows[1]) == ["La", "femme", "lit"]
    assert rows == make_constraints(["L'homme mange.", "La femme lit."], 0, 3, 3, lang="fr")

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


def test_command_line_refuses_to_write_over_its_references(tmp_path, capsys):
    """`--refs f --output f` (or a link to f) read the references, then replaced them with the constraints; now one
    line and exit code 2, the references kept."""
    refs = tmp_path / "refs.de"
    refs.write_text("Ein Mann läuft.\n", encoding="utf-8")
    (tmp_path / "link.de").symlink_to(refs)
    for output in (refs, tmp_path / "link.de"):
        assert main(["--refs", str(refs), "--output", str(output)]) == 2
        assert capsys.readouterr().err == (f"jaxnat: error: --output {output} is the --refs file, which the "
                                           "constraints would replace; write them to another file\n")
    assert refs.read_text(encoding="utf-8") == "Ein Mann läuft.\n"
