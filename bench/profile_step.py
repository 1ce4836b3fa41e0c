"""Where a train step's time goes on XLA's CPU backend: one config's step traced, grouped by what each op does.

    python bench/profile_step.py --config configs/cmlm/multi30k.py --data-dir ../shared/data/multi30k \
        [--shape 128x32] [--steps 2] [--top 15]

The step (forward, backward, Adam) is compiled for one batch of the given shape, run once, then traced with
`jax.profiler.trace` for ``--steps`` steps. Each traced XLA op is matched to its instruction in the compiled
program, whose metadata names the JAX operation and module path it came from; the op's time is put under
the first group whose pattern that name matches (a fusion counts where its root operation's name puts it).
Prints the milliseconds per step of each group, of each kind of XLA op (YNNPACK products, the generic dot kernel,
copies and transposes, elementwise fusions) and of the ``--top`` single sources (layer numbers merged). Pinned to
one core with one thread (``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false taskset -c 0``) the ops run one at a
time and their sum is the step's time; with more threads concurrent ops' times add up past it.
The trace itself (`vm.trace.json.gz`, readable in Perfetto) is kept under ``--trace-dir`` if given.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from jaxnat.config import build_config  # noqa: E402
from jaxnat.errors import run_script  # noqa: E402
from jaxnat.provenance import machine  # noqa: E402
from jaxnat.training.flops import count_correction, program_flops  # noqa: E402
from jaxnat.training.trainer import Trainer, make_train_step  # noqa: E402

# (group, pattern over the op's JAX name), first match wins
GROUPS = [
    ("dropout masks (random bits)", r"_bernoulli|_uniform|threefry|random_bits|Dropout_\d+/(xor|mul|shift|iota)"),
    ("vocabulary projection + softmax", r"log_softmax|logsumexp|\.project/|\.attend/dot_general"),
    ("feed-forward", r"/ffn/"),
    ("attention", r"attn"),
    ("optimizer", r"adam|scale_by|optax|tree_map"),
    ("dropout (apply)", r"/drop/"),
    ("layer norm", r"norm"),
]


def step_parser(description: str) -> argparse.ArgumentParser:
    """The arguments every train-step benchmark takes: --config, --data-dir and --shape (sentences x tokens)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--config", required=True)
    parser.add_argument("--data-dir", help="the Multi30k folder of a config that reads files (not with a demo's "
                                           "embedded corpus)")
    parser.add_argument("--shape", default="128x32", help="batch shape, sentences x tokens")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override, e.g. --set data.pairs_dir=/tmp/pairs (repeatable)")
    return parser


def batch_shape(text: str) -> tuple[int, int]:
    """A --shape value as (sentences, tokens): "128x32" → (128, 32)."""
    return tuple(int(n) for n in text.split("x"))


def step_inputs(config_path: str, data_dir: str, shape, workdir: str, overrides=()):
    """(trainer, its first batch of ``shape`` on the device, the initial train state) for a config's train step
    on the Multi30k folder ``data_dir`` (None: the config's own data), with ``overrides`` ("key=value") of the
    config."""
    data = [f"--config.data.dir={data_dir}"] if data_dir else []
    trainer = Trainer(build_config(config_path, [*data, *(f"--config.{kv}" for kv in overrides)]), workdir)
    batcher = trainer.make_batcher()
    if shape not in batcher.shapes:
        raise SystemExit(f"error: no batch of shape {shape}; this config's shapes: {sorted(batcher.shapes)}")
    batch = {k: jnp.asarray(v) for k, v in batcher.first_batch_of_shape(shape).items()}
    return trainer, batch, trainer.init_state(batch)


def trace_step(config_path: str, data_dir: str, shape, steps: int, trace_dir: str, overrides=()):
    """(the compiled program's HLO text, its FLOPs as XLA counts them with every loop's iterations, the trace's
    json.gz path) for ``steps`` traced steps."""
    with tempfile.TemporaryDirectory() as tmp:
        trainer, batch, state = step_inputs(config_path, data_dir, shape, tmp, overrides)
        key = jax.random.PRNGKey(0)
        traced = jax.jit(make_train_step(trainer.spec, trainer.optimizer, trainer.schedule,
                                         trainer.config.train.microbatches)).trace(state, batch, key)
        flops = program_flops(traced.lower()) + count_correction(traced.jaxpr.jaxpr)
        step = traced.lower().compile()
        jax.block_until_ready(step(state, batch, key))
        with jax.profiler.trace(trace_dir):
            for _ in range(steps):
                jax.block_until_ready(step(state, batch, key))
    traces = sorted(glob.glob(os.path.join(trace_dir, "plugins", "profile", "*", "*.trace.json.gz")))
    return step.as_text(), flops, traces[-1]


def op_times(hlo: str, trace_path: str) -> tuple[collections.Counter, collections.Counter]:
    """({JAX name of the op (layer numbers merged): total microseconds}, {kind of XLA op: total microseconds})
    over the traced ops. The kinds say how XLA's CPU backend runs them: products handed to YNNPACK (a fusion of
    that kind), products of its generic dot kernel, copies and transposes, the other fusions (elementwise loops)."""
    names, kinds = {}, {}
    for m in re.finditer(r'^\s*(?:ROOT )?%([\w.\-]+) = \S+ ([\w\-]+)\((.*)$', hlo, re.M):
        name, op, rest = m.groups()
        op_name = re.search(r'op_name="([^"]*)"', rest)
        if op_name:
            names[name] = op_name.group(1)
        kinds[name] = ("YNNPACK product" if "__ynn_fusion" in rest else "generic dot" if op == "dot"
                       else "copy / transpose" if op in ("copy", "transpose") or name.startswith(("copy", "transpose"))
                       else "elementwise / reduction fusion" if op == "fusion" else op)
    with gzip.open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    times, by_kind = collections.Counter(), collections.Counter()
    for e in events:
        if e.get("ph") == "X" and e["name"] in names:
            times[re.sub(r"layer_\d+", "layer_#", names[e["name"]])] += e["dur"]
            by_kind[kinds[e["name"]]] += e["dur"]
    return times, by_kind


def main():
    parser = step_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--trace-dir", help="keep the trace here (default: a temporary directory)")
    args = parser.parse_args()
    try:
        shape = batch_shape(args.shape)
        assert len(shape) == 2
    except (ValueError, AssertionError):
        raise SystemExit(f"error: --shape {args.shape!r}: give SENTENCESxTOKENS, e.g. 128x32") from None
    if args.steps < 1 or args.top < 1:
        raise SystemExit("error: --steps and --top must be at least 1")
    if args.trace_dir and os.path.exists(args.trace_dir) and not os.path.isdir(args.trace_dir):
        raise SystemExit(f"error: --trace-dir {args.trace_dir}: not a directory")
    with tempfile.TemporaryDirectory() as tmp:
        hlo, flops, trace = trace_step(args.config, args.data_dir, shape, args.steps, args.trace_dir or tmp,
                                         args.set)
        times, by_kind = op_times(hlo, trace)
    per_step = {name: us / 1000 / args.steps for name, us in times.items()}
    total = sum(per_step.values())
    groups = collections.Counter()
    for name, ms in per_step.items():
        groups[next((g for g, pattern in GROUPS if re.search(pattern, name)), "other")] += ms
    print(f"{args.config}, one {args.shape} batch, {total:.0f} ms of XLA ops per step "
          f"(mean of {args.steps} traced steps, {jax.devices()[0].platform}); {flops / 1e9:.0f} GFLOP a step "
          f"by XLA's count, {flops / 1e6 / total:.1f} GFLOP/s\n")
    print("| group | ms per step | share |\n|---|---|---|")
    for group, ms in groups.most_common():
        print(f"| {group} | {ms:.0f} | {ms / total:.1%} |")
    print("\n| kind of XLA op | ms per step | share |\n|---|---|---|")
    for kind, us in by_kind.most_common():
        print(f"| {kind} | {us / 1000 / args.steps:.0f} | {us / 1000 / args.steps / total:.1%} |")
    print(f"\n| the {args.top} largest sources | ms per step |\n|---|---|")
    for name, ms in sorted(per_step.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"| `{name.removeprefix('jit(step)/')}` | {ms:.0f} |")
    print(f"\n{machine()}")


if __name__ == "__main__":
    run_script(main)
