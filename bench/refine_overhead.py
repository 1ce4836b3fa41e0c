"""Cost of one refinement iteration (LevT or EDITOR) against its three bare decoder passes, at batch 1 and 64.

    python bench/refine_overhead.py --config configs/levt/demo.py --workdir runs/levt-demo [--repeats 5]
    python bench/refine_overhead.py --config configs/editor/demo.py --workdir runs/editor-demo

For a batch of test sources and the hypotheses the model actually produces, it times (all jit'd, compiled
before timing, the two programs alternating inside each repeat):

* loop: the model's real decoding (`jaxnat.decoding.refine.refine`: deletion or reposition → placeholders →
  fill with the edit ops, length caps, stop bookkeeping, all inside one `lax.while_loop`), forced to run K
  iterations;
* bare: K repetitions of just the three decoder passes (first-edit, placeholder and token logits) on a
  hypothesis of the same shape, in a `lax.fori_loop` (a data dependence keeps XLA from hoisting them).

Their ratio is the implementation's overhead per iteration (edit operations, oracle-free bookkeeping, loop
control); the issue's bar is at most 1.2.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from jaxnat.config import build_config, load_config  # noqa: E402
from jaxnat.data.batching import eval_batches  # noqa: E402
from jaxnat.data.sources import load_corpus  # noqa: E402
from jaxnat.restore import load_translator  # noqa: E402
from jaxnat.decoding.request import DecodeRequest  # noqa: E402
from jaxnat.decoding.refine import forbid_reserved  # noqa: E402
from jaxnat.models.transformer import token_mask  # noqa: E402


FIRST_HEAD = {"levt": "deletion_logits", "editor": "reposition_logits"}


def programs(spec, iterations: int):
    """(loop, bare): the model's own decoding (config forced to run ``iterations``) and the bare passes."""
    module = spec.module

    @functools.partial(jax.jit, static_argnums=2)
    def loop(params, src, capacity):
        return spec.generate(params, DecodeRequest(src, max_out=capacity))["tokens"]

    @jax.jit
    def bare(params, src, tokens):
        memory, mask = module.apply(params, src, method="encode"), token_mask(src)
        head = lambda m: (lambda t: module.apply(params, t, memory, mask, method=m))  # noqa: E731
        first, placeholder, token = head(FIRST_HEAD[spec.name]), head("placeholder_logits"), head("token_logits")

        def body(_, t):
            total = first(t).max() + placeholder(t).max() + forbid_reserved(token(t)).max()
            return jnp.where(total > 1e30, t + 1, t)  # never true; keeps the passes inside the loop

        return lax.fori_loop(0, iterations, body, tokens)

    return loop, bare


def time_it(fn, *args) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=4, help="K, iterations per timed call")
    parser.add_argument("--single", type=int, default=20, help="sentences timed one by one at batch 1")
    args, overrides = parser.parse_known_args()
    family = load_config(args.config).model.name  # an edit family: its section has max_iter
    config = build_config(args.config, [*overrides, f"--config.{family}.max_iter={args.iterations - 1}",
                                        "--config.eval.run_all_iterations=true"])
    corpus = load_corpus(config.data)
    split = [s for s in corpus if s not in ("train", "valid")][0]
    translator = load_translator(config, args.workdir)
    params = translator.params
    loop, bare = programs(translator.spec, args.iterations)
    src, _ = translator.encode(corpus[split][0])
    rows = []
    for batch_size, sources in ((1, src[:args.single]), (64, src[:64])):
        batches = [b["src"] for _, b in eval_batches(sources, None, batch_size, translator.buckets)]
        work = []
        for s in batches:
            capacity = translator.output_capacity(s.shape[1])
            hyps = loop(params, s, capacity)  # compiles; its output is the realistic hypothesis for `bare`
            jax.block_until_ready(bare(params, s, hyps))
            work.append((s, capacity, hyps))
        t_loop, t_bare = [], []
        for _ in range(args.repeats):
            t_loop.append(sum(time_it(loop, params, s, c) for s, c, _ in work))
            t_bare.append(sum(time_it(bare, params, s, h) for s, _, h in work))
        per_iter = lambda ts: statistics.median(ts) / (len(work) * args.iterations) * 1000  # noqa: E731
        rows.append((batch_size, per_iter(t_loop), per_iter(t_bare)))
    print("| batch | one iteration, full loop (ms) | three bare decoder passes (ms) | loop / bare |")
    print("|---|---|---|---|")
    for batch_size, lp, bp in rows:
        print(f"| {batch_size} | {lp:.2f} | {bp:.2f} | {lp / bp:.3f} |")
    print(f"\n{split}; K = {args.iterations} forced iterations per call; batch 1 over {args.single} sentences, "
          f"batch 64 over the first 64; median of {args.repeats} alternating repeats")


if __name__ == "__main__":
    main()
