"""Label-smoothed cross-entropy as in fairseq (docs/levt.md).

Per token: `(1 - eps) * nll - eps * mean_v log p_v` (uniform smoothing over the vocabulary). Functions
return *sums* and a token count, so that a data-parallel step can normalise by the global count and give
the same number on any number of devices.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def smoothed_cross_entropy(logits: jnp.ndarray, targets: jnp.ndarray, mask: jnp.ndarray, eps: float,
                           log_probs: bool = False, weights: jnp.ndarray | None = None):
    """logits: float32[..., V] (with ``log_probs``: log-probabilities already, used as they are); targets:
    int32[...]; mask: bool[...]; weights: float32[...] per-token weights of the loss (not of nll or count).

    Returns (loss_sum, nll_sum, count): float32 scalars summed over masked positions, and their number.
    """
    logp = logits.astype(jnp.float32) if log_probs else jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    smooth = -jnp.mean(logp, axis=-1)
    loss = (1.0 - eps) * nll + eps * smooth
    w = mask.astype(jnp.float32)
    weighted = w if weights is None else w * weights
    return jnp.sum(loss * weighted), jnp.sum(nll * w), jnp.sum(w)
