"""A model's constrained decoding on its own: time and memory of `generate` with hard constraints beside plain
decoding, on a random model of a family's config (a search's work and memory depend on the shapes, not on the
weights).

    python bench/constrained_cost.py [--config configs/dat/multi30k.py] [--batch 64] [--cases 18x4x8,30x4x4] \
        [--vocab 8000] [--repeats 3] [--tokens-out FILE.npz] [overrides, e.g. --config.eval.beam_size=4]

Each case SxCxP is a batch of random sources of S pieces, each with C random hard phrases of P pieces (the shapes a
`Translator` request would have after its padding). The model is the config's (its family, decoding options,
eval.beam_size 1 unless overridden) shrunk to d 32 and 1+1 layers, with a vocabulary of --vocab pieces, every piece
a word. Per case: the output slots, XLA's temporary memory of the plain and the hard `generate` programs, and the
median of --repeats timed runs of each (after one untimed run that compiles). --tokens-out keeps the hard outputs
of every case (arr_0, arr_1 … in case order, one .npz file) so that two commits' outputs can be compared.
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

from jaxnat.config import build_config  # noqa: E402
from jaxnat.decoding.request import DecodeRequest  # noqa: E402
from jaxnat.errors import run_script  # noqa: E402
from jaxnat.models import build_model  # noqa: E402
from jaxnat.provenance import machine  # noqa: E402

SMALL = ["--config.model.d_model=32", "--config.model.ffn_dim=64", "--config.model.num_heads=2",
         "--config.model.enc_layers=1", "--config.model.dec_layers=1", "--config.eval.beam_size=1",
         "--config.data.source=synthetic"]


def timed(f, *args, repeats: int) -> tuple[float, object]:
    """(median seconds of ``repeats`` runs after an untimed one, the output)."""
    out = jax.block_until_ready(f(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/dat/multi30k.py")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--cases", default="18x4x8,30x4x4", help="SOURCExPHRASESxPIECES, comma-separated")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens-out", help="keep the hard outputs here (.npz)")
    args, overrides = parser.parse_known_args()
    try:
        cases = [tuple(int(x) for x in case.split("x")) for case in args.cases.split(",")]
        assert all(len(case) == 3 and min(case) > 0 for case in cases)
    except (ValueError, AssertionError):
        sys.exit(f"error: --cases {args.cases!r}: give SOURCExPHRASESxPIECES, e.g. 18x4x8,30x4x4")
    if min(args.batch, args.repeats) < 1 or args.vocab < 6:
        sys.exit("error: --batch and --repeats must be at least 1, --vocab at least 6 (ids 0-4 are reserved)")
    if args.tokens_out and (os.path.isdir(args.tokens_out)  # np.savez would write DIR.npz beside it
                            or not os.path.isdir(os.path.dirname(os.path.abspath(args.tokens_out)))):
        sys.exit(f"error: --tokens-out {args.tokens_out}: give a file in a directory that exists")
    config = build_config(args.config, SMALL + overrides)
    spec = build_model(config, args.vocab, args.vocab)
    if not spec.supports.hard_constraints:
        sys.exit(f"error: {spec.name!r} takes no hard constraints")
    rng = np.random.default_rng(0)
    generate = jax.jit(spec.generate)
    print(f"| sources, phrases | output slots | memory, plain / hard | run, plain / hard (batch {args.batch}) |")
    print("|---|---|---|---|")
    kept = []
    for s, c, p in cases:
        src = jnp.asarray(rng.integers(5, args.vocab, (args.batch, s)), jnp.int32)
        params = jax.jit(spec.init)(jax.random.PRNGKey(0), {"src": src[:1], "tgt": src[:1]})
        width = spec.capacity(s)
        phrases = jnp.asarray(rng.integers(5, args.vocab, (args.batch, c, p)), jnp.int32)
        beam = config.eval.beam_size
        plain = DecodeRequest(src=src, max_out=width, beam_size=beam)
        hard = DecodeRequest(src=src, constraints=phrases, hard=jnp.ones(args.batch, bool), max_out=width,
                             beam_size=beam)
        memory = [generate.lower(params, r).compile().memory_analysis().temp_size_in_bytes / 2**30
                  for r in (plain, hard)]
        (t_plain, _), (t_hard, out) = (timed(generate, params, r, repeats=args.repeats) for r in (plain, hard))
        kept.append(np.asarray(out["tokens"]))
        print(f"| {s} pieces, {c} × {p} pieces | {width} | {memory[0]:.2f} / {memory[1]:.2f} GiB | "
              f"{t_plain:.3g} / {t_hard:.3g} s |", flush=True)
    if args.tokens_out:
        np.savez(args.tokens_out, *kept)
    print(f"\nmedian of {args.repeats} runs; random d-32 model of {args.config} ({spec.name}, beam "
          f"{config.eval.beam_size}), vocabulary {args.vocab}\n{machine()}")


if __name__ == "__main__":
    run_script(main)
