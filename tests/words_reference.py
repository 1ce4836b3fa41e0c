"""Whole words after hard constraints (`jaxnat.decoding.words`) in plain Python, one row at a time: walks back
from each position instead of cumulative maxima, and repairs a pass round by round as the jit'd loop does."""


def open_word(passes, last, i):
    """Whether position i stands in a phrase's open word: every position between it and a phrase's last piece
    passes (a free trailing piece). Returns (open, the nearest position before i that does not pass, or -1)."""
    j = i - 1
    while j >= 0 and passes[j]:
        j -= 1
    return j >= 0 and bool(last[j]), j


def glued(row, in_phrase, last, continues, trails):
    """The free continuing pieces of ``row`` that stand in a phrase's open word."""
    passes = [bool(trails[t]) and not p for t, p in zip(row, in_phrase)]
    return [open_word(passes, last, i)[0] and bool(continues[t]) and not in_phrase[i] for i, t in enumerate(row)]


def repair(choose, row, written, in_phrase, last, continues, trails):
    """choose(levels: list of 0/1/2) -> row: the pass at those levels; row: the pass as it ran. Each round
    raises the level of a written glued piece to 1 (no continuing piece), and for a glued piece the pass did not
    write, that of the last written piece of its open run to 2 (a word start). Returns (row, levels)."""
    level = [0] * len(row)
    while True:
        passes = [bool(trails[t]) and not p for t, p in zip(row, in_phrase)]
        need = list(level)
        for i, bad in enumerate(glued(row, in_phrase, last, continues, trails)):
            if not bad:
                continue
            if written[i]:
                need[i] = max(need[i], 1)
                continue
            j = i - 1
            while j >= 0 and passes[j] and not written[j]:
                j -= 1
            if j >= 0 and passes[j] and written[j]:
                need[j] = 2
        if need == level:
            return row, level
        level = need
        row = choose(level)


def allowed(level, continues, trails):
    """What a position at ``level`` may take (bool per id), as `words.restrict`."""
    return [not ((level >= 1 and c) or (level >= 2 and t)) for c, t in zip(continues, trails)]
