"""Tests of jaxnat.evaluation.metrics against sacreBLEU, NLTK and hand-computed values."""

import functools
import math
from collections import Counter

import pytest
import sacrebleu
from hypothesis import given, settings
from hypothesis import strategies as st
from nltk.translate.ribes_score import corpus_ribes, kendall_tau

from jaxnat.data.words import LANGUAGE_INDEPENDENT, moses_tokenize
from jaxnat.errors import DataError
from jaxnat.evaluation import metrics
from jaxnat.evaluation.constraints import make_constraints
from jaxnat.evaluation.metrics import (
    bleu,
    chrf,
    constraint_preservation,
    corpus_metrics,
    format_table,
    repetition_rate,
    ribes,
    ter,
    tokenize,
    tokenized_bleu,
)

HYPS = [
    "The cat sat on the mat.",
    "Hello, world! It's a nice day.",
    "",
    "the the the dog barked at the moon",
    "Machine translation is hard, isn't it?",
]
REFS = [
    "The cat sat on a mat.",
    "Hello world, it is a nice day!",
    "Nothing was produced here.",
    "The dog barked at the moon.",
    "Machine translation is difficult, is it not?",
]

FAST = settings(max_examples=40, deadline=None)

# Recent NLTK counts every increasing pair in Kendall's tau, as RIBES.py does; old releases (<= 3.8) only
# counted pairs inside runs of consecutive positions, so they cannot be compared with.
NLTK_KENDALL_OK = kendall_tau([2, 1, 0, 3]) == 0.5
needs_fixed_nltk = pytest.mark.skipif(not NLTK_KENDALL_OK, reason="this NLTK has the old Kendall's tau")

# Sentences as random strings: letters, digits, spaces and punctuation.
sentence_text = st.text(alphabet="abcdeXYZ 019.,!?'-", max_size=30)
# Sentences as word lists over a tiny vocabulary, so that repeated words (the hard alignment case) occur.
word_lists = st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=10)


# ----------------------------------------------------------------------------------------------------------
# sacreBLEU metrics
# ----------------------------------------------------------------------------------------------------------


def test_bleu_chrf_ter_equal_sacrebleu_on_fixed_strings():
    score, signature = bleu(HYPS, REFS)
    assert score == sacrebleu.corpus_bleu(HYPS, [REFS]).score
    assert signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert chrf(HYPS, REFS) == sacrebleu.corpus_chrf(HYPS, [REFS]).score
    assert ter(HYPS, REFS) == sacrebleu.corpus_ter(HYPS, [REFS], case_sensitive=True).score
    assert ter(["The cat"], ["the cat"]) == 50.0  # case-sensitive, as the papers' TER (sacreBLEU's default is not)


@FAST
@given(st.lists(st.tuples(sentence_text, sentence_text), min_size=1, max_size=5))
def test_bleu_chrf_ter_equal_sacrebleu_on_random_strings(pairs):
    hyps = [h for h, _ in pairs]
    refs = [r for _, r in pairs]
    assert bleu(hyps, refs)[0] == sacrebleu.corpus_bleu(hyps, [refs]).score
    assert chrf(hyps, refs) == sacrebleu.corpus_chrf(hyps, [refs]).score
    assert ter(hyps, refs) == sacrebleu.corpus_ter(hyps, [refs], case_sensitive=True).score


def test_bleu_hand_computed():
    assert bleu(["the cat sat on the mat"], ["the cat sat on the mat"])[0] == pytest.approx(100.0)
    assert bleu(["a b c d e"], ["v w x y z"])[0] == 0.0
    # One substituted last word of five: precisions 4/5, 3/4, 2/3, 1/2, no brevity penalty.
    expected = 100 * (4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25
    assert bleu(["a b c d e"], ["a b c d f"])[0] == pytest.approx(expected)
    assert tokenized_bleu(["a b c d e"], ["a b c d f"]) == pytest.approx(expected)
    # Brevity penalty: 4 of 5 reference words, all n-grams correct.
    assert bleu(["a b c d"], ["a b c d e"])[0] == pytest.approx(100 * math.exp(1 - 5 / 4))
    assert chrf(["same words here"], ["same words here"]) == pytest.approx(100.0)
    assert ter(["a b c d"], ["a b c d"]) == 0.0
    assert ter(["a b x d"], ["a b c d"]) == pytest.approx(25.0)  # one substitution in 4 words


def _plain_bleu(hyps: list[list[str]], refs: list[list[str]]) -> float:
    """multi-bleu.perl's corpus BLEU in plain Python: clipped n-gram matches summed over the corpus for n = 1..4,
    the geometric mean of the four precisions, the brevity penalty; 0 when an order has no match."""
    matches, totals = [0] * 4, [0] * 4
    for hyp, ref in zip(hyps, refs):
        for n in range(1, 5):
            grams = Counter(tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1))
            ref_grams = Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
            matches[n - 1] += sum(min(c, ref_grams[g]) for g, c in grams.items())
            totals[n - 1] += max(len(hyp) - n + 1, 0)
    if min(matches) == 0:
        return 0.0
    c, r = sum(len(h) for h in hyps), sum(len(x) for x in refs)
    penalty = 1.0 if c >= r else math.exp(1 - r / c)
    return 100 * penalty * math.exp(sum(math.log(m / t) for m, t in zip(matches, totals)) / 4)


def test_tokenized_bleu_is_multi_bleu_on_moses_tokens():
    """The papers' tokenized BLEU: Moses tokens of the target language (here English, whose clitics Moses
    splits off and 13a does not), no smoothing, case-sensitive unless lowercased (multi-bleu.perl -lc)."""
    hyps = ["It's a man's T-shirt, isn't it?", "The dog runs in the park.", "A red car is parked on the street."]
    refs = ["It's the man's T-shirt, isn't it?", "the dog is running in the park .", "A red car parked on a street."]
    words = lambda texts: [moses_tokenize(t, "en") for t in texts]  # noqa: E731
    assert words(hyps)[0] == ["It", "'s", "a", "man", "'s", "T-shirt", ",", "isn", "'t", "it", "?"]
    assert tokenized_bleu(hyps, refs, lang="en") == pytest.approx(_plain_bleu(words(hyps), words(refs)))
    lower = lambda texts: [[w.lower() for w in x] for x in words(texts)]  # noqa: E731
    assert tokenized_bleu(hyps, refs, lang="en", lowercase=True) == pytest.approx(_plain_bleu(lower(hyps),
                                                                                              lower(refs)))
    assert tokenized_bleu(hyps, refs, lang="en", lowercase=True) > tokenized_bleu(hyps, refs, lang="en")
    # not 13a's words: it keeps "It's" whole
    assert tokenize(hyps[0])[0] == "It's"
    # no smoothing: no 4-gram match anywhere -> 0, while sacreBLEU's exp smoothing is > 0
    assert tokenized_bleu(["a b c x e f"], ["a b c d e f"]) == 0.0
    assert bleu(["a b c x e f"], ["a b c d e f"])[0] > 0.0
    # RIBES reads the same tokens: "'s" is a word of its own
    assert ribes(["man 's"], ["man 's"]) == ribes(["man's"], ["man's"]) == pytest.approx(1.0)
    out = corpus_metrics(hyps, refs, lang="en", lowercase=True)
    assert out["tok_bleu"] == tokenized_bleu(hyps, refs, lang="en")
    assert out["tok_bleu_lc"] == tokenized_bleu(hyps, refs, lang="en", lowercase=True)
    assert out["ribes"] == pytest.approx(100 * ribes(hyps, refs, lang="en", lowercase=True))


def test_tokenize_splits_punctuation_and_keeps_case():
    assert tokenize("Hello, World! (ok)") == ["Hello", ",", "World", "!", "(", "ok", ")"]
    assert tokenize("") == []


# ----------------------------------------------------------------------------------------------------------
# RIBES
# ----------------------------------------------------------------------------------------------------------


def _words(text):
    """The tokens RIBES reads: Moses tokens (English)."""
    return moses_tokenize(text, "en")


def _nltk_ribes(hyps, refs):
    return corpus_ribes([[_words(r)] for r in refs], [_words(h) for h in hyps])


RIBES_HYPS = [
    "he read the book because he was interested in world history",
    "Bob hit John yesterday",
    "the book was read by the boy",
    "It is a guide to action which ensures that the military always obeys the commands of the party",
    "the cat sat on the mat , the cat sat",
    "completely unrelated words",
    "",
]
RIBES_REFS = [
    "he was interested in world history because he read the book",
    "John hit Bob yesterday",
    "the boy read the book",
    "It is a guide to action that ensures that the military will forever heed Party commands",
    "the cat sat on the mat",
    "nothing in common here",
    "an empty hypothesis scores zero",
]


@needs_fixed_nltk
def test_ribes_equals_nltk_on_fixed_sentences():
    expected = _nltk_ribes(RIBES_HYPS, RIBES_REFS)
    assert ribes(RIBES_HYPS, RIBES_REFS, variant="nltk") == pytest.approx(expected, rel=1e-12)
    # The default variant agrees except on the first pair (see test_ribes_difference_paper_example).
    assert ribes(RIBES_HYPS[1:], RIBES_REFS[1:]) == pytest.approx(
        _nltk_ribes(RIBES_HYPS[1:], RIBES_REFS[1:]), rel=1e-12
    )
    assert ribes(RIBES_HYPS, RIBES_REFS, alpha=0.5, beta=0.3, variant="nltk") == pytest.approx(
        corpus_ribes([[_words(r)] for r in RIBES_REFS], [_words(h) for h in RIBES_HYPS], 0.5, 0.3),
        rel=1e-12,
    )


def test_ribes_hand_computed():
    # Paper's (H1, R1): alignment [2, 1, 0, 3]: 3 of 6 pairs increasing; P = 1, BP = 1.
    assert ribes(["Bob hit John yesterday"], ["John hit Bob yesterday"]) == pytest.approx(0.5)
    assert ribes(["the cat sat"], ["the cat sat"]) == pytest.approx(1.0)
    assert ribes(["x y z"], ["the cat sat"]) == 0.0
    assert ribes([""], ["the cat sat"]) == 0.0
    assert ribes(["the cat sat"], [""]) == 0.0
    # Two words aligned in order out of 4 hypothesis words, reference of 2 words: P = 1/2, BP = 1.
    assert ribes(["the cat x y"], ["the cat"]) == pytest.approx(0.5**0.25)
    # Short hypothesis: NKT = 1, P = 1, BP = exp(1 - 4/2).
    assert ribes(["the cat"], ["the cat sat down"]) == pytest.approx(math.exp(1 - 4 / 2) ** 0.10)
    # The corpus score is the mean of the sentence scores.
    assert ribes(["Bob hit John yesterday", "the cat sat"], ["John hit Bob yesterday", "the cat sat"]) == (
        pytest.approx(0.75)
    )


@needs_fixed_nltk
@FAST
@given(st.lists(st.tuples(word_lists, word_lists), min_size=1, max_size=6))
def test_ribes_nltk_variant_equals_nltk_on_random_word_lists(pairs):
    hyps = [" ".join(h) for h, _ in pairs]
    refs = [" ".join(r) for _, r in pairs]
    assert ribes(hyps, refs, variant="nltk") == pytest.approx(_nltk_ribes(hyps, refs), rel=1e-12, abs=1e-15)


def _count(seq, ngram):
    return sum(tuple(seq[s : s + len(ngram)]) == ngram for s in range(len(seq) - len(ngram) + 1))


def _first(seq, ngram):
    return next(s for s in range(len(seq) - len(ngram) + 1) if tuple(seq[s : s + len(ngram)]) == ngram)


def _naive_alignment(ref, hyp, variant):
    """Brute-force word alignment written from the RIBES.py / NLTK loops, without any shortcut."""
    out = []
    for i, word in enumerate(hyp):
        if word not in ref:
            continue
        if ref.count(word) == 1 and hyp.count(word) == 1:
            out.append(ref.index(word))
            continue
        if variant == "official":
            windows, sides = range(1, max(i + 1, len(hyp) - i + 1)), ("left", "right")
        else:
            windows, sides = range(1, max(i, len(hyp) - i + 1)), ("right", "left")
        for window in windows:
            found = None
            for side in sides:
                if side == "left" and window <= i:
                    ngram = tuple(hyp[i - window : i + 1])
                    if _count(ref, ngram) == 1 and _count(hyp, ngram) == 1:
                        found = _first(ref, ngram) + window
                        break
                if side == "right" and i + window < len(hyp):
                    ngram = tuple(hyp[i : i + window + 1])
                    if _count(ref, ngram) == 1 and _count(hyp, ngram) == 1:
                        found = _first(ref, ngram)
                        break
            if found is not None:
                out.append(found)
                break
    return out


@FAST
@given(word_lists, word_lists)
def test_ribes_alignment_equals_naive_loops(ref, hyp):
    for variant in ("official", "nltk"):
        assert metrics._ribes_alignment(ref, hyp, variant) == _naive_alignment(ref, hyp, variant)


@FAST
@given(st.lists(st.integers(0, 6), max_size=12))
def test_ascending_pairs_equals_quadratic_count(order):
    expected = sum(order[a] < order[b] for a in range(len(order)) for b in range(a + 1, len(order)))
    assert metrics._ascending_pairs(order, 7) == expected


@FAST
@given(st.lists(st.tuples(word_lists, word_lists), min_size=1, max_size=4))
def test_ribes_in_unit_interval(pairs):
    score = ribes([" ".join(h) for h, _ in pairs], [" ".join(r) for _, r in pairs])
    assert 0.0 <= score <= 1.0


# Intentional differences between the default (RIBES.py 1.03.1) and NLTK, each shown on one sentence.


@needs_fixed_nltk
def test_ribes_difference_one_word_reference():
    # RIBES.py: a one-word reference matched by the one-word hypothesis is perfectly ordered (NKT = 1);
    # NLTK needs two aligned words for Kendall's tau and scores 0.
    assert ribes(["yes"], ["yes"]) == 1.0
    assert ribes(["yes", "yes"], ["yes", "no"]) == 0.5
    assert ribes(["yes"], ["yes"], variant="nltk") == 0.0 == _nltk_ribes(["yes"], ["yes"])
    # "ok" is repeated in the hypothesis and no context of it occurs in the reference: nothing aligned.
    assert ribes(["ok ok"], ["ok"]) == 0.0
    # One aligned word of two: NKT = 1, P = 1/2, BP = 1.
    assert ribes(["ok x"], ["ok"]) == pytest.approx(0.5**0.25)


@needs_fixed_nltk
def test_ribes_difference_left_window_reaching_sentence_start():
    # Hypothesis "x a b", reference "x a b a b". "b" (i = 2) is ambiguous; "a b" occurs twice in the
    # reference, the full prefix "x a b" once. RIBES.py tries that window (w = 2 <= i) and aligns "b" to
    # position 2: order [0, 1, 2]. NLTK stops at w < max(i, len - i + 1) = 2 and drops "b": order [0, 1].
    hyp, ref = "x a b", "x a b a b"
    brevity = math.exp(1 - 5 / 3) ** 0.10
    assert metrics._ribes_alignment(ref.split(), hyp.split(), "official") == [0, 1, 2]
    assert metrics._ribes_alignment(ref.split(), hyp.split(), "nltk") == [0, 1]
    assert ribes([hyp], [ref]) == pytest.approx(brevity)
    assert ribes([hyp], [ref], variant="nltk") == pytest.approx((2 / 3) ** 0.25 * brevity)
    assert _nltk_ribes([hyp], [ref]) == pytest.approx((2 / 3) ** 0.25 * brevity)


@needs_fixed_nltk
def test_ribes_difference_paper_example():
    # (H0, R0) of Isozaki et al. (2010). The second hypothesis "he" (position 5) has a unique left context
    # "because he" (reference 6-7) and a unique right context "he was" (reference 0-1). RIBES.py tries the
    # left context first and aligns it to 7 -- the same reference word as the first "he" ("he read") --
    # while NLTK, trying the right context first, reproduces the paper's alignment with 0.
    hyp = "he read the book because he was interested in world history"
    ref = "he was interested in world history because he read the book"
    official = [7, 8, 9, 10, 6, 7, 1, 2, 3, 4, 5]
    paper = [7, 8, 9, 10, 6, 0, 1, 2, 3, 4, 5]
    assert metrics._ribes_alignment(ref.split(), hyp.split(), "official") == official
    assert metrics._ribes_alignment(ref.split(), hyp.split(), "nltk") == paper
    # P = BP = 1, so RIBES = NKT = increasing pairs / 55.
    assert ribes([hyp], [ref]) == pytest.approx(17 / 55)
    assert ribes([hyp], [ref], variant="nltk") == pytest.approx(21 / 55) == _nltk_ribes([hyp], [ref])


@needs_fixed_nltk
def test_ribes_difference_left_context_tried_first():
    # Hypothesis "a b a a", reference "a a b a". For hypothesis position 2 both bigrams "b a" (left, at
    # reference 2) and "a a" (right, at reference 0) are unique in both sentences. RIBES.py takes the left
    # one -> reference position 3; NLTK the right one -> 0. Orders [1, 2, 3, 1] (3/6 pairs increasing) and
    # [1, 2, 0, 1] (2/6); P = BP = 1.
    hyp, ref = "a b a a", "a a b a"
    assert metrics._ribes_alignment(ref.split(), hyp.split(), "official") == [1, 2, 3, 1]
    assert metrics._ribes_alignment(ref.split(), hyp.split(), "nltk") == [1, 2, 0, 1]
    assert ribes([hyp], [ref]) == pytest.approx(0.5)
    assert ribes([hyp], [ref], variant="nltk") == pytest.approx(1 / 3)
    assert _nltk_ribes([hyp], [ref]) == pytest.approx(1 / 3)


def test_ribes_is_case_sensitive_and_tokenizes_punctuation():
    assert ribes(["The cat, sat"], ["The cat , sat"]) == pytest.approx(1.0)
    assert ribes(["the cat sat"], ["The Cat Sat"]) == 0.0


def test_ribes_rejects_unknown_variant():
    with pytest.raises(ValueError, match="variant"):
        ribes(["a"], ["a"], variant="moses")


# ----------------------------------------------------------------------------------------------------------
# Constraints and repetition
# ----------------------------------------------------------------------------------------------------------


def test_constraint_preservation_hand_made():
    hyps = ["The New York Times reported it.", "I like new york.", "Nothing here"]
    constraints = [["New York", "reported it."], ["New York", "like"], []]
    # Preserved: "New York" and "reported it ." in sentence 1, "like" in sentence 2; lowercase "new york"
    # does not preserve "New York".
    assert constraint_preservation(hyps, constraints) == pytest.approx(75.0)
    # Whole words only, in order and contiguous.
    assert constraint_preservation(["Yorkshire pudding"], [["York"]]) == 0.0
    assert constraint_preservation(["York big city"], [["York city"]]) == 0.0
    assert constraint_preservation(["city York"], [["York city"]]) == 0.0
    assert constraint_preservation(["hello, world"], [["hello", "world", "hello,"]]) == pytest.approx(100.0)
    # Every listed constraint is checked once.
    assert constraint_preservation(["a b"], [["a", "a", "c"]]) == pytest.approx(200 / 3)


def test_constraint_metrics_without_constraints_are_nan():
    assert math.isnan(constraint_preservation(["a b", "c"], [[], []]))


def test_constraints_are_moses_words_hand_made():
    hyps = ["The New York Times reported it.", "Yorkshire is not York's", "x-ray machine"]
    constraints = [["New York", "Times", "report"], ["York"], ["ray", "x-ray", "machine"]]
    # Sentence 1: "New York" and "Times" used, "report" only inside "reported". Sentence 2: English Moses
    # splits "York's" into "York" "'s" -> used. Sentence 3: "x-ray" is one Moses token, so "ray" is not used
    # on its own; "x-ray" and "machine" are. 5 of 7.
    assert constraint_preservation(hyps, constraints) == pytest.approx(500 / 7)
    # Punctuation in a term is matched as Moses tokens too: "(net)" is "( net )".
    assert constraint_preservation(["costs 3.50 (net)"], [["3.50", "(net)", "3x50"]]) == pytest.approx(200 / 3)
    # Moses, not 13a: "York's" is "York" "'s".
    assert constraint_preservation(["not York's"], [["York"]]) == 100.0


@pytest.mark.parametrize(
    "hyp, constraint, lang, found",
    [
        ("Ein Mann, der läuft.", "Mann", "de", True),
        ("Ein Mann, der läuft.", "läuft", "de", True),
        ("Ein Mann, der läuft.", "mann", "de", False),  # same case only
        ("Die Mannschaft gewinnt.", "Mann", "de", False),
        ("ein rotes T-Shirt.", "T-Shirt", "de", True),
        ("ein rotes T-Shirt.", "Shirt", "de", False),  # a hyphenated word is one token
        ("ein rotes T-Shirt.", "rotes T-Shirt", "de", True),
        ("ein rotes T-Shirt.", "T-Shirt rotes", "de", False),
        ("ein rotes und ein T-Shirt.", "rotes T-Shirt", "de", False),  # contiguous only
        ("eine blau-weiß gestreifte Mütze", "blau-weiß", "de", True),
        ("eine blau-weiß gestreifte Mütze", "weiß", "de", False),
        ("am Zaun. der Hund", "Zaun", "de", True),  # Moses keeps the period (an abbreviation?): split off
        ("am Zaun. der Hund", "Zaun.", "de", True),  # the constraint's own final "." is a token: not split again
        ("am Zaun.n der Hund", "Zaun", "de", False),
        ("z.B. ein Hund", "z.B.", "de", True),
        ("„Hallo“, sagte sie.", "Hallo", "de", True),
        ('"Stop", he said.', "Stop", "en", True),
        ("Sie sagte 'nein'.", "nein", "de", True),
        ("I saw Peter's dog.", "Peter", "en", True),
        ("I don't know.", "know", "en", True),
        ("L'homme mange.", "homme", "fr", True),
        ("L'homme mange.", "homme", "en", False),  # English Moses keeps "'homme" as one token
        ("我住在北京。", "北京", "zh", True),  # unspaced: characters in a row, wherever they stand
        ("我住在 北京 。", "北京", "zh", True),  # a constrained decoder's spaces between them change nothing
        ("我住在北方。", "北京", "zh", False),
        ("我去NBA比赛", "NBA比赛", "zh", True),
        ("私は東京に住んでいます。", "東京", "ja", True),
        ("私は東京に住んでいます。", "京都", "ja-JP", False),
        ("저는 서울에 살아요.", "서울", "ko", True),  # a particle written onto it: Korean on syllables
        ("저는 서울에 살아요.", "서울에", "ko-KR", True),
        ("저는 부산에 살아요.", "서울", "kor_Hang", False),
        ("Er lebt in Seoulstadt.", "Seoul", "de", False),  # elsewhere whole words as before
    ],
)
def test_constraints_are_found_as_whole_moses_tokens(hyp, constraint, lang, found):
    expected = 100.0 if found else 0.0
    assert constraint_preservation([hyp], [[constraint]], lang=lang) == expected


def test_words_chosen_from_a_reference_are_found_in_it():
    refs = ["Ein Mann, der läuft.", "„Hallo“, sagte sie: 'Komm her!'", "Ein rotes T-Shirt kostet 3.50 €.",
            "L'homme, dit-il, a 1,000 e-mails.", "The U.S. Army; don't stop (now)!", "Er trägt ein blau-weiß Hemd."]
    for lang in ("de", "en", "fr"):
        constraints = make_constraints(refs, seed=2, min_words=20, max_words=20, lang=lang)
        assert all(len(c) >= 2 for c in constraints)
        assert constraint_preservation(refs, constraints, lang=lang) == 100.0


def test_repetition_rate_hand_made():
    assert repetition_rate([["a", "a", "a", "b"], ["c"], []]) == pytest.approx(40.0)
    assert repetition_rate([["a", "b", "a", "b"]]) == 0.0
    assert repetition_rate([[1, 1, 2, 2]]) == pytest.approx(50.0)
    assert repetition_rate([[], []]) == 0.0
    # Repeats do not cross sentence boundaries.
    assert repetition_rate([["a"], ["a"]]) == 0.0


@FAST
@given(st.lists(st.lists(st.sampled_from(["a", "b", "c"]), max_size=8), min_size=1, max_size=5))
def test_repetition_rate_matches_reference(token_lists):
    repeats = 0
    total = 0
    for tokens in token_lists:
        total += len(tokens)
        for t in range(1, len(tokens)):
            if tokens[t] == tokens[t - 1]:
                repeats += 1
    expected = 100.0 * repeats / total if total else 0.0
    assert repetition_rate(token_lists) == pytest.approx(expected)


# ----------------------------------------------------------------------------------------------------------
# corpus_metrics and format_table
# ----------------------------------------------------------------------------------------------------------


def test_corpus_metrics_keys_and_scales():
    out = corpus_metrics(HYPS, REFS)
    assert set(out) == {"bleu", "bleu_signature", "tok_bleu", "chrf", "ter", "ribes", "repetition"}
    assert out["bleu"] == bleu(HYPS, REFS)[0]
    assert out["bleu_signature"] == bleu(HYPS, REFS)[1]
    assert out["tok_bleu"] == tokenized_bleu(HYPS, REFS)
    assert out["chrf"] == chrf(HYPS, REFS)
    assert out["ter"] == ter(HYPS, REFS)
    assert out["ribes"] == pytest.approx(100 * ribes(HYPS, REFS))  # 0-100 in the table
    assert out["repetition"] == pytest.approx(repetition_rate([tokenize(h) for h in HYPS]))
    assert out["repetition"] == pytest.approx(100 * 2 / 32)  # "the the the": 2 repeats in 32 13a words

    constraints = [["cat"], [], [], ["moon", "sun"], []]
    out = corpus_metrics(HYPS, REFS, constraints)
    assert out["cpr"] == pytest.approx(200 / 3)
    # The language reaches the constraint metrics: French Moses splits "L'" off "homme", English does not.
    for lang, expected in (("fr", 100.0), ("en", 0.0)):
        out = corpus_metrics(["L'homme mange."], ["L'homme mange."], [["homme"]], lang=lang)
        assert out["cpr"] == expected
    # ... and the tokenized scores: "homme" matches the reference's French token, not its English "'homme"
    hyps, refs = ["un homme mange une pomme rouge."], ["L'homme mange une pomme rouge."]
    out = corpus_metrics(hyps, refs, lang="fr")
    assert out["tok_bleu"] == tokenized_bleu(hyps, refs, lang="fr") != tokenized_bleu(hyps, refs, lang="en")
    assert out["ribes"] == pytest.approx(100 * ribes(hyps, refs, lang="fr"))
    assert out["ribes"] != pytest.approx(100 * ribes(hyps, refs, lang="en"))


def test_format_table():
    rows = {
        "valid": {"bleu": 27.456, "bleu_signature": "nrefs:1|tok:13a", "ribes": 80.0},
        "test": {"bleu": 5.0, "ter": 101.234, "flat": True},  # a bool is no number: no column
        "hard": {"bleu": 4.0, "cpr": float("nan")},  # no number to print (null in metrics.json): a dash, not nan
    }
    assert format_table(rows) == (
        "        bleu  ribes     ter  cpr\n"
        "-----  -----  -----  ------  ---\n"
        "valid  27.46  80.00       -    -\n"
        "test    5.00      -  101.23    -\n"
        "hard    4.00      -       -    -"
    )
    assert format_table(rows, columns=["ter", "bleu_signature"]) == (
        "          ter  bleu_signature\n"
        "-----  ------  --------------\n"
        "valid       -               -\n"
        "test   101.23               -\n"
        "hard        -               -"
    )


# ----------------------------------------------------------------------------------------------------------
# Error paths
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [bleu, tokenized_bleu, chrf, ter, ribes, corpus_metrics])
def test_parallel_metrics_reject_bad_input(fn):
    with pytest.raises(DataError, match="empty"):
        fn([], [])
    with pytest.raises(DataError, match="2 hypotheses but 1 references"):
        fn(["a", "b"], ["a"])
    with pytest.raises(DataError, match="list of strings"):
        fn("a b", "a b")
    with pytest.raises(DataError, match=r"references\[1\]"):
        fn(["a", "b"], ["a", None])


@pytest.mark.parametrize("fn", [constraint_preservation, functools.partial(constraint_preservation, by_words=True)])
def test_constraint_metrics_reject_bad_input(fn):
    with pytest.raises(DataError, match="empty"):
        fn([], [])
    with pytest.raises(DataError, match="2 hypotheses but 1 constraint lists"):
        fn(["a", "b"], [["a"]])
    with pytest.raises(DataError, match=r"constraints\[0\] must be a list"):
        fn(["a"], ["a"])  # a list of strings instead of a list of lists
    with pytest.raises(DataError, match=r"constraints\[0\]\[1\] is empty"):
        fn(["a"], [["a", "  "]])
    with pytest.raises(DataError, match=r"constraints\[0\]\[0\] = '\\x01' has no word"):
        fn(["a"], [["\x01"]])  # Moses deletes control characters


def test_corpus_metrics_checks_constraints():
    with pytest.raises(DataError, match="constraint lists"):
        corpus_metrics(["a"], ["a"], [])


def test_repetition_rate_rejects_bad_input():
    with pytest.raises(DataError, match="empty"):
        repetition_rate([])
    with pytest.raises(DataError, match=r"token_lists\[0\]"):
        repetition_rate(["a a b"])


def test_error_messages_are_one_line():
    for call in (lambda: bleu([], []), lambda: ribes(["a"], ["a", "b"]),
                 lambda: constraint_preservation(["a"], [[""]])):
        with pytest.raises(DataError) as info:
            call()
        assert "\n" not in str(info.value)


def test_cpr_by_words_weights_each_constraint_by_its_words():
    """The vectorized-constraints authors' CSR counts constraint words: "ein Haus" found, "Baum" missed."""
    hyps, constraints = ["ein Haus steht da"], [["ein Haus", "Baum"]]
    assert constraint_preservation(hyps, constraints, lang="de") == 50.0
    assert constraint_preservation(hyps, constraints, lang="de", by_words=True) == pytest.approx(200 / 3)
    assert corpus_metrics(hyps, hyps, constraints, lang="de")["cpr_words"] == pytest.approx(200 / 3)
    # the words are Moses tokens, not white-space ones: "(net)" is three
    assert constraint_preservation(["costs (net)"], [["(net)", "Baum"]], by_words=True) == pytest.approx(75.0)


def test_unproduced_pairs_keep_what_the_plain_output_misses():
    from jaxnat.evaluate import unproduced_pairs

    pairs = [[("house", "Haus"), ("tree", "Baum")], [("dog", "Hund")]]
    assert unproduced_pairs(pairs, ["ein Haus", "eine Katze"], "de") == [[("tree", "Baum")], [("dog", "Hund")]]
    assert unproduced_pairs(pairs, ["Haus Baum", "Hunde"], "de") == [[], [("dog", "Hund")]]  # whole words only


def test_hypothesis_files_keep_one_line_per_sentence(tmp_path):
    """A hypothesis with a line break (byte pieces decode to "\\n", "\\r") made hyps/<split>.txt longer than the
    references (metrics.json was right; the report and sacrebleu on the file refused it: "41 hypotheses for the 40
    references"); now the break is written as a space, which changes no score."""
    from jaxnat.data.text import read_lines
    from jaxnat.evaluate import _write_lines

    hyps = ["ein Mann", "a\r\nb", "c\rd", "e\nf ", ""]
    path = tmp_path / "test.txt"
    _write_lines(str(path), hyps)
    with open(path, encoding="utf-8") as f:  # as the report reads it (universal newlines: "\r" ends a line too)
        written = [line.rstrip("\n") for line in f]
    assert written == read_lines(str(path), blank_ok=True) == ["ein Mann", "a  b", "c d", "e f", ""]
    refs = ["ein Mann", "a b", "c d", "e f", "g"]
    assert metrics.corpus_metrics(written, refs) == metrics.corpus_metrics(hyps, refs)


def test_pairs_the_model_input_leaves_out_are_reported(caplog):
    """The evaluation's `+pairs` rows left pairs with a phrase over data.max_pair_pieces (the embedded corpus's test
    split at 6 pieces: 7 of its 51) out of the model's input without a word, while CSR still counted their target
    phrases; a warning now counts them, as training's log does."""
    from types import SimpleNamespace

    from jaxnat.evaluate import report_left_out_pairs

    def words(texts, side):  # a piece a word
        return [[7] * len(t.split()) for t in texts]

    translator = SimpleNamespace(config=SimpleNamespace(data=SimpleNamespace(max_pairs=2, max_pair_pieces=2)),
                                 encode_phrases=words)
    pairs = [[("dog", "Hund"), ("bus stop", "die Bus Haltestelle")], [("a", "b"), ("c", "d"), ("e", "f")], []]
    assert report_left_out_pairs(translator, "test", pairs) == {"pairs": 3, "too_long": 1, "too_many": 1}
    assert ("test: 2 of 5 constraint pairs are left out of the model's input (1 with a phrase over "
            "data.max_pair_pieces=2 pieces, 1 beyond data.max_pairs=2 a sentence)") in caplog.text
    caplog.clear()
    report_left_out_pairs(translator, "test", [[("dog", "Hund")]])
    assert "left out" not in caplog.text


def test_words_of_unspaced_languages_are_their_characters():
    assert metrics.word_tokens("我住在NBA比赛, 北京.", "zh") == [
        "我", "住", "在", "NBA", "比", "赛", ",", "北", "京", "."]
    assert metrics.word_tokens("スーパーで買った。", "ja") == ["ス", "ー", "パ", "ー", "で", "買", "っ", "た", "。"]
    assert metrics.word_tokens("北京 und Bonn.", "de") == moses_tokenize("北京 und Bonn.", "de")  # spaced: Moses'
    assert [metrics.unspaced(x) for x in ("zh", "zh_Hant", "ja-JP", "JA", "ko", "de", "")] == [True] * 4 + [False] * 3


def test_a_regional_language_code_has_its_language_s_moses_rules():
    # Moses knows "ko" and "en", not "ko-KR" or "en_US": it would split Hangul into syllables, "'s" into two tokens
    for lang in ("ko", "en", "zh"):
        for code in (f"{lang}-XX", f"{lang.upper()}_xx"):
            text = "서울에 갔다. Peter's 北京。"
            assert metrics.word_tokens(text, code) == metrics.word_tokens(text, lang), code
    assert metrics.word_tokens("서울에 갔다.", "ko-KR") == ["서울에", "갔다", "."]


def test_three_letter_codes_of_chinese_japanese_and_korean_are_theirs():
    # FLORES-200's file names: "zho_Hans" was scored as a spaced language, 13a's BLEU 0 on a whole clause a word
    assert [metrics.bleu_tokenize(x) for x in ("zho_Hans", "cmn", "jpn_Jpan", "kor_Hang", "deu_Latn")] == [
        "zh", "zh", "ja-mecab", "ko-mecab", "13a"]
    assert metrics.unspaced("zho_Hant") and metrics.unspaced("JPN") and not metrics.unspaced("kor_Hang")
    assert metrics.word_tokens("我住在北京。", "zho_Hans") == metrics.word_tokens("我住在北京。", "zh")


@given(st.text(alphabet="北京我住在スーパ。、abc ,.!", max_size=30))
def test_unspaced_words_refine_moses_tokens(text):
    # each Moses token is cut into pieces, never joined to another: the words join back into the Moses tokens
    words, tokens = metrics.word_tokens(text, "zh"), moses_tokenize(text, LANGUAGE_INDEPENDENT)
    assert "".join(words) == "".join(tokens) and len(words) >= len(tokens)
    assert all(len(w) == 1 for w in words if "\u4e00" <= w[0] <= "\u9fff")  # a Han character stands alone


def test_mean_length_counts_words_or_the_characters_of_an_unspaced_language():
    from jaxnat.evaluate import mean_length

    assert mean_length(["Ein Mann, der läuft.", "Ja"], "de") == 2.5  # whitespace words
    assert mean_length(["我住在北京。", "你好"], "zh-CN") == 4.0 and mean_length([], "ja") == 0.0


def test_bleu_tokenizes_as_sacrebleu_does_for_the_target_language():
    assert [metrics.bleu_tokenize(x) for x in ("zh", "zh-CN", "ja", "ko_KR", "de", "")] == [
        "zh", "zh", "ja-mecab", "ko-mecab", "13a", "13a"]
    assert metrics.bleu_tokenize("zh", "13a") == "13a"  # eval.bleu_tokenize names it
    hyps, refs = ["我们住在北京的东边。"], ["我们住在上海的东边。"]
    m = corpus_metrics(hyps, refs, lang="zh")
    assert m["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], tokenize="zh").score)
    assert "tok:zh" in m["bleu_signature"] and 0 < m["bleu"] < 100  # 13a: one word each, 0
    assert m["ter"] == pytest.approx(100 * 2 / 10)  # two of the reference's ten characters substituted
    assert 0 < m["tok_bleu"] < 100 and m["repetition"] == 0.0
    assert corpus_metrics(["谢谢谢谢"], ["谢谢"], lang="zh")["repetition"] == 75.0  # characters repeat


def test_a_bleu_tokenizer_that_cannot_be_had_is_one_line(monkeypatch):
    def no_mecab(**kwargs):
        raise RuntimeError("Japanese tokenization requires extra dependencies\n\n    pip install sacrebleu[ja]\n")

    monkeypatch.setattr(metrics, "BLEU", no_mecab)
    metrics._bleu_metric.cache_clear()
    try:
        with pytest.raises(metrics.ConfigError, match=r"^BLEU with sacreBLEU's ja-mecab .*'jaxnat\[ja\]'[^\n]*$"):
            metrics.check_bleu_tokenize("ja-mecab")
        with pytest.raises(metrics.ConfigError, match="eval.bleu_tokenize must be .* not 'flores200'"):
            metrics.check_bleu_tokenize("flores200")  # it would fetch its model at run time
    finally:
        metrics._bleu_metric.cache_clear()
