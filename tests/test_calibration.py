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
    assert inference_ece([], [])["ece"] is None


def test_calibration_counts_only_the_models_own_tokens():
    import math

    outputs = [(["a", "b", "c"], [math.log(0.9), math.log(0.5), 0.0], [True, True, False])]
    r = calibration(outputs, [["a", "x", "c"]])
    assert r["tokens"] == 2 and r["accuracy"] == pytest.approx(50.0) and r["confidence"] == pytest.approx(70.0)
