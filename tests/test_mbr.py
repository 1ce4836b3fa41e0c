"""MBR decoding's choice (`jaxnat/decoding/mbr.py`): the candidate of highest mean utility against the others, and
its utilities all at once against sacreBLEU's sentence chrF and BLEU, one pair at a time."""

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sacrebleu import sentence_bleu
from sacrebleu.metrics import CHRF

from jaxnat.decoding import mbr


def test_the_candidate_the_others_agree_with_wins():
    """The consensus of the samples, not the first (the model's best): two near-copies and an outlier, the copies
    win; of equals, the first; a candidate drawn twice is supported by its copy, not by itself."""
    candidates = ["a cat sits on the red mat", "the dog runs in the park", "a cat sits on the mat",
                  "a cat sat on the mat"]
    best, utility = mbr.choose(candidates)
    chrf = CHRF()
    expected = [sum(chrf.sentence_score(h, [r]).score for r in candidates if r is not h) / 3 for h in candidates]
    assert best == expected.index(max(expected)) == 2 and utility == pytest.approx(max(expected))
    assert mbr.choose(["x y", "u v", "x y"]) == (0, pytest.approx(100 / 2 + chrf.sentence_score(
        "x y", ["u v"]).score / 2))
    assert mbr.choose(["p q", "p q"])[0] == 0  # equals: the first
    best, utility = mbr.choose(["only one"])
    assert best == 0 and math.isnan(utility)


def test_the_chrf_matrix_is_sacrebleus_sentence_chrf_in_any_script():
    """chrF reads characters: Chinese written without spaces gets partial credit as any language does."""
    candidates = ["我住在北京。", "我住在上海。", "他住在北京。"]
    matrix = mbr.chrf_matrix(candidates)
    chrf = CHRF()
    for i, h in enumerate(candidates):
        assert matrix[i, i] == 0.0
        for j, r in enumerate(candidates):
            if i != j:
                assert matrix[i, j] == pytest.approx(chrf.sentence_score(h, [r]).score)
    assert 0 < matrix[0, 1] < 100 and mbr.choose(candidates)[0] == 0  # 我住在北京 shares most with the others


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="ab cé北京.\t", max_size=12), min_size=1, max_size=6))
@example(["", "a", "ab ab", "  ", "北京北京北京", "a b c d e f g"])
@example(["a\ud800b", "a\ud800", "🙂 x🙂"])  # a lone surrogate (a str may hold one), a character beyond 16 bits
def test_the_matrix_is_sacrebleus_chrf_of_every_pair(candidates):
    """Empty candidates, ones of whitespace only, shorter than an order, repeated n-grams, any script: each entry is
    sacreBLEU's score of the pair, to the last bit (the same operations in the same order)."""
    chrf, matrix = CHRF(), mbr.chrf_matrix(candidates)
    want = np.array([[chrf.sentence_score(h, [r]).score if i != j else 0.0 for j, r in enumerate(candidates)]
                     for i, h in enumerate(candidates)])
    np.testing.assert_array_equal(matrix, want)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="ab c.,-\té北", max_size=16), min_size=1, max_size=6))
@example(["", "a", "a a a a a", "  ", "a b c d e", "a b. c, d-e", "b a b a b a"])
def test_the_bleu_matrix_is_sacrebleus_sentence_bleu_of_every_pair(candidates):
    """Empty candidates, shorter than an order, repeated n-grams, punctuation the 13a tokenizer splits off: each
    entry is `sacrebleu.sentence_bleu`'s score of the pair, to the last bit; a choice by BLEU is the candidate of
    the highest mean of those."""
    matrix = mbr.bleu_matrix(candidates)
    want = np.array([[sentence_bleu(h, [r]).score if i != j else 0.0 for j, r in enumerate(candidates)]
                     for i, h in enumerate(candidates)])
    np.testing.assert_array_equal(matrix, want)
    if len(candidates) > 1:
        expected = want.sum(axis=1) / (len(candidates) - 1)
        assert mbr.choose(candidates, "bleu") == (int(np.argmax(expected)), float(expected.max()))
