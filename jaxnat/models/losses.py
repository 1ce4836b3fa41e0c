"""Label-smoothed cross-entropy as in fairseq (docs/levt.md).

Per token: `(1 - eps) * nll - eps * mean_v log p_v` (uniform smoothing over the vocabulary). Functions
return *sums* and a token count, so that a data-parallel step can normalise by the global count and give
the same number on any number of devices.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


def smoothed_cross_entropy(logits: jnp.ndarray, targets: jnp.ndarray, mask: jnp.ndarray, eps: float,
                           weights: jnp.ndarray | None = None):
    """logits: float32[..., V]; targets: int32[...]; mask: bool[...]; weights: float32[...] per-token weights of
    the loss (not of nll or count).

    Returns (loss_sum, nll_sum, count): float32 scalars summed over masked positions, and their number.
    """
    return token_sums(*token_losses(logits.astype(jnp.float32), targets, eps), mask, weights)


def token_sums(loss: jnp.ndarray, nll: jnp.ndarray, mask: jnp.ndarray, weights: jnp.ndarray | None = None):
    """Per-token loss and nll float32[...] → (loss_sum, nll_sum, count) over mask bool[...], the loss weighted."""
    w = mask.astype(jnp.float32)
    weighted = w if weights is None else w * weights
    return jnp.sum(loss * weighted), jnp.sum(nll * w), jnp.sum(w)


def log_prob_losses(logp: jnp.ndarray, targets: jnp.ndarray, eps: float):
    """log-probabilities float[..., V] (used as they are: not renormalised), targets int32[...] → (smoothed loss,
    nll) float32[...] each, per token."""
    logp = logp.astype(jnp.float32)
    nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    return (1.0 - eps) * nll - eps * jnp.mean(logp, axis=-1), nll


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def token_losses(logits: jnp.ndarray, targets: jnp.ndarray, eps: float):
    """logits: float32[..., V]; targets: int32[...] -> (smoothed loss, nll): float32[...] each, per token.

    With z the logits and lse their log-sum-exp, nll = lse - z[target] and the smoothed loss is
    lse - (1 - eps) z[target] - eps mean(z), the same numbers as through log_softmax. Its own gradient, because
    autodiff through log_softmax makes XLA's CPU backend build the [N, V] cotangent twice, once transposed for
    the output projection's weight gradient (a quarter of the AR train step's vocabulary-layer time): here it is
    one elementwise pass, softmax(z) (g_loss + g_nll) - onehot(target) ((1 - eps) g_loss + g_nll) - eps/V g_loss.
    """
    return _token_losses_fwd(logits, targets, eps)[0]


def _token_losses_fwd(logits, targets, eps):
    lse = jax.nn.logsumexp(logits, axis=-1)
    target_logit = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    nll = lse - target_logit
    loss = lse - (1.0 - eps) * target_logit - eps * jnp.mean(logits, axis=-1)
    return (loss, nll), (logits, targets, lse)


def _token_losses_bwd(eps, residuals, cotangents):
    logits, targets, lse = residuals
    g_loss, g_nll = cotangents
    probs = jnp.exp(logits - lse[..., None])
    is_target = jnp.arange(logits.shape[-1]) == targets[..., None]
    d = (probs * (g_loss + g_nll)[..., None] - jnp.where(is_target, ((1.0 - eps) * g_loss + g_nll)[..., None], 0.0)
         - (eps / logits.shape[-1]) * g_loss[..., None])
    return d, None


token_losses.defvjp(_token_losses_fwd, _token_losses_bwd)
