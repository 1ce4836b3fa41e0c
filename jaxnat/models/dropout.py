"""Dropout whose random bits cost a few integer operations per element.

`flax.linen.Dropout` draws each element's bit from jax's threefry2x32 generator, twenty rounds of integer
arithmetic per pair of words; on a CPU that was a tenth of a Transformer's train step (docs/benchmarks.md,
"Where a train step's time goes"). Here each dropout site draws two 32-bit seeds from its own key (threefry, as
before, so the sites and steps stay independent) and an element's word is a hash of its flat index under those
seeds: the index times an odd constant (a Weyl sequence, distinct for every index), then twice "xor a seed,
mix with murmur3's 32-bit finaliser" (`fmix32`, a bijection in which every input bit flips about half the output
bits). The second seed keeps two sites' words from being shifted copies of one sequence, which one seed added
to a Weyl sequence would give. The element is dropped when its word falls below ``rate`` · 2^32, so the drop
probability is the rate to within 2^-32, and kept elements are scaled by 1 / (1 - rate), as fairseq's and flax's
dropout do. The masks depend only on the key and the array's global shape, so a sharded batch draws the same
mask as one device.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

# a Weyl sequence's step (2^32 / golden ratio, odd) and murmur3's fmix32 multipliers: NumPy scalars, not jnp
# arrays, so that importing this module starts no JAX backend
WEYL = np.uint32(0x9E3779B9)
FMIX_1, FMIX_2 = np.uint32(0x85EBCA6B), np.uint32(0xC2B2AE35)


def fmix32(h: jnp.ndarray) -> jnp.ndarray:
    """murmur3's finaliser on uint32[...] words, elementwise (a bijection of the 32-bit words)."""
    h = h ^ (h >> 16)
    h = h * FMIX_1
    h = h ^ (h >> 13)
    h = h * FMIX_2
    return h ^ (h >> 16)


def hash_bits(seeds: jnp.ndarray, shape: tuple[int, ...]) -> jnp.ndarray:
    """seeds: uint32[2] -> uint32[shape], element i (flat, row-major) being
    fmix32(fmix32(i · WEYL ^ seeds[0]) ^ seeds[1])."""
    size = int(np.prod(shape, dtype=np.int64))
    if size >= 2**32:
        raise ValueError(f"dropout over {size} elements: the hash's counter has 32 bits")
    index = jax.lax.iota(jnp.uint32, size).reshape(shape)
    return fmix32(fmix32(index * WEYL ^ seeds[0]) ^ seeds[1])


def drop_threshold(rate: float) -> np.uint32:
    """The word below which an element is dropped: round(rate · 2^32), for 0 <= rate < 1."""
    return np.uint32(min(round(rate * 2.0**32), 2**32 - 1))


def keep_mask(key: jax.Array, rate: float, shape: tuple[int, ...]) -> jnp.ndarray:
    """bool[shape], True where an element is kept: each dropped with probability ``rate`` under ``key``."""
    seeds = jax.random.bits(key, (2,), jnp.uint32)
    return hash_bits(seeds, shape) >= drop_threshold(rate)


class Dropout(nn.Module):
    """Inverted dropout at ``rate`` with hashed random bits; in place of `flax.linen.Dropout`, with its
    "dropout" random stream."""

    rate: float

    @nn.compact
    def __call__(self, x: jnp.ndarray, deterministic: bool) -> jnp.ndarray:
        """x: float[...] -> float[...] of x's dtype: x itself when ``deterministic`` or the rate is 0."""
        if deterministic or self.rate == 0.0:
            return x
        if self.rate >= 1.0:
            return jnp.zeros_like(x)
        keep = keep_mask(self.make_rng("dropout"), self.rate, x.shape)
        return jnp.where(keep, x / jnp.asarray(1.0 - self.rate, x.dtype), jnp.zeros((), x.dtype))
