"""MFU (`jaxnat.training.flops`): XLA's FLOP count of a train step against 6 · parameters · tokens for a model
whose matmuls dominate; padding slots; a scanned run counted on its unrolled stacks; the peak, measured or
configured; a trained run's history holds mfu and padding."""

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
    assert utilisation.source == "XLA's cost analysis"
    utilisation.add(_batch())
    utilisation.add(_batch(pad_from=L // 4))
    got = utilisation.window(seconds=3.0)
    np.testing.assert_allclose(got["mfu"], flops * (1 + 1 / 4) / 3.0 / 2e12, rtol=1e-6)
    assert got["padding"] == pytest.approx(3 / 8)
    assert utilisation.describe(got["mfu"]) == f"MFU {100 * got['mfu']:.1f}% of 2 TFLOP/s (configured)"
    assert utilisation.window(1.0) == {"mfu": 0.0, "padding": 1.0}  # a new window

    estimated = Utilisation(n, config.model.dtype, peak_tflops=2.0)  # no count: from the tokens instead
    estimated.count(None)
    assert estimated.source == "6·params·tokens"
    estimated.add(_batch(pad_from=L // 2))
    np.testing.assert_allclose(estimated.window(1.0)["mfu"], 6 * n * B * L / 2 / jax.local_device_count() / 2e12,
                               rtol=1e-6)


@pytest.mark.slow
def test_a_scanned_run_is_counted_on_its_unrolled_stacks(tmp_path):
    """XLA counts a scanned stack's loop body once (a third of this model's step is left out); the trainer counts a
    scanned run on the same program with the stacks unrolled, lowered only: within 3% of the compiled count."""
    from jaxnat.training.trainer import Trainer

    config = build_config(TINY, [*WIDE, "--config.model.scan_layers=true", "--config.data.bucket_multiple=48"])
    trainer = Trainer(config, str(tmp_path))
    batcher = trainer.make_batcher()
    (shape,) = batcher.shapes
    unrolled = trainer.unrolled_step_flops(batcher, jax.random.PRNGKey(1))
    batch = {k: jax.ShapeDtypeStruct(s, jnp.int32) for k, s in batcher.key_shapes(shape).items()}

    def count(scan_layers, compile):
        config.model.scan_layers = scan_layers
        spec = build_model(config, trainer.tokenizer.vocab_size("src"), trainer.tokenizer.vocab_size("tgt"))
        init = lambda: spec.init(jax.random.PRNGKey(0), {k: jnp.ones((1, *v.shape[1:]), jnp.int32)  # noqa: E731
                                                         for k, v in batch.items()})
        params = jax.eval_shape(init)
        state = {"step": jax.ShapeDtypeStruct((), jnp.int32), "params": params,
                 "opt_state": jax.eval_shape(trainer.optimizer.init, params)}
        lowered = jax.jit(make_train_step(spec, trainer.optimizer, trainer.schedule)).lower(
            state, batch, jax.random.PRNGKey(1))
        return program_flops(lowered.compile() if compile else lowered)

    compiled = count(False, compile=True)
    assert list(unrolled) == [shape[1]] and count(True, compile=False) < 0.8 * compiled
    assert unrolled[shape[1]] == pytest.approx(compiled, rel=0.03)


def test_measured_peak_is_a_positive_rate():
    assert 0 < measure_peak_tflops("float32", seconds=0.05) < 1e4


def test_trained_run_history_holds_mfu(ar_run):
    windows = [e for e in map(json.loads, (ar_run / "history.jsonl").read_text().splitlines()) if "loss" in e]
    assert windows and all(0 < e["mfu"] < 1 and 0 <= e["padding"] < 1 for e in windows)
