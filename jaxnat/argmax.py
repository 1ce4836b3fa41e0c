"""``argmax`` and ``top_k`` over the last axis, as ``jnp.argmax`` and ``lax.top_k`` compute them but without their
slow paths on XLA's CPU backend.

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

``lax.top_k`` is a runtime kernel that visits every element (about 1.4 ns an element: 2.6 ms of a 42 ms beam-4
step at batch 64, its [64, 4 · 7,034] candidates), and it needs its input written out, so the candidates' scores
are materialised for it. ``top_k`` takes the same chunk maxima (a plain reduction, into which XLA fuses the
scores' arithmetic), ranks them, and runs ``lax.top_k`` on the k best chunks only: the k best elements lie in the
k chunks with the best maxima (each chunk that beats an element's chunk holds an element that beats it).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
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


def masked_best(x: jax.Array, member, fill: float) -> tuple[jax.Array, jax.Array]:
    """x: float[..., V], member: bool broadcastable to x, or None → (values float[...], indices int32[...]): the
    maximum of x where member holds and ``fill`` elsewhere, and its first index (no member: ``fill`` at 0).

    None stands for a class known to be empty when the program is traced (a word table the vocabulary lacks),
    and makes no pass over V. A mask XLA can prove all false must not reach the reduction either: XLA:CPU folds
    a reduction of a constant at compile time, element by element (over 20 s for one [8, 114, 9802] argmax)."""
    if member is None:
        return jnp.full(x.shape[:-1], fill, x.dtype), jnp.zeros(x.shape[:-1], jnp.int32)
    masked = jnp.where(member, x, fill)
    index = argmax(masked)
    return jnp.take_along_axis(masked, index[..., None], axis=-1)[..., 0], index


TOP_K_CHUNK = 64


def top_k(x: jax.Array, k: int, axes: int = 1) -> tuple[jax.Array, jax.Array]:
    """x: float[..., R, W] without NaN → (values float[..., k], indices int32[..., k]): ``lax.top_k`` over the last
    ``axes`` axes taken as one row-major axis (axes=2: the R · W entries), exactly: the largest first, ties to the
    lower index. Each row of W is cut into chunks of 64, its last chunk shorter where 64 does not divide W (so
    no vocabulary size is special and no array is padded or re-sliced across rows); rows under 4 · 64 entries, k
    above 64 or above a quarter of the chunks keep ``lax.top_k``."""
    *lead, width = x.shape
    lead, rows = lead[:len(lead) - (axes - 1)], int(np.prod(lead[len(lead) - (axes - 1):], dtype=int))
    flat = x.reshape(*lead, rows * width)
    c = TOP_K_CHUNK
    whole, rest = divmod(width, c)
    per_row = whole + (rest > 0)
    if width < 4 * c or k > c or 4 * k > rows * per_row:
        values, indices = lax.top_k(flat, k)
        return values, indices.astype(jnp.int32)
    x = x.reshape(*lead, rows, width)
    maxima = jnp.max(x[..., :whole * c].reshape(*lead, rows, whole, c), axis=-1)
    if rest:
        maxima = jnp.concatenate([maxima, jnp.max(x[..., whole * c:], axis=-1, keepdims=True)], axis=-1)
    # the k best chunks in their order along the axis, so that their entries keep x's order (ties: lower index)
    best = jnp.sort(lax.top_k(maxima.reshape(*lead, rows * per_row), k)[1], axis=-1)
    start = (best // per_row) * width + (best % per_row) * c
    offset = jnp.arange(c)
    pos = (start[..., :, None] + offset).reshape(*lead, k * c)
    real = ((best % per_row)[..., :, None] * c + offset < width).reshape(*lead, k * c)
    # past a row's end: -inf, never taken before a real entry: with fewer than k entries above -inf, the first
    # chunk (64 real entries, all before any row's end) is among the best and holds the -inf entries to take
    inside = jnp.where(real, jnp.take_along_axis(flat, jnp.where(real, pos, 0), axis=-1), -jnp.inf)
    values, j = lax.top_k(inside, k)
    return values, jnp.take_along_axis(pos, j, axis=-1).astype(jnp.int32)
