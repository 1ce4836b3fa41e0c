"""The padding share of a config's training batches under each way of shaping them: 1, 2, … buckets fitted to
the data (data.max_buckets), the geometric buckets (data.bucket_growth, data.bucket_multiple), and packing.

    python bench/padding.py --config configs/levt/multi30k.py --data-dir ../shared/data/multi30k [--counts 1,2,3,4]

Builds the run's `Trainer` (vocabulary and encoded training split, in a temporary workdir) and the batcher of
each scheme, nothing compiled or trained. Padding: the share of an epoch's batch tokens (source and target,
filler rows included) that are PAD; every scheme's batches hold data.batch_tokens padded tokens a side, so
steps per epoch grow with it. Packing is exact only for the models that pack (`ModelSpec.packs`).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import jax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jaxnat.config import build_config  # noqa: E402
from jaxnat.data.batching import PackedBatcher, TrainBatcher, example_lengths, fitted_buckets  # noqa: E402
from jaxnat.training.trainer import Trainer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=os.path.join(ROOT, "configs/levt/multi30k.py"))
    parser.add_argument("--data-dir", default=os.path.join(ROOT, "..", "shared", "data", "multi30k"))
    parser.add_argument("--counts", default="1,2,3,4", help="the numbers of fitted buckets to compare")
    args, overrides = parser.parse_known_args()  # the rest: --config.a.b=value overrides
    config = build_config(args.config, [f"--config.data.dir={args.data_dir}", *overrides])
    d, seed = config.data, config.train.seed
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(config, tmp)
        src, tgt, init, _, _ = trainer.encoded_split("train")
    lengths = example_lengths(src, tgt, init)
    schemes = {f"fitted, data.max_buckets={k}" + (" (the config's)" if k == d.max_buckets else ""):
               fitted_buckets(lengths, k, d.bucket_multiple, d.max_len) for k in map(int, args.counts.split(","))}
    schemes[f"geometric, growth {d.bucket_growth}" + (" (the config's)" if not d.max_buckets else "")] = trainer.buckets
    print(f"\n{args.config}: {len(src)} training pairs, {d.batch_tokens} tokens a batch and side, "
          f"{jax.device_count()} device(s)")
    print("| batches | train programs | lengths | padding | steps per epoch |")
    print("|---|---|---|---|---|")
    for name, buckets in schemes.items():
        batcher = TrainBatcher(src, tgt, d.batch_tokens, buckets, seed, multiple_of=jax.device_count(), init=init)
        lengths_used = sorted(length for _, length in batcher.shapes)
        print(f"| {name} | {len(batcher.shapes)} | {', '.join(map(str, lengths_used))} | "
              f"{100 * batcher.padding:.1f}% | {batcher.steps_per_epoch} |")
    if init is None:
        packed = PackedBatcher(src, tgt, d.batch_tokens, d.max_len, seed, multiple_of=jax.device_count())
        print(f"| packed, rows of data.max_len | 1 | {d.max_len} | {100 * packed.padding:.1f}% | "
              f"{packed.steps_per_epoch} |")


if __name__ == "__main__":
    main()
