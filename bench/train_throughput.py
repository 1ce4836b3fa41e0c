"""Training throughput: jaxnat's full training loop against a bare jit'd train step of the same model.

    python bench/train_throughput.py --data-dir ../shared/data/multi30k [--model ar|levt] [--steps 60] [--repeats 3]

Both sides train the d 256, 3+3-layer model of configs/MODEL/multi30k.py (8k joint vocabulary) on the same
Multi30k batches, counting real (non-padding) target tokens:
  bare  — one jit'd step (forward, backward, Adam) on batches already on the device, nothing else, once with
          threefry keys and once with rbg keys for dropout and noise (the PRNG choice, train.rng_impl);
  full  — `Trainer.train()`: batching thread, sharding onto the mesh, NaN guard, metrics, progress bar.
Runs alternate (bare, full, bare, full, …) so both see the same machine load; the table gives the median
tokens/s of each and their ratios. Compilation is excluded on both sides (the first window is dropped).
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
from jaxnat.training import mesh as mesh_lib  # noqa: E402
from jaxnat.training.trainer import Trainer, make_train_step  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bare_tokens_per_s(trainer: Trainer, steps: int, rng_impls: tuple[str, ...]) -> dict[str, float]:
    """tokens/s of a bare jit'd step with the dropout/noise keys of each PRNG implementation, same batches."""
    batcher = trainer.make_batcher()
    batches = [jax.device_put({k: jnp.asarray(v) for k, v in batcher.batch(i).items()}) for i in range(steps)]
    tokens = sum(float(jnp.sum(b["tgt"][:, 1:] != 0)) for b in batches)
    state = trainer.init_state(batcher.batch(0))
    step = jax.jit(make_train_step(trainer.spec, trainer.optimizer, trainer.schedule), donate_argnums=(0,))
    result = {}
    for impl in rng_impls:
        key = jax.random.key(0, impl=impl)
        for b in batches:  # compile every shape
            state, m = step(state, b, key)
        jax.block_until_ready(m)
        t0 = time.perf_counter()
        for b in batches:
            state, m = step(state, b, key)
        jax.block_until_ready(m)
        result[impl] = tokens / (time.perf_counter() - t0)
    return result


def full_tokens_per_s(config, workdir: str, steps: int) -> float:
    config.train.steps = 2 * steps
    config.train.log_every = steps
    trainer = Trainer(config, workdir)
    trainer.train()
    windows = [h["tokens_per_s"] for h in trainer.history if "tokens_per_s" in h]
    return windows[-1]  # the second window: every shape compiled during the first


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=os.path.join(ROOT, "..", "shared", "data", "multi30k"))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="ar", choices=("ar", "levt"), help="configs/MODEL/multi30k.py")
    args = parser.parse_args()
    enable_compilation_cache()  # repeats after the first skip compilation
    overrides = [f"--config.data.dir={args.data_dir}", "--config.train.eval_every=1000000",
                 "--config.train.checkpoint_every=1000000", "--config.train.valid_bleu_sentences=10"]
    impls = ("threefry2x32", "rbg")
    bare, full = {impl: [] for impl in impls}, []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            config = build_config(os.path.join(ROOT, f"configs/{args.model}/multi30k.py"), overrides)
            workdir = os.path.join(tmp, f"run{r}")
            trainer = Trainer(config, workdir)
            for impl, rate in bare_tokens_per_s(trainer, args.steps, impls).items():
                bare[impl].append(rate)
            full.append(full_tokens_per_s(config, os.path.join(tmp, f"full{r}"), args.steps))
            print(f"repeat {r}: bare " + ", ".join(f"{i} {v[-1]:.0f}" for i, v in bare.items())
                  + f" tok/s; full ({config.train.rng_impl}) {full[-1]:.0f} tok/s", flush=True)
    b = {impl: statistics.median(v) for impl, v in bare.items()}
    f = statistics.median(full)
    print(f"\n| model ({args.model}) | bare step, threefry (tok/s) | bare step, rbg (tok/s) | rbg / threefry | "
          f"jaxnat full step, {config.train.rng_impl} (tok/s) | full / bare {config.train.rng_impl} |")
    print("|---|---|---|---|---|---|")
    print(f"| d256 3+3, 8k vocab, Multi30k batches | {b['threefry2x32']:.0f} | {b['rbg']:.0f} | "
          f"{b['rbg'] / b['threefry2x32']:.2f} | {f:.0f} | {f / b[config.train.rng_impl]:.2f} |")
    print(f"\nmachine: {os.cpu_count()} CPU cores, jax {jax.__version__}, backend {jax.default_backend()}; "
          f"median of {args.repeats} alternating repeats, {args.steps} timed steps each")


if __name__ == "__main__":
    main()
