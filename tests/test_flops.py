"""MFU (`jaxnat.training.flops`): XLA's FLOP count of a train step against 6 · parameters · tokens for a model
whose matmuls dominate; padding slots and a scanned stack's count; the peak, measured or configured; a trained
run's history holds mfu and padding."""

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxnat.config import build_config
from jaxnat.data.vocab import NUM_RESERVED, PAD_ID
from jaxnat.models import build_model, count_params
from jaxnat.training.flops import Utilisation, measure_peak_tflops, program_flops
from jaxnat.training.optim import make_optimizer
from jaxnat.training.trainer import make_train_step

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


def test_step_flops_are_near_six_params_tokens():
    _, compiled, n = _compiled_step()
    flops = program_flops(compiled)
    assert 1 / 1.5 < flops / (6 * n * B * L) < 1.5


def test_padding_is_not_model_flops_and_a_scanned_stack_is_estimated():
    config, compiled, n = _compiled_step()
    flops = program_flops(compiled)
    utilisation = Utilisation({(B, L): compiled}, n, config.model, peak_tflops=2.0)
    assert utilisation.source == "XLA's cost analysis"
    utilisation.add(_batch())
    utilisation.add(_batch(pad_from=L // 4))
    got = utilisation.window(seconds=3.0)
    np.testing.assert_allclose(got["mfu"], flops * (1 + 1 / 4) / 3.0 / 2e12, rtol=1e-6)
    assert got["padding"] == pytest.approx(3 / 8)
    assert utilisation.describe(got["mfu"]) == f"MFU {100 * got['mfu']:.1f}% of 2 TFLOP/s (configured)"
    assert utilisation.window(1.0) == {"mfu": 0.0, "padding": 1.0}  # a new window

    config.model.scan_layers = True  # XLA counts a loop's body once: the estimate from the tokens instead
    scanned = Utilisation({(B, L): compiled}, n, config.model, peak_tflops=2.0)
    config.model.scan_layers = False
    assert scanned.source == "6·params·tokens"
    scanned.add(_batch(pad_from=L // 2))
    np.testing.assert_allclose(scanned.window(1.0)["mfu"], 6 * n * B * L / 2 / jax.local_device_count() / 2e12,
                               rtol=1e-6)


def test_measured_peak_is_a_positive_rate():
    assert 0 < measure_peak_tflops("float32", seconds=0.05) < 1e4


def test_trained_run_history_holds_mfu(ar_run):
    windows = [e for e in map(json.loads, (ar_run / "history.jsonl").read_text().splitlines()) if "loss" in e]
    assert windows and all(0 < e["mfu"] < 1 and 0 <= e["padding"] < 1 for e in windows)
