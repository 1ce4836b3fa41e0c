"""Training throughput: jaxnat's full training loop against a bare jit'd train step of the same model.

    python bench/train_throughput.py --data-dir ../shared/data/multi30k [--steps 60] [--repeats 3]

Both sides train the AR d 256, 3+3-layer model (configs/ar/multi30k.py, 8k joint vocabulary) on the same
Multi30k batches, counting real (non-padding) target tokens:
  bare  — one jit'd step (forward, backward, Adam) on batches already on the device, nothing else;
  full  — `Trainer.train()`: batching thread, sharding onto the mesh, NaN guard, metrics, progress bar.
Runs alternate (bare, full, bare, full, …) so both see the same machine load; the table gives the median
tokens/s of each and their ratio. Compilation is excluded on both sides (the first window is dropped).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jaxnat.config import build_config  # noqa: E402
from jaxnat.main import enable_compilation_cache  # noqa: E402
from jaxnat.training.trainer import Trainer, make_train_step  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bare_tokens_per_s(trainer: Trainer, steps: int) -> float:
    batcher = trainer.make_batcher()
    batches = [jax.device_put({k: jnp.asarray(v) for k, v in batcher.batch(i).items()}) for i in range(steps)]
    tokens = [float(jnp.sum(b["tgt"][:, 1:] != 0)) for b in batches]
    state = trainer.init_state(batcher.batch(0))
    step = jax.jit(make_train_step(trainer.spec, trainer.optimizer, trainer.schedule), donate_argnums=(0,))
    key = jax.random.PRNGKey(0)
    for b in batches:  # compile every shape
        state, m = step(state, b, key)
    jax.block_until_ready(m)
    t0 = time.perf_counter()
    for b in batches:
        state, m = step(state, b, key)
    jax.block_until_ready(m)
    return sum(tokens) / (time.perf_counter() - t0)


def full_tokens_per_s(config, workdir: str, steps: int) -> float:
    config.train.steps = 2 * steps
    config.train.log_every = steps
    trainer = Trainer(config, workdir)
    trainer.train()
    windows = [h["tokens_per_s"] for h in trainer.history.entries if "tokens_per_s" in h]
    return windows[-1]  # the second window: every shape compiled during the first


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=os.path.join(ROOT, "..", "shared", "data", "multi30k"))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    enable_compilation_cache()  # repeats after the first skip compilation
    overrides = [f"--config.data.dir={args.data_dir}", "--config.train.eval_every=1000000",
                 "--config.train.checkpoint_every=1000000", "--config.train.valid_bleu_sentences=10"]
    bare, full = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            config = build_config(os.path.join(ROOT, "configs/ar/multi30k.py"), overrides)
            workdir = os.path.join(tmp, f"run{r}")
            trainer = Trainer(config, workdir)
            bare.append(bare_tokens_per_s(trainer, args.steps))
            full.append(full_tokens_per_s(config, os.path.join(tmp, f"full{r}"), args.steps))
            print(f"repeat {r}: bare {bare[-1]:.0f} tok/s, full {full[-1]:.0f} tok/s", flush=True)
    b, f = statistics.median(bare), statistics.median(full)
    print("\n| model | bare step (tok/s) | jaxnat full step (tok/s) | full / bare |")
    print("|---|---|---|---|")
    print(f"| AR d256 3+3, 8k vocab, Multi30k batches | {b:.0f} | {f:.0f} | {f / b:.2f} |")
    print(f"\nmachine: {os.cpu_count()} CPU cores, jax {jax.__version__}, backend {jax.default_backend()}; "
          f"median of {args.repeats} alternating repeats, {args.steps} timed steps each")


if __name__ == "__main__":
    main()
