"""Constraint pairs from alignments: the extracted pairs against the definition checked by brute force on
random alignments, sampling (counts, lengths, no overlap, determinism by seed), and code-switching."""

import random
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxnat.data.phrase_pairs import (PhrasePair, Written, code_switch, encode_pairs, most_common_words, phrase_pairs,
                                      sample_pairs, word_spans)
from jaxnat.data.vocab import PAD_ID
from jaxnat.errors import Terminated

SEVERAL = settings(max_examples=150, deadline=None)


def brute_force(src, tgt, links, max_words=3):
    """Every pair of spans (1–3 words each) that is tight (every word aligned), consistent (no link leaves
    the pair), words only, with the target span exactly the hull of the source span's links."""
    out = set()
    for s0 in range(len(src)):
        for s1 in range(s0 + 1, min(s0 + max_words, len(src)) + 1):
            for t0 in range(len(tgt)):
                for t1 in range(t0 + 1, min(t0 + max_words, len(tgt)) + 1):
                    inside = {(i, j) for i, j in links if s0 <= i < s1 or t0 <= j < t1}
                    if any(not (s0 <= i < s1 and t0 <= j < t1) for i, j in inside):
                        continue
                    if not all(any(i == k for k, _ in links) for i in range(s0, s1)):
                        continue
                    if not all(any(j == k for _, k in links) for j in range(t0, t1)):
                        continue
                    targets = {j for i, j in links if s0 <= i < s1}
                    if (min(targets), max(targets) + 1) != (t0, t1):
                        continue
                    if all(w.isalpha() for w in src[s0:s1] + tgt[t0:t1]):
                        out.add(PhrasePair(s0, s1, t0, t1))
    return out


@st.composite
def aligned_pair(draw):
    n, m = draw(st.integers(0, 7)), draw(st.integers(0, 7))
    words = st.sampled_from(["a", "b", "Haus", "blue", ",", "."])
    src, tgt = draw(st.lists(words, min_size=n, max_size=n)), draw(st.lists(words, min_size=m, max_size=m))
    cells = [(i, j) for i in range(n) for j in range(m)]
    links = set(draw(st.lists(st.sampled_from(cells), max_size=12))) if cells else set()
    return src, tgt, links


@SEVERAL
@given(aligned_pair())
def test_phrase_pairs_match_the_definition(case):
    src, tgt, links = case
    assert set(phrase_pairs(src, tgt, links)) == brute_force(src, tgt, links)


def test_phrases_of_frequent_words_only_are_left_out():
    src, tgt = "the red car".split(), "das rote Auto".split()
    links = {(0, 0), (1, 1), (2, 2)}
    pairs = phrase_pairs(src, tgt, links, common=({"the"}, {"das"}))
    assert PhrasePair(0, 1, 0, 1) not in pairs and PhrasePair(0, 2, 0, 2) in pairs


def test_a_known_sentence():
    src = "a man in a blue shirt .".split()
    tgt = "ein Mann in einem blauen Hemd .".split()
    links = {(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (6, 6)}
    pairs = phrase_pairs(src, tgt, links)
    assert PhrasePair(4, 6, 4, 6) in pairs              # "blue shirt" -> "blauen Hemd"
    assert all(p.src_end <= 6 for p in pairs)          # the period is never in a constraint
    crossed = {(1, 1), (4, 5), (5, 4)}                 # "blue shirt" -> "Hemd blauen": still one pair
    assert PhrasePair(4, 6, 4, 6) in phrase_pairs(src, tgt, crossed)
    assert PhrasePair(4, 5, 5, 6) in phrase_pairs(src, tgt, crossed)


@SEVERAL
@given(aligned_pair(), st.integers(0, 2**32 - 1))
def test_samples_are_few_short_disjoint_and_seeded(case, seed):
    src, tgt, links = case
    pairs = phrase_pairs(src, tgt, links)
    chosen = sample_pairs(pairs, random.Random(seed))
    assert chosen == sample_pairs(pairs, random.Random(seed))
    assert len(chosen) <= 3 and all(p in pairs for p in chosen)
    assert all(not a.overlaps(b) for k, a in enumerate(chosen) for b in chosen[k + 1:])
    if pairs:
        assert chosen  # at least one constraint whenever one exists


def test_target_lengths_follow_the_draw():
    """Pairs of every target length: each drawn length 1–3 appears about equally often."""
    pairs = [PhrasePair(k, k + 1, 3 * k, 3 * k + size) for k, size in enumerate([1, 2, 3] * 4)]
    counts = {1: 0, 2: 0, 3: 0}
    rng = random.Random(0)
    for _ in range(3000):
        for p in sample_pairs(pairs, rng):
            counts[p.tgt_end - p.tgt_start] += 1
    total = sum(counts.values())
    assert all(abs(c / total - 1 / 3) < 0.04 for c in counts.values()), counts


def test_pairs_side_by_side_do_not_overlap():
    """Spans [0, 1) and [1, 2) touch but share no word, on either side; sharing one on either side overlaps."""
    assert not PhrasePair(0, 1, 0, 1).overlaps(PhrasePair(1, 2, 1, 2))
    assert not PhrasePair(1, 2, 1, 2).overlaps(PhrasePair(0, 1, 0, 1))
    assert PhrasePair(0, 2, 0, 1).overlaps(PhrasePair(1, 2, 1, 2)) and PhrasePair(0, 1, 0, 2).overlaps(
        PhrasePair(1, 2, 1, 2))


class _Drawn:
    """A `random.Random` stand-in whose every `randint` draws its low (or high) end: one constraint of the
    shortest (longest) target length; the first option, no shuffle."""
    def __init__(self, high):
        self.high = high

    def randint(self, low, high):
        return high if self.high else low

    def randrange(self, n):
        return 0

    def shuffle(self, items):
        pass


def test_a_missing_length_falls_back_to_the_nearest():
    """No pair of the drawn target length: the longest shorter one, else the shortest longer one (not any)."""
    two, three, one = PhrasePair(0, 1, 0, 2), PhrasePair(1, 2, 2, 5), PhrasePair(2, 3, 5, 6)
    assert sample_pairs([three, two], _Drawn(False), max_pairs=1) == [two]  # 1 drawn: 2, not 3
    assert sample_pairs([one, two], _Drawn(True), max_pairs=1) == [two]  # 3 drawn: 2, not 1


def test_encode_pairs_leaves_out_long_and_surplus_pairs_and_counts_them():
    """Pieces (here one a word, src 7 + its length, tgt 20 + it) PAD-padded to max_pieces; a pair past max_pieces
    on either side, or past the first max_pairs kept of its sentence, left out and counted."""
    def encode(texts, side):
        return [[(7 if side == "src" else 20) + len(w) for w in t.split()] for t in texts]

    pairs = [[("a", "xy"), ("b c d", "z"), ("h", "t s r"), ("ef", "w v"), ("g", "u")], []]
    pair_src, pair_tgt, counts = encode_pairs(pairs, encode, max_pairs=2, max_pieces=2)
    assert counts == {"pairs": 2, "too_long": 2, "too_many": 1}
    assert pair_src.tolist() == [[[8, PAD_ID], [9, PAD_ID]], [[PAD_ID] * 2] * 2]
    assert pair_tgt.tolist() == [[[22, PAD_ID], [21, 21]], [[PAD_ID] * 2] * 2]


def test_pair_phrases_of_an_unspaced_language_are_encoded_as_inside_their_sentence():
    """A Chinese pair phrase encoded alone starts with SentencePiece's "▁" ("市" -> "▁" "市"), which its sentence
    ("我喜欢城市。", "▁我喜欢" "城" "市" "。") has not: on a toy En-Zh corpus 39 of 600 examples then held more phrase
    than sentence pieces and packed training stopped at its start, and the plug-in could copy that "▁" (a space)
    into a Chinese output. The pairs take the translator's encoding of phrases (`phrase_encoder`); English keeps
    its boundary."""
    from types import SimpleNamespace

    from jaxnat.models.vecconst import train_extras

    class Pieces:
        pieces = ["<pad>", "▁", "市", "城", "▁city", "▁the"]

        def encode(self, texts, side):
            return [[1, 3, 2] if t == "城市" else [self.pieces.index("▁" + w) for w in t.split()] for t in texts]

        def id_to_piece(self, i, side):
            return self.pieces[i]

        def piece_id(self, piece, side):
            return self.pieces.index(piece) if piece in self.pieces else None

    data = SimpleNamespace(src_lang="en", tgt_lang="zh-CN", max_pairs=1, max_pair_pieces=3)
    extras, _ = train_extras(SimpleNamespace(data=data), Pieces(), None, None, [[("the city", "城市")]])
    assert extras["pair_src"].tolist() == [[[5, 4, PAD_ID]]] and extras["pair_tgt"].tolist() == [[[3, 2, PAD_ID]]]


def _written(text: str, words: str | None = None) -> Written:
    """``text`` with the words ``words`` (its own split at spaces where None), joined by spaces where unplaced."""
    return Written.of(text, (words or text).split(), " ".join)


@pytest.mark.parametrize("placed", [True, False])
def test_code_switching_replaces_the_target_phrase_by_the_source_phrase(placed):
    """In the sentence as written (placed: every word found in it), or where a word is not, in its words joined."""
    def written(text):
        return _written(text) if placed else _written("", text)

    src, tgt = written("the Beatles were a band"), written("die Beatles waren eine Band")
    pairs = [PhrasePair(1, 2, 1, 2), PhrasePair(4, 5, 4, 5)]
    assert (tgt.spans is not None) == placed
    switched, constraints = code_switch(src, tgt, pairs, random.Random(0), rate=1.0)
    assert switched == "die Beatles waren eine band"
    assert constraints == [("Beatles", "Beatles"), ("band", "band")]
    kept, constraints = code_switch(src, tgt, pairs, random.Random(0), rate=0.0)
    assert kept == "die Beatles waren eine Band" and constraints == [("Beatles", "Beatles"), ("band", "Band")]
    longer = code_switch(written("x a b y"), written("X P Y"), [PhrasePair(1, 3, 1, 2)], random.Random(0), 1.0)
    assert longer == ("X a b Y", [("a b", "a b")])
    # two switched spans of other lengths than their targets: each replaces its own words (right to left)
    two = code_switch(written("x1 x2 y"), written("X Y1 Y2"), [PhrasePair(0, 2, 0, 1), PhrasePair(2, 3, 1, 3)],
                      random.Random(0), 1.0)
    assert two == ("x1 x2 y", [("x1 x2", "x1 x2"), ("y", "y")])


def test_phrases_are_written_as_their_sentences_write_them():
    """A Korean word aligned without its particle (MeCab-ko's morphemes) is "서울", not "서울 에"; Chinese keeps
    "NBA比赛" whole (Moses's detokenizer wrote "NBA 比赛"); a switched phrase is spliced into the sentence as written,
    its punctuation and spacing kept."""
    korean = _written("나는 서울에 갔다.", "나 는 서울 에 갔 다 .")
    assert korean.phrase(2, 3) == "서울" and korean.phrase(2, 4) == "서울에" and korean.phrase(0, 3) == "나는 서울"
    assert _written("NBA比赛很好看", "NBA 比赛 很 好看").phrase(0, 2) == "NBA比赛"
    german = _written("Er sah „Die Beatles“, sagte sie.", "Er sah „ Die Beatles “ , sagte sie .")
    target, pairs = code_switch(_written("He saw the Beatles"), german, [PhrasePair(3, 4, 4, 5)], random.Random(0),
                                1.0)
    assert target == "Er sah „Die Beatles“, sagte sie." and pairs == [("Beatles", "Beatles")]
    target, _ = code_switch(_written("He saw the band"), german, [PhrasePair(3, 4, 4, 5)], random.Random(0), 1.0)
    assert target == "Er sah „Die band“, sagte sie."


@given(st.lists(st.text(alphabet="ab 서울에", min_size=1, max_size=4).map(str.strip).filter(bool), max_size=6),
       st.lists(st.sampled_from([" ", "  ", "\t"]), min_size=6, max_size=6))
def test_word_spans_find_each_word_where_it_stands(words, gaps):
    """Property: words written with whitespace between them are found in order at their own places; a word that
    is not written there (a tokenizer that changed a character) gives None."""
    text = "".join(w + g for w, g in zip(words, gaps))
    spans = word_spans(text, [w for w in words])
    assert spans is not None and [text[a:b] for a, b in spans] == words
    assert all(text[b:c].isspace() for (_, b), (c, _) in zip(spans, spans[1:]))
    assert word_spans(text, [*words, "x"]) is None


def test_a_target_phrase_of_three_words_is_a_pair_and_of_four_is_not():
    links = {(0, 0), (0, 1), (0, 2)}
    assert phrase_pairs(["firehouse"], "stanu di foko".split(), links) == [PhrasePair(0, 1, 0, 3)]
    assert phrase_pairs(["firehouse"], "stanu di foko x".split(), links | {(0, 3)}) == []


def test_most_common_words_are_counted_lowercased():
    sentences = [["The", "cat"], ["the", "dog"], ["THE", "cat"]]
    assert most_common_words(sentences, 1) == {"the"}  # 3 of "the", not 1 each of three spellings
    assert most_common_words(sentences, 2) == {"the", "cat"}


# --------------------------------------------------------------------------------- alignment

def test_symmetrise_grows_from_the_intersection():
    from jaxnat.data.alignment import symmetrise

    fwd = {(0, 0), (1, 1), (2, 1)}
    rev = {(0, 0), (1, 1), (3, 3)}
    # intersection {0-0, 1-1}; 2-1 is next to 1-1 and aligns an unaligned source word: grown; 3-3 only in
    # one direction and far from both, but its two words are unaligned: added by final-and
    assert symmetrise(fwd, rev) == {(0, 0), (1, 1), (2, 1), (3, 3)}
    # a union link whose both words are already aligned is not added
    assert symmetrise({(0, 0), (1, 1)}, {(0, 0), (1, 1), (0, 1)}) == {(0, 0), (1, 1)}
    assert symmetrise(set(), set()) == set()


def test_a_split_where_most_sentences_get_no_pair_is_warned_about():
    """Targets without spaces (a sentence one Moses word) gave "train: 0 constraint pairs in 300 sentences" at INFO,
    and a vectorized-constraints run trained on them without a pair; a few sentences without one are normal (5% of
    a Multi30k sample). Chinese and Japanese are cut by their segmenters (or into characters without one): there a
    small corpus's most frequent words (--common-words) are the likelier cause, which the warning names."""
    from jaxnat.data.alignment import few_pairs

    assert few_pairs("train", [[["a", "b"]], [], [["c", "d"]]], 100) == ""
    assert few_pairs("train", [[["a", "b"]], [], []], 100) == (
        "train: 2 of 3 sentences got no constraint pair; a phrase is 1–3 words (Moses's, split at spaces; Chinese and "
        "Japanese by their segmenters) not all among a side's 100 most frequent: lower --common-words for a small "
        "vocabulary, and segment a language written without spaces other than Chinese and Japanese (Thai) into words "
        "first")


def test_pairs_are_detokenized_by_the_primary_language():
    # where the words are not found in the sentence as written, Moses's detokenizer joins them; it joins Hangul
    # words under any code but "ko": "ko-KR" wrote "서울에갔다"
    from jaxnat.data.alignment import pairs_of_split

    for src, tgt in (("to Seoul went", "서울에 갔다"), ("", "")):
        out, _ = pairs_of_split([src], [tgt], [["to", "Seoul", "went"]], [["서울에", "갔다"]], [{(1, 0), (2, 1)}], 1,
                                "en", "ko-KR", False, (set(), set()))
        assert out == [[["Seoul went", "서울에 갔다"]]]


def test_align_corpus_writes_resumable_files(tmp_path, caplog):
    """A small corpus where every source word has one translation: the aligner learns it, each sentence gets
    constraint pairs of real phrases, the test split is aligned with the training model, a rerun redoes
    nothing, the code-switched files keep the source phrase in the target. The Moses tokenization, minutes on
    millions of pairs with a bar only at a terminal, has its log line."""
    import json

    from jaxnat.data.alignment import align_corpus, main

    lexicon = {"red": "rot", "car": "Auto", "big": "groß", "house": "Haus", "old": "alt", "dog": "Hund",
               "sees": "sieht", "the": "das"}
    rng = random.Random(0)
    words = list(lexicon)
    for split, n in (("train", 300), ("test", 12)):
        src = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 6))) for _ in range(n)]
        (tmp_path / f"{split}.en").write_text("".join(s + "\n" for s in src))
        (tmp_path / f"{split}.de").write_text("".join(" ".join(lexicon[w] for w in s.split()) + "\n" for s in src))
    out = tmp_path / "out"
    with caplog.at_level("INFO", logger="jaxnat"):
        written = align_corpus(str(tmp_path), "en", "de", str(out), splits=("test",), switch=True, common_words=0)
    assert set(written.values()) == {"written"}
    assert "train: words of 300 sentence pairs" in caplog.messages
    test_src = (tmp_path / "test.en").read_text().splitlines()
    links = [line.split() for line in (out / "test.align").read_text().splitlines()]
    assert len(links) == len(test_src)
    diagonal = sum(a == f"{k}-{k}" for row in links for k, a in enumerate(row))
    assert diagonal >= 0.9 * sum(len(row) for row in links)  # the monotone one-to-one lexicon, learned
    pairs = [json.loads(line) for line in (out / "test.pairs.jsonl").read_text().splitlines()]
    assert len(pairs) == len(test_src) and all(1 <= len(p) <= 3 for p in pairs)
    for src, sentence_pairs in zip(test_src, pairs):
        for s, t in sentence_pairs:
            assert s in src and t == " ".join(lexicon[w] for w in s.split())
    switched = (out / "test.cs.de").read_text().splitlines()
    cs_pairs = [json.loads(line) for line in (out / "test.cs.pairs.jsonl").read_text().splitlines()]
    assert any(s == t for p in cs_pairs for s, t in p)
    assert all(t in line for line, p in zip(switched, cs_pairs) for _, t in p)
    assert (out / "test.cs.en").read_text().splitlines() == test_src  # "test.cs" is a split of its own
    assert set(align_corpus(str(tmp_path), "en", "de", str(out), splits=("test",), switch=True,
                            common_words=0).values()) == {"kept"}
    # the most frequent words never make a constraint on their own
    frequent = align_corpus(str(tmp_path), "en", "de", str(tmp_path / "frequent"), splits=("test",), common_words=3)
    common = json.loads((tmp_path / "frequent" / "train.common.json").read_text())
    assert len(common[0]) == 3 and set(frequent.values()) == {"written"}
    for line in (tmp_path / "frequent" / "test.pairs.jsonl").read_text().splitlines():
        assert all(not set(s.lower().split()) <= set(common[0]) for s, _ in json.loads(line))
    assert main(["--data-dir", str(tmp_path / "missing"), "--splits", "test"]) == 2


@pytest.mark.parametrize("interruption, status", [(KeyboardInterrupt, 130), (Terminated, 143)])
def test_an_interrupted_alignment_is_one_line(tmp_path, monkeypatch, capsys, interruption, status):
    """Ctrl-C printed a traceback out of sacremoses or eflomal, and SIGTERM ended it without a word; now one line
    saying that the same command goes on from the files written (each is written whole)."""
    from jaxnat.data import alignment

    def interrupted(*args):
        raise interruption

    monkeypatch.setattr(alignment, "align_corpus", interrupted)
    assert alignment.main(["--data-dir", str(tmp_path)]) == status
    assert capsys.readouterr().err == (f"jaxnat: interrupted; the same command goes on from the files written whole "
                                       f"in {tmp_path} (each split's alignment, then its constraint pairs)\n")


def test_a_deeply_nested_pairs_line_is_one_line():
    """A pairs line nested deeper than json's decoder recurses ended in RecursionError's traceback."""
    import pytest

    from jaxnat.data.sources import parse_pairs
    from jaxnat.errors import DataError

    with pytest.raises(DataError, match=r"^train.pairs.jsonl:3: not JSON"):
        parse_pairs("[" * 100_000 + "]" * 100_000, "train.pairs.jsonl:3")


def test_load_pairs_reads_aligned_files_and_reports_bad_ones(tmp_path):
    import ml_collections
    import pytest

    from jaxnat.data.sources import load_pairs
    from jaxnat.errors import DataError

    corpus = {"train": (["a b", "c"], ["x y", "z"]), "valid": (["a"], ["x"]), "test": (["b"], ["y"])}
    cfg = ml_collections.ConfigDict({"pairs_dir": str(tmp_path), "train_split": "train", "valid_split": "val"})
    (tmp_path / "train.pairs.jsonl").write_text('[["a", "x"], ["b", "y"]]\n[]\n')
    (tmp_path / "val.pairs.jsonl").write_text('[["a", "x"]]\n')
    assert load_pairs(cfg, corpus) == {"train": [[("a", "x"), ("b", "y")], []], "valid": [[("a", "x")]]}
    assert load_pairs(ml_collections.ConfigDict({"pairs_dir": ""}), corpus) == {}
    for text, message in [('[["a", "x"]]\n', "1 lines, but the train split has 2"),
                          ('[]\n[]\n[]\n', "3 lines, but the train split has 2"),
                          ('[["a", "x"]]\n{"a": 1}\n', "train.pairs.jsonl:2: expected a list"),
                          ('[["a", ""]]\n[]\n', "train.pairs.jsonl:1: expected a list"),
                          ('[["a", "x"]\n[]\n', "train.pairs.jsonl:1: not JSON")]:
        (tmp_path / "train.pairs.jsonl").write_text(text)
        with pytest.raises(DataError, match=message):
            load_pairs(cfg, corpus)
    (tmp_path / "train.pairs.jsonl").unlink()
    with pytest.raises(DataError, match="file not found; data.pairs_dir needs the constraint pairs of the train"):
        load_pairs(cfg, corpus)


def test_synthetic_pairs_are_one_to_three_of_the_lexicons_drawn_by_the_seed():
    import ml_collections

    from jaxnat.data import synthetic
    from jaxnat.data.sources import load_pairs

    corpus = synthetic.generate_corpus(0, {"train": 40, "valid": 1, "test": 1})
    cfg = ml_collections.ConfigDict({"pairs_dir": "synthetic", "source": "synthetic", "synthetic_seed": 0})
    pairs = load_pairs(cfg, corpus)
    assert sorted(pairs) == ["test", "train", "valid"]
    for src, tgt, chosen in zip(*corpus["train"], pairs["train"]):
        found = synthetic.lexicon_pairs(src, tgt)
        assert set(chosen) <= set(found) and len(chosen) == len(set(chosen))
        assert 1 <= len(chosen) <= 3 if found else chosen == []
    cfg.synthetic_seed = 1
    assert load_pairs(cfg, corpus)["train"] != pairs["train"]


def test_pairs_drawn_from_other_targets_are_refused_to_a_model_that_trains_on_them(tmp_path):
    """A distilled corpus has the original's sources and line counts: the original's pairs, whose target phrases
    the teacher's targets mostly lack, were taken without a word by a model that trains on pairs."""
    import json

    import ml_collections
    import pytest

    from jaxnat.data.alignment import split_fingerprint
    from jaxnat.data.sources import load_pairs
    from jaxnat.errors import DataError

    original = {"train": (["a b"], ["x y"]), "valid": (["a"], ["x"]), "test": (["b"], ["y"])}
    distilled = {**original, "train": (["a b"], ["z"])}
    cfg = ml_collections.ConfigDict({"pairs_dir": str(tmp_path), "dir": "/kd", "train_split": "train",
                                     "valid_split": "val"})
    for split, text in (("train", '[["a", "x"]]\n'), ("val", '[["a", "x"]]\n'), ("test", '[["b", "y"]]\n')):
        (tmp_path / f"{split}.pairs.jsonl").write_text(text)
    record = {"settings": {}, "splits": {name: split_fingerprint(*original[key])
                                         for key, name in (("train", "train"), ("valid", "val"), ("test", "test"))}}
    (tmp_path / "train.alignment.json").write_text(json.dumps(record))
    assert load_pairs(cfg, original, trains_on=True)["train"] == [[("a", "x")]]
    with pytest.raises(DataError, match=r"train.pairs.jsonl: drawn from other train files than those in data.dir "
                                         r".*--data-dir /kd --output DIR"):
        load_pairs(cfg, distilled, trains_on=True)
    # a model that does not train on pairs reads only the valid and test splits' (the original's, copied beside)
    assert load_pairs(cfg, distilled)["test"] == [[("b", "y")]]
    with pytest.raises(DataError, match="test.pairs.jsonl: drawn from other test files"):
        load_pairs(cfg, {**distilled, "test": (["b"], ["w"])})


def test_chinese_pairs_are_aligned_on_words_and_recorded_so(tmp_path, monkeypatch):
    """A Chinese side is aligned on its segmenter's words (rjieba): a target phrase is whole words ("汽车", never
    "汽"), up to three of them, written without spaces. The record says what cut the words: an alignment made on
    characters (no segmenter installed) is not kept by a run that has one."""
    import json

    from jaxnat.data import words
    from jaxnat.data.alignment import align_corpus
    from jaxnat.errors import DataError

    # words jieba keeps apart in any order (a single character such as "大" merges: "大房子")
    lexicon = {"red": "红色", "car": "汽车", "house": "房子", "dog": "小狗", "sees": "看见", "teacher": "老师",
               "city": "城市", "beautiful": "美丽"}
    rng = random.Random(0)
    src = [" ".join(rng.choice(list(lexicon)) for _ in range(rng.randint(2, 5))) for _ in range(200)]
    for split, lines in (("train", src), ("test", src[:12])):
        (tmp_path / f"{split}.en").write_text("".join(s + "\n" for s in lines))
        (tmp_path / f"{split}.zh").write_text("".join("".join(lexicon[w] for w in s.split()) + "\n" for s in lines))
    assert words.dictionary_words("红色汽车看见小狗", "zh") == ["红色", "汽车", "看见", "小狗"]
    out = tmp_path / "out"
    align_corpus(str(tmp_path), "en", "zh", str(out), splits=("test",), common_words=0)
    pairs = [p for line in (out / "test.pairs.jsonl").read_text().splitlines() for p in json.loads(line)]
    assert pairs and all(t == "".join(lexicon[w] for w in s.split()) for s, t in pairs)
    record = json.loads((out / "train.alignment.json").read_text())
    assert record["settings"]["words"] == {"zh": "jieba's dictionary (rjieba)"}

    monkeypatch.setitem(sys.modules, "rjieba", None)
    words._segmenter.cache_clear()
    try:
        chars = tmp_path / "chars"
        align_corpus(str(tmp_path), "en", "zh", str(chars), common_words=0)
        with pytest.raises(DataError, match="other settings \\(words None there, .*rjieba.* now"):
            words._segmenter.cache_clear()
            monkeypatch.delitem(sys.modules, "rjieba")
            align_corpus(str(tmp_path), "en", "zh", str(chars), common_words=0)
    finally:
        words._segmenter.cache_clear()


def test_a_rerun_keeps_only_an_alignment_of_the_same_files_and_settings(tmp_path):
    """A rerun skipped every file that existed, whatever it had been made from: into the same --output, another
    target language (--tgt fr after --tgt de), another seed or an edited corpus exited 0 with the old pairs."""
    import pytest

    from jaxnat.data.alignment import align_corpus, main
    from jaxnat.errors import DataError

    rng = random.Random(0)
    lexicon = {"red": ("rot", "rouge"), "car": ("Auto", "voiture"), "old": ("alt", "vieux"), "dog": ("Hund", "chien")}
    src = [" ".join(rng.choice(list(lexicon)) for _ in range(rng.randint(2, 5))) for _ in range(40)]
    for lang, k in (("de", 0), ("fr", 1)):
        for split, lines in (("train", src), ("test", src[:5])):
            (tmp_path / f"{split}.{lang}").write_text("".join(" ".join(lexicon[w][k] for w in s.split()) + "\n"
                                                              for s in lines))
    for split, lines in (("train", src), ("test", src[:5])):
        (tmp_path / f"{split}.en").write_text("".join(s + "\n" for s in lines))
    out = str(tmp_path / "out")
    assert set(align_corpus(str(tmp_path), "en", "de", out, splits=("test",), common_words=0).values()) == {"written"}
    pairs = (tmp_path / "out" / "train.pairs.jsonl").read_text()
    assert set(align_corpus(str(tmp_path), "en", "de", out, splits=("test",), common_words=0).values()) == {"kept"}
    for kw, message in ((dict(tgt_lang="fr"), "--tgt 'de' there, 'fr' now"), (dict(seed=2), "--seed 1 there, 2 now")):
        args = dict(data_dir=str(tmp_path), src_lang="en", tgt_lang="de", out_dir=out, splits=("test",),
                    common_words=0)
        with pytest.raises(DataError, match=message):
            align_corpus(**{**args, **kw})
    (tmp_path / "test.de").write_text((tmp_path / "test.de").read_text().replace("Hund", "Hunde"))
    with pytest.raises(DataError, match="other test.en/test.de files"):
        align_corpus(str(tmp_path), "en", "de", out, splits=("test",), common_words=0)
    assert main(["--data-dir", str(tmp_path), "--tgt", "fr", "--output", out, "--common-words", "0"]) == 2
    assert (tmp_path / "out" / "train.pairs.jsonl").read_text() == pairs  # nothing was overwritten
