"""A train step with its dense layers applied to [B·T, D] rows (as built) or to [B, T, D] arrays, side by side.

    python bench/dense_layout.py --config configs/nat/multi30k.py --data-dir ../shared/data/multi30k \
        [--shape 128x32] [--repeats 5]

`transformer.flat_leading` flattens the leading axes of every attention projection and feed-forward layer's
input. On XLA's CPU backend the backward pass of a dense layer over [B, T, D] transposes its activations
explicitly, which the flattened form does not need. This script compiles the config's train step (forward,
backward, Adam) twice on one batch of the given shape, as built and with `flat_leading` replaced by the plain
call, checks that both give the same loss, and times them alternately: median of --repeats steps each.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from bench.profile_step import batch_shape, step_inputs, step_parser  # noqa: E402
from jaxnat.models import transformer  # noqa: E402
from jaxnat.training.trainer import make_train_step  # noqa: E402


def unflattened(layer, x, keep: int = 1):
    return layer(x)


def main():
    parser = step_parser(__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    shape = batch_shape(args.shape)
    flat = transformer.flat_leading
    steps, losses = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        trainer, batch, state = step_inputs(args.config, args.data_dir, shape, tmp)
        key = jax.random.PRNGKey(0)
        for name, function in (("[B·T, D] rows (as built)", flat), ("[B, T, D] arrays", unflattened)):
            transformer.flat_leading = function  # read when the step is traced
            steps[name] = jax.jit(make_train_step(trainer.spec, trainer.optimizer, trainer.schedule)).lower(
                state, batch, key).compile()
            _, metrics = jax.block_until_ready(steps[name](state, batch, key))
            losses[name] = float(np.asarray(metrics["loss"]))
        transformer.flat_leading = flat
        seconds = {name: [] for name in steps}
        for repeat in range(args.repeats):
            for name, step in steps.items():
                t0 = time.perf_counter()
                jax.block_until_ready(step(state, batch, key))
                seconds[name].append(time.perf_counter() - t0)
            print(f"repeat {repeat + 1}/{args.repeats}: " + ", ".join(f"{n}: {s[-1]:.2f} s" for n, s in
                                                                      seconds.items()), file=sys.stderr, flush=True)
    print(f"| {args.config}, one {args.shape} batch | ms per train step | loss |\n|---|---|---|")
    for name in steps:
        print(f"| dense layers on {name} | {1000 * statistics.median(seconds[name]):.0f} | {losses[name]:.6f} |")
    a, b = (statistics.median(s) for s in seconds.values())
    print(f"\nflattened / unflattened: {b / a:.2f}× faster; median of {args.repeats}")


if __name__ == "__main__":
    main()
