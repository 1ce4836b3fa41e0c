"""Minimum Bayes risk (MBR) decoding: of a sentence's candidates, the one the others agree with most.

A search returns the output the model scores highest; MBR decoding (Kumar & Byrne 2004) returns the candidate of
highest expected utility under the model, estimated with the candidates themselves as pseudo-references: with
samples (`eval.sampling`) an unbiased estimate (Eikema & Aziz 2020), with a beam's n-best list a common
approximation. Freitag et al. 2022 and 2023 found it, with chrF or a neural utility, better than beam search by
human judgement. Here the utility is sacreBLEU's sentence chrF (character n-grams, so it reads every language alike,
those written without spaces too), each candidate scored against every other one of the same sentence (not against
itself: a candidate drawn k times is supported by its k − 1 copies), and their mean its expected utility; ties go
to the candidate the model ranks first. K candidates cost K · (K − 1) sentence scores, about 0.15 ms each on this
project's CPU (Intel Xeon, 2 cores): 16 candidates of 1,000 sentences take about 36 s.
`Translator.translate(..., mbr=...)` chooses among a beam's outputs (eval.mbr).
"""

from __future__ import annotations

import functools

import numpy as np

UTILITIES = ("chrf",)  # eval.mbr: the utilities `choose` computes


@functools.lru_cache(maxsize=None)
def _chrf():
    from sacrebleu.metrics import CHRF

    return CHRF()


def utility_matrix(candidates: list[str]) -> np.ndarray:
    """float64[K, K]: the utility of candidate i as a hypothesis with candidate j as its reference (sacreBLEU's
    sentence chrF, 0-100); the diagonal is not computed (0)."""
    metric = _chrf()
    k = len(candidates)
    out = np.zeros((k, k))
    for i in range(k):
        for j in range(k):
            if i != j:
                out[i, j] = metric.sentence_score(candidates[i], [candidates[j]]).score
    return out


def choose(candidates: list[str]) -> tuple[int, float]:
    """(the index of the candidate of highest expected utility, that expected utility): its mean utility against the
    other candidates, the first of equals (the candidates in the model's order); one candidate is chosen as it is,
    with utility NaN (no other to agree with)."""
    if len(candidates) < 2:
        return 0, float("nan")
    expected = utility_matrix(candidates).sum(axis=1) / (len(candidates) - 1)
    best = int(np.argmax(expected))
    return best, float(expected[best])
