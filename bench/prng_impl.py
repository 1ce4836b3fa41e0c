"""Random bits: a train step's compile and run time with each key implementation (`train.prng_impl`).

    python bench/prng_impl.py --data-dir ../shared/data/multi30k [--config configs/ar/multi30k.py]
        [--impls threefry2x32,rbg] [--repeats 3] [--steps 5] [--set KEY=VALUE ...]

Dropout draws a random bit per activation it may drop, several times a layer; jax's default threefry2x32 makes
them with a long chain of integer operations that XLA compiles at every dropout site, XLA's RngBitGenerator ("rbg")
with one operation. Per implementation, in a process of its own (the implementation is jax's process-wide
setting) and alternating between them within each repeat: the config's train step (forward, backward, Adam) on the
first batch of its batcher, compiled (persistent cache off), then timed over --steps steps after one warm-up step.
The table gives the median of --repeats processes each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(config_path: str, overrides: list[str], steps: int) -> dict:
    """{compile_s, step_s} of the config's train step, in this process (its train.prng_impl already set)."""
    import jax

    sys.path.insert(0, ROOT)
    from jaxnat.config import build_config
    from jaxnat.training.trainer import Trainer, make_train_step

    config = build_config(config_path, overrides)
    with tempfile.TemporaryDirectory() as workdir, jax.default_prng_impl(config.train.prng_impl):
        trainer = Trainer(config, workdir)
        batch = trainer.make_batcher().batch(0)
        state = trainer.init_state(batch)
        key = jax.random.PRNGKey(0)
        t0 = time.perf_counter()
        step = jax.jit(make_train_step(trainer.spec, trainer.optimizer, trainer.schedule),
                       donate_argnums=(0,)).lower(state, batch, key).compile()
        compile_s = time.perf_counter() - t0
        state, metrics = step(state, batch, key)
        jax.block_until_ready(metrics)
        t0 = time.perf_counter()
        for i in range(steps):
            state, metrics = step(state, batch, jax.random.fold_in(key, i))
        jax.block_until_ready(metrics)
        return {"compile_s": compile_s, "step_s": (time.perf_counter() - t0) / steps}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=os.path.join(ROOT, "..", "shared", "data", "multi30k"))
    parser.add_argument("--config", default=os.path.join(ROOT, "configs", "ar", "multi30k.py"))
    parser.add_argument("--impls", default="threefry2x32,rbg")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # this process measures that implementation alone
    args = parser.parse_args()
    overrides = [f"--config.data.dir={args.data_dir}", *(f"--config.{kv}" for kv in args.set)]
    if args.one:
        print(json.dumps(measure(args.config, [*overrides, f"--config.train.prng_impl={args.one}"], args.steps)))
        return
    impls = [i for i in args.impls.split(",") if i]
    env = {**os.environ, "JAXNAT_COMPILATION_CACHE": "off"}
    runs = {impl: [] for impl in impls}
    for repeat in range(args.repeats):
        for impl in impls:
            cmd = [sys.executable, os.path.abspath(__file__), "--one", impl, "--data-dir", args.data_dir, "--config",
                   args.config, "--steps", str(args.steps), *(f"--set={kv}" for kv in args.set)]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            runs[impl].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(impl, repeat, runs[impl][-1], flush=True)
    print(f"\n{os.path.relpath(args.config, ROOT)}, {os.cpu_count()} cores, {args.steps} steps, median of "
          f"{args.repeats}\n| prng_impl | compile (s) | step (s) |\n|---|---|---|")
    for impl, rs in runs.items():
        print(f"| {impl} | {statistics.median(r['compile_s'] for r in rs):.1f} | "
              f"{statistics.median(r['step_s'] for r in rs):.3f} |")


if __name__ == "__main__":
    main()
