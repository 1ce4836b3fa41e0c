"""Minimum Bayes risk (MBR) decoding: of a sentence's candidates, the one the others agree with most.

A search returns the output the model scores highest; MBR decoding (Kumar & Byrne 2004) returns the candidate of
highest expected utility under the model, estimated with the candidates themselves as pseudo-references: with
samples (`eval.sampling`) an unbiased estimate (Eikema & Aziz 2020), with a beam's n-best list a common
approximation. Freitag et al. 2022 and 2023 found it, with chrF or a neural utility, better than beam search by
human judgement. The utility (eval.mbr) is sacreBLEU's sentence chrF (character n-grams, so it reads every language
alike, those written without spaces too: `chrf_matrix`) or sentence BLEU (`bleu_matrix`, as
`sacrebleu.sentence_bleu` scores: 13a tokens, exponential smoothing, the effective order; what a BLEU table rewards),
each candidate scored against every other one of the same sentence (not against itself: a candidate drawn k times
is supported by its k − 1 copies), and their mean its expected utility; ties go to the candidate the model ranks
first. A sentence's K · (K − 1) n-gram matches are counted at once. `Translator.translate(..., mbr=...)` chooses
among a beam's outputs.
"""

from __future__ import annotations

import math

import numpy as np

from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

UTILITIES = ("chrf", "bleu")  # eval.mbr: the utilities `choose` computes


CHAR_ORDER, BETA = 6, 2  # sacreBLEU's chrF: character n-grams of orders 1-6, recall weighted β = 2


def _matches(rows: list[np.ndarray], orders: int):
    """Yields per order n = 1 … ``orders`` the n-grams of K sequences (``rows``: int arrays ≥ 0, of characters' code
    points or words' ids): (int64[K, K] the n-grams sequence i shares with sequence j, each counted at most as often
    as either has it; int64[K] each one's n-grams), from one matrix of their counts C (K sequences × the n-grams any
    of them has) instead of K · (K − 1) comparisons of counters. An n-gram's column is the pair (its first n − 1 items'
    column, its last item) numbered by np.unique, so that no n-gram is made as a Python object. Since min(a, b) =
    Σ_t≥1 [a ≥ t] · [b ≥ t], the shared counts are Σ_t A_t A_tᵀ with A_t = [C ≥ t] (t up to the largest count; each
    A_t of the columns that reach t): matrix products of 0/1 entries, exact in float64, in place of K² elementwise
    minima over every n-gram."""
    k = len(rows)
    lengths = np.asarray([len(r) for r in rows], np.int64)
    items = np.concatenate([np.asarray(r, np.int64) for r in rows]) if k else np.zeros(0, np.int64)
    row = np.repeat(np.arange(k), lengths)
    room = np.repeat(np.cumsum(lengths), lengths) - np.arange(len(items))   # the items from each on to its row's end
    _, column = np.unique(items, return_inverse=True)                       # each position's 1-gram
    base = int(items.max()) + 1 if len(items) else 1
    for n in range(1, orders + 1):
        starts = np.flatnonzero(room >= n)                                   # the positions an n-gram starts at
        width = int(column[starts].max()) + 1 if len(starts) else 1
        counts = np.bincount(row[starts] * width + column[starts], minlength=k * width).reshape(k, width)
        shared = np.zeros((k, k))
        most = counts.max(axis=0)
        for t in range(1, int(most.max(initial=0)) + 1):
            above = (counts[:, most >= t] >= t).astype(np.float64)
            shared += above @ above.T
        yield shared.astype(np.int64), counts.sum(axis=1)
        longer = starts[room[starts] > n]                                    # the (n + 1)-grams: one item more
        _, grown = np.unique(column[longer] * base + items[longer + n], return_inverse=True)
        column = np.full(len(items), -1, np.int64)
        column[longer] = grown


def chrf_matrix(candidates: list[str]) -> np.ndarray:
    """float64[K, K]: sacreBLEU's sentence chrF (0-100) of candidate i as the hypothesis with candidate j as its
    reference (the diagonal: 0, not computed), for all pairs at once. chrF reads the character n-grams of each
    candidate with its whitespace removed: per order n, the n-grams the hypothesis and the reference share (their
    counts' minimum, summed), over the hypothesis's for precision and over the reference's for recall; precision and
    recall are averaged over the orders both sides have n-grams of, and F_β is their weighted harmonic mean. The
    shared n-grams of every pair come from one count matrix per order (`_matches`) instead of K · (K − 1) calls of
    sacreBLEU's sentence_score (equal to theirs to the last bit: tests/test_mbr.py), 38x faster at 16 candidates and
    120x at 64 (bench/mbr_speed.py)."""
    k = len(candidates)
    # each candidate's characters but whitespace, as code points (a lone surrogate, which a str may hold, too)
    text = [np.frombuffer("".join(c.split()).encode("utf-32-le", "surrogatepass"), np.uint32) for c in candidates]
    prec_sum, rec_sum, orders = np.zeros((k, k)), np.zeros((k, k)), np.zeros((k, k))
    for shared, total in _matches(text, CHAR_ORDER):                      # [K, K], [K] per order
        total = total.astype(np.float64)
        both = (total[:, None] > 0) & (total[None, :] > 0)
        prec_sum += np.where(both, shared / np.where(total > 0, total, 1)[:, None], 0.0)
        rec_sum += np.where(both, shared / np.where(total > 0, total, 1)[None, :], 0.0)
        orders += both
    prec, rec = prec_sum / np.maximum(orders, 1), rec_sum / np.maximum(orders, 1)
    factor = BETA ** 2
    denominator = factor * prec + rec
    # (sacreBLEU's operations in its order, so that the scores are its own to the last bit)
    out = np.where(prec + rec > 0, 100 * ((1 + factor) * prec * rec / np.where(denominator > 0, denominator, 1)), 0.0)
    np.fill_diagonal(out, 0.0)
    return out


WORD_ORDER = 4  # sentence BLEU's n-grams: orders 1-4
_TOKENIZE = Tokenizer13a()


def bleu_matrix(candidates: list[str]) -> np.ndarray:
    """float64[K, K]: sacreBLEU's sentence BLEU (0-100; `sacrebleu.sentence_bleu`'s settings: 13a tokens, exponential
    smoothing, the effective order) of candidate i as the hypothesis with candidate j as its reference (the diagonal:
    0, not computed). The matches of every pair come from one count matrix per order (`_matches`), the precisions
    and the orders each distinct pair of statistics counts from NumPy in `BLEU.compute_bleu`'s operations; the
    logarithms, their sum and the exponential are Python's own (`math.log` of each distinct precision, then per
    distinct pair `sum` and `math.exp`, as sacreBLEU calls them; NumPy's may differ in the last bit, and Python's
    `sum` of floats is compensated from 3.12), so that each score is theirs to the last bit (tests/test_mbr.py):
    32x faster than sentence_bleu pair by pair at 16 candidates, 102x at 64 (bench/mbr_speed.py)."""
    k = len(candidates)
    vocab: dict = {}
    words = [[vocab.setdefault(w, len(vocab)) for w in _TOKENIZE(c.rstrip()).split()] for c in candidates]
    lengths = np.asarray([len(w) for w in words])
    matches = np.stack([shared for shared, _ in _matches(words, WORD_ORDER)])   # [n, K, K]: hypothesis i, ref j
    # a pair's score depends on its matches and the two lengths alone (the hypothesis's n-grams: its length − n + 1):
    # each distinct one is computed once (candidates of one sentence share most: 700 of 10,000 pairs at K = 100)
    keys = np.concatenate([matches.reshape(WORD_ORDER, -1), np.repeat(lengths, k)[None], np.tile(lengths, k)[None]])
    order = np.lexsort(keys[::-1])
    new = np.ones(k * k, bool)
    new[1:] = (keys[:, order[1:]] != keys[:, order[:-1]]).any(axis=0)
    which = np.empty(k * k, np.int64)
    which[order] = np.cumsum(new) - 1
    correct, hyp, ref = keys[:WORD_ORDER, order[new]], keys[WORD_ORDER, order[new]], keys[-1, order[new]]  # [n, D], [D]
    total = np.maximum(hyp - np.arange(WORD_ORDER)[:, None], 0)            # [n, D]: the hypothesis's n-grams
    counted = np.cumprod(total > 0, axis=0).astype(bool)   # the orders before the first the hypothesis has none of
    zero = correct == 0
    smooth = 2.0 ** np.cumsum(zero & counted, axis=0)     # exponential smoothing: halved at each order matching none
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(zero, 100. / (smooth * total), 100. * correct / total)
    distinct, at = np.unique(precision[counted], return_inverse=True)
    logs = np.zeros(correct.shape)
    logs[counted] = np.array([math.log(p) for p in distinct.tolist()])[at]
    brevity = {(h, r): (math.exp(1 - r / h) if h > 0 else 0.0) if h < r else 1.0
               for h in set(hyp.tolist()) for r in set(ref.tolist())}
    score = np.array([brevity[h, r] * math.exp(sum(row[:orders]) / orders) if matched else 0.0
                      for row, orders, matched, h, r in zip(logs.T.tolist(), counted.sum(axis=0).tolist(),
                                                           correct.any(axis=0).tolist(), hyp.tolist(), ref.tolist())])
    out = score[which].reshape(k, k)
    np.fill_diagonal(out, 0.0)
    return out


def choose(candidates: list[str], utility: str = "chrf") -> tuple[int, float]:
    """(the index of the candidate of highest expected ``utility`` (`UTILITIES`), that expected utility): its mean
    utility against the other candidates, the first of equals (the candidates in the model's order); one candidate
    is chosen as it is, with utility NaN (no other to agree with)."""
    if len(candidates) < 2:
        return 0, float("nan")
    matrix = {"chrf": chrf_matrix, "bleu": bleu_matrix}[utility](candidates)
    expected = matrix.sum(axis=1) / (len(candidates) - 1)
    best = int(np.argmax(expected))
    return best, float(expected[best])
