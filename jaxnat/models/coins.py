"""Branches of a train step taken on a coin, and how their FLOPs are counted.

An edit model's roll-in flips one coin per batch and runs one of two computations (`lax.cond`): EDITOR's two
paths, the own-insertion roll-in. XLA's cost analysis counts a conditional at its costlier branch, as if every
step ran it, which credits MFU with work a step skipped. `coin_cond` is `lax.cond` with the coin's probability
written into the name scope of its operations (its forward and its transposed conditional keep it), so that
`jaxnat.training.flops` counts each branch at its expected share instead.
"""

from __future__ import annotations

import re

import jax
from jax import lax

_SCOPE = "coin_cond_p{:.6g}"
_TAG = re.compile(r"coin_cond_p([0-9.e+-]+)")


def coin_cond(probability: float, heads: jax.Array, true_fn, false_fn, *operands):
    """`lax.cond(heads, true_fn, false_fn, *operands)` where ``heads`` (bool[]) is a coin that shows heads with
    ``probability`` (a Python float in [0, 1], the `jax.random.bernoulli` it was drawn with)."""
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"a coin's probability is in [0, 1], got {probability}")
    with jax.named_scope(_SCOPE.format(probability)):
        return lax.cond(heads, true_fn, false_fn, *operands)


def coin_probability(name_stack: str) -> float | None:
    """The probability of the true branch of the conditional whose operations carry ``name_stack`` when it is a
    `coin_cond` (its scope the stack's last, as ``jvp(…)`` or ``transpose(jvp(…))`` for the passes of autodiff),
    or None for any other conditional, one nested in a coin's branch included."""
    found = _TAG.findall(name_stack.rsplit("/", 1)[-1])
    return float(found[-1]) if found else None
