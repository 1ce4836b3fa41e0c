"""The train step's own kernels: hashed dropout against a plain-Python reference and its statistics, the
cross-entropy's hand-written gradient and the dense layers' weight-gradient product against autodiff."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxnat.models.dropout import Dropout, drop_threshold, hash_bits, keep_mask
from jaxnat.models.losses import smoothed_cross_entropy
from jaxnat.models.transformer import rows_dot_general

MASK32 = 0xFFFFFFFF


def reference_hash(seeds: tuple[int, int], size: int) -> list[int]:
    """Plain-Python hash_bits: element i is fmix32(fmix32(i * 0x9E3779B9 ^ s0) ^ s1), all mod 2^32."""
    def fmix32(h):
        h ^= h >> 16
        h = (h * 0x85EBCA6B) & MASK32
        h ^= h >> 13
        h = (h * 0xC2B2AE35) & MASK32
        return h ^ (h >> 16)

    return [fmix32(fmix32(((i * 0x9E3779B9) & MASK32) ^ seeds[0]) ^ seeds[1]) for i in range(size)]


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(s0=st.integers(0, MASK32), s1=st.integers(0, MASK32), rows=st.integers(1, 5), cols=st.integers(1, 13))
def test_hash_bits_match_the_reference(s0, s1, rows, cols):
    words = hash_bits(jnp.array([s0, s1], jnp.uint32), (rows, cols))
    assert words.dtype == jnp.uint32 and words.shape == (rows, cols)
    assert np.asarray(words).ravel().tolist() == reference_hash((s0, s1), rows * cols)


def test_keep_masks_drop_at_the_rate_independently():
    n = 400_000
    for rate in (0.1, 0.3):
        a, b = (np.asarray(keep_mask(jax.random.PRNGKey(k), rate, (n,))) for k in (1, 2))
        sigma = np.sqrt(rate * (1 - rate) / n)
        assert abs((~a).mean() - rate) < 5 * sigma
        # two keys' masks, and neighbouring elements of one mask, as independent draws
        assert abs((~a & ~b).mean() - rate**2) < 5 * sigma
        assert abs((~a[1:] & ~a[:-1]).mean() - rate**2) < 5 * sigma
    assert drop_threshold(0.0) == 0 and drop_threshold(0.5) == 2**31


def test_dropout_module_scales_kept_values_and_keeps_the_dtype():
    x = jnp.ones((8, 64), jnp.bfloat16)
    apply = lambda rate, det: Dropout(rate).apply({}, x, det, rngs={"dropout": jax.random.PRNGKey(0)})  # noqa: E731
    assert (apply(0.3, True) == x).all() and (apply(0.0, False) == x).all()
    out = apply(0.25, False)
    assert out.dtype == jnp.bfloat16
    assert set(np.unique(np.asarray(out, np.float32)).tolist()) == {0.0, np.float32(jnp.bfloat16(1 / 0.75))}


def reference_cross_entropy(z, targets, mask, weights, eps, a, b):
    """Plain numpy, float64: a·Σ w·m·loss + b·Σ m·nll, with log-softmax written out (nll = lse - z[target],
    loss = (1 - eps)·nll - eps·mean(log p))."""
    z = np.asarray(z, np.float64)
    top = z.max(-1, keepdims=True)
    logp = z - (top + np.log(np.exp(z - top).sum(-1, keepdims=True)))
    nll = -np.take_along_axis(logp, targets[..., None], -1)[..., 0]
    loss = (1 - eps) * nll - eps * logp.mean(-1)
    return a * np.sum(loss * mask * weights) + b * np.sum(nll * mask)


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(data=st.data(), shape=st.sampled_from([(1, 1), (4, 2), (2, 3, 5)]), eps=st.sampled_from([0.0, 0.1, 0.5]),
       ab=st.tuples(st.floats(0.0, 2.0), st.floats(0.0, 2.0)))
def test_cross_entropy_gradient_matches_finite_differences(data, shape, eps, ab):
    """`smoothed_cross_entropy`'s loss and its hand-written gradient (`token_losses`) against the numpy reference
    and its central differences, for weighted, masked tokens, both sums' cotangents and any label smoothing."""
    *lead, v = shape
    n = int(np.prod(lead))

    def floats(lo, hi, k):
        return np.array(data.draw(st.lists(st.floats(lo, hi, width=32), min_size=k, max_size=k)), np.float32)

    logits = floats(-20, 20, n * v).reshape(shape)
    targets = np.array(data.draw(st.lists(st.integers(0, v - 1), min_size=n, max_size=n)), np.int32).reshape(lead)
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n))).reshape(lead)
    weights = floats(0, 1, n).reshape(lead)
    a, b = ab

    def ours(z):
        loss, nll, _ = smoothed_cross_entropy(z, targets, mask, eps, weights=weights)
        return a * loss + b * nll

    want = reference_cross_entropy(logits, targets, mask, weights, eps, a, b)
    np.testing.assert_allclose(ours(logits), want, rtol=1e-5, atol=1e-4)
    h, grad = 1e-5, np.zeros(shape)
    for i in np.ndindex(*shape):
        step = np.zeros(shape)
        step[i] = h
        grad[i] = (reference_cross_entropy(logits + step, targets, mask, weights, eps, a, b)
                   - reference_cross_entropy(logits - step, targets, mask, weights, eps, a, b)) / (2 * h)
    np.testing.assert_allclose(jax.grad(ours)(logits), grad, atol=2e-5)
    # the count is of the masked tokens: the weights scale the loss only
    assert smoothed_cross_entropy(logits, targets, mask, eps, weights=weights)[2] == mask.sum()


@pytest.mark.parametrize("features,axis", [((24,), -1), ((2, 5), -1), ((6,), (-2, -1))])
def test_dense_layers_on_rows_keep_the_function_and_its_gradients(features, axis):
    """Both branches of the weight gradient (x or g the narrower), and DenseGeneral's head axes."""
    x = jax.random.normal(jax.random.PRNGKey(0), (9, 3, 4) if axis != -1 else (9, 12))
    plain = nn.DenseGeneral(features, axis=axis)
    ours = nn.DenseGeneral(features, axis=axis, dot_general=rows_dot_general)
    params = plain.init(jax.random.PRNGKey(1), x)
    loss = lambda module: lambda p, x: jnp.sum(jnp.sin(module.apply(p, x)))  # noqa: E731
    np.testing.assert_allclose(ours.apply(params, x), plain.apply(params, x), rtol=1e-6)
    for got, want in zip(jax.tree.leaves(jax.grad(loss(ours), argnums=(0, 1))(params, x)),
                         jax.tree.leaves(jax.grad(loss(plain), argnums=(0, 1))(params, x))):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
