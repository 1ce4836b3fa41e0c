"""MFU (`jaxnat.training.flops`): XLA's FLOP count of a train step against 6 · parameters · tokens for a model
whose matmuls dominate; padding slots; loops counted per iteration, a coin's branches at its probability; the
peak, measured or configured; a trained run's history holds mfu and padding."""

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxnat.config import build_config
from jaxnat.data.vocab import NUM_RESERVED, PAD_ID
from jaxnat.models import build_model, count_params
from jaxnat.models.coins import coin_cond, coin_probability
from jaxnat.training.flops import Utilisation, count_correction, measure_peak_tflops, program_flops
from jaxnat.training.optim import make_optimizer
from jaxnat.training.trainer import lowered_step_flops, make_train_step

TINY = "tests/configs/tiny.py"
B, L, V = 8, 16, 64
# wide layers over short rows: the dense layers' products dominate (attention adds 2·B·L²·D a layer and pass)
WIDE = ["--config.model.d_model=128", "--config.model.ffn_dim=512", "--config.model.num_heads=4",
        "--config.model.enc_layers=2", "--config.model.dec_layers=2"]


@functools.lru_cache(maxsize=None)
def _compiled_step():
    config = build_config(TINY, WIDE)
    spec = build_model(config, V, V)
    rng = np.random.default_rng(0)
    batch = {k: jnp.asarray(rng.integers(NUM_RESERVED, V, (B, L)), jnp.int32) for k in ("src", "tgt")}  # no PAD
    params = spec.init(jax.random.PRNGKey(0), batch)
    optimizer, schedule = make_optimizer(config.train)
    state = {"step": jnp.zeros((), jnp.int32), "params": params, "opt_state": optimizer.init(params)}
    step = jax.jit(make_train_step(spec, optimizer, schedule))
    return config, step.lower(state, batch, jax.random.PRNGKey(1)).compile(), count_params(params)


def _batch(pad_from: int = L):
    """A batch whose rows hold real tokens up to ``pad_from`` and PAD after."""
    ids = np.full((B, L), NUM_RESERVED, np.int32)
    ids[:, pad_from:] = PAD_ID
    return {"src": ids, "tgt": ids}


@pytest.mark.slow
def test_step_flops_are_near_six_params_tokens():
    _, compiled, n = _compiled_step()
    flops = program_flops(compiled)
    assert 1 / 1.5 < flops / (6 * n * B * L) < 1.5


def test_padding_is_not_model_flops_and_a_missing_count_is_estimated():
    config, compiled, n = _compiled_step()
    flops = program_flops(compiled)
    utilisation = Utilisation(n, config.model.dtype, peak_tflops=2.0)
    utilisation.count({L: flops}.get)
    assert utilisation.source == "XLA's cost analysis, each loop's iterations counted"
    utilisation.add(_batch())
    utilisation.add(_batch(pad_from=L // 4))
    got = utilisation.window(seconds=3.0)
    np.testing.assert_allclose(got["mfu"], flops * (1 + 1 / 4) / 3.0 / 2e12, rtol=1e-6)
    assert got["padding"] == pytest.approx(3 / 8)
    assert utilisation.describe(got["mfu"]) == f"MFU {100 * got['mfu']:.1f}% of 2 TFLOP/s (configured)"
    assert utilisation.window(1.0) == {"mfu": 0.0, "padding": 1.0}  # a new window
    # above the peak: a peak configured too low, or measured while the machine was busy, is said beside the figure
    assert utilisation.describe(1.25) == "MFU 125.0% of 2 TFLOP/s (configured), above train.peak_tflops"
    utilisation.peak_source = "measured"
    assert utilisation.describe(1.25).endswith("above the peak: the measured peak was low (the machine busy at the "
                                               "start); set train.peak_tflops")

    estimated = Utilisation(n, config.model.dtype, peak_tflops=2.0)  # no count: from the tokens instead
    estimated.count(None)
    assert estimated.source == "6·params·tokens"
    estimated.add(_batch(pad_from=L // 2))
    np.testing.assert_allclose(estimated.window(1.0)["mfu"], 6 * n * B * L / 2 / jax.local_device_count() / 2e12,
                               rtol=1e-6)


def _scanned(x, w, length, unroll, inner=0):
    """A loop of ``length`` products with ``w`` (each with a loop of ``inner`` more in it), as a scan."""
    def body(c, _):
        if inner:
            c = jax.lax.scan(lambda d, _: (jnp.tanh(d @ w), None), c, None, length=inner)[0]
        return jnp.tanh(c @ w), None
    return jax.lax.scan(body, x, None, length=length, unroll=unroll)[0].sum()


def _unrolled(x, w, length, unroll, inner=0):
    """The same loops in Python: every iteration in the program."""
    for _ in range(length):
        for _ in range(inner):
            x = jnp.tanh(x @ w)
        x = jnp.tanh(x @ w)
    return x.sum()


@pytest.mark.parametrize("length,unroll,inner", [(7, 1, 0), (7, 3, 0), (6, 3, 0), (7, 7, 0), (7, 9, 0), (7, 0, 0),
                                                 (4, 1, 3), (1, 1, 0)])
def test_loops_are_counted_per_iteration(length, unroll, inner):
    """XLA's count of a scanned program with `count_correction` is XLA's count of the same program written out, forward
    and backward (the backward pass is a scan too), for plain, partly and wholly unrolled scans and a nested one."""
    x, w = jnp.ones((16, 64)), jnp.ones((64, 64))

    def count(f):
        traced = jax.jit(jax.value_and_grad(f, argnums=(0, 1))).trace(x, w)
        return program_flops(traced.lower()) + count_correction(traced.jaxpr.jaxpr)

    scanned = count(functools.partial(_scanned, length=length, unroll=unroll, inner=inner))
    assert scanned == pytest.approx(count(functools.partial(_unrolled, length=length, unroll=unroll, inner=inner)),
                                    rel=0.02)
    assert scanned > length * (1 + inner) * 3 * 2 * 16 * 64 * 64  # every product, forward and backward


@pytest.mark.parametrize("probability", [0.0, 0.3, 1.0])
def test_a_coins_branches_are_counted_at_its_probability(probability):
    """A `coin_cond` costs p · its true branch + (1 − p) · its false one on average, forward and backward: its
    corrected count is that mix of the two programs that run one branch each (a scanned branch with its loop's
    iterations), where XLA counts it at its costlier branch; a plain `lax.cond` stays at the costlier."""
    x, w = jnp.ones((16, 64)), jnp.ones((64, 64))

    def true_branch(x, w):  # three products in a scan
        return jax.lax.scan(lambda h, _: (jnp.tanh(h @ w), None), x, None, length=3)[0]

    def false_branch(x, w):
        return jnp.tanh(x @ w)

    def count(f):
        traced = jax.jit(jax.value_and_grad(lambda x, w: f(x, w).sum(), argnums=(0, 1))).trace(x, w)
        return program_flops(traced.lower()) + count_correction(traced.jaxpr.jaxpr)

    heads = jnp.asarray(True)  # the predicate's value does not change the count
    coin = count(lambda x, w: coin_cond(probability, heads, true_branch, false_branch, x, w))
    mix = probability * count(true_branch) + (1 - probability) * count(false_branch)
    assert coin == pytest.approx(mix, rel=0.02)
    assert count(lambda x, w: jax.lax.cond(heads, true_branch, false_branch, x, w)) == pytest.approx(
        count(true_branch), rel=0.02)
    # a coin's own conditional, forward or transposed, not one nested in its branch
    assert coin_probability("jit(step)/transpose(jvp(coin_cond_p0.25))") == 0.25
    assert coin_probability("jvp(coin_cond_p0.25)/jvp(other)") is None


def test_a_coins_probability_is_kept_to_six_digits_and_checked():
    """The scope keeps a probability such as 1/3 to six significant digits (the count's share), and one outside
    [0, 1] is refused before anything is traced."""
    from jaxnat.models.coins import _SCOPE

    assert coin_probability(f"jit(step)/{_SCOPE.format(1 / 3)}") == pytest.approx(1 / 3, rel=1e-6)
    for probability in (-0.1, 1.5):
        with pytest.raises(ValueError, match=r"in \[0, 1\]"):
            coin_cond(probability, jnp.asarray(True), lambda: 0.0, lambda: 1.0)


def test_a_scanned_run_is_counted_as_its_unrolled_stacks():
    """A scanned layer stack is a loop: its step's count (`lowered_step_flops`, loops included) is that of the same
    model with the stacks written out, where XLA's count alone leaves out a third of it."""
    config = build_config(TINY, WIDE)
    batch = {k: jax.ShapeDtypeStruct((B, L), jnp.int32) for k in ("src", "tgt")}

    def count(scan_layers):
        config.model.scan_layers = scan_layers
        return lowered_step_flops(build_model(config, V, V), *make_optimizer(config.train), batch,
                                  jax.random.PRNGKey(1))

    assert count(True) == pytest.approx(count(False), rel=0.01)


def test_measured_peak_is_a_positive_rate():
    assert 0 < measure_peak_tflops("float32", seconds=0.05) < 1e4


def test_trained_run_history_holds_mfu(ar_run):
    windows = [e for e in map(json.loads, (ar_run / "history.jsonl").read_text().splitlines()) if "loss" in e]
    assert windows and all(0 < e["mfu"] < 1 and 0 <= e["padding"] < 1 for e in windows)
