"""Train-step compilation: every batch shape of a config compiled one after another, against jaxnat's
`Trainer.compile_train_steps` (the shapes compiled side by side in threads, one per core).

    python bench/compile_time.py --config configs/cmlm/multi30k.py --data-dir ../shared/data/multi30k [--repeats 2]

Both sides compile the same lowered programs from scratch (the persistent compilation cache is off) in one
process; runs alternate (one after another, threads, one after another, …) so that both see the same machine
load. The table gives the median seconds of each and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import jax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jaxnat.config import build_config  # noqa: E402
from jaxnat.training.trainer import Trainer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one_after_another(trainer: Trainer, state, batcher, key) -> None:
    for program in trainer.lower_train_steps(state, batcher, key).values():
        program.compile()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=os.path.join(ROOT, "configs/cmlm/multi30k.py"))
    parser.add_argument("--data-dir", default=os.path.join(ROOT, "..", "shared", "data", "multi30k"))
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    jax.config.update("jax_enable_compilation_cache", False)  # even where JAX_COMPILATION_CACHE_DIR is set
    config = build_config(args.config, [f"--config.data.dir={args.data_dir}"])
    times = {"one after another": [], "threads": []}
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(config, tmp)
        batcher = trainer.make_batcher()
        state = trainer.init_state(batcher.batch(0))
        key = jax.random.PRNGKey(0)
        for r in range(args.repeats):
            for name, compile_all in (("one after another", one_after_another),
                                      ("threads", Trainer.compile_train_steps)):
                t0 = time.perf_counter()
                compile_all(trainer, state, batcher, key)
                times[name].append(time.perf_counter() - t0)
                print(f"repeat {r}: {name} {times[name][-1]:.1f} s", flush=True)
    a, b = statistics.median(times["one after another"]), statistics.median(times["threads"])
    print(f"\n{args.config}: {len(batcher.shapes)} batch shapes, {os.cpu_count()} cores, {jax.devices()[0].platform}")
    print("| one after another (s) | threads (s) | threads / one after another |")
    print("|---|---|---|")
    print(f"| {a:.1f} | {b:.1f} | {b / a:.2f} |")


if __name__ == "__main__":
    main()
