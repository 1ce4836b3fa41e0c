"""An n-gram language model of target pieces, estimated with interpolated modified Kneser-Ney smoothing (Chen &
Goodman 1998; the estimate KenLM's `lmplz` makes, without pruning) and written as an ARPA file: what `--mode lm`
builds from a run's training targets for the beam searches that fuse one (`jaxnat.decoding.ngram`).

For each order k the counts are *adjusted*: the highest order's and those of n-grams starting with ``<s>`` are the
raw counts, every other n-gram's is the number of distinct words seen before it (its continuation count). Per
order, three discounts come from the counts of counts t_1 … t_4 of the adjusted counts: Y = t_1 / (t_1 + 2 t_2),
D_1 = 1 − 2Y t_2/t_1, D_2 = 2 − 3Y t_3/t_2, D_3+ = 3 − 4Y t_4/t_3 (a corpus too small for them, where a t is 0 or a
discount falls outside (0, its count], takes 0.5, 1 and 1.5, as lmplz's `--discount_fallback`). Then for a context h
with adjusted counts a(h w) summing to A(h):

    p(w | h) = (a(h w) − D(a(h w))) / A(h) + γ(h) · p(w | h without its first word),
    γ(h) = (D_1 N_1(h) + D_2 N_2(h) + D_3+ N_3+(h)) / A(h),   N_i(h): the words w with a(h w) = i (≥ 3 for 3+),

down to the unigrams, which take γ(ε) / |V| of a uniform distribution over the vocabulary (every word but ``<s>``,
with ``</s>`` and ``<unk>``; ``<unk>`` has that share only). The ARPA file holds p(w | h) for every n-gram seen and
log10 γ(h) as the back-off of every context, so that its back-off rule gives the interpolated estimate of any word
after any context: the distributions sum to 1 (tested).
"""

from __future__ import annotations

import collections
import logging
import math
from typing import Iterable

from jaxnat.errors import DataError

log = logging.getLogger(__name__)

BOS_WORD, EOS_WORD, UNK_WORD = "<s>", "</s>", "<unk>"  # an ARPA model's sentence ends and unknown word
FALLBACK = (0.5, 1.0, 1.5)
NEVER = -99.0  # log10 P(<s>): never predicted (the value ARPA files hold)


def _discounts(adjusted: dict, order: int) -> tuple[float, float, float]:
    t = [sum(1 for c in adjusted.values() if c == i) for i in (1, 2, 3, 4)]
    if min(t) > 0:
        y = t[0] / (t[0] + 2 * t[1])
        d = (1 - 2 * y * t[1] / t[0], 2 - 3 * y * t[2] / t[1], 3 - 4 * y * t[3] / t[2])
        if all(0 < di <= i for i, di in enumerate(d, 1)):
            return d
    log.info("%d-grams: too few for Kneser-Ney's discounts (counts of counts %s); taking %s", order, t, FALLBACK)
    return FALLBACK


def _writable(word: str, unwritable: collections.Counter) -> str:
    """The word, or ``<unk>`` where an ARPA line cannot hold it (counted in ``unwritable``): a query reads such a
    piece, which the file lacks, as ``<unk>`` too."""
    if word and not any(c in word for c in " \t\r\n"):
        return word
    unwritable[word] += 1
    return UNK_WORD


def estimate(sentences: Iterable[list[str]], order: int) -> list[dict]:
    """Sentences (lists of words) → per order k = 1 … n a dict {k-gram (tuple of words): (log10 p, log10 back-off
    or None)}: every n-gram seen, ``<unk>`` and ``<s>`` (log10 p = −99) among the unigrams."""
    if order < 1:
        raise DataError(f"an n-gram model's order must be at least 1, not {order}")
    raw = [collections.Counter() for _ in range(order)]
    unwritable = collections.Counter()
    for words in sentences:
        seq = (BOS_WORD, *(_writable(w, unwritable) for w in words), EOS_WORD)
        for k in range(1, order + 1):
            raw[k - 1].update(seq[i:i + k] for i in range(len(seq) - k + 1))
    if not raw[0]:
        raise DataError("no sentences to estimate a language model from")
    if unwritable:
        log.info("language model: %d words an ARPA file cannot hold (empty, or with an ASCII space: %s) counted as "
                 "%s", sum(unwritable.values()), ", ".join(map(repr, list(unwritable)[:3])), UNK_WORD)
    adjusted = raw[-1:]
    for k in range(order - 1, 0, -1):  # continuation counts: the distinct words before each k-gram
        before = collections.Counter(gram[1:] for gram in raw[k])
        adjusted.insert(0, {gram: count if gram[0] == BOS_WORD else before[gram] for gram, count in raw[k - 1].items()})
    adjusted[0] = {gram: count for gram, count in adjusted[0].items() if gram != (BOS_WORD,)}  # never predicted
    size = len(adjusted[0]) + ((UNK_WORD,) not in adjusted[0])  # p(. | h) ranges over every word but <s>, <unk> too
    out: list[dict] = []
    below: dict = {}
    for k, counts in enumerate(adjusted, 1):
        d = _discounts(counts, k)
        total, n = collections.Counter(), collections.Counter()
        for gram, count in counts.items():
            total[gram[:-1]] += count
            n[gram[:-1], min(count, 3)] += 1
        gamma = {h: (d[0] * n[h, 1] + d[1] * n[h, 2] + d[2] * n[h, 3]) / a for h, a in total.items()}
        probs = {gram: (count - d[min(count, 3) - 1]) / total[gram[:-1]]
                 + gamma[gram[:-1]] * (below[gram[1:]] if k > 1 else 1.0 / size) for gram, count in counts.items()}
        if k == 1:
            probs.setdefault((UNK_WORD,), gamma[()] / size)
        for h, g in gamma.items() if k > 1 else ():  # the contexts' back-offs, on the order below's entries
            out[-1][h] = (out[-1][h][0], math.log10(g))
        out.append({gram: (math.log10(p), None) for gram, p in probs.items()})
        log.info("language model: %d %d-grams, discounts %s", len(probs), k, ", ".join(f"{x:.3f}" for x in d))
        if k == 1:  # <s>: never predicted; a context (its back-off) from the bigrams on
            out[0][(BOS_WORD,)] = (NEVER, None)
        below = probs
    return out


def write_arpa(path: str, grams: list[dict]) -> None:
    """`estimate`'s model as an ARPA file (log10 values, tab-separated), written whole to ``path`` + '.part' first
    and then renamed, so that a file of this name is always complete."""
    import os

    part = path + ".part"
    with open(part, "w", encoding="utf-8") as f:
        f.write("\\data\\\n")
        for k, entries in enumerate(grams, 1):
            f.write(f"ngram {k}={len(entries)}\n")
        for k, entries in enumerate(grams, 1):
            f.write(f"\n\\{k}-grams:\n")
            for gram, (p, b) in entries.items():
                f.write(f"{p:.7g}\t{' '.join(gram)}" + (f"\t{b:.7g}\n" if b is not None else "\n"))
        f.write("\n\\end\\\n")
    os.replace(part, path)


def write_run_lm(config, workdir: str, output: str) -> str:
    """`--mode lm`: the n-gram model (order eval.lm_order) of the training targets of ``workdir``'s run (the corpus
    its config names, cut into its target pieces, each piece a word) written to ``output`` as an ARPA file; returns
    a line saying what was written."""
    from jaxnat.data.sources import load_corpus
    from jaxnat.data.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(workdir)
    targets = load_corpus(config.data)["train"][1]
    log.info("language model: cutting %d training targets into pieces", len(targets))
    pieces = [[tokenizer.id_to_piece(i, "tgt") for i in ids] for ids in tokenizer.encode(targets, "tgt")]
    grams = estimate(pieces, config.eval.lm_order)
    write_arpa(output, grams)
    sizes = ", ".join(f"{len(g)} {k}-grams" for k, g in enumerate(grams, 1))
    return f"{output}: a {config.eval.lm_order}-gram model of {len(targets)} training targets' pieces ({sizes})"
