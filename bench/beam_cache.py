"""Beam search with the cross-attention keys and values inside its reordered cache, or outside it, side by side.

    python bench/beam_cache.py --run runs/ar-multi30k --config.data.dir=../shared/data/multi30k \
        [--beam 4] [--batch 128] [--sentences 100] [--repeats 3]

Beam search reorders its cache along the surviving beams at every step. Until this benchmark's commit the AR
models searched with the whole `Decoder.init_cache` cache, so every step also copied each layer's cross-attention
keys and values ([B·K, S, H, K], the same for every beam of a sentence); since then `without_cross_cache` keeps
them out of it, as loop constants. Both programs are built here from the workdir's AR model (its best
checkpoint) on the first test split of its corpus: they must return the same tokens, and are timed alternately
inside each repeat (compiled before timing): latency at batch 1 over the first --sentences sentences, and
throughput at --batch over all; each figure the median of --repeats.
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

from jaxnat.config import apply_override, parse_overrides, workdir_config  # noqa: E402
from jaxnat.data.batching import eval_batches  # noqa: E402
from jaxnat.data.sources import load_corpus  # noqa: E402
from jaxnat.models.ar.model import search  # noqa: E402
from jaxnat.models.transformer import token_mask, without_cross_cache  # noqa: E402
from jaxnat.restore import load_translator  # noqa: E402


def beam_program(translator, beam: int, outside: bool):
    """jit'd src int32[B, S] → tokens, the AR model's beam search with the cross-attention cache outside the
    searched cache (``outside``) or inside it."""
    model, params, e = translator.spec.module, translator.params, translator.config.eval

    def run(src):
        src_mask = jnp.repeat(token_mask(src), beam, axis=0)
        memory = jnp.repeat(model.apply(params, src, method=model.encode), beam, axis=0)
        max_out = translator.output_capacity(src.shape[1])
        cache = model.apply(params, memory, max_out - 1, method=model.init_cache)

        def step(tokens, cache, index):
            return model.apply(params, tokens, cache, index, src_mask, method=model.step)

        tokens_to_logprobs, cache = without_cross_cache(step, cache) if outside else (step, cache)
        return search(tokens_to_logprobs, cache, src, beam_size=beam, length_penalty=e.length_penalty,
                      max_len_a=e.max_len_a, max_len_b=e.max_len_b, max_out=max_out)["tokens"]

    return jax.jit(run)


def timed(program, batches) -> tuple[float, list]:
    """Seconds for the batches (each call waited for) and the outputs."""
    t0, outs = time.perf_counter(), []
    for src in batches:
        outs.append(jax.block_until_ready(program(src)))
    return time.perf_counter() - t0, outs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", required=True, help="an AR model's workdir")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--sentences", type=int, default=100, help="sentences timed at batch 1")
    parser.add_argument("--repeats", type=int, default=3)
    args, overrides = parser.parse_known_args()
    config = workdir_config(args.run)
    for key, value in parse_overrides(overrides):
        apply_override(config, key, value)
    translator = load_translator(config, args.run)
    if translator.spec.name != "ar":
        sys.exit(f"--run: {args.run} holds a {translator.spec.name!r} model, not an AR one")
    corpus = load_corpus(config.data)
    split = [s for s in corpus if s not in ("train", "valid")][0]
    src, _ = translator.encode(corpus[split][0])
    sets = {size: [jnp.asarray(b["src"]) for _, b in eval_batches(ids, None, size, translator.buckets)]
            for size, ids in ((1, src[:args.sentences]), (args.batch, src))}
    programs = {"inside": beam_program(translator, args.beam, False), "outside": beam_program(translator, args.beam,
                                                                                                 True)}
    outputs = {}
    for name, program in programs.items():  # compile every shape; the two must agree
        outputs[name] = [np.asarray(o) for size in sets for o in timed(program, sets[size])[1]]
    same = all((a == b).all() for a, b in zip(outputs["inside"], outputs["outside"]))
    if not same:
        sys.exit("the two programs translate differently")
    seconds = {(name, size): [] for name in programs for size in sets}
    for repeat in range(args.repeats):
        for size in sets:
            for name, program in programs.items():
                seconds[name, size].append(timed(program, sets[size])[0])
                print(f"repeat {repeat + 1}/{args.repeats}: cross cache {name}, batch {size}: "
                      f"{seconds[name, size][-1]:.2f} s", file=sys.stderr, flush=True)
    n = {1: min(args.sentences, len(src)), args.batch: len(src)}
    median = {key: statistics.median(v) for key, v in seconds.items()}
    print(f"| beam {args.beam} ({split}, {len(src)} sentences) | latency, batch 1 (ms/sentence) | "
          f"throughput, batch {args.batch} (sentences/s) |")
    print("|---|---|---|")
    for name in programs:
        print(f"| cross-attention cache {name} the searched cache | {1000 * median[name, 1] / n[1]:.1f} | "
              f"{n[args.batch] / median[name, args.batch]:.1f} |")
    print(f"\noutside / inside: {median['inside', 1] / median['outside', 1]:.2f}× at batch 1, "
          f"{median['inside', args.batch] / median['outside', args.batch]:.2f}× at batch {args.batch}; "
          f"median of {args.repeats}; the same tokens: {same}")


if __name__ == "__main__":
    main()
