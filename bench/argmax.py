"""jaxnat.argmax.argmax against jnp.argmax at the shapes decoding and training reduce over.

    python bench/argmax.py [--repeats 20]

Each shape: both functions jit'd and compiled first, then timed alternately, median of the repeats; the two
answers are checked to be equal. Shapes: the token argmax of one refinement iteration at batch 1 and 64
(40 positions, 8,000 pieces), a CPU training batch's roll-in argmax ([128, 32, 8000]), the placeholder head
(256 classes), EDITOR's pointer head ([64, 40, 40]), a vocabulary no chunk size divides (8,003), and AR greedy
steps ([64, 32000]).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxnat.argmax import argmax  # noqa: E402

SHAPES = [(1, 40, 8000), (64, 40, 8000), (128, 32, 8000), (64, 39, 256), (64, 40, 40), (64, 40, 8003), (64, 32000)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"backend {jax.default_backend()}, median of {args.repeats}\n")
    print("| shape | jnp.argmax (ms) | jaxnat.argmax (ms) | ratio |")
    print("|---|---|---|---|")
    for shape in SHAPES:
        x = jnp.asarray(rng.standard_normal(shape, dtype=np.float32))
        fns = [jax.jit(lambda x: jnp.argmax(x, axis=-1).astype(jnp.int32)), jax.jit(argmax)]
        outs = [jax.block_until_ready(f(x)) for f in fns]
        assert (outs[0] == outs[1]).all(), shape
        times = [[], []]
        for _ in range(args.repeats):
            for f, t in zip(fns, times):
                t0 = time.perf_counter()
                jax.block_until_ready(f(x))
                t.append(time.perf_counter() - t0)
        old, new = (statistics.median(t) * 1000 for t in times)
        print(f"| {list(shape)} | {old:.3f} | {new:.3f} | {new / old:.3f} |")


if __name__ == "__main__":
    main()
