"""Plain-Python references of the CTC family's kernels (jaxnat/models/ctc/): every alignment enumerated on tiny
lattices — the loss, the best alignment, the best collapsed string, the best constrained path — and the
collapse and glancing choices written out one sentence at a time."""

from __future__ import annotations

import itertools
import math

BLANK = 4  # jaxnat.models.ctc.model.BLANK_ID
PAD = 0


def collapse(path, blank=BLANK):
    """Frame labels → the output: repeats merged, then blanks (and PAD frames) dropped."""
    out, previous = [], None
    for label in path:
        if label != previous and label not in (blank, PAD):
            out.append(label)
        previous = label
    return out


def paths(labels, frames):
    """Every label sequence of ``frames`` frames over ``labels``."""
    return itertools.product(labels, repeat=frames)


def path_score(log_probs, path):
    return sum(float(log_probs[t][label]) for t, label in enumerate(path))


def ctc_nll(log_probs, frames, target, labels):
    """−log Σ over the paths (over ``labels``, the blank among them) that collapse to ``target``; inf if none."""
    scores = [path_score(log_probs, p) for p in paths(labels, frames) if collapse(p) == list(target)]
    if not scores:
        return math.inf
    top = max(scores)
    return -(top + math.log(sum(math.exp(s - top) for s in scores)))


def forward_nll(log_probs, frames, target, blank=BLANK):
    """The same sum by the forward recursion (Graves et al. 2006) over the target with blanks around and between
    its labels, one frame at a time: for lattices too long to enumerate; inf if no path."""
    ext = [blank]
    for label in target:
        ext += [label, blank]
    alpha = [-math.inf] * len(ext)
    alpha[0] = float(log_probs[0][blank])
    if len(ext) > 1:
        alpha[1] = float(log_probs[0][ext[1]])
    for t in range(1, frames):
        alpha = [_logsumexp([alpha[s]] + ([alpha[s - 1]] if s else [])
                            + ([alpha[s - 2]] if s > 1 and ext[s] != blank and ext[s] != ext[s - 2] else []))
                 + float(log_probs[t][ext[s]]) for s in range(len(ext))]
    return -_logsumexp(alpha[-2:])


def _logsumexp(values):
    top = max(values)
    return top if top == -math.inf else top + math.log(sum(math.exp(v - top) for v in values))


def best_alignment(log_probs, frames, target, labels):
    """(the best score, every path reaching it) among the paths that collapse to ``target``."""
    best, argbest = -math.inf, []
    for p in paths(labels, frames):
        if collapse(p) == list(target):
            s = path_score(log_probs, p)
            if s > best + 1e-6:
                best, argbest = s, [p]
            elif abs(s - best) <= 1e-6:
                argbest.append(p)
    return best, argbest


def string_totals(log_probs, frames, labels):
    """{collapsed string: its log-probability summed over every path that collapses to it}."""
    totals = {}
    for p in paths(labels, frames):
        y = tuple(collapse(p))
        s = path_score(log_probs, p)
        totals[y] = s if y not in totals else max(s, totals[y]) + math.log1p(math.exp(-abs(s - totals[y])))
    return totals


def repeats(y, no_repeat: int, no_consecutive: int) -> bool:
    """Whether a token of y (BOS before it) completes an n-gram y already holds before it (n = no_repeat > 0), or
    makes the last m tokens repeat the m before them (m ≤ no_consecutive)."""
    row = [1, *y]
    grams = [tuple(row[t - no_repeat + 1:t + 1]) for t in range(no_repeat - 1, len(row))] if no_repeat else []
    return any(g in grams[:i] for i, g in enumerate(grams)) or any(
        row[t - m + 1:t + 1] == row[t - 2 * m + 1:t - m + 1] for t in range(1, len(row))
        for m in range(1, no_consecutive + 1) if t - 2 * m + 1 >= 0)


def placements(y, phrases):
    """Every way of placing each phrase once in the output y as non-overlapping contiguous runs: lists of
    (start, end) spans, one per phrase, in the phrases' order."""
    options = [[i for i in range(len(y) - len(ph) + 1) if list(y[i:i + len(ph)]) == list(ph)] for ph in phrases]
    for starts in itertools.product(*options):
        spans = [(s, s + len(ph)) for s, ph in zip(starts, phrases)]
        ordered = sorted(spans)
        if all(a[1] <= b[0] for a, b in zip(ordered, ordered[1:])):
            yield spans


def whole_words(y, spans, continues, joins, trails=None):
    """The subword rule of hard constraints: after a placed phrase its word stays open up to the next token that
    starts a word (or the end): the tokens in between are ``trails`` tokens, none continues a word (a continuing
    token, also one that is trails, glues the run onto the phrase); the free token right before a phrase does not
    join onto it (the end of another phrase is not free)."""
    ends = {e for _, e in spans}
    for s, e in spans:
        for token in y[e:]:
            if continues is not None and continues[token]:
                return False
            if trails is None or not trails[token]:
                break  # a word start: the phrase's word is closed
        if s > 0 and s not in ends and joins is not None and joins[y[s - 1]]:
            return False
    return True


def satisfies(y, phrases, continues=None, joins=None, trails=None):
    """Whether the output y holds every phrase, placed whole, non-overlapping, as words."""
    return any(whole_words(y, spans, continues, joins, trails) for spans in placements(y, phrases))


def soft_gain(y, phrases, bonus):
    """The largest bonus × (pieces of the phrases placed) over non-overlapping placements of a subset of them."""
    best = 0.0
    for k in range(len(phrases) + 1):
        for subset in itertools.combinations(range(len(phrases)), k):
            if any(True for _ in placements(y, [phrases[i] for i in subset])):
                best = max(best, bonus * sum(len(phrases[i]) for i in subset))
    return best


def constrained_best(log_probs, frames, labels, phrases, hard, continues=None, joins=None, trails=None,
                     bonus=0.0):
    """The best path's value: hard, the best path score whose output satisfies every phrase (−inf if none);
    soft, the best path score + `soft_gain`."""
    phrases = [list(p) for p in phrases if len(p)]
    best = -math.inf
    for p in paths(labels, frames):
        y = collapse(p)
        if hard:
            if satisfies(y, phrases, continues, joins, trails):
                best = max(best, path_score(log_probs, p))
        else:
            best = max(best, path_score(log_probs, p) + soft_gain(y, phrases, bonus))
    return best


def glance(aligned, predicted, frames, ratio, draws):
    """GLAT on one sentence's alignment: (mismatches, count, the glanced frames) with count =
    min(⌊ratio × mismatches⌋, frames − 1), the frames of the count lowest draws."""
    mismatches = sum(aligned[t] != predicted[t] for t in range(frames))
    count = min(math.floor(ratio * mismatches), max(frames - 1, 0))
    order = sorted(range(frames), key=lambda t: (draws[t], t))
    return mismatches, count, sorted(order[:count])
