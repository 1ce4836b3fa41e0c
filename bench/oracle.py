"""Oracle label throughput (ed2 = LevT, ed3 = EDITOR) and edit-op latency.

    python bench/oracle.py [--repeats 5] [--python-pairs 64]

For batch 256 × length 64 and 1024 × 128 it times, side by side in one run: jaxnat's jit'd bit-parallel
kernels (compilation timed separately), a numpy implementation vectorised over the batch (row-by-row DP
with a prefix-min, full-table backtrace), and the plain-Python reference of the tests (on a subset of
pairs). All three must produce identical labels on the benchmark batch, which is checked. Then the latency
of each edit operation at B 64, L 128. Figures are medians of --repeats runs.

Pairs look like training pairs: references of 50–100% of the capacity over a 1000-token Zipf vocabulary,
inputs made from them by deleting 30%, substituting 10% and inserting 10% of the tokens.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from jaxnat import edit_ops  # noqa: E402
from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID, PLH_ID  # noqa: E402
from jaxnat.errors import run_script  # noqa: E402
from jaxnat.oracle import ed2_labels, ed3_labels  # noqa: E402
from jaxnat.provenance import machine  # noqa: E402
from tests import reference  # noqa: E402


def make_pairs(batch: int, length: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    zipf = 1.0 / np.arange(1, 1001)
    zipf /= zipf.sum()
    x = np.full((batch, length), PAD_ID, np.int32)
    y = np.full((batch, length), PAD_ID, np.int32)
    for b in range(batch):
        ref = list(rng.choice(1000, size=rng.integers(length // 2, length - 1), p=zipf) + 10)
        src = []
        for tok in ref:
            u = rng.random()
            if u < 0.3:
                continue
            src.append(int(rng.choice(1000, p=zipf) + 10) if u < 0.4 else tok)
            if rng.random() < 0.1:
                src.append(int(rng.choice(1000, p=zipf) + 10))
        y[b, :len(ref) + 2] = [BOS_ID, *ref, EOS_ID]
        src = [BOS_ID, *src[:length - 2], EOS_ID]
        x[b, :len(src)] = src
    return x, y


# --------------------------------------------------------------------------------------------- numpy

def numpy_labels(x: np.ndarray, y: np.ndarray, ed3: bool):
    """Row DP over the batch (prefix-min for the horizontal term), then the reference backtrace per row."""
    b, lx = x.shape
    ly = y.shape[1]
    n, m = (x != PAD_ID).sum(1), (y != PAD_ID).sum(1)
    same = (x[:, :, None] == y[:, None, :]) & (x != PAD_ID)[:, :, None]
    sub_cost = np.where(same.any(1), 1, 2) if ed3 else np.full((b, ly), 2)
    cost = np.where(same, 0, sub_cost[:, None, :])
    cols = np.arange(ly + 1)
    d = np.empty((lx + 1, b, ly + 1), np.int32)
    d[0] = cols
    for i in range(1, lx + 1):
        t = np.empty((b, ly + 1), np.int32)
        t[:, 0] = i
        t[:, 1:] = np.minimum(d[i - 1][:, 1:] + 1, d[i - 1][:, :-1] + cost[:, i - 1])
        d[i] = np.minimum.accumulate(t - cols, axis=1) + cols
    rows = np.arange(b)
    col = m.copy()
    consumed = np.zeros((b, lx), bool)
    substituted = np.zeros((b, lx), bool)
    column = np.zeros((b, lx), np.int64)
    inserted = np.zeros((b, lx), np.int64)
    for i in range(lx, 0, -1):
        active = i <= n
        excess = d[i] - cols
        first = (excess > excess[rows, col][:, None]).sum(1)
        here = d[i][rows, first]
        delete = d[i - 1][rows, first] < here
        sub = ~delete & (d[i - 1][rows, np.maximum(first - 1, 0)] < here)
        keep = active & ~delete
        consumed[:, i - 1], substituted[:, i - 1] = keep, active & sub
        column[:, i - 1] = first
        inserted[:, i - 1] = np.where(i < n, col - first, 0)
        col = np.where(active, first - keep, col)
    hit = np.zeros((b, ly + 1), bool)
    hit[np.repeat(rows, lx), np.where(consumed, column - 1, ly).ravel()] = True
    insert_mask = (y != PAD_ID) & ~hit[:, :ly]
    slots = np.minimum(inserted[:, :-1], 255)
    if not ed3:
        return ((x != PAD_ID) & ~consumed).astype(np.int32), slots, insert_mask
    first_occ = same.argmax(1)
    pointer = np.take_along_axis(first_occ, np.maximum(column - 1, 0), axis=1)
    repos = np.where(consumed, np.where(substituted, pointer, np.arange(lx)), 0)
    return repos, slots, insert_mask


def python_labels(x: np.ndarray, y: np.ndarray, ed3: bool):
    fn = reference.ed3_labels if ed3 else reference.ed2_labels
    return [fn([int(t) for t in a if t != PAD_ID], [int(t) for t in b if t != PAD_ID]) for a, b in zip(x, y)]


# --------------------------------------------------------------------------------------------- timing

def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def check_same(name, jax_out, np_out, py_out, x, y):
    first = jax_out.deletion if name == "ed2" else jax_out.reposition
    for got, want in zip((first, jax_out.insertion, jax_out.insert_mask), np_out):
        np.testing.assert_array_equal(np.asarray(got), want)
    for b, labels in enumerate(py_out):
        lx, ly = int((x[b] != PAD_ID).sum()), int((y[b] != PAD_ID).sum())
        assert np.asarray(first[b, :lx]).tolist() == labels[0]
        assert np.asarray(jax_out.insertion[b, :lx - 1]).tolist() == labels[1]
        assert np.asarray(jax_out.insert_mask[b, :ly]).tolist() == labels[2]


def oracle_table(repeats: int, python_pairs: int):
    print("| oracle | batch × length | jaxnat (pairs/s) | compile (s) | numpy (pairs/s) | plain Python (pairs/s) "
          "| jaxnat / numpy |")
    print("|---|---|---|---|---|---|---|")
    for batch, length in ((256, 64), (1024, 128)):
        x, y = make_pairs(batch, length)
        xj, yj = jnp.asarray(x), jnp.asarray(y)
        timed = len(x[:python_pairs])  # the pairs the plain-Python reference labels: at most the batch
        for name, kernel, ed3 in (("ed2", ed2_labels, False), ("ed3", ed3_labels, True)):
            t0 = time.perf_counter()
            compiled = jax.jit(kernel).lower(xj, yj).compile()
            compile_s = time.perf_counter() - t0
            out = jax.block_until_ready(compiled(xj, yj))
            np_out = numpy_labels(x, y, ed3)
            py_out = python_labels(x[:python_pairs], y[:python_pairs], ed3)
            check_same(name, out, np_out, py_out, x, y)
            # alternate the implementations inside each repeat so that all see the same machine load
            t_jax, t_np, t_py = [], [], []
            for _ in range(repeats):
                t_jax.append(median_time(lambda: jax.block_until_ready(compiled(xj, yj)), 5))
                t_np.append(median_time(lambda: numpy_labels(x, y, ed3), 1))
                t_py.append(median_time(lambda: python_labels(x[:python_pairs], y[:python_pairs], ed3), 1))
            jax_rate = batch / statistics.median(t_jax)
            np_rate = batch / statistics.median(t_np)
            py_rate = timed / statistics.median(t_py)
            print(f"| {name} | {batch} × {length} | {jax_rate:,.0f} | {compile_s:.2f} | {np_rate:,.0f} | "
                  f"{py_rate:,.0f} | {jax_rate / np_rate:.1f}× |", flush=True)


def edit_op_cases(batch: int = 64, length: int = 128) -> dict:
    """{name: (function, its input arrays)} of each edit operation at B ``batch`` × L ``length``. The arrays are the
    jit'd function's arguments: closed over, they would be constants of the program, which XLA folds (carry slots
    and fill placeholders then compiled to a constant and were timed as one)."""
    x, y = make_pairs(batch, length, seed=1)
    tokens, y = jnp.asarray(x), jnp.asarray(y)
    rng = np.random.default_rng(2)
    delete = jnp.asarray(rng.random((batch, length)) < 0.2)
    counts = jnp.asarray(rng.integers(0, 2, (batch, length - 1)), jnp.int32)
    index = jnp.asarray(rng.integers(0, length // 2, (batch, length)), jnp.int32)
    keep = jnp.asarray(rng.random((batch, length)) < 0.8)
    scores = jnp.asarray(rng.random((batch, length)), jnp.float32)
    return {
        "delete (+ scores side array)": (lambda t, d, s: edit_ops.delete_tokens(t, d, PAD_ID, sides=s),
                                         (tokens, delete, scores)),
        "insert placeholders (+ scores)": (lambda t, c, s: edit_ops.insert_placeholders(
            t, c, PAD_ID, PLH_ID, max_length=100, sides=s), (tokens, counts, scores)),
        "fill placeholders": (lambda t, y: edit_ops.fill_placeholders(t, y, PLH_ID), (tokens, y)),
        "reposition (+ scores)": (lambda t, i, s: edit_ops.reposition(t, i, PAD_ID, sides=s), (tokens, index, scores)),
        "carry slots": (lambda c, k, t: edit_ops.carry_slots(c, k, edit_ops.lengths(t, PAD_ID)),
                        (counts, keep, tokens)),
    }


def edit_op_table(repeats: int, batch: int = 64, length: int = 128):
    print(f"\n| edit operation, B {batch} × L {length} | latency (µs) |")
    print("|---|---|")
    for name, (op, inputs) in edit_op_cases(batch, length).items():
        fn = jax.jit(op)
        jax.block_until_ready(fn(*inputs))
        t = statistics.median(median_time(lambda: jax.block_until_ready(fn(*inputs)), 50) for _ in range(repeats))
        print(f"| {name} | {t * 1e6:.0f} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--python-pairs", type=int, default=64, help="pairs timed for the plain-Python reference")
    args = parser.parse_args()
    if args.repeats < 1 or args.python_pairs < 1:
        raise SystemExit("error: --repeats and --python-pairs must be at least 1")
    print(machine() + "\n")
    oracle_table(args.repeats, args.python_pairs)
    edit_op_table(args.repeats)
    print(f"\nmedians of {args.repeats} repeats (jaxnat: each repeat the median of 5 calls)")


if __name__ == "__main__":
    run_script(main)
