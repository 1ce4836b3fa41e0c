"""Training: the loss falls, 8 simulated devices give the 1-device step, and a run killed with SIGKILL, or stopped
with SIGTERM between its checkpoints, and resumed ends with exactly the parameters of the uninterrupted run;
validation decodes with the program the restored checkpoint's evaluation uses."""

import functools
import json
import os
import re
import signal
import sys
import textwrap
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxnat.config import workdir_config
from jaxnat.evaluate import already_evaluated
from tests import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "tests", "configs", "tiny.py")


def _env(**extra):
    env = dict(os.environ, JAX_PLATFORMS="cpu", **extra)
    return env


def _train(workdir, *overrides):
    """The command, started: output and errors in one stream (`cli.start`)."""
    # one bucket (48 tokens): one train-step program to compile instead of three
    cmd = [sys.executable, "-m", "jaxnat.main", "--config", TINY, "--workdir", str(workdir),
           "--config.data.bucket_multiple=48", *overrides]
    return cli.start(cmd, cwd=ROOT, env=_env())


def _final_params(workdir, step):
    import orbax.checkpoint as ocp

    path = os.path.join(str(workdir), "checkpoints", "last", str(step))
    restored = ocp.StandardCheckpointer().restore(os.path.join(path, "state"))
    return restored["params"]


# the evaluation that ends a training command: greedy, as validation decodes (its program, compiled already)
QUICK_EVAL = ("--config.eval.latency_sentences=0", "--config.eval.beam_size=1")


@pytest.mark.slow
def test_kill9_and_a_damaged_checkpoint_resume_reproduces_uninterrupted_run(tmp_path):
    # (and re-running a finished run's command neither trains nor evaluates again)
    steps = 24
    full = _train(tmp_path / "full", *QUICK_EVAL)
    out, _ = full.communicate(timeout=600)
    assert full.returncode == 0, out
    metrics = json.loads((tmp_path / "full" / "metrics.json").read_text())
    assert "bleu" in metrics["test"]
    # the same command again: nothing left to train, and metrics.json already holds this evaluation
    written = os.path.getmtime(tmp_path / "full" / "metrics.json")
    again = _train(tmp_path / "full", *QUICK_EVAL)
    out, _ = again.communicate(timeout=600)
    assert again.returncode == 0, out
    assert "training already complete: step 24" in out and "compiled the train step" not in out
    assert "already holds this config's evaluation" in out
    assert os.path.getmtime(tmp_path / "full" / "metrics.json") == written
    # another evaluation setting is evaluated again (the check the command makes before evaluating)
    recorded = workdir_config(str(tmp_path / "full"))
    assert already_evaluated(recorded, str(tmp_path / "full"))
    recorded.eval.latency_sentences = 2
    assert not already_evaluated(recorded, str(tmp_path / "full"))

    # Same run, killed with SIGKILL once a checkpoint in the middle exists, then resumed.
    killed = _train(tmp_path / "resumed", *QUICK_EVAL, "--config.train.plot_curves=true")
    ckpt_dir = tmp_path / "resumed" / "checkpoints" / "last"
    deadline = time.time() + 300
    while time.time() < deadline:
        done = [int(d) for d in os.listdir(ckpt_dir) if d.isdigit()] if ckpt_dir.exists() else []
        if any(8 <= s < steps for s in done):
            break
        time.sleep(0.05)
    killed.send_signal(signal.SIGKILL)
    killed.communicate()
    assert killed.returncode == -signal.SIGKILL
    # ... and its newest checkpoint damaged afterwards (a truncated file): resume falls back to the one before
    newest = max(int(d) for d in os.listdir(ckpt_dir) if d.isdigit())
    for path in (ckpt_dir / str(newest) / "state").rglob("*"):
        if path.is_file():
            path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    resumed = _train(tmp_path / "resumed", *QUICK_EVAL, "--config.train.plot_curves=true")
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out
    assert f"the last checkpoint of step {newest} is unreadable" in out and f"resumed from step {newest - 4}" in out
    assert (tmp_path / "resumed" / "checkpoints" / "unreadable" / f"last-{newest}").is_dir()  # kept, not deleted

    a, b = _final_params(tmp_path / "full", steps), _final_params(tmp_path / "resumed", steps)
    import jax

    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # the history tells the resumed run's story once: the killed process's entries after its checkpoint dropped
    from jaxnat.training.history import read_history

    def story(workdir):
        return [(e["step"], e.get("loss"), e.get("valid_bleu")) for e in read_history(str(workdir))]

    assert story(tmp_path / "full") == story(tmp_path / "resumed")
    assert (tmp_path / "resumed" / "curves.png").is_file()

    # Stopped with SIGTERM between two checkpoints (every 1000 steps here: none but the end's): the step in flight
    # finishes, its checkpoint is written, the exit code is 128 + 15; the resumed run ends where the full one does
    stopped = _train(tmp_path / "stopped", *QUICK_EVAL, "--config.train.checkpoint_every=1000")
    history = tmp_path / "stopped" / "history.jsonl"
    while time.time() < deadline + 300 and not (history.is_file() and history.read_text().count("\n") >= 2):
        time.sleep(0.05)
    stopped.send_signal(signal.SIGTERM)
    out, _ = stopped.communicate(timeout=600)
    assert stopped.returncode == 128 + signal.SIGTERM, out
    at = int(re.search(r"jaxnat: stopped by SIGTERM after step (\d+) \(checkpoint written\)", out).group(1))
    assert 8 <= at < steps and "Traceback" not in out
    assert sorted(int(d) for d in os.listdir(tmp_path / "stopped" / "checkpoints" / "last") if d.isdigit()) == [at]
    resumed = _train(tmp_path / "stopped", *QUICK_EVAL, "--config.train.checkpoint_every=1000")
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0 and f"resumed from step {at}" in out, out
    # the stop's checkpoint is gone once the end's is written
    assert [d for d in os.listdir(tmp_path / "stopped" / "checkpoints" / "last") if d.isdigit()] == [str(steps)]
    # runs.jsonl: the stopped part and the resumed one, their times summed, and the evaluation
    runs = [json.loads(line) for line in (tmp_path / "stopped" / "runs.jsonl").read_text().splitlines()]
    assert [(r["mode"], r.get("steps")) for r in runs] == [("train", at), ("train", steps), ("eval", None)]
    from jaxnat.provenance import summary

    assert summary(str(tmp_path / "stopped"))["train_seconds"] == pytest.approx(runs[0]["seconds"] + runs[1]["seconds"])
    for x, y in zip(jax.tree_util.tree_leaves(a),
                    jax.tree_util.tree_leaves(_final_params(tmp_path / "stopped", steps))):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.slow
def test_the_run_draws_its_keys_as_configured(tmp_path):
    """train.prng_impl: the run's keys (initialisation, dropout) are drawn with that implementation, the same
    config gives the same run, and the process's own setting is left as it was."""
    import jax

    from jaxnat.config import build_config
    from jaxnat.training.history import read_history
    from jaxnat.training.trainer import Trainer

    def run(impl, name):
        config = build_config(TINY, ["--config.data.bucket_multiple=48", "--config.train.steps=2",
                                     "--config.train.log_every=1", "--config.train.eval_every=2",
                                     "--config.train.checkpoint_every=2", "--config.train.valid_bleu_sentences=1",
                                     f"--config.train.prng_impl={impl}"])
        trainer = Trainer(config, str(tmp_path / name))
        init = trainer.init_state(trainer.make_batcher().batch(0))["params"]
        trainer.train()
        return init, [h["loss"] for h in read_history(str(tmp_path / name)) if "loss" in h]

    before = jax.config.jax_default_prng_impl
    (three, three_losses), (rbg, rbg_losses), (again, again_losses) = (run("threefry2x32", "a"), run("rbg", "b"),
                                                                        run("rbg", "c"))
    assert jax.config.jax_default_prng_impl == before
    emb = lambda p: np.asarray(p["params"]["src_embed"]["tokens"]["embedding"])  # noqa: E731
    assert not np.allclose(emb(three), emb(rbg)) and np.array_equal(emb(rbg), emb(again))
    assert len(rbg_losses) == 2 and rbg_losses == again_losses and rbg_losses != three_losses


SHARDED = textwrap.dedent(
    """
    import os
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    import jax, jax.numpy as jnp, numpy as np
    from jaxnat.config import build_config
    from jaxnat.models import build_model
    from jaxnat.training import mesh as mesh_lib
    from jaxnat.training.optim import make_optimizer
    from jaxnat.training.trainer import make_train_step
    assert jax.device_count() == 8
    config = build_config(%(tiny)r, [])
    spec = build_model(config, 64, 64)
    # SGD: the update is linear in the gradient, so parameters expose any difference in the gradient
    # itself (Adam's first steps move every weight by about +-lr whatever its gradient's size, and so turn
    # rounding noise in near-zero gradients into lr-sized differences).
    import optax
    opt, schedule = optax.sgd(0.5), make_optimizer(config.train)[1]
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 16, size=16)
    def rows(n):
        out = np.zeros((16, 16), np.int32)
        for i, l in enumerate(lengths):
            out[i, 0], out[i, 1:l - 1], out[i, l - 1] = 1, rng.integers(6, 64, size=l - 2), 2
        return out
    batch = {"src": rows(16), "tgt": rows(16)}
    params = spec.init(jax.random.PRNGKey(0), {k: jnp.asarray(v) for k, v in batch.items()})
    results = []
    for devices in (jax.devices()[:1], jax.devices()):
        mesh = mesh_lib.make_mesh(devices)
        state = jax.device_put({"step": jnp.zeros((), jnp.int32), "params": params, "opt_state": opt.init(params)},
                               mesh_lib.replicated(mesh))
        step = jax.jit(make_train_step(spec, opt, schedule))
        for _ in range(3):
            state, metrics = step(state, mesh_lib.shard_batch(batch, mesh), jax.random.PRNGKey(1))
        results.append((jax.device_get(state["params"]), float(metrics["loss"])))
    (p1, l1), (p8, l8) = results
    diff = max(float(np.max(np.abs(a - b)))
               for a, b in zip(jax.tree_util.tree_leaves(p1), jax.tree_util.tree_leaves(p8)))
    print("MAXDIFF", diff, "LOSS", l1, l8)
    """
)


@pytest.mark.slow
def test_data_parallel_step_on_8_devices_equals_1_device(tmp_path):
    script = tmp_path / "sharded.py"
    script.write_text(SHARDED % {"tiny": TINY})
    # forked from the server that has imported jax without starting a backend (`cli.run`): the script's own
    # XLA_FLAGS still make the 8 devices it asserts
    result = cli.run([sys.executable, str(script)], cwd=ROOT, env=_env(), timeout=300)
    assert result.returncode == 0, result.stderr
    line = [out_line for out_line in result.stdout.splitlines() if out_line.startswith("MAXDIFF")][0].split()
    diff, loss1, loss8 = float(line[1]), float(line[3]), float(line[4])
    # Tolerance: the 8-way all-reduce sums in another order than 1 device; after 3 steps float32 rounding
    # stays below 1e-6 absolute on parameters of size O(0.1) and 1e-5 on the loss.
    assert diff < 1e-6, diff
    assert abs(loss1 - loss8) < 1e-5


def test_validation_decodes_with_the_program_a_restored_checkpoint_does():
    """`mesh.local_copy` of the replicated training parameters (what validation decodes with) and parameters on
    `mesh.first_local_device` (where `restore` reads a checkpoint to) lower to one program, so the evaluation after
    training reads validation's decoder back from the compilation cache; the replicated ones to another."""
    import jax
    import jax.numpy as jnp

    from jaxnat.training import mesh as mesh_lib

    tree = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(3)}
    trained = jax.device_put(tree, mesh_lib.replicated(mesh_lib.make_mesh()))
    restored = jax.device_put(tree, mesh_lib.first_local_device())
    decode = jax.jit(lambda p, x: x @ p["w"] + p["b"])
    x = np.ones((4, 2), np.float32)
    copy = mesh_lib.local_copy(trained)
    assert all(a.sharding == mesh_lib.first_local_device() for a in jax.tree_util.tree_leaves(copy))
    jax.tree_util.tree_map(np.testing.assert_array_equal, copy, tree)
    assert decode.lower(copy, x).as_text() == decode.lower(restored, x).as_text()
    assert decode.lower(trained, x).as_text() != decode.lower(restored, x).as_text()


@functools.lru_cache(maxsize=None)
def _tiny_step_setup(microbatches: int = 1, lengths: tuple = (), sgd: bool = False):
    """(the tiny AR model's jit'd train step, its initial state, a batch of 8 copy pairs of ``lengths``, default 8).
    ``sgd``: plain SGD instead of the config's Adam, whose first update (about lr · sign(g)) would turn rounding
    noise in near-zero gradients into lr-sized differences. Cached: the tests that take the same setup share its
    compiled step (its arrays are immutable, and the step donates none of them)."""
    import jax
    import jax.numpy as jnp

    from jaxnat.config import build_config
    from jaxnat.models import build_model
    from jaxnat.training.optim import make_optimizer
    from jaxnat.training.trainer import make_train_step

    config = build_config(TINY, ["--config.model.dropout=0.0", "--config.train.lr=3e-3",
                                 "--config.train.warmup_steps=1"])
    spec = build_model(config, 32, 32)
    opt, schedule = make_optimizer(config.train)
    if sgd:
        import optax
        opt = optax.sgd(0.5)
    rng = np.random.default_rng(0)
    tokens = np.concatenate([np.ones((8, 1)), rng.integers(6, 32, (8, 6)), np.full((8, 1), 2)], 1).astype(np.int32)
    for row, length in enumerate(lengths):  # [BOS, …, EOS] then PAD
        tokens[row, length - 1], tokens[row, length:] = 2, 0
    batch = {"src": jnp.asarray(tokens), "tgt": jnp.asarray(tokens)}  # learn to copy
    params = spec.init(jax.random.PRNGKey(0), batch)
    state = {"step": jnp.zeros((), jnp.int32), "params": params, "opt_state": opt.init(params)}
    return jax.jit(make_train_step(spec, opt, schedule, microbatches)), state, batch


@pytest.mark.slow
def test_microbatches_make_the_whole_batch_update():
    """train.microbatches cuts a batch's rows into chunks whose gradients one scan adds up: with a loss summed over
    tokens (the AR model's) the update is the whole batch's, even with chunks of unequal token counts."""
    import jax

    lengths = (3, 8, 4, 8, 5, 2, 8, 6)
    results = []
    for k in (1, 4):  # chunks of rows (0, 4), (1, 5), …: 8, 10, 12 and 14 tokens
        step, state, batch = _tiny_step_setup(k, lengths, sgd=True)
        state, metrics = step(state, batch, jax.random.PRNGKey(0))
        results.append((jax.device_get(state["params"]), jax.device_get(metrics)))
    (whole, m1), (params, m) = results
    assert float(m["tokens"]) == float(m1["tokens"]) == sum(lengths) - len(lengths)  # BOS is not predicted
    for key in ("loss", "nll", "grad_norm"):
        np.testing.assert_allclose(float(m[key]), float(m1[key]), rtol=1e-5)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), params, whole)


@pytest.mark.slow
def test_loss_falls_on_a_tiny_model():
    import jax

    step, state, batch = _tiny_step_setup()
    losses = []
    for _ in range(30):
        state, metrics = step(state, batch, jax.random.PRNGKey(0))
        losses.append(float(metrics["loss"]))
    assert losses[-1] < 0.7 * losses[0] and losses[-1] < min(losses[:10]), losses


def test_non_finite_step_is_skipped():
    import jax
    import jax.numpy as jnp

    step, state, batch = _tiny_step_setup()
    poisoned = jax.tree_util.tree_map(lambda x: x, state)
    emb = poisoned["params"]["params"]["src_embed"]["tokens"]["embedding"]
    poisoned["params"]["params"]["src_embed"]["tokens"]["embedding"] = emb.at[6].set(jnp.nan)
    new, metrics = step(poisoned, batch, jax.random.PRNGKey(0))
    assert not bool(metrics["finite"])
    assert int(new["step"]) == 1  # the step counts, the update does not happen
    for tree in ("params", "opt_state"):  # Adam's moments too: a NaN there would make every later update NaN
        for a, b in zip(jax.tree_util.tree_leaves(poisoned[tree]), jax.tree_util.tree_leaves(new[tree])):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _stand_in_spec():
    """A model of three weights for `make_train_step`, in microseconds: row r's loss is n_r · (x_r · w)² (n_r its
    tokens), plus √|w_0| times the batch's "kink" (its gradient at w_0 = 0 is not finite, its value is); its term
    "draw" is a uniform number from the step's key (a batch mean, as a model's terms are)."""
    import types

    import jax
    import jax.numpy as jnp

    def loss(params, batch, rng, train):
        n = batch["n"]
        loss_sum = jnp.sum(n * (batch["x"] @ params["w"]) ** 2) + jnp.sum(batch["kink"]) * jnp.sqrt(
            jnp.abs(params["w"][0]))
        return loss_sum, {"nll": loss_sum, "count": jnp.sum(n), "draw": jax.random.uniform(rng)}

    return types.SimpleNamespace(loss=loss, terms=("draw",), stepped=False)


def test_the_train_step_normalises_weights_and_keys_its_chunks():
    """`make_train_step` on a stand-in model: the loss is the batch's loss sum over its tokens, the learning rate
    the step's, a term the chunks' token-weighted mean, each chunk's key `fold_in(fold_in(root, step), chunk)`; a
    step whose gradient alone is not finite changes nothing. Mutations of each (the sum not divided, the next
    step's rate, a term's plain mean, one key for every chunk or every step, the loss alone checked) passed every
    test but slow ones, or all."""
    import jax
    import jax.numpy as jnp
    import optax

    from jaxnat.training.optim import warmed_up_schedule
    from jaxnat.training.trainer import make_train_step

    spec, schedule, root = _stand_in_spec(), warmed_up_schedule(1.0, 4, 0.0), jax.random.PRNGKey(3)
    rng = np.random.default_rng(0)
    batch = {"x": jnp.asarray(rng.normal(size=(4, 3)), jnp.float32), "n": jnp.asarray([1.0, 2.0, 3.0, 6.0]),
             "kink": jnp.zeros(4)}
    state = {"step": jnp.asarray(1, jnp.int32), "params": {"w": jnp.asarray([0.5, -1.0, 2.0])}}
    state["opt_state"] = optax.sgd(0.1).init(state["params"])
    key = jax.random.fold_in(root, 1)
    sums = [float(spec.loss(state["params"], {k: v[i::2] for k, v in batch.items()}, key, True)[0]) for i in (0, 1)]
    draws = [float(jax.random.uniform(jax.random.fold_in(key, i))) for i in (0, 1)]
    results = {}
    for k in (1, 2):  # chunk i: rows i, i + 2, with 4 and 8 tokens
        step = jax.jit(make_train_step(spec, optax.sgd(0.1), schedule, microbatches=k))
        new, metrics = step(state, batch, root)
        results[k] = new["params"]["w"]
        np.testing.assert_allclose(float(metrics["loss"]), sum(sums) / 12, rtol=1e-5)
        np.testing.assert_allclose(float(metrics["lr"]), 0.5, rtol=1e-6)  # step 1's rate: 2/4 of the warm-up
        expected = float(jax.random.uniform(key)) if k == 1 else (4 * draws[0] + 8 * draws[1]) / 12
        np.testing.assert_allclose(float(metrics["draw"]), expected, rtol=1e-6)
        kinked, metrics = step({**state, "params": {"w": state["params"]["w"].at[0].set(0.0)}},
                               {**batch, "kink": jnp.ones(4)}, root)
        assert np.isfinite(float(metrics["loss"])) and not bool(metrics["finite"])
        np.testing.assert_array_equal(np.asarray(kinked["params"]["w"]), [0.0, -1.0, 2.0])
    np.testing.assert_allclose(np.asarray(results[2]), np.asarray(results[1]), rtol=1e-6)


@pytest.mark.slow
def test_run_stops_after_consecutive_non_finite_steps(tmp_path):
    # lr 1e12 blows the parameters up after the first update; every later step is non-finite and skipped.
    run = _train(tmp_path / "nan", "--config.train.lr=1e12", "--config.train.warmup_steps=1",
                 "--config.train.max_bad_steps=3")
    out, _ = run.communicate(timeout=600)
    assert run.returncode == 2, out
    last = out.strip().splitlines()[-1]
    assert last.startswith("jaxnat: error: loss was not finite for 3 consecutive steps"), last


def test_only_non_finite_steps_in_a_row_stop_a_run():
    """train.max_bad_steps counts a row: a finite step starts it again (a count never reset stopped a run after
    that many scattered bad steps, which the run above, bad from its second step on, could not show)."""
    from jaxnat.training.trainer import NonFiniteSteps, TrainingError

    bad = NonFiniteSteps(limit=3)
    for step, finite in enumerate([False, False, True, False, False, True, True, False]):
        bad.count(finite, step)
    assert (bad.in_a_row, bad.skipped) == (1, 5)
    bad.count(False, 8)
    with pytest.raises(TrainingError, match=r"^loss was not finite for 3 consecutive steps \(last: step 10\)"):
        bad.count(False, 9)


def test_periodic_work_falls_on_its_period_and_on_the_last_step():
    from jaxnat.training.trainer import due

    # train.steps=12 with a period of 5: steps 5 and 10, and 12, the run's end (its last window, validation and
    # checkpoint), not 11
    assert [done for done in range(1, 13) if due(done, 5, 12)] == [5, 10, 12]
    assert [done for done in range(1, 13) if due(done, 20, 12)] == [12]  # a period longer than the run: the end


def test_learning_rate_schedules():
    from jaxnat.training.optim import warmed_up_schedule

    # fairseq's: linear warm-up, then lr * sqrt(warmup / step), with optax's step 0 as fairseq's update 1
    inv = warmed_up_schedule(1.0, 4, 0.0, "inverse_sqrt")
    np.testing.assert_allclose([float(inv(s)) for s in (0, 3, 15)], [0.25, 1.0, 0.5], rtol=1e-6)
    # linear: the same warm-up, then a straight line to 0 at the last step
    lin = warmed_up_schedule(1.0, 4, 0.0, "linear", total_steps=12)
    np.testing.assert_allclose([float(lin(s)) for s in (0, 3, 7, 11, 20)], [0.25, 1.0, 0.5, 0.0, 0.0], atol=1e-6)
    # cosine (fairseq's, one period ending with the run): the peak after the warm-up, min_lr at the last step
    cos = warmed_up_schedule(1.0, 4, 0.0, "cosine", total_steps=12, min_lr=0.1)
    np.testing.assert_allclose([float(cos(s)) for s in (0, 3, 7, 11, 20)],
                               [0.25, 1.0, 0.1 + 0.45 * (1 + np.cos(np.pi / 2)), 0.1, 0.1], atol=1e-6)
    # constant (a fine-tuning phase): without warm-up, lr from the first step on
    const = warmed_up_schedule(1e-5, 0, 0.0, "constant")
    np.testing.assert_allclose([float(const(s)) for s in (0, 1, 500)], [1e-5] * 3, rtol=1e-6)
    # the warm-up rises from train.warmup_init_lr; without one, inverse_sqrt decays from the first step
    init = warmed_up_schedule(1.0, 4, 0.2, "inverse_sqrt")
    np.testing.assert_allclose([float(init(s)) for s in (0, 1, 3)], [0.4, 0.6, 1.0], rtol=1e-6)
    unwarmed = warmed_up_schedule(1.0, 0, 0.0, "inverse_sqrt")
    np.testing.assert_allclose([float(unwarmed(s)) for s in (0, 3)], [1.0, 0.5], rtol=1e-6)


def test_the_optimizer_takes_every_setting_of_the_train_section():
    """`make_optimizer` against AdamW with clipping written out in NumPy, for three updates with none of the train
    section's optimizer keys at its default: a key passed as another (adam_b1 as adam_b2), dropped (weight decay,
    train.min_lr) or scaled wrongly changed every run's training without failing a test."""
    import jax.numpy as jnp
    import optax

    from jaxnat.config import build_config
    from jaxnat.training.optim import make_optimizer

    lr, wd, clip, b1, b2, eps = 0.5, 0.1, 1.0, 0.8, 0.9, 1e-3
    config = build_config(TINY, [f"--config.train.{k}={v}" for k, v in dict(
        lr=lr, lr_schedule="cosine", warmup_steps=2, warmup_init_lr=0.1, min_lr=0.05, steps=4, weight_decay=wd,
        clip_norm=clip, adam_b1=b1, adam_b2=b2, adam_eps=eps).items()])
    opt, schedule = make_optimizer(config.train)
    rates = [0.3, 0.5, 0.05 + 0.225 * (1 + np.cos(np.pi / 2)), 0.05]  # warm-up from 0.1, a cosine to min_lr
    np.testing.assert_allclose([float(schedule(s)) for s in range(4)], rates, rtol=1e-6)
    params, m, v = np.array([1.0, -2.0, 0.5]), np.zeros(3), np.zeros(3)
    grads = [np.array([3.0, 4.0, 0.0]), np.array([0.1, -0.2, 0.3]), np.array([-1.0, 0.5, 2.0])]
    state, got = opt.init({"w": jnp.asarray(params, jnp.float32)}), {"w": jnp.asarray(params, jnp.float32)}
    for t, g in enumerate(grads, 1):
        updates, state = opt.update({"w": jnp.asarray(g, jnp.float32)}, state, got)
        got = optax.apply_updates(got, updates)
        g = g * min(1.0, clip / np.linalg.norm(g))
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        adam = (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
        params = params - rates[t - 1] * (adam + wd * params)
        np.testing.assert_allclose(np.asarray(got["w"]), params, rtol=1e-5)


def _plateau_reference(ppls, factor, patience, stop_patience):
    """The plateau rule in plain Python, with the two counters of its statement: the learning-rate scale after each
    validation (the list ends at the validation that stops the run) and whether the run stopped."""
    best, bad_lr, bad_stop, scale, scales = float("inf"), 0, 0, 1.0, []
    for ppl in ppls:
        if ppl < best:  # a new best perplexity (nan never is)
            best, bad_lr, bad_stop = ppl, 0, 0
        else:
            bad_lr, bad_stop = bad_lr + 1, bad_stop + 1
            if patience and bad_lr == patience:
                scale, bad_lr = scale * factor, 0
        scales.append(scale)
        if stop_patience and bad_stop == stop_patience:
            return scales, True
    return scales, False


def _plateau_run(ppls, factor, patience, stop_patience, resume_at=None):
    """`optim.Plateau` on ``ppls``, as `_plateau_reference` returns; with ``resume_at``, a fresh one takes up the
    progress after that many validations (JSON, as a checkpoint's) and goes on."""
    from jaxnat.training.optim import Plateau

    tracker, scales = Plateau(factor, patience, stop_patience), []
    for i, ppl in enumerate(ppls):
        if i == resume_at:
            progress = json.loads(json.dumps(tracker.progress()))
            tracker = Plateau(factor, patience, stop_patience)
            tracker.resume(progress)
        stopped = tracker.validated(2 * (i + 1), ppl)
        scales.append(tracker.scale)
        if stopped:
            return scales, True
    return scales, False


def test_plateau_rule_matches_a_plain_reference():
    # the EDITOR paper's AR baseline (Xu & Carpuat 2021, §4.1): x0.7 after 4 validations without a gain, a stop
    # after 20; a tie with the best is no gain
    ppls = [30.0, 25.0, 26.0, 25.0, 27.0, 25.5, 24.0] + [24.0 + i % 3 for i in range(25)]
    scales, stopped = _plateau_run(ppls, 0.7, 4, 20)
    assert (scales, stopped) == _plateau_reference(ppls, 0.7, 4, 20)
    assert stopped and len(scales) == 7 + 20  # the 20th validation after the best at 24.0
    assert scales[:5] == [1.0] * 5 and scales[5] == 0.7 and scales[-1] == pytest.approx(0.7 ** 6)  # 4 + 20 misses
    # resumed after the rate was lowered (scale 0.7 from the 11th validation): the scale is taken up, not reset
    assert _plateau_run(ppls, 0.7, 4, 20, resume_at=12) == (scales, stopped)
    # other schedules: no scale, only the stop
    assert _plateau_run(ppls, 0.7, 0, 20) == ([1.0] * 27, True)
    # nan and inf never gain; a finite perplexity after them does
    assert _plateau_run([float("nan"), float("inf"), 5.0, 5.0], 0.5, 2, 0) == ([1.0, 0.5, 0.5, 0.5], False)


@settings(max_examples=150, deadline=None)
@given(ppls=st.lists(st.one_of(st.sampled_from([1.5, 2.0, 2.5, float("inf"), float("nan")]),
                               st.floats(1.0, 4.0)), max_size=40),
       factor=st.floats(0.05, 0.95), patience=st.integers(0, 5), stop_patience=st.integers(0, 8),
       resume_at=st.integers(0, 40))
def test_plateau_rule_property(ppls, factor, patience, stop_patience, resume_at):
    """Any perplexities: the implementation's scales and stop are the reference's, resumed anywhere or not."""
    expected = _plateau_reference(ppls, factor, patience, stop_patience)
    assert _plateau_run(ppls, factor, patience, stop_patience) == expected
    assert _plateau_run(ppls, factor, patience, stop_patience, resume_at) == expected


def test_plateau_scale_is_an_array_of_the_optimizer_state():
    """The plateau schedule's warm-up is the others'; its scale multiplies Adam's updates and a new one reaches a
    jit'd update without tracing it again; the other schedules' optimizer states have no scale (their checkpoints
    restore as before)."""
    import jax
    import jax.numpy as jnp

    from jaxnat.config import build_config
    from jaxnat.training.optim import lr_scale, make_optimizer, warmed_up_schedule, with_lr_scale

    plateau = warmed_up_schedule(1.0, 4, 0.0, "plateau")
    np.testing.assert_allclose([float(plateau(s)) for s in (0, 3, 500)], [0.25, 1.0, 1.0], rtol=1e-6)
    config = build_config(TINY, ["--config.train.lr_schedule=plateau"])
    opt, _ = make_optimizer(config.train)
    params = {"w": jnp.linspace(-1.0, 1.0, 6, dtype=jnp.float32)}
    grads = {"w": jnp.linspace(0.5, -0.3, 6, dtype=jnp.float32)}
    traces = []

    @jax.jit
    def update(opt_state):
        traces.append(1)
        return opt.update(grads, opt_state, params)[0]["w"]

    state = opt.init(params)
    assert float(lr_scale(state)) == 1.0
    full = update(state)
    half = with_lr_scale(state, 0.5)
    assert float(lr_scale(half)) == 0.5 and float(lr_scale(state)) == 1.0
    np.testing.assert_array_equal(np.asarray(update(half)), 0.5 * np.asarray(full))
    assert len(traces) == 1
    assert lr_scale(make_optimizer(build_config(TINY, []).train)[0].init(params)) is None


@pytest.mark.slow
def test_plateau_run_lowers_the_lr_stops_early_and_resumes(tmp_path, monkeypatch, caplog):
    """A tiny run with scripted validation perplexities (plateau_patience 2, factor 0.5, stop_patience 5): the
    logged learning rate halves after every 2 validations without a gain, a run stopped at step 10 and resumed goes
    on with the scale and the count of the uninterrupted one, and the run stops early at its 5th validation without
    a gain with a checkpoint there; the same command again trains nothing."""
    import logging

    from jaxnat.config import build_config
    from jaxnat.training import trainer as trainer_lib
    from jaxnat.training.history import read_history
    from jaxnat.training.optim import lr_scale

    nll = [3.0, 3.0, 3.0, 2.0, 2.5, 2.0, 2.1, 2.2, 2.3, 1.0, 1.0]  # the validations of steps 2, 4, 6, ...
    calls = []

    def validate(self, params, valid_data, translator):
        calls.append(1)
        return {"valid_loss": nll[len(calls) - 1], "valid_nll": nll[len(calls) - 1], "valid_bleu": 0.0}

    monkeypatch.setattr(trainer_lib.Trainer, "validate", validate)  # no decoding: this test is about the schedule
    monkeypatch.setattr(trainer_lib, "plot_curves", lambda workdir: "not drawn")
    caplog.set_level(logging.INFO, logger="jaxnat")
    keys = ["--config.data.synthetic_train=300", "--config.train.lr_schedule=plateau", "--config.train.lr=2e-3",
            "--config.train.plateau_factor=0.5", "--config.train.plateau_patience=2", "--config.train.stop_patience=5",
            "--config.train.warmup_steps=0", "--config.train.eval_every=2", "--config.train.log_every=2",
            "--config.train.checkpoint_every=4"]
    workdir = str(tmp_path / "run")
    assert trainer_lib.Trainer(build_config(TINY, keys + ["--config.train.steps=10"]), workdir).train()
    assert len(calls) == 5
    config = build_config(TINY, keys + ["--config.train.steps=40"])
    assert trainer_lib.Trainer(config, workdir).train()  # resumed at step 10
    assert "resumed from step 10" in caplog.text
    # one train program a run: a new scale is an array of the state (a compiled step refuses other input types)
    assert caplog.text.count("compiled the train step for 1 batch shapes") == 2
    assert "step 18: stopping early, before train.steps=40: 5 validations without a new best valid perplexity" \
        in caplog.text
    scales, stopped = _plateau_reference([np.exp(v) for v in nll[:len(calls)]], 0.5, 2, 5)
    assert stopped and len(calls) == len(scales) == 9  # steps 2 … 18
    # each log window (2 steps) trains with the scale of the validation before it
    logged = {e["step"]: e["lr"] for e in read_history(workdir) if "lr" in e}
    assert sorted(logged) == list(range(2, 20, 2))
    np.testing.assert_allclose([logged[s] for s in sorted(logged)], [2e-3 * s for s in [1.0] + scales[:-1]],
                               rtol=1e-6)
    assert scales[-1] == 0.125
    # the command again: nothing to train; the newest checkpoint is the stop's, with its scale and progress
    caplog.clear()
    trainer = trainer_lib.Trainer(config, workdir)
    assert not trainer.train()
    assert "training already complete: stopped early at step 18" in caplog.text
    state, progress = trainer.ckpt.restore_state_and_progress(trainer.init_state(trainer.make_batcher().batch(0)))
    assert int(state["step"]) == 18 and float(lr_scale(state["opt_state"])) == 0.125
    assert progress.items() >= {"best_ppl": float(np.exp(2.0)), "best_step": 8, "since_best": 5,
                                "lr_scale": 0.125}.items()


def test_a_resume_on_batches_of_another_shape_says_so():
    """A run trained on 8 devices (batches of 8 rows of 48 tokens for data.batch_tokens=512) and resumed on 1 (10
    rows) went on with other batches than the uninterrupted run without a word; the same shapes on another device
    count (8 rows on 8, 1 or 2 devices) resume that run, as do the states written before the plan was recorded.
    Shapes changed by the config on as many devices are put down to it, not to the device count."""
    from jaxnat.training import trainer as trainer_lib

    eight = trainer_lib.batch_plan({(8, 48)}, 8)
    assert eight == {"devices": 8, "batch_shapes": [[8, 48]]}
    assert trainer_lib.plan_change(None, eight) == ""
    assert trainer_lib.plan_change({"lr_scale": 1.0}, eight) == ""
    assert trainer_lib.plan_change(trainer_lib.batch_plan({(8, 48)}, 1), eight) == ""
    said = trainer_lib.plan_change(eight, trainer_lib.batch_plan({(10, 48)}, 1))
    assert said.startswith("the checkpoint was trained on batches of 8x48 on 8 device(s), this run's are 10x48 on 1 "
                           "device(s)") and said.endswith("(resume on 8 device(s) to continue it exactly)")
    # on as many devices, the config changed them (data.pack=false here): that advice was given all the same
    said = trainer_lib.plan_change(eight, trainer_lib.batch_plan({(8, 48), (16, 32)}, 8))
    assert said.endswith("(data.batch_tokens, data.max_len, data.pack, data.max_buckets or train.microbatches "
                         "changed: resume with the trained values to continue it exactly)"), said


def test_a_resume_on_other_training_pairs_says_so_and_records_them(tmp_path):
    """A run resumed with a data.dir whose training files held other pairs trained on them without a word (only a
    distillation's manifest was compared). A training state records a cheap fingerprint of the pairs it trained
    on: the same pairs moved elsewhere (and gzipped) resume silently, other ones (one pair edited) warn, naming both
    places, and are recorded from the step the run resumed at."""
    import gzip

    import ml_collections

    from jaxnat.data import sources, text
    from jaxnat.training import trainer as trainer_lib

    def corpus(name, pairs, gz=False):
        d = tmp_path / name
        d.mkdir()
        for lang, i in (("en", 0), ("de", 1)):
            for split, lines in (("train", [p[i] for p in pairs]), ("val", ["a", "b"])):
                data = "".join(f"{line}\n" for line in lines).encode()
                (d / f"{split}.{lang}{'.gz' if gz else ''}").write_bytes(gzip.compress(data) if gz else data)
        cfg = ml_collections.ConfigDict(dict(source="text", dir=str(d), src_lang="en", tgt_lang="de",
                                             train_split="train", valid_split="val", test_splits=""))
        return {"origin": sources.train_origin(cfg),
                "fingerprint": text.corpus_fingerprint(*sources.load_corpus(cfg)["train"])}

    pairs = [(f"source {i}", f"ziel {i}") for i in range(1000)]
    first = corpus("a", pairs)
    assert first["origin"] == f"{tmp_path}/a/train.{{en,de}}"
    corpora, said = trainer_lib.corpora_from(None, first, 0)
    assert corpora == [{"step": 0, **first}] and said == ""
    assert trainer_lib.corpora_from({"corpora": corpora}, corpus("moved", pairs, gz=True), 8) == (corpora, "")
    assert trainer_lib.corpora_from({"lr_scale": 1.0}, first, 8) == ([{"step": 8, **first}], "")  # an older state
    other = corpus("b", [*pairs[:501], ("source 501", "ziel 502"), *pairs[502:]])  # 501: a sampled pair
    recorded, said = trainer_lib.corpora_from({"corpora": corpora}, other, 8)
    assert recorded == [*corpora, {"step": 8, **other}]
    assert said.startswith(f"the training pairs of {tmp_path}/b/train.{{en,de}} (1000 pairs) are not those this run "
                           f"trained on from step 0 to 8, read from {tmp_path}/a/train.{{en,de}} (1000 pairs)"), said


def test_a_split_that_filters_down_to_nothing_is_refused(caplog):
    """A valid set of paragraphs, every pair longer than data.max_len, left validation a loss over no pair: the
    run logged `valid_loss 0.000 valid_nll 0.000` at every validation (and the plateau schedule saw no gain). Both
    splits' counts are logged, and a split left empty stops the run in one line before it initialises."""
    from jaxnat.training import trainer as trainer_lib

    kept = {"kept": 3, "too_long": 1, "truncated": 0, "empty": 0}
    with caplog.at_level("INFO", logger="jaxnat"):
        trainer_lib.check_pairs_left(kept, "valid")
    assert f"valid pairs: {kept}" in caplog.text
    for split in ("train", "valid"):
        with pytest.raises(trainer_lib.TrainingError, match=f"^no {split} pair is left after filtering .*'too_long': "
                                                            "6.*raise data.max_len or set data.truncate=true$"):
            trainer_lib.check_pairs_left({"kept": 0, "too_long": 6, "truncated": 0, "empty": 0}, split)


def test_a_resume_with_another_learning_rate_schedule_says_so():
    """A cosine (or linear) run trained to train.steps=12 and resumed with train.steps=24 went on at a rate that
    jumped from 0 back up to most of train.lr without a word (the schedules end at train.steps); a training state
    records its schedule's keys and its next step's rate, and a resume whose rate differs says why. More steps of
    the default inverse square root, which does not end, go on with the same rates: nothing to say."""
    from jaxnat.config import build_config
    from jaxnat.training import trainer as trainer_lib
    from jaxnat.training.optim import make_optimizer

    def record(schedule, steps):
        t = build_config(TINY, [f"--config.train.lr_schedule={schedule}", f"--config.train.steps={steps}"]).train
        return trainer_lib.schedule_record(t, make_optimizer(t)[1], 12)

    trained = record("cosine", 12)
    assert trained["next_lr"] == 0.0 and trained["schedule"]["steps"] == 12
    assert trainer_lib.schedule_change(trained, record("cosine", 12)) == ""
    assert trainer_lib.schedule_change({"lr_scale": 1.0}, record("cosine", 24)) == ""  # a state of before the record
    said = trainer_lib.schedule_change(trained, record("cosine", 24))
    assert said.startswith("the learning rate jumps at the resume: the next step trains with 0.00178, the "
                           "checkpoint's schedule with 0 (train.steps=24, trained with 12;"), said
    assert trainer_lib.schedule_change(record("inverse_sqrt", 12), record("inverse_sqrt", 24)) == ""


def test_a_workdir_whose_training_states_are_all_unreadable_is_not_trained_from_the_start(tmp_path):
    """Every training state unreadable (a copy gone wrong, states of another structure): each was moved aside with
    a warning and the run trained again from step 0 without a line saying so, hours before a user would notice.
    The command stops in one line instead, before compiling anything; the same command again starts over."""
    from jaxnat.config import build_config
    from jaxnat.training import trainer as trainer_lib
    from jaxnat.training.checkpoint import Checkpoints

    workdir = tmp_path / "run"
    ckpt = Checkpoints(str(workdir), 3)
    for step in (4, 8):
        ckpt.save_state(step, {"step": np.int32(step)})  # no parameters: nothing restores into the run's state
    ckpt.wait()
    ckpt.close()
    trainer = trainer_lib.Trainer(build_config(TINY, ["--config.data.synthetic_train=300"]), str(workdir))
    with pytest.raises(trainer_lib.TrainingError, match=r"no training state in .+ is readable \(steps \[4, 8\], moved "
                                                        r"to checkpoints/unreadable/.+; the same command again trains"):
        trainer.train()
    assert sorted(os.listdir(workdir / "checkpoints" / "unreadable")) == ["last-4", "last-8"]
    assert not trainer.ckpt.last.all_steps()


def test_a_workdir_refuses_an_optimizer_that_cannot_resume_its_checkpoints(tmp_path):
    """Switching to or from the plateau schedule (or clipping) changes the optimizer state's structure: a workdir
    with training states refuses it in one line, where restoring would move every checkpoint aside and train from
    the start; a change that keeps the structure (another rate, another decay) resumes."""
    from jaxnat.config import build_config
    from jaxnat.errors import ConfigError
    from jaxnat.training.trainer import check_resumable

    (tmp_path / "config.json").write_text(build_config(TINY, []).to_json_best_effort(sort_keys=True))
    plateau = build_config(TINY, ["--config.train.lr_schedule=plateau"])
    check_resumable(plateau, str(tmp_path))  # no training state yet: a new run
    (tmp_path / "checkpoints" / "last" / "4").mkdir(parents=True)
    for args in (["--config.train.lr=1e-4", "--config.train.lr_schedule=constant"], ["--config.train.stop_patience=3"]):
        check_resumable(build_config(TINY, args), str(tmp_path))
    for config in (plateau, build_config(TINY, ["--config.train.clip_norm=1.0"])):
        with pytest.raises(ConfigError, match="hold the optimizer state of train.lr_schedule=inverse_sqrt, "
                                              "train.clip_norm=0.0, which this config's") as err:
            check_resumable(config, str(tmp_path))
        assert "\n" not in str(err.value)


def test_a_workdir_with_training_states_refuses_another_seed_or_key_implementation(tmp_path):
    """train.seed and train.prng_impl decide the batch of every step and every random draw: resuming a run with
    other values trained on as another run and rewrote its config.json to credit the whole run to them. Refused in
    one line once the workdir has a training state; a new workdir, or another value of an allowed key, is not."""
    from jaxnat.config import build_config
    from jaxnat.errors import ConfigError
    from jaxnat.training.trainer import check_resumable

    (tmp_path / "config.json").write_text(build_config(TINY, []).to_json_best_effort(sort_keys=True))
    seed = build_config(TINY, ["--config.train.seed=7"])
    check_resumable(seed, str(tmp_path))  # no training state yet: a new run
    (tmp_path / "checkpoints" / "last" / "4").mkdir(parents=True)
    check_resumable(build_config(TINY, ["--config.train.steps=48", "--config.train.lr=1e-4"]), str(tmp_path))
    with pytest.raises(ConfigError, match=r"train.seed=7 \(trained: 0\)") as err:
        check_resumable(seed, str(tmp_path))
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"train.prng_impl='rbg' \(trained: 'threefry2x32'\)"):
        check_resumable(build_config(TINY, ["--config.train.prng_impl=rbg"]), str(tmp_path))


def test_init_from_a_run_that_has_not_validated_yet_says_so_before_writing(tmp_path):
    """train.init_from naming a run stopped before its first validation (a training state, no best checkpoint)
    said 'its best checkpoint is unreadable', after writing config.json, spm/ and checkpoints/ into the new
    workdir; now one line that says what is missing, and nothing written."""
    from jaxnat.config import build_config
    from jaxnat.training.trainer import Trainer, TrainingError

    source = tmp_path / "first"
    (source / "checkpoints" / "best").mkdir(parents=True)  # Orbax makes it at the run's start
    (source / "checkpoints" / "last" / "4").mkdir(parents=True)
    (source / "config.json").write_text(build_config(TINY, []).to_json_best_effort(sort_keys=True))
    config = build_config(TINY, [f"--config.train.init_from={source}"])
    with pytest.raises(TrainingError, match=f"train.init_from={source}: no best checkpoint there \\(no validation"):
        Trainer(config, str(tmp_path / "second"))
    assert not (tmp_path / "second").exists()


def test_a_log_window_that_spans_a_validation_counts_all_its_steps_time(tmp_path, monkeypatch):
    """A log window's tokens/s (and MFU) divide its steps' tokens by its steps' time. With train.eval_every not a
    multiple of train.log_every, validation reset the window's clock while its tokens kept counting: a window of 4
    steps with a validation after its 2nd divided 4 steps' tokens by the time of the last 2 (about 2x too high).
    Each step here takes at least 0.25 s (a slowed shard_batch), so no window can exceed its tokens over 1 s."""
    from jaxnat.config import build_config
    from jaxnat.training import trainer as trainer_lib
    from jaxnat.training.history import read_history

    shard, tokens = trainer_lib.mesh_lib.shard_batch, []

    def slow_shard(batch, mesh):
        tokens.append(int(np.count_nonzero(batch["tgt"])))  # an upper bound of the step's target tokens
        time.sleep(0.25)
        return shard(batch, mesh)

    monkeypatch.setattr(trainer_lib.mesh_lib, "shard_batch", slow_shard)
    monkeypatch.setattr(trainer_lib.Trainer, "validate", lambda self, params, valid_data, translator: {
        "valid_loss": 1.0, "valid_nll": 1.0, "valid_bleu": 0.0})
    config = build_config(TINY, ["--config.data.synthetic_train=300", "--config.train.steps=4",
                                 "--config.train.log_every=4", "--config.train.eval_every=2",
                                 "--config.train.checkpoint_every=4"])
    assert trainer_lib.Trainer(config, str(tmp_path / "run")).train()
    (window,) = [e for e in read_history(str(tmp_path / "run")) if "tokens_per_s" in e]
    assert len(tokens) == 4 and window["tokens_per_s"] <= sum(tokens) / 1.0


@pytest.mark.parametrize("signalled, windows", [(6, [4, 6]), (8, [4, 8])])
def test_a_signal_during_a_validation_stops_there_with_its_steps_logged(tmp_path, monkeypatch, signalled, windows):
    """SIGTERM during a validation (train.eval_every=2 of 8 steps; train.log_every=4) stops the run at that step,
    its checkpoint written: at step 6 the metrics of steps 5-6 were never logged (history.jsonl, TensorBoard) and the
    resumed run's window of step 8 counted 7-8 alone; they are logged as a window of step 6. At the last step the
    signal was read at no step: the command went on to the whole evaluation (minutes with beam search) and exited 0,
    and a scheduler's SIGKILL came in the middle of it; the run ends there now, the same command evaluates."""
    from jaxnat.config import build_config
    from jaxnat.errors import Stopped
    from jaxnat.training import trainer as trainer_lib
    from jaxnat.training.history import read_history

    validated = []

    def validate(self, params, valid_data, translator):
        validated.append(1)
        if 2 * len(validated) == signalled:
            os.kill(os.getpid(), signal.SIGTERM)  # caught by the trainer's handler: recorded, read after the step
        return {"valid_loss": 1.0, "valid_nll": 1.0, "valid_bleu": 0.0}

    monkeypatch.setattr(trainer_lib.Trainer, "validate", validate)
    config = build_config(TINY, ["--config.data.synthetic_train=300", "--config.train.steps=8",
                                 "--config.train.log_every=4", "--config.train.eval_every=2",
                                 "--config.train.checkpoint_every=4"])
    trainer = trainer_lib.Trainer(config, str(tmp_path / "run"))
    with pytest.raises(Stopped, match=f"stopped by SIGTERM after step {signalled}") as stopped:
        trainer.train()
    assert stopped.value.exit_code == 128 + signal.SIGTERM and trainer.ckpt.latest_step() == signalled
    assert [e["step"] for e in read_history(str(tmp_path / "run")) if "loss" in e] == windows


@pytest.mark.parametrize("args, message", [
    (["--config.eval.average_checkpoints=3", "--config.eval.average_of=best"],
     "eval.average_checkpoints=3 with eval.average_of=best needs train.keep_best >= 3 (it is 1)"),
    (["--config.eval.average_checkpoints=4"],
     "eval.average_checkpoints=4 with eval.average_of=last needs train.keep_checkpoints >= 4 (it is 3)"),
    (["--config.eval.average_checkpoints=3", "--config.train.checkpoint_every=12"],
     "eval.average_checkpoints=3 with eval.average_of=last: the run writes 2 training states (train.steps=24, "
     "train.checkpoint_every=12)"),
    (["--config.eval.average_checkpoints=3", "--config.eval.average_of=best", "--config.train.keep_best=3"],
     "eval.average_checkpoints=3 with eval.average_of=best: the run validates 2 times (train.steps=24, "
     "train.eval_every=12)"),
    (["--config.eval.params=averaged"], "eval.params=averaged decodes the checkpoint --mode average writes"),
])
def test_the_evaluation_after_training_is_checked_before_training(tmp_path, args, message):
    """The evaluation a training command ends with decodes what eval.params and eval.average_checkpoints name: an
    average of more checkpoints than training keeps or writes, or eval.params=averaged (which --mode average writes
    after training), failed only after the whole run had trained; now one line before anything is written."""
    from jaxnat.config import build_config
    from jaxnat.errors import ConfigError
    from jaxnat.training.trainer import Trainer

    with pytest.raises(ConfigError) as err:
        Trainer(build_config(TINY, args), str(tmp_path / "run"))
    assert message in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()
    # what training keeps and writes is enough: no error (24 steps validated at 10, 20 and the last)
    Trainer(build_config(TINY, ["--config.eval.average_checkpoints=3", "--config.eval.average_of=best",
                                "--config.train.keep_best=3", "--config.train.eval_every=10"]), str(tmp_path / "ok"))


@pytest.mark.parametrize("args, message", [
    (["--config.train.min_lr=1e-5"], "train.min_lr=1e-05 is read by train.lr_schedule=cosine only; "
                                     "train.lr_schedule=inverse_sqrt never decays to it"),
    (["--config.train.lr_schedule=linear", "--config.train.min_lr=1e-5"], "train.lr_schedule=linear never decays"),
    (["--config.train.lr_schedule=cosine", "--config.train.min_lr=0.01"],
     "train.min_lr (0.01) must not exceed train.lr (0.002)"),
    (["--config.train.plateau_patience=2"], "train.plateau_patience=2 is read by train.lr_schedule=plateau only"),
    (["--config.train.lr_schedule=cosine", "--config.train.plateau_factor=0.5"],
     "train.plateau_factor=0.5 is read by train.lr_schedule=plateau only"),
    (["--config.train.warmup_init_lr=0.01"], "train.warmup_init_lr (0.01) must not exceed train.lr (0.002): the "
                                             "warm-up rises from it"),
])
def test_a_schedule_key_the_schedule_does_not_read_is_refused(tmp_path, args, message):
    """train.min_lr (the cosine schedule's end) and train.plateau_factor / plateau_patience (the plateau schedule's)
    did nothing with another train.lr_schedule, without a word: refused in one line before anything is written."""
    from jaxnat.config import build_config
    from jaxnat.errors import ConfigError
    from jaxnat.training.trainer import Trainer

    with pytest.raises(ConfigError) as err:
        Trainer(build_config(TINY, args), str(tmp_path / "run"))
    assert message in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("key, value, message", [
    ("stepz", 5, "the config sets unknown config key train.stepz; did you mean train.steps?"),
    ("steps", -5, "train.steps must be in (0, 2147483647], got -5"),
])
def test_a_config_changed_in_python_is_checked_again(tmp_path, key, value, message):
    """A config built by build_config and then changed in Python (a notebook's config.train.steps = ...): a misspelt
    key was added without a word and the run trained without it, a value out of range failed inside the run.
    One line before anything is written."""
    from jaxnat.config import build_config
    from jaxnat.errors import ConfigError
    from jaxnat.training.trainer import Trainer

    config = build_config(TINY, [])
    setattr(config.train, key, value)
    with pytest.raises(ConfigError) as err:
        Trainer(config, str(tmp_path / "run"))
    assert str(err.value) == message
    assert not (tmp_path / "run").exists()


def test_init_from_a_run_of_another_shape_names_init_from(tmp_path):
    """A config whose model differs from the train.init_from run was told to use 'another --workdir', which is not
    the directory that differs: the message names train.init_from."""
    from jaxnat.config import build_config
    from jaxnat.errors import ConfigError
    from jaxnat.training.trainer import Trainer

    source = tmp_path / "first"
    source.mkdir()
    (source / "config.json").write_text(build_config(TINY, []).to_json_best_effort(sort_keys=True))
    with pytest.raises(ConfigError, match=f"^train.init_from={tmp_path / 'nowhere'}: no such directory"):
        Trainer(build_config(TINY, [f"--config.train.init_from={tmp_path / 'nowhere'}"]), str(tmp_path / "second"))
    config = build_config(TINY, [f"--config.train.init_from={source}", "--config.model.d_model=64"])
    with pytest.raises(ConfigError, match=r"model.d_model=64 \(trained: 32\); use the config it was trained with, "
                                          r"or another train.init_from") as err:
        Trainer(config, str(tmp_path / "second"))
    assert "\n" not in str(err.value) and "--workdir" not in str(err.value)
    assert not (tmp_path / "second").exists()


def test_init_from_with_the_vocabulary_of_another_run_is_refused(tmp_path):
    """data.spm_from took precedence over train.init_from's vocabulary without a word: the run started from the
    init_from run's parameters with another run's pieces under their embedding rows. Refused in one line (before
    anything is written) unless both runs hold the same SentencePiece models."""
    from jaxnat.config import build_config
    from jaxnat.errors import ConfigError
    from jaxnat.training.trainer import Trainer

    source, vocab = tmp_path / "first", tmp_path / "vocab"
    (source / "checkpoints" / "best" / "4").mkdir(parents=True)
    (source / "config.json").write_text(build_config(TINY, []).to_json_best_effort(sort_keys=True))
    for run, model in ((source, b"one vocabulary"), (vocab, b"another")):
        (run / "spm").mkdir(parents=True)
        (run / "spm" / "joint.model").write_bytes(model)
    config = build_config(TINY, [f"--config.train.init_from={source}", f"--config.data.spm_from={vocab}"])
    with pytest.raises(ConfigError, match=f"data.spm_from={vocab} holds another vocabulary than train.init_from="
                                          f"{source}") as err:
        Trainer(config, str(tmp_path / "second"))
    assert "\n" not in str(err.value)
    assert not (tmp_path / "second").exists()


@pytest.mark.parametrize("model, key, other_model, message", [
    ("cmlm", "cmlm.rescorer", "cmlm", "is a 'cmlm' run; it must be a run of model 'ar'"),
    ("cmlm", "cmlm.rescorer", "ar", "has another vocabulary than"),
    ("ar", "eval.ensemble", "cmlm", "is a 'cmlm' run; it must be a run of model 'ar'")])
def test_a_run_the_evaluation_would_refuse_is_refused_before_training(tmp_path, model, key, other_model, message):
    """cmlm.rescorer (or an ensemble's member, eval.ensemble) naming a run of another model, or one of another
    vocabulary, was refused by the evaluation that ends a training command, after every step had run; now in one
    line before the first."""
    from jaxnat.config import build_config
    from jaxnat.errors import JaxnatError
    from jaxnat.training.trainer import Trainer

    other = tmp_path / "other"
    (other / "spm").mkdir(parents=True)
    (other / "spm" / "joint.model").write_bytes(b"another vocabulary")
    recorded = build_config(TINY, [f"--config.model.name={other_model}", "--config.eval.beam_size=1"])
    (other / "config.json").write_text(recorded.to_json_best_effort(sort_keys=True))
    config = build_config(TINY, [f"--config.model.name={model}", "--config.eval.beam_size=1",
                                 f"--config.{key}={other}"])
    with pytest.raises(JaxnatError, match=f"^{key}={other} {re.escape(message)}") as err:
        Trainer(config, str(tmp_path / "run"))
    assert "\n" not in str(err.value)


def test_training_pairs_a_reused_vocabulary_reads_as_unk_are_counted():
    """A workdir trained on En-De and run on with En-Zh data (or data.spm_from a run on other text), without byte
    fallback, trained on targets of UNKs without a word; a warning now counts the pairs."""
    from jaxnat.data.vocab import BOS_ID, EOS_ID, UNK_ID
    from jaxnat.training.trainer import unknown_pairs

    def pair(*ids):
        return np.array([BOS_ID, *ids, EOS_ID], np.int32)

    src, tgt = [pair(7, 8), pair(9), pair(7)], [pair(10), pair(UNK_ID, 11), pair(12)]
    assert unknown_pairs(src, [pair(10)] * 3) == ""
    assert unknown_pairs(src, tgt).startswith("1 of 3 training pairs hold characters the vocabulary has no piece for "
                                              "(UNK), which the model learns to write: it was made from other text")
    assert unknown_pairs([pair(UNK_ID)] * 3, tgt).startswith("3 of 3 training pairs")


@pytest.mark.parametrize("named", ["spm/joint.model", "spm"])
def test_spm_from_naming_a_model_file_or_spm_itself_is_refused_before_writing(tmp_path, named):
    """data.spm_from=RUN/spm/joint.model (or RUN/spm) said "RUN/spm/joint.model/spm: no SentencePiece model" after
    writing config.json into the new workdir; now one line that names the key and what it wants, nothing written."""
    from jaxnat.config import build_config
    from jaxnat.errors import ConfigError
    from jaxnat.training.trainer import Trainer

    (tmp_path / "first" / "spm").mkdir(parents=True)
    (tmp_path / "first" / "spm" / "joint.model").write_bytes(b"a model")
    given = tmp_path / "first" / named
    config = build_config(TINY, [f"--config.data.spm_from={given}"])
    with pytest.raises(ConfigError, match=f"^data.spm_from={given}: no SentencePiece model in {given}/spm; "
                                          f"data.spm_from names a trained run's workdir, the directory that holds "
                                          f"spm/$"):
        Trainer(config, str(tmp_path / "second"))
    assert not (tmp_path / "second").exists()


def test_a_vocabulary_too_small_for_the_corpus_leaves_no_config_the_corrected_command_must_match(tmp_path):
    """data.vocab_size below the corpus's characters was refused by SentencePiece after config.json was written:
    the command with the larger vocabulary the error asks for was then refused as "does not match the run in W:
    data.vocab_size=400 (trained: 10)", a run that had trained nothing. Now config.json follows the vocabulary."""
    from jaxnat.config import build_config, check_matches_workdir
    from jaxnat.errors import ConfigError
    from jaxnat.training.trainer import Trainer

    small = ["--config.data.synthetic_train=300"]
    with pytest.raises(ConfigError, match="data.vocab_size=10 is too small: the corpus's characters need"):
        Trainer(build_config(TINY, [*small, "--config.data.vocab_size=10"]), str(tmp_path))
    assert not (tmp_path / "config.json").exists()
    check_matches_workdir(build_config(TINY, small), str(tmp_path))


def test_non_finite_steps_are_numbered_as_the_log_and_checkpoints_are(tmp_path, caplog):
    """The log lines and checkpoints number a step by the steps done (step 4: after 4 updates); the non-finite
    warnings and the final error counted from 0, so the 2nd step's skip read 'step 1' and a run stopped after its
    4th step said 'last: step 3'."""
    import logging

    from jaxnat.config import build_config
    from jaxnat.training.trainer import Trainer, TrainingError

    caplog.set_level(logging.INFO, logger="jaxnat")
    # lr 1e12 blows the parameters up at the first update; steps 2, 3 and 4 are non-finite and skipped
    config = build_config(TINY, ["--config.data.synthetic_train=300", "--config.train.lr=1e12",
                                 "--config.train.warmup_steps=1", "--config.train.max_bad_steps=3"])
    with pytest.raises(TrainingError, match=r"loss was not finite for 3 consecutive steps \(last: step 4\)"):
        Trainer(config, str(tmp_path / "run")).train()
    skipped = re.findall(r"step (\d+): non-finite loss or gradient, update skipped \((\d) in a row\)", caplog.text)
    assert skipped == [("2", "1"), ("3", "2"), ("4", "3")]
