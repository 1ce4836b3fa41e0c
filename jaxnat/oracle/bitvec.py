"""Multi-word bit vectors: ``uint32[..., W]`` arrays holding bit j in word ``j // 32``, bit ``j % 32``.

The oracles pack one DP row (one bit per reference position) into W = ceil(Ly / 32) words, so a row update is
a handful of word operations instead of Ly cell updates.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

WORD = 32


def num_words(bits: int) -> int:
    return max(1, -(-bits // WORD))


def pack(flags: jax.Array) -> jax.Array:
    """bool[..., N] → uint32[..., W] (bits past N are 0)."""
    n = flags.shape[-1]
    w = num_words(n)
    flags = jnp.pad(flags, [(0, 0)] * (flags.ndim - 1) + [(0, w * WORD - n)])
    flags = flags.reshape(flags.shape[:-1] + (w, WORD)).astype(jnp.uint32)
    return jnp.sum(flags << jnp.arange(WORD, dtype=jnp.uint32), axis=-1, dtype=jnp.uint32)


def add(a: jax.Array, b: jax.Array, carry_in: int = 0) -> jax.Array:
    """(a + b + carry_in) over the whole multi-word number (carries ripple from word 0 upwards)."""
    words = []
    carry = jnp.full(a.shape[:-1], carry_in, jnp.uint32)
    for w in range(a.shape[-1]):
        partial = a[..., w] + b[..., w]
        total = partial + carry
        carry = ((partial < a[..., w]) | (total < partial)).astype(jnp.uint32)
        words.append(total)
    return jnp.stack(words, axis=-1)


def carries_into(a: jax.Array, b: jax.Array, carry_in: int = 0) -> jax.Array:
    """Bit j = the carry into bit j of ``a + b + carry_in``: ``(a + b + c) ^ a ^ b``."""
    return add(a, b, carry_in) ^ a ^ b


def low_mask(count: jax.Array, w: int) -> jax.Array:
    """int32[...] → uint32[..., w] with bits 0 … count-1 set."""
    k = jnp.clip(count[..., None] - WORD * jnp.arange(w, dtype=count.dtype), 0, WORD).astype(jnp.uint32)
    full = jnp.uint32(0xFFFFFFFF)
    return jnp.where(k >= WORD, full, (jnp.uint32(1) << jnp.minimum(k, WORD - 1)) - 1)


def highest_set_bit(v: jax.Array) -> jax.Array:
    """uint32[..., W] → int32[...]: index of the highest set bit, -1 if none."""
    w = v.shape[-1]
    top = (WORD - 1) - lax.clz(v).astype(jnp.int32) + WORD * jnp.arange(w, dtype=jnp.int32)
    return jnp.max(jnp.where(v != 0, top, -1), axis=-1)


def get_bit(v: jax.Array, index: jax.Array) -> jax.Array:
    """uint32[B, W], int32[B] → bool[B]: bit ``index`` (False for index < 0)."""
    safe = jnp.maximum(index, 0)
    word = jnp.take_along_axis(v, (safe // WORD)[:, None], axis=1)[:, 0]
    return (index >= 0) & (((word >> (safe % WORD).astype(jnp.uint32)) & 1) == 1)
