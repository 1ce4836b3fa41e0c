"""Functions compiled for the tests. A flax method called outside `jax.jit` dispatches op by op, each op its own
small XLA program (several times slower for these models than one compiled call). The session compiles without
XLA's backend optimisation (conftest: most of the tests' programs run once, so compiling is their cost);
`optimized` turns it back on for a program that a test runs hundreds of times."""

import functools

import jax


@functools.lru_cache(maxsize=None)
def method(module, name, **static):
    """``module.apply(params, *args, method=name, **static)`` as one jit'd function of (params, *args);
    ``static``: Python values the method branches or loops on (e.g. ``iterations=2``). One function per
    (module, name, static), so that every call with the same shapes reuses one trace and one program."""
    return jax.jit(functools.partial(module.apply, method=name, **static))


def optimized(fun, **jit_options):
    """``jax.jit(fun)`` compiled with XLA's backend optimisation, which the test session turns off: for the step
    of a test's training loop (a tiny model's step runs about 3x faster). Level 1: the CMLMC step runs as fast
    as at level 2 and compiles in 4.3 s instead of 5.2 (0.8 s at level 0, where 100 steps take 3.5 s, not 1.2)."""
    return jax.jit(fun, compiler_options={"xla_backend_optimization_level": 1}, **jit_options)
