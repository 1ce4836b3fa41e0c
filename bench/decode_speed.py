"""Decoding speed of trained workdirs, side by side: latency at batch 1 and throughput at batch 64.

    python bench/decode_speed.py --run configs/ar/multi30k.py:runs/ar-multi30k \
        --run configs/levt/multi30k.py:runs/levt-kd-multi30k \
        --config.data.dir=../shared/data/multi30k [--repeats 3] [--sentences 100] [--batch 64] [--pairs] \
        [--full-canvas] [--variant "eval.no_repeat_ngram=3 eval.no_consecutive_repeat=2"]

With --pairs (and data.pairs_dir in the configs or overrides) the AR models are also timed with the test split's
constraint pairs, beam 4: a model of vectorized constraints with the pairs as input, and every AR model with the
pairs' target phrases as hard constraints (constrained beam search) — the vectorized-constraints paper's
Table 5, with each row's speed relative to the first run's plain beam search. With --unpacked as well, a model of
vectorized constraints is also timed attending over all data.max_pairs × data.max_pair_pieces constraint entries
in every batch (`vecconst.pack_entries=false`), without its pairs and with them. With --full-canvas a model that
predicts its lengths (CMLM, NAT) is also timed on outputs as wide as its source allows (`Translator.narrow_outputs`
off) instead of as wide as its longest predicted candidate needs. Each --variant (repeatable: space-separated
KEY=VALUE settings) times every run again with those settings on top of its own, alternating with it.

Each --run is CONFIG:WORKDIR, or a WORKDIR alone (the config it was trained with); overrides after the flags
apply to every run. AR models are timed greedy and with beam 4, refining models (LevT, EDITOR) with their
refinement loop, CMLM and NAT with their configured passes, length beam and rescorer. All use the workdir's
best checkpoint and the first test split of the first run's corpus. Every shape is compiled before timing
(model loading and compilation excluded); each figure is the median of --repeats timed passes, and all runs
and modes alternate inside each repeat so that they see the same machine load.
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jaxnat.config import apply_override, build_config, parse_overrides, workdir_config  # noqa: E402
from jaxnat.data.sources import load_corpus, load_pairs  # noqa: E402
from jaxnat.errors import run_script  # noqa: E402
from jaxnat.provenance import machine  # noqa: E402
from jaxnat.restore import load_translator  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="append", required=True, help="CONFIG:WORKDIR (repeatable)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=100, help="sentences timed at batch 1")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--pairs", action="store_true", help="also time with the test split's constraint pairs")
    parser.add_argument("--unpacked", action="store_true",
                        help="with --pairs: also time vectorized constraints over all padded constraint entries")
    parser.add_argument("--full-canvas", action="store_true",
                        help="also time length-predicting models on canvases sized from the source")
    parser.add_argument("--variant", action="append", default=[], metavar="'KEY=VALUE …'",
                        help="also time every run with these settings (repeatable)")
    args, overrides = parser.parse_known_args()
    if min(args.repeats, args.sentences, args.batch) < 1:
        raise SystemExit("error: --repeats, --sentences and --batch must be at least 1")
    logging.basicConfig(level=logging.WARNING)
    modes, srcs, split = [], None, None
    runs = [(run, "", []) for run in args.run]
    for variant in args.variant:
        extra = [f"--config.{setting}" for setting in variant.split()]
        runs += [(run, f", with {variant}", extra) for run in args.run]
    for run, variation, extra in runs:
        config_path, _, workdir = run.rpartition(":")
        if config_path:
            config = build_config(config_path, overrides + extra)
        else:  # the workdir's own config, with the overrides
            config = workdir_config(workdir)
            for key, value in parse_overrides(overrides + extra):
                apply_override(config, key, value)
        if srcs is None:
            corpus = load_corpus(config.data)
            split = [s for s in corpus if s not in ("train", "valid")][0]
            srcs = corpus[split][0]
            pairs = load_pairs(config.data, corpus).get(split) if args.pairs else None
            if args.pairs and pairs is None:
                sys.exit(f"error: --pairs: no constraint pairs for {split} (set data.pairs_dir)")
        translator = load_translator(config, workdir)
        name = f"{translator.spec.name} ({workdir}){variation}"
        beams = (1, 4) if translator.spec.supports.beam else (1,)
        for beam in beams:
            label = f"{name}, beam {beam}" if beam > 1 else f"{name}, {'greedy' if len(beams) > 1 else 'decoding'}"
            modes.append((label, translator, beam, {}))
        if args.full_canvas and translator.spec.plan is not None:
            full = copy.copy(translator)  # the same parameters and compiled functions
            full.narrow_outputs = False
            modes.append((f"{name}, decoding, canvases sized from the source", full, 1, {}))
        sup = translator.spec.supports
        if pairs and sup.pairs:
            modes.append((f"{name}, with the pairs, beam 4", translator, 4, dict(pairs=pairs)))
            if args.unpacked:
                unpacked = copy.copy(translator)  # the same parameters and compiled function
                unpacked.config = copy.deepcopy(translator.config)
                unpacked.config.vecconst.pack_entries = False
                modes.append((f"{name}, beam 4, all entries", unpacked, 4, {}))
                modes.append((f"{name}, with the pairs, beam 4, all entries", unpacked, 4, dict(pairs=pairs)))
        if pairs and sup.hard_constraints:
            targets = [[t for _, t in p] or None for p in pairs]
            modes.append((f"{name}, the pairs' targets hard (VDBA), beam 4", translator, 4,
                          dict(constraints=targets, hard=[True] * len(srcs), pairs=pairs if sup.pairs else None)))
    results = {label: [] for label, _, _, _ in modes}
    for repeat in range(args.repeats):
        for label, translator, beam, starts in modes:
            r = translator.speed(srcs, beam, args.sentences, args.batch, **starts)
            results[label].append(r)
            # a long benchmark (the --pairs table takes an hour on one core) shows where it is
            print(f"repeat {repeat + 1}/{args.repeats}: {label}: {r['latency_ms']:.1f} ms/sentence at batch 1, "
                  f"{r['sentences_per_s']:.1f} sentences/s at batch {args.batch}", file=sys.stderr, flush=True)
    medians = {label: (statistics.median(r["latency_ms"] for r in runs),
                       statistics.median(r["sentences_per_s"] for r in runs)) for label, runs in results.items()}
    base = next((m for (label, *_), m in zip(modes, medians.values()) if label.endswith("beam 4")), None)
    print(f"| decoding ({split}, {len(srcs)} sentences) | latency, batch 1 (ms/sentence) | "
          f"throughput, batch {args.batch} (sentences/s) | relative to the first beam 4 (batch 1 / batch "
          f"{args.batch}) |")
    print("|---|---|---|---|")
    for label, (lat, thr) in medians.items():
        rel = f"{base[0] / lat:.2f}× / {thr / base[1]:.2f}×" if base else "–"
        print(f"| {label} | {lat:.1f} | {thr:.1f} | {rel} |")
    print(f"\nmedian of {args.repeats} repeats; batch-1 latency over the first {min(args.sentences, len(srcs))} "
          f"sentences")
    print(machine())


if __name__ == "__main__":
    run_script(main)
