"""Decoding speed of trained workdirs, side by side: latency at batch 1 and throughput at batch 64.

    python bench/decode_speed.py --run configs/ar/multi30k.py:runs/ar-multi30k \
        --run configs/levt/multi30k.py:runs/levt-kd-multi30k \
        --config.data.dir=../shared/data/multi30k [--repeats 3] [--sentences 100]

Each --run is CONFIG:WORKDIR, or a WORKDIR alone (the config it was trained with); overrides after the flags
apply to every run. AR models are timed greedy and with beam 4, refining models (LevT, EDITOR) with their
refinement loop, CMLM and NAT with their configured passes, length beam and rescorer. All use the workdir's
best checkpoint and the first test split of the first run's corpus. Every shape is compiled before timing
(model loading and compilation excluded); each figure is the median of --repeats timed passes, and all runs
and modes alternate inside each repeat so that they see the same machine load.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jaxnat.config import apply_override, build_config, parse_overrides, workdir_config  # noqa: E402
from jaxnat.data.sources import load_corpus  # noqa: E402
from jaxnat.restore import load_translator  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", action="append", required=True, help="CONFIG:WORKDIR (repeatable)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=100, help="sentences timed at batch 1")
    parser.add_argument("--batch", type=int, default=64)
    args, overrides = parser.parse_known_args()
    logging.basicConfig(level=logging.WARNING)
    modes, srcs, split = [], None, None
    for run in args.run:
        config_path, _, workdir = run.rpartition(":")
        if config_path:
            config = build_config(config_path, overrides)
        else:  # the workdir's own config, with the overrides
            config = workdir_config(workdir)
            for key, value in parse_overrides(overrides):
                apply_override(config, key, value)
        if srcs is None:
            corpus = load_corpus(config.data)
            split = [s for s in corpus if s not in ("train", "valid")][0]
            srcs = corpus[split][0]
        translator = load_translator(config, workdir)
        name = f"{translator.spec.name} ({workdir})"
        beams = (1, 4) if translator.spec.supports.beam else (1,)
        for beam in beams:
            label = f"{name}, beam {beam}" if beam > 1 else f"{name}, {'greedy' if len(beams) > 1 else 'decoding'}"
            modes.append((label, translator, beam))
    results = {label: [] for label, _, _ in modes}
    for _ in range(args.repeats):
        for label, translator, beam in modes:
            results[label].append(translator.speed(srcs, beam, args.sentences, args.batch))
    print(f"| decoding ({split}, {len(srcs)} sentences) | latency, batch 1 (ms/sentence) | "
          f"throughput, batch {args.batch} (sentences/s) |")
    print("|---|---|---|")
    for label, runs in results.items():
        lat = statistics.median(r["latency_ms"] for r in runs)
        thr = statistics.median(r["sentences_per_s"] for r in runs)
        print(f"| {label} | {lat:.1f} | {thr:.1f} |")
    print(f"\nmedian of {args.repeats} repeats; batch-1 latency over the first {args.sentences} sentences")


if __name__ == "__main__":
    main()
