"""The two CTC loss kernels timed side by side, forward and backward (through a log-softmax over the vocabulary, as
the loss runs them), at the demo's sizes: ``python -m jaxnat.models.ctc.timing``. docs/ctc.md has the figures;
the faster, `lattice.ctc_nll` (a `lax.scan` of the forward algorithm), is the one the loss uses."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxnat.models.ctc.lattice import ctc_nll, ctc_nll_optax

# (batch, source width, target width, vocabulary): the demo's batch shapes, and one of its longest sentences
SHAPES = ((42, 24, 22, 1500), (64, 16, 14, 1500), (128, 8, 6, 1500), (16, 40, 38, 1500))


def milliseconds(kernel, batch: int, src: int, tgt: int, vocab: int, upsample: int = 3, repeats: int = 10) -> float:
    """Mean wall time of one jit'd forward + backward of Σ_b kernel(log_softmax(logits)) on random inputs."""
    rng = np.random.default_rng(0)
    frames = upsample * src
    logits = jnp.asarray(rng.normal(size=(batch, frames, vocab)).astype(np.float32))
    labels = jnp.asarray(rng.integers(6, vocab, (batch, tgt)).astype(np.int32))
    lengths = jnp.asarray(rng.integers(tgt // 2, tgt + 1, batch).astype(np.int32))
    counts = jnp.full((batch,), frames, jnp.int32)
    step = jax.jit(jax.value_and_grad(lambda x: jnp.sum(kernel(jax.nn.log_softmax(x), counts, labels, lengths, 4))))
    jax.block_until_ready(step(logits))
    start = time.perf_counter()
    for _ in range(repeats):
        jax.block_until_ready(step(logits))
    return (time.perf_counter() - start) / repeats * 1000


def main() -> None:
    print("| batch × frames (target) | lax.scan | optax.ctc_loss |\n|---|---|---|")
    for batch, src, tgt, vocab in SHAPES:
        scan, optax = (milliseconds(k, batch, src, tgt, vocab) for k in (ctc_nll, ctc_nll_optax))
        print(f"| {batch} × {3 * src} ({tgt}) | {scan:.1f} ms | {optax:.1f} ms |")


if __name__ == "__main__":
    main()
