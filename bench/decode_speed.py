"""AR decoding speed of a trained workdir: latency at batch 1 and throughput at batch 64, greedy and beam 4.

    python bench/decode_speed.py --config configs/ar/multi30k.py --workdir runs/ar-multi30k \
        --config.data.dir=../shared/data/multi30k [--repeats 3] [--sentences 100]

Uses the workdir's best checkpoint and the first test split. Every shape is compiled before timing (model
loading and compilation excluded); each figure is the median of --repeats timed passes, and greedy and
beam runs alternate inside each repeat so that both see the same machine load.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jaxnat.config import build_config  # noqa: E402
from jaxnat.data.sources import load_corpus  # noqa: E402
from jaxnat.evaluation.evaluate import load_translator  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=100, help="sentences timed at batch 1")
    parser.add_argument("--batch", type=int, default=64)
    args, overrides = parser.parse_known_args()
    logging.basicConfig(level=logging.WARNING)
    config = build_config(args.config, overrides)
    corpus = load_corpus(config.data)
    split = [s for s in corpus if s not in ("train", "valid")][0]
    srcs = corpus[split][0]
    translator = load_translator(config, args.workdir)
    results = {beam: [] for beam in (1, 4)}
    for _ in range(args.repeats):
        for beam in results:
            results[beam].append(translator.speed(srcs, beam, args.sentences, args.batch))
    print(f"| decoding ({split}, {len(srcs)} sentences) | latency, batch 1 (ms/sentence) | "
          f"throughput, batch {args.batch} (sentences/s) |")
    print("|---|---|---|")
    for beam, runs in results.items():
        name = "greedy" if beam == 1 else f"beam {beam}"
        lat = statistics.median(r["latency_ms"] for r in runs)
        thr = statistics.median(r["sentences_per_s"] for r in runs)
        print(f"| {name} | {lat:.1f} | {thr:.1f} |")
    print(f"\nmedian of {args.repeats} repeats; batch-1 latency over the first {args.sentences} sentences")


if __name__ == "__main__":
    main()
