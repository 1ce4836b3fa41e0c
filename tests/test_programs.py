"""TrainPrograms (jaxnat/training/programs.py): one compiled program per batch shape, the first shape's traced in the
calling thread before it returns, the others traced and compiled in its pool's threads once the first step has run;
their FLOPs with every loop's iterations."""

import threading
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxnat.training.programs import TrainPrograms

SHAPES = [(4, 8), (2, 16), (8, 4)]


def _step(x):
    """x: float32[B, L] -> float32[B, L]: three products with a fixed [L, L] matrix, as a scan."""
    w = jnp.eye(x.shape[1]) * 2.0
    return jax.lax.scan(lambda c, _: (c @ w, None), x, None, length=3)[0]


def test_each_shape_gets_its_program_and_only_the_first_is_traced_before_the_first_step():
    threads = {}

    def trace(shape):
        threads[shape] = threading.current_thread()
        return jax.jit(_step).trace(jax.ShapeDtypeStruct(shape, jnp.float32))

    begin = time.perf_counter()
    programs = TrainPrograms(trace, SHAPES)
    assert threads[SHAPES[0]] is threading.current_thread()
    assert programs.shapes == SHAPES
    np.testing.assert_array_equal(programs[SHAPES[0]](np.ones(SHAPES[0], np.float32)), np.full(SHAPES[0], 8.0))
    time.sleep(0.3)
    assert set(threads) == {SHAPES[0]}  # the others wait for the first step to have run (or for a step to need one)
    for shape in SHAPES:
        np.testing.assert_array_equal(programs[shape](np.ones(shape, np.float32)), np.full(shape, 8.0))
    assert all(threads[s] is not threading.current_thread() for s in SHAPES[1:])
    programs.close()
    deadline = time.monotonic() + 30
    while programs.finished_at is None and time.monotonic() < deadline:  # the last one's bookkeeping
        time.sleep(0.01)
    assert begin < programs.finished_at and programs.compiled_before(programs.finished_at)
    assert not programs.compiled_before(begin)
    for b, length in SHAPES:  # three products of [B, L] by [L, L]: the loop's three iterations counted
        assert programs.flops(length) >= 3 * 2 * b * length * length / jax.device_count()
