"""Inference calibration: how well the probabilities a model gives the tokens it outputs match how often those
tokens are right (Wang et al. 2020, "On the inference calibration of neural machine translation", as Wang et al.
2022 report it in their Table 6).

Each output token is labelled correct or not by TER's alignment of the hypothesis with the reference, both as
the model's target pieces: after TER's shifts, a hypothesis token the edit path keeps unchanged is correct,
one it substitutes or deletes is not. Over the tokens the model chose itself (not the given ones: BOS, EOS,
an initial hypothesis, hard constraints placed by the start), with confidence = the probability the model gave
the token when it chose it:

    ECE = Σ_b |B_b| / N · |accuracy(B_b) − confidence(B_b)|     over ten equal-width confidence bins B_b

reported ×100 beside the mean confidence and the accuracy (the paper's "Prob." and "Acc.").

    token_labels(hyp, ref) -> [bool]          per hypothesis token, TER-aligned to the reference
    inference_ece(confidences, labels) -> {'ece', 'confidence', 'accuracy', 'tokens'}
"""

from __future__ import annotations

import numpy as np

BINS = 10


class _Token(str):
    """A token that remembers its position in the hypothesis through TER's shifts (which move list items)."""

    position: int


def token_labels(hyp: list[str], ref: list[str]) -> list[bool]:
    """Per token of ``hyp``: whether TER's alignment with ``ref`` keeps it (a match, possibly after a shift).

    TER's shift search and edit path are sacreBLEU's (`sacrebleu.metrics.lib_ter`, the tercom heuristics
    sacreBLEU's TER score uses), so the labels agree with the TER that the evaluation reports."""
    from sacrebleu.metrics import lib_ter as ter

    if not hyp:
        return []
    if not ref:
        return [False] * len(hyp)
    words = []
    for k, token in enumerate(hyp):
        w = _Token(token)
        w.position = k
        words.append(w)
    edits = ter.BeamEditDistance(ref)
    checked = 0
    while True:  # shifts while they reduce the edit distance, as sacreBLEU's translation_edit_rate
        delta, shifted, checked = ter._shift(words, ref, edits, checked)
        if checked >= ter._MAX_SHIFT_CANDIDATES or delta <= 0:
            break
        words = shifted
    _, trace = edits(words)
    _, _, hyp_errors = ter.trace_to_alignment(ter._flip_trace(trace))
    labels = [False] * len(hyp)
    for w, wrong in zip(words, hyp_errors):
        labels[w.position] = not wrong
    return labels


def inference_ece(confidences: list[float], labels: list[bool], bins: int = BINS) -> dict:
    """{'ece', 'confidence', 'accuracy' (each ×100), 'tokens'} over tokens with these confidences (probabilities in
    [0, 1]) and correctness labels; equal-width bins, the top one closed. No tokens: every figure None."""
    conf = np.asarray(confidences, np.float64)
    correct = np.asarray(labels, np.float64)
    if conf.size == 0:
        return {"ece": None, "confidence": None, "accuracy": None, "tokens": 0}
    which = np.minimum((conf * bins).astype(int), bins - 1)
    gap = sum(abs(correct[which == b].mean() - conf[which == b].mean()) * np.sum(which == b)
              for b in range(bins) if np.any(which == b))
    return {"ece": 100.0 * gap / conf.size, "confidence": 100.0 * conf.mean(), "accuracy": 100.0 * correct.mean(),
            "tokens": int(conf.size)}


def calibration(outputs: list[tuple[list[str], list[float], list[bool]]], refs: list[list[str]]) -> dict:
    """`inference_ece` of a corpus: per sentence (hypothesis pieces, their log-probabilities, whether the model
    scored each) and the reference's pieces."""
    confidences, labels = [], []
    for (pieces, logps, scored), ref in zip(outputs, refs):
        for label, logp, own in zip(token_labels(pieces, ref), logps, scored):
            if own:
                confidences.append(float(np.exp(logp)))
                labels.append(label)
    return inference_ece(confidences, labels)
