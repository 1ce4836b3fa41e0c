"""`model.scan_layers`: each layer stack one nn.scan. With the per-layer model's parameters moved to the scanned
layout (`stack_layers`), losses and gradients (in that layout) are the same for the AR model (a packed batch),
CMLMC (the causal sublayer), Coverage-NAT (the last layer's cross attention, an unfinished stack) and the
vectorized model (per-layer prefixes), CTC and DA-Transformer (their glancing passes), and every head's output and
gradient for LevT and EDITOR; cached AR decoding, plain and with constraint pairs, Coverage-NAT's and the edit
models' decoding give the same outputs; `unstack_layers` inverts the move; early exit with scanned stacks is
refused."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxnat.config import build_config
from jaxnat.data import batching
from jaxnat.data.vocab import NUM_RESERVED, PAD_ID
from jaxnat.decoding.request import DecodeRequest
from jaxnat.errors import ConfigError
from jaxnat import models
from jaxnat.models import build_model
from jaxnat.models.vecconst.model import PairInputs
from jaxnat.models.transformer import Decoder, stack_layers, unstack_layers
from tests.refine_reference import random_batch

TINY = "tests/configs/tiny.py"
V = 40
# two layers a stack (a scan carries between steps; every unrolled layer is program to compile); no dropout, so
# that a training-mode loss is the same function either way (the scanned stack draws its dropout keys per scan
# step, not per layer name)
DEEP = ("--config.model.enc_layers=2", "--config.model.dec_layers=2", "--config.model.dropout=0")
FAMILIES = {
    "ar": (),
    "ctc": ("--config.model.name=ctc",),
    "dat": ("--config.model.name=dat", "--config.dat.upsample=2"),
    "cmlmc": ("--config.model.name=cmlm", "--config.cmlm.masked_attn=true"),
    # three decoder layers: the scanned stack before the last layer is itself two
    "coverage-nat": ("--config.model.name=nat", "--config.nat.coverage=true", "--config.nat.train_iterations=2",
                     "--config.model.dec_layers=3"),
    "vecconst": ("--config.model.name=vecconst", "--config.data.pairs_dir=synthetic"),
    # the edit models run their decoder once per head: each pass over the one scanned stack
    "levt": ("--config.model.name=levt",),
    "editor": ("--config.model.name=editor",),
    # the authors' forms: per-head prefixes from their adapters, the consumed phrases in the searched state
    "vecconst-authors": ("--config.model.name=vecconst", "--config.data.pairs_dir=synthetic",
                         "--config.vecconst.output=authors", "--config.vecconst.adapters=separate"),
}


def test_every_family_has_a_variant_here():
    """A family added to jaxnat/models is compared scanned against unrolled too: it needs its variant above."""
    covered = {next((o.split("=", 1)[1] for o in overrides if o.startswith("--config.model.name=")), "ar")
               for overrides in FAMILIES.values()}
    assert set(models.FAMILIES) <= covered, sorted(set(models.FAMILIES) - covered)


# the edit models' losses roll in through their oracles, the costliest programs of the suite to compile; their
# stacks are compared head by head, on the module's call that runs all three heads on one hypothesis
EDIT = ("levt", "editor")


@functools.lru_cache(maxsize=None)
def _spec(family: str, scan: bool):
    config = build_config(TINY, [*DEEP, *FAMILIES[family], "--config.eval.beam_size=1",
                                 f"--config.model.scan_layers={scan}"])
    return build_model(config, V, V)


def _batch(family: str, packed: bool = False):
    batch = random_batch(1, V)
    if family.startswith("vecconst"):  # two pairs a sentence, of 1-2 source and 1-3 target pieces; row 0 none
        rng = np.random.default_rng(1)
        for key, most in (("pair_src", 2), ("pair_tgt", 3)):
            ids = rng.integers(NUM_RESERVED, V, (6, 2, most))
            ids[np.arange(most) >= rng.integers(1, most + 1, (6, 2, 1))] = PAD_ID
            ids[0] = PAD_ID
            batch[key] = jnp.asarray(ids, jnp.int32)
        return batch
    if packed:  # the same pairs, several a row
        src, tgt = ([np.asarray(row[row > 0]) for row in batch[k]] for k in ("src", "tgt"))
        batch = {k: jnp.asarray(v) for k, v in batching.PackedBatcher(src, tgt, 4 * 24, 24, seed=0).batch(0).items()}
        assert int(batch["tgt_seg"].max()) > 1
    return batch


def _close(a, b, atol=2e-5):
    """Equal leaf by leaf up to float32 sums taken in another order (the scan's), whose rounding grows with the
    leaf's magnitude: atol, or a millionth of the leaf's largest entry if that is more (atol 0: exactly equal)."""
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)

    def close(x, y):
        x, y = np.asarray(x), np.asarray(y)
        tol = max(atol, 1e-6 * float(np.max(np.abs(y), initial=0.0))) if atol else 0.0
        np.testing.assert_allclose(x, y, atol=tol, rtol=1e-5)
    jax.tree_util.tree_map(close, a, b)


@pytest.mark.slow
@pytest.mark.parametrize("family, packed", [("ar", True), ("cmlmc", False), ("coverage-nat", False),
                                            ("vecconst", False), ("levt", False), ("editor", False),
                                            ("ctc", False), ("dat", False)])
def test_scanned_stacks_give_the_same_loss_and_gradient(family, packed):
    plain, scanned = _spec(family, False), _spec(family, True)
    batch = _batch(family, packed)
    params = plain.init(jax.random.PRNGKey(0), batch)
    moved = stack_layers(params)
    # the scanned model's own parameters: the same arrays up to the layer axis, nothing more or less
    own = jax.eval_shape(scanned.init, jax.random.PRNGKey(0), batch)
    assert jax.tree_util.tree_map(jnp.shape, own) == jax.tree_util.tree_map(jnp.shape, moved)
    _close(unstack_layers(moved), params, atol=0)

    def value_and_grad(spec, p):
        if family in EDIT:  # every head through the stacks (the roll-in around them is the same code either way)
            loss = lambda p: sum(jnp.sum(jnp.tanh(o)) for o in spec.module.apply(  # noqa: E731
                p, batch["src"], batch["tgt"], train=True, rngs={"dropout": jax.random.PRNGKey(2)}))
        else:
            loss = lambda p: spec.loss(p, batch, jax.random.PRNGKey(2), train=True)[0]  # noqa: E731
        return jax.jit(jax.value_and_grad(loss))(p)

    loss, grads = value_and_grad(plain, params)
    scan_loss, scan_grads = value_and_grad(scanned, moved)
    np.testing.assert_allclose(float(scan_loss), float(loss), rtol=1e-5)
    _close(scan_grads, stack_layers(grads))


@pytest.mark.slow
@pytest.mark.parametrize("family", ["ar", "vecconst-authors", "coverage-nat", "cmlmc", "levt", "editor"])
def test_scanned_stacks_decode_the_same(family):
    """AR and the vectorized model: beam search over the per-layer KV cache (with constraint pairs: each layer's
    prefix entries in its cross-attention cache; the authors' forms, whose prefixes are per-head keys and values
    and whose phrases follow the beams); Coverage-NAT: its one-pass decoding over length candidates."""
    plain, scanned = _spec(family, False), _spec(family, True)
    batch = _batch(family)
    params = plain.init(jax.random.PRNGKey(0), batch)
    extras = {"pairs": PairInputs(batch["pair_src"], batch["pair_tgt"])} if "pair_src" in batch else {}
    request = DecodeRequest(batch["src"], extras=extras, max_out=16, beam_size=1 if family == "coverage-nat" else 2)
    want = jax.jit(plain.generate)(params, request)
    got = jax.jit(scanned.generate)(stack_layers(params), request)
    np.testing.assert_array_equal(np.asarray(got["tokens"]), np.asarray(want["tokens"]))
    np.testing.assert_allclose(np.asarray(got["score"]), np.asarray(want["score"]), atol=1e-4)


def test_early_exit_with_scanned_stacks_is_refused():
    with pytest.raises(ConfigError, match="model.scan_layers .*levt.early_exit='1,3,3'"):
        build_config(TINY, ["--config.model.name=levt", "--config.eval.beam_size=1", "--config.model.dec_layers=3",
                            "--config.levt.early_exit=1,3,3", "--config.model.scan_layers=true"])
    cfg = _spec("cmlmc", True).cfg
    x, mask = jnp.zeros((1, 4, cfg.d_model)), jnp.ones((1, 4), bool)
    with pytest.raises(ConfigError, match="early exit after 2 of 3"):
        Decoder(cfg, 3, causal=False).init(jax.random.PRNGKey(0), x, mask, x, mask, False, num_layers=2)
