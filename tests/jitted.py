"""Module methods compiled for the tests. A flax method called outside `jax.jit` dispatches op by op, each op
its own small XLA program (several times slower for these models than one compiled call)."""

import functools

import jax


def method(module, name, **static):
    """``module.apply(params, *args, method=name, **static)`` as one jit'd function of (params, *args);
    ``static``: Python values the method branches or loops on (e.g. ``iterations=2``)."""
    return jax.jit(functools.partial(module.apply, method=name, **static))
