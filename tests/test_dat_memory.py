"""XLA's memory analysis of a DA-Transformer train step (the trainer's own step: loss with glancing, gradient,
optimizer update), compiled for the CPU from shapes only, with the DAG loss's scan step recomputed in the backward
pass (`jax.checkpoint`, the default) or kept. docs/dat.md has the figures at configs/dat/multi30k_gpu.py's sizes:

    python -m tests.test_dat_memory --config configs/dat/multi30k_gpu.py --length 64 --length 100

The test below checks, at tiny sizes, that the recomputation keeps the T copies of the [B, L, L] sums out of
memory."""

from __future__ import annotations

import argparse
import dataclasses
import functools

import jax
import jax.numpy as jnp
import pytest

from jaxnat.config import build_config
from jaxnat.models import build_model
from jaxnat.models.dat.model import Glancing, dat_loss
from jaxnat.training.optim import make_optimizer
from jaxnat.training.trainer import make_train_step

pytestmark = pytest.mark.slow  # the quick tier (-m 'not slow') leaves this file out


def step_memory(config, length: int, remat: bool = True) -> dict:
    """{'rows', 'vertices', argument/output/temp/code bytes} of the train step for batches of data.batch_tokens /
    length rows of ``length`` tokens a side (the trainer's bucket shape), with or without ``remat``."""
    vocab = config.data.vocab_size
    spec = build_model(config, vocab, vocab)
    s = config.dat
    glance = Glancing(s.glance_start, s.glance_end, s.glance_steps, s.glance_count, s.glance_fix_alignment)

    def loss(params, batch, rng, train=True, step=None):
        return dat_loss(spec.module, params, batch, rng, glance=glance, step=step, train=train, remat=remat)

    spec = dataclasses.replace(spec, loss=loss)
    rows = max(config.data.batch_tokens // length, 1)
    batch = {k: jax.ShapeDtypeStruct((rows, length), jnp.int32) for k in ("src", "tgt")}
    key = jax.random.PRNGKey(0)
    params = jax.eval_shape(spec.init, key, batch)
    optimizer, schedule = make_optimizer(config.train)
    state = {"step": jax.ShapeDtypeStruct((), jnp.int32), "params": params,
             "opt_state": jax.eval_shape(optimizer.init, params)}
    compiled = jax.jit(make_train_step(spec, optimizer, schedule), donate_argnums=0).lower(state, batch, key).compile()
    m = compiled.memory_analysis()
    return {"rows": rows, "vertices": s.upsample * (length - 2) + 2,
            "argument": m.argument_size_in_bytes, "output": m.output_size_in_bytes,
            "temp": m.temp_size_in_bytes, "code": m.generated_code_size_in_bytes}


@functools.lru_cache(maxsize=None)
def _tiny(remat: bool) -> dict:
    config = build_config("tests/configs/tiny.py", ["--config.model.name=dat", "--config.dat.upsample=4",
                                                    "--config.eval.beam_size=1", "--config.data.batch_tokens=512"])
    return step_memory(config, 32, remat)


def test_recomputing_the_dag_scan_keeps_its_sums_out_of_memory():
    """Without the recomputation the backward pass keeps the T = 32 steps' [B, L, L] sums (16 rows, L = 122
    vertices: 30 MB in float32); with it, the temporaries are smaller by about that."""
    kept, recomputed = _tiny(False), _tiny(True)
    sums = 32 * 16 * 122 * 122 * 4
    assert kept["temp"] - recomputed["temp"] > 0.8 * sums, (kept, recomputed)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--length", type=int, action="append", help="bucket lengths (default: 64)")
    parser.add_argument("--override", action="append", default=[], help="--config.a.b=value overrides")
    args = parser.parse_args()
    config = build_config(args.config, ["--config.data.dir=unused", *args.override])
    print(f"{args.config}: d {config.model.d_model}, {config.model.enc_layers}+{config.model.dec_layers} layers, "
          f"vocab {config.data.vocab_size}, {config.model.dtype}, λ {config.dat.upsample}, "
          f"{config.data.batch_tokens} tokens a batch; jax {jax.__version__}, backend {jax.default_backend()}")
    print("| length | rows | vertices L | DAG scan | arguments | outputs | temporaries | code |")
    print("|---|---|---|---|---|---|---|---|")
    gib = lambda b: f"{b / 2**30:.2f} GiB"  # noqa: E731
    for length in args.length or [64]:
        for remat in (True, False):
            m = step_memory(config, length, remat)
            print(f"| {length} | {m['rows']} | {m['vertices']} | {'recomputed' if remat else 'kept'} | "
                  f"{gib(m['argument'])} | {gib(m['output'])} | {gib(m['temp'])} | {m['code'] / 2**20:.1f} MiB |",
                  flush=True)


if __name__ == "__main__":
    main()
