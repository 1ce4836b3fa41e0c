"""jaxnat.argmax.argmax against jnp.argmax at the shapes decoding and training reduce over.

    python bench/argmax.py [--repeats 20]
    python bench/argmax.py --train configs/levt/multi30k.py --data-dir ../shared/data/multi30k [--repeats 5]

Each shape: both functions jit'd and compiled first, then timed alternately, median of the repeats; the two
answers are checked to be equal. Shapes: the token argmax of one refinement iteration at batch 1 and 64
(40 positions, 8,000 pieces), a CPU training batch's roll-in argmax ([128, 32, 8000]), the placeholder head
(256 classes), EDITOR's pointer head ([64, 40, 40]), a vocabulary no chunk size divides (8,003), and AR greedy
steps ([64, 32000]).

With ``--train CONFIG``: that config's whole train step (forward, backward, Adam) on one batch of its
128 × 32 shape, with jnp.argmax put back in place of jaxnat.argmax in every module that calls it, against
the train step as it is; both compiled first, then timed alternately.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import importlib  # noqa: E402
import tempfile  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxnat.argmax import argmax  # noqa: E402

CALLERS = ["jaxnat.decoding.search", "jaxnat.decoding.constrained", "jaxnat.decoding.mask_predict",
           "jaxnat.decoding.refine", "jaxnat.models.insertion", "jaxnat.models.editor.model"]

SHAPES = [(1, 40, 8000), (64, 40, 8000), (128, 32, 8000), (64, 39, 256), (64, 40, 40), (64, 40, 8003), (64, 32000)]


def jnp_argmax(x):
    return jnp.argmax(x, axis=-1).astype(jnp.int32)


def median_ms(fns, args_of, repeats):
    """Median milliseconds of each function over ``repeats`` alternating calls (each compiled first)."""
    times = [[] for _ in fns]
    for f, a in zip(fns, args_of):
        jax.block_until_ready(f(*a))
    for _ in range(repeats):
        for f, a, t in zip(fns, args_of, times):
            t0 = time.perf_counter()
            jax.block_until_ready(f(*a))
            t.append(time.perf_counter() - t0)
    return [statistics.median(t) * 1000 for t in times]


def train_step_times(config_path: str, data_dir: str, repeats: int):
    """(jnp.argmax, jaxnat.argmax) milliseconds of the config's train step on one 128 × 32 batch."""
    from jaxnat.config import build_config
    from jaxnat.training.trainer import Trainer, make_train_step

    config = build_config(config_path, [f"--config.data.dir={data_dir}"])
    modules = [importlib.import_module(m) for m in CALLERS]
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(config, tmp)
        batcher = trainer.make_batcher()
        shape = (128, 32) if (128, 32) in batcher.shapes else sorted(batcher.shapes)[0]
        batch = {k: jnp.asarray(v) for k, v in batcher.first_batch_of_shape(shape).items()}
        state = trainer.init_state(batch)
        steps = []
        for impl in (jnp_argmax, argmax):
            for m in modules:
                m.argmax = impl
            # no donation: both programs take the same state every call
            steps.append(jax.jit(make_train_step(trainer.spec, trainer.optimizer, trainer.schedule))
                         .lower(state, batch, jax.random.PRNGKey(0)).compile())
        for m in modules:
            m.argmax = argmax
        key = jax.random.PRNGKey(0)
        return shape, median_ms(steps, [(state, batch, key)] * 2, repeats)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--train", help="a config: time its train step instead of the shapes above")
    parser.add_argument("--data-dir", default=os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "..", "shared", "data", "multi30k"))
    args = parser.parse_args()
    if args.train:
        shape, (old, new) = train_step_times(args.train, args.data_dir, args.repeats)
        print(f"{args.train}, one batch of {list(shape)}, median of {args.repeats}\n")
        print("| train step with jnp.argmax (ms) | with jaxnat.argmax (ms) | ratio |\n|---|---|---|")
        print(f"| {old:.0f} | {new:.0f} | {new / old:.3f} |")
        return
    rng = np.random.default_rng(0)
    print(f"backend {jax.default_backend()}, median of {args.repeats}\n")
    print("| shape | jnp.argmax (ms) | jaxnat.argmax (ms) | ratio |")
    print("|---|---|---|---|")
    for shape in SHAPES:
        x = jnp.asarray(rng.standard_normal(shape, dtype=np.float32))
        fns = [jax.jit(jnp_argmax), jax.jit(argmax)]
        assert (fns[0](x) == fns[1](x)).all(), shape
        old, new = median_ms(fns, [(x,), (x,)], args.repeats)
        print(f"| {list(shape)} | {old:.3f} | {new:.3f} | {new / old:.3f} |")


if __name__ == "__main__":
    main()
