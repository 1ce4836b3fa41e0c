"""Mixed precision: the training loss of ``model.dtype=bfloat16`` against float32, on the same batches.

    python bench/mixed_precision.py [--config configs/ar/demo.py] [--steps 500] [--window 50] [--config.a.b=v ...]

One `Trainer` builds the data and vocabulary of the config (its corpus: the embedded synthetic one for the demo
configs); the trainer's jit'd train step (forward, backward, Adam, NaN guard) then trains three runs from the
same initial parameters on the same batches: float32 with dropout seed 1, float32 with seed 2 (the run-to-run
noise) and bfloat16 with seed 1. It prints the mean training loss of each window of steps, the largest gap
between bfloat16 and float32 against the largest gap between the two float32 seeds, and the seconds a step
took in each dtype (compilation excluded). docs/benchmarks.md, "Mixed precision", has the figures.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jaxnat.config import build_config  # noqa: E402
from jaxnat.main import enable_compilation_cache  # noqa: E402
from jaxnat.models import build_model  # noqa: E402
from jaxnat.training.trainer import Trainer, make_train_step  # noqa: E402


def run(spec, trainer: Trainer, batches, seed: int):
    """(per-step losses, seconds a step after the first window) of one run from the config's initial parameters."""
    step = jax.jit(make_train_step(spec, trainer.optimizer, trainer.schedule), donate_argnums=(0,))
    params = spec.init(jax.random.PRNGKey(trainer.config.train.seed), {k: v[:1] for k, v in batches[0].items()})
    state = {"step": jnp.zeros((), jnp.int32), "params": params, "opt_state": trainer.optimizer.init(params)}
    key, losses, start = jax.random.PRNGKey(seed), [], None
    for i, batch in enumerate(batches):
        if i == len(batches) // 10:  # every shape compiled by then (the batcher cycles through its buckets)
            jax.block_until_ready(state)
            start = time.perf_counter()
        state, metrics = step(state, batch, key)
        losses.append(metrics["loss"])
    jax.block_until_ready(state)
    per_step = (time.perf_counter() - start) / (len(batches) - len(batches) // 10)
    return np.asarray(jax.device_get(losses)), per_step


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/ar/demo.py")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--window", type=int, default=50)
    args, overrides = parser.parse_known_args()
    if args.steps % args.window:
        parser.error("--steps must be a multiple of --window")
    enable_compilation_cache()
    config = build_config(args.config, ["--config.model.dtype=float32", *overrides])
    with tempfile.TemporaryDirectory() as workdir:
        trainer = Trainer(config, os.path.join(workdir, "run"))
        batcher = trainer.make_batcher()
        batches = [jax.device_put({k: jnp.asarray(v) for k, v in batcher.batch(i).items()}) for i in range(args.steps)]
        bf16_config = build_config(args.config, ["--config.model.dtype=bfloat16", *overrides])
        tok = trainer.tokenizer
        bf16_spec = build_model(bf16_config, tok.vocab_size("src"), tok.vocab_size("tgt"), tok.piece_tables("tgt"))
        runs = {"float32": run(trainer.spec, trainer, batches, 1),
                "float32, seed 2": run(trainer.spec, trainer, batches, 2),
                "bfloat16": run(bf16_spec, trainer, batches, 1)}
    windows = {name: losses.reshape(-1, args.window).mean(axis=1) for name, (losses, _) in runs.items()}
    ends = [f"{(i + 1) * args.window}" for i in range(args.steps // args.window)]
    print(f"{args.config} {' '.join(overrides)}: mean training loss per {args.window} steps, ending at step")
    print("| run | " + " | ".join(ends) + " | s/step |")
    print("|---|" + "---|" * (len(ends) + 1))
    for name, curve in windows.items():
        print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in curve) + f" | {runs[name][1]:.3f} |")
    gap = lambda name: float(np.max(np.abs(windows[name] - windows["float32"])))  # noqa: E731
    print(f"largest gap to float32: bfloat16 {gap('bfloat16'):.4f}, float32 with another dropout seed "
          f"{gap('float32, seed 2'):.4f}")


if __name__ == "__main__":
    main()
