"""MBR decoding's utilities: jaxnat's chrF and BLEU of every pair of a sentence's candidates at once against
sacreBLEU's sentence scores called pair by pair.

    python bench/mbr_speed.py [--sentences 20] [--repeats 5]

For K = 16 and 64 candidates a sentence (sentences of 8-14 words drawn from a small German vocabulary, so that
the candidates share many n-grams, as samples of one source do), it times `jaxnat.decoding.mbr.chrf_matrix` and
`bleu_matrix` and the same K · (K − 1) scores by `sacrebleu.metrics.CHRF().sentence_score` and
`sacrebleu.sentence_bleu`, alternately (a full garbage collection before each), checks that each two agree exactly,
and prints the median milliseconds a sentence of each and their ratio.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jaxnat.decoding import mbr  # noqa: E402

WORDS = ("ein mann fährt ein rotes fahrrad auf der straße zwei hunde spielen im schnee die frau in einem blauen "
         "mantel liest buch kind isst apfel park").split()


def candidates(rng: random.Random, k: int) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 14))) for _ in range(k)]


def pairwise(texts: list[str], score) -> np.ndarray:
    """The K · (K − 1) scores one sacreBLEU call a pair: score(hypothesis, reference) → a score object."""
    return np.array([[score(h, r).score if i != j else 0.0 for j, r in enumerate(texts)]
                     for i, h in enumerate(texts)])


def sacrebleu_scorers() -> dict:
    """{utility: sacreBLEU's sentence score of a pair}: CHRF().sentence_score and sentence_bleu (its defaults)."""
    import sacrebleu
    from sacrebleu.metrics import CHRF

    chrf = CHRF()
    return {"chrf": lambda h, r: chrf.sentence_score(h, [r]), "bleu": lambda h, r: sacrebleu.sentence_bleu(h, [r])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.sentences < 1 or args.repeats < 1:
        raise SystemExit("error: --sentences and --repeats must be at least 1")
    scorers = sacrebleu_scorers()
    for utility, matrix in (("chrf", mbr.chrf_matrix), ("bleu", mbr.bleu_matrix)):
        theirs = lambda texts: pairwise(texts, scorers[utility])  # noqa: E731
        for k in (16, 64):
            rng = random.Random(k)
            sets = [candidates(rng, k) for _ in range(args.sentences)]
            for texts in sets[:2]:
                assert np.array_equal(matrix(texts), theirs(texts)), "the two disagree"
            times = {"jaxnat": [], "sacrebleu": []}
            for _ in range(args.repeats):
                for name, fn in (("jaxnat", matrix), ("sacrebleu", theirs)):
                    gc.collect()  # else the side after sacreBLEU's calls pays for collecting what they allocated
                    t0 = time.perf_counter()
                    for texts in sets:
                        fn(texts)
                    times[name].append((time.perf_counter() - t0) / len(sets) * 1000)
            ours, pairs = statistics.median(times["jaxnat"]), statistics.median(times["sacrebleu"])
            print(f"{utility} K={k}: jaxnat {ours:.2f} ms a sentence, sacreBLEU pair by pair {pairs:.2f} ms: "
                  f"{pairs / ours:.1f}x (median of {args.repeats})")


if __name__ == "__main__":
    main()
