"""``argmax`` over the last axis, as ``jnp.argmax`` computes it but without its slow path on XLA's CPU backend.

``jnp.argmax`` lowers to a variadic (value, index) reduction, which XLA:CPU runs as a scalar loop: about 4.5 ns
an element on one core of this project's machine, so the token argmax of one refinement iteration at batch 1
(40 positions × 8,000 pieces) took 1.4 ms, about an eighth of the iteration, and a training step's roll-in
argmax over [128, 32, 8000] logits 147 ms. A plain ``max`` runs vectorised (about 0.15 ns an element). So the
last axis is cut into chunks; the chunk maxima (a plain reduction) pick the first chunk holding the overall
maximum, and a small variadic argmax finds the position inside that one chunk: 10–16× faster at those shapes
(docs/benchmarks.md, "Argmax on XLA's CPU backend"). A vocabulary none of the preferred sizes divides (fairseq's
dictionaries: 9,802 = 58 · 169) takes its divisor nearest 64: 4–6× faster than ``lax.top_k(x, 1)`` (a runtime
sort kernel), which is left for widths with no divisor from 16 to 512 (padding to a multiple costs a copy of the
whole array, slower than ``top_k`` at [64, 16, 9802]).

Both give ``jnp.argmax``'s answer exactly: the first maximum, NaN counting as the largest value (the chunk
maxima propagate NaN, and argmax picks the first NaN chunk, then the first NaN in it).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

# chunk sizes tried, best first: multiples of 16 fill the vector lanes (at [64, 40, 8000], 125-wide chunks
# were 1.6× slower than 100-wide and 64-wide ones)
_CHUNKS = (64, 32, 80, 128, 96, 48, 160, 256, 100, 200, 50, 40)
SMALL = 128  # narrower axes keep jnp.argmax: the variadic reduction over them is cheap


def chunk_size(width: int) -> int | None:
    """The chunk size for an axis of ``width`` elements (at least two chunks), or None when none divides it."""
    preferred = next((c for c in _CHUNKS if width % c == 0 and width >= 2 * c), None)
    if preferred is not None:
        return preferred
    divisors = [c for c in range(16, 513) if width % c == 0 and width >= 2 * c]
    return min(divisors, key=lambda c: abs(c - 64), default=None)


def argmax(x: jax.Array) -> jax.Array:
    """x: float[..., V] → int32[...], the index of the first maximum along the last axis (``jnp.argmax(x, -1)``)."""
    *lead, width = x.shape
    if width < SMALL:
        return jnp.argmax(x, axis=-1).astype(jnp.int32)
    c = chunk_size(width)
    if c is None:
        return lax.top_k(x, 1)[1][..., 0].astype(jnp.int32)
    chunks = x.reshape(*lead, width // c, c)
    best_chunk = jnp.argmax(jnp.max(chunks, axis=-1), axis=-1).astype(jnp.int32)      # [...]
    inside = jnp.take_along_axis(chunks, best_chunk[..., None, None], axis=-2)[..., 0, :]  # [..., c]
    return best_chunk * c + jnp.argmax(inside, axis=-1).astype(jnp.int32)
