"""Inference calibration: TER's token labels (shifts included) and ECE, by hand; the labels agree with TER."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxnat.evaluation.calibration import calibration, inference_ece, token_labels


def test_token_labels_by_hand():
    assert token_labels("a b c".split(), "a x c".split()) == [True, False, True]
    assert token_labels("c a b".split(), "a b c".split()) == [True, True, True]  # one shift, then all match
    assert sorted(token_labels("a a b".split(), "a b".split())) == [False, True, True]  # one "a" is extra
    assert token_labels([], ["a"]) == [] and token_labels(["a"], []) == [False]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from("abcd"), max_size=8), st.lists(st.sampled_from("abcd"), min_size=1, max_size=8))
def test_token_labels_agree_with_ter(hyp, ref):
    """A token TER keeps is a match: the kept tokens are a sub-multiset of the reference, and every other token of
    either side costs one of TER's edits (a substitution, insertion or deletion)."""
    from sacrebleu.metrics.lib_ter import translation_edit_rate

    labels = token_labels(hyp, ref)
    kept = [t for t, ok in zip(hyp, labels) if ok]
    assert all(kept.count(t) <= ref.count(t) for t in set(kept))
    edits, _ = translation_edit_rate(hyp, ref)
    assert len(hyp) - len(kept) <= edits and len(ref) - len(kept) <= edits


def test_ece_by_hand():
    r = inference_ece([0.95, 0.95, 0.15, 0.15], [True, False, False, False])
    # the 0.9-1 bin: confidence 0.95, accuracy 0.5; the 0.1-0.2 bin: confidence 0.15, accuracy 0
    assert r["ece"] == pytest.approx(100 * (2 * 0.45 + 2 * 0.15) / 4)
    assert r["confidence"] == pytest.approx(55.0) and r["accuracy"] == pytest.approx(25.0) and r["tokens"] == 4
    assert inference_ece([1.0], [True])["ece"] == pytest.approx(0.0)  # the top bin is closed
    # the edges: 0.1 opens the second bin (not in 0.05's), 1.0 is counted in the top one (not dropped)
    assert inference_ece([0.05, 0.1, 1.0], [True, False, False])["ece"] == pytest.approx(100 * (0.95 + 0.1 + 1) / 3)
    assert inference_ece([], [])["ece"] is None


def plain_ece(percents, labels, bins):
    """ECE ×100 of confidences k/100 written out: token i in bin ⌊k_i · bins / 100⌋ (integer arithmetic), the
    top bin closed (k = 100 joins bin bins − 1)."""
    groups = {}
    for k, label in zip(percents, labels):
        groups.setdefault(min(k * bins // 100, bins - 1), []).append((k / 100, label))
    gap = sum(abs(sum(ok for _, ok in g) / len(g) - sum(c for c, _ in g) / len(g)) * len(g) for g in groups.values())
    return 100 * gap / len(percents)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20).map(lambda k: 5 * k), st.booleans()), min_size=1, max_size=12),
       st.sampled_from([1, 3, 10]))
def test_ece_equals_the_plain_binning(tokens, bins):
    """Confidences in steps of 0.05, so that every other one is on an edge of the ten bins (0.1, 0.2, ... and
    1.0), where an open top bin, bins closed on the right or a skipped bin would move or drop tokens."""
    percents, labels = zip(*tokens)
    got = inference_ece([k / 100 for k in percents], list(labels), bins)
    assert got["ece"] == pytest.approx(plain_ece(percents, labels, bins), abs=1e-9)


def test_calibration_counts_only_the_models_own_tokens():
    import math

    outputs = [(["a", "b", "c"], [math.log(0.9), math.log(0.5), 0.0], [True, True, False])]
    r = calibration(outputs, [["a", "x", "c"]])
    assert r["tokens"] == 2 and r["accuracy"] == pytest.approx(50.0) and r["confidence"] == pytest.approx(70.0)
