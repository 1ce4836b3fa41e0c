"""Multi-process data parallelism for real: two local processes (`jax.distributed.initialize` on localhost,
2 simulated CPU devices each, the launcher's environment variables) train the same tiny run as one process
with 4 devices, and end with the same parameters; each process builds only its own rows of every batch."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from jaxnat.data.batching import TrainBatcher
from jaxnat.errors import ConfigError
from jaxnat.training.mesh import differing_rows, distributed_settings
from jaxnat.training.history import read_history

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "tests", "configs", "tiny.py")
STEPS = 6
ARGS = [f"--config.train.steps={STEPS}", f"--config.train.checkpoint_every={STEPS}", "--config.train.eval_every=1000",
        "--config.data.bucket_multiple=48", "--config.eval.latency_sentences=0", "--config.eval.beam_size=1",
        "--config.train.valid_bleu_sentences=8",
        # Adam with ε = 1: an update proportional to the gradient, as SGD's. With the default 1e-8, a weight
        # whose gradient is zero but for rounding (attention key biases) moves by ±lr on the sign of that noise,
        # and the two meshes sum a gradient across devices in different orders.
        "--config.train.adam_eps=1.0", "--config.train.lr=0.05"]


def _env(devices: int, **extra):
    flags = os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
    return dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=flags.strip(), **extra)


def _train(workdir, env, *extra):
    cmd = [sys.executable, "-m", "jaxnat.main", "--config", TINY, "--workdir", str(workdir), *ARGS, *extra]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _params(workdir):
    """The final parameters, restored onto this process's one device whatever mesh saved them."""
    import jax
    import orbax.checkpoint as ocp

    path = os.path.join(str(workdir), "checkpoints", "last", str(STEPS), "state")
    checkpointer = ocp.StandardCheckpointer()
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=one),
                          checkpointer.metadata(path).item_metadata)
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(checkpointer.restore(path, target)["params"])]


def _launch(env: dict, *args: str) -> subprocess.CompletedProcess:
    """launch/multiprocess.sh with ``env`` as its whole environment (bash and what PATH finds)."""
    return subprocess.run(["bash", os.path.join(ROOT, "launch", "multiprocess.sh"), *args], cwd=ROOT, text=True,
                          env={"PATH": os.environ["PATH"], **env}, capture_output=True, timeout=60)


def test_launcher_names_what_is_missing():
    """The launcher parses (an apostrophe in one of its messages once stopped bash at line 7, whatever the
    variables) and names the variable or argument that is missing."""
    assert subprocess.run(["bash", "-n", os.path.join(ROOT, "launch", "multiprocess.sh")]).returncode == 0
    out = _launch({"NUM_PROCESSES": "2", "PROCESS_ID": "0"}, TINY, "w")
    assert out.returncode != 0 and "set COORDINATOR=host:port" in out.stderr, out.stderr
    out = _launch({"COORDINATOR": "localhost:1", "NUM_PROCESSES": "2", "PROCESS_ID": "0"})
    assert out.returncode != 0 and "usage: launch/multiprocess.sh CONFIG WORKDIR" in out.stderr, out.stderr


@pytest.mark.parametrize("env, says", [
    ({"JAX_COORDINATOR_ADDRESS": "host0", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"}, "is not HOST:PORT"),
    ({"JAX_COORDINATOR_ADDRESS": "host0:x", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"}, "is not HOST:PORT"),
    ({"JAX_COORDINATOR_ADDRESS": "host0:1234", "JAX_PROCESS_ID": "0"}, "JAX_NUM_PROCESSES='' is not an integer"),
    ({"JAX_COORDINATOR_ADDRESS": "host0:1234", "JAX_NUM_PROCESSES": "two", "JAX_PROCESS_ID": "0"}, "'two' is not"),
    ({"JAX_COORDINATOR_ADDRESS": "host0:1234", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "-1"}, "'-1' is not"),
    ({"JAX_COORDINATOR_ADDRESS": "host0:1234", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "2"}, "numbered 0 to"),
    ({"JAX_COORDINATOR_ADDRESS": "host0:1234", "JAX_NUM_PROCESSES": "0", "JAX_PROCESS_ID": "0"}, "numbered 0 to"),
])
def test_malformed_process_variables_are_one_line(env, says):
    with pytest.raises(ConfigError, match=says):
        distributed_settings(env)


def test_process_variables_read():
    assert distributed_settings({}) is None
    env = {"JAX_COORDINATOR_ADDRESS": "host0:1234", "JAX_NUM_PROCESSES": "4", "JAX_PROCESS_ID": "3"}
    assert distributed_settings(env) == ("host0:1234", 4, 3)


def test_taken_coordinator_port_is_one_line():
    """Process 0 cannot listen at the coordinator's port: a one-line error naming it, not JAX's traceback (or, at
    times, a segmentation fault)."""
    code = ("import sys\nfrom jaxnat.errors import ConfigError\nfrom jaxnat.training.mesh import "
            "maybe_initialize_distributed\ntry:\n    maybe_initialize_distributed()\nexcept ConfigError as e:\n"
            "    sys.exit(f'error: {e}')\n")
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = _env(1, JAX_COORDINATOR_ADDRESS=f"localhost:{port}", JAX_NUM_PROCESSES="2", JAX_PROCESS_ID="0")
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=120)
    said = f"cannot listen at JAX_COORDINATOR_ADDRESS=localhost:{port} (Address already in use)"
    assert out.returncode == 1 and said in out.stderr, out.stderr


@pytest.mark.parametrize("index", [0, 1])
def test_process_zero_writes_after_every_process_has_read(monkeypatch, index):
    """one_process_first and in_process_zero in two processes, their barriers recorded: process 0 writes only after
    a barrier every process reaches after its own reads of the workdir (a process running late once read process
    0's half-written config.json and stopped), the others read only after a barrier process 0 reaches after
    writing; in_process_zero's change (moving an unreadable checkpoint aside) is process 0's alone."""
    from jax.experimental import multihost_utils

    from jaxnat.training import mesh

    events = []
    monkeypatch.setattr(mesh.jax, "process_count", lambda: 2)
    monkeypatch.setattr(mesh.jax, "process_index", lambda: index)
    monkeypatch.setattr(multihost_utils, "sync_global_devices", lambda name: events.append("barrier"))
    assert mesh.one_process_first("vocabulary", lambda: events.append("fn") or "tokenizer") == "tokenizer"
    assert events == (["barrier", "fn", "barrier"] if index == 0 else ["barrier", "barrier", "fn"])
    events.clear()
    assert mesh.in_process_zero("move", lambda: events.append("fn") or "moved") == ("moved" if index == 0 else None)
    assert events == (["barrier", "fn", "barrier"] if index == 0 else ["barrier", "barrier"])


def test_differing_rows():
    assert differing_rows(np.array([[1, 2], [1, 2], [1, 3], [0, 2]])) == [2, 3]
    assert differing_rows(np.array([[1, 2], [1, 2]])) == []


@pytest.mark.slow  # starts two jaxnat commands (they stop before loading any data)
def test_processes_with_other_arguments_stop_at_once(tmp_path):
    """Another train.lr in one process trained two sets of "replicated" parameters without a word (exit 0, the
    checkpoint process 0's); every process now stops at the start with one line, having written nothing."""
    port = _free_port()
    procs = [_train(tmp_path / "w", _env(1, JAX_COORDINATOR_ADDRESS=f"localhost:{port}", JAX_NUM_PROCESSES="2",
                                         JAX_PROCESS_ID=str(i)), *lr)
             for i, lr in enumerate([[], ["--config.train.lr=0.1"]])]
    for p in procs:
        out = p.communicate(timeout=300)[0]
        assert p.returncode == 2, out
        assert "jaxnat: error: process 1 of 2 runs another command than process 0" in out
    assert not (tmp_path / "w").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_processes_read_only_their_rows():
    rng = np.random.default_rng(0)
    src = [rng.integers(3, 50, size=rng.integers(3, 20)).astype(np.int32) for _ in range(100)]
    whole = TrainBatcher(src, src, 256, [16, 32], seed=3, multiple_of=4)
    parts = [TrainBatcher(src, src, 256, [16, 32], seed=3, multiple_of=4, process=(i, 2)) for i in range(2)]
    for step in range(2 * whole.steps_per_epoch):
        full = whole.batch(step)
        for k in full:
            np.testing.assert_array_equal(np.concatenate([p.batch(step)[k] for p in parts]), full[k])


@pytest.mark.slow  # trains: the quick tier (-m 'not slow') leaves it out
def test_two_processes_train_as_one_with_all_devices(tmp_path):
    one = _train(tmp_path / "one", _env(4))
    out_one, _ = one.communicate(timeout=600)
    assert one.returncode == 0, out_one

    port = _free_port()
    procs = [_train(tmp_path / "two", _env(2, JAX_COORDINATOR_ADDRESS=f"localhost:{port}", JAX_NUM_PROCESSES="2",
                                           JAX_PROCESS_ID=str(i))) for i in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    said = "\n".join(f"--- process {i} (exit {p.returncode}) ---\n{out}" for i, (p, out) in enumerate(zip(procs, outs)))
    assert all(p.returncode == 0 for p in procs), said  # both: a process that stops leaves the other waiting
    for a, b in zip(_params(tmp_path / "one"), _params(tmp_path / "two")):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)  # float sums in another order, nothing else
    losses = [[(e["step"], e.get("loss")) for e in read_history(str(tmp_path / w))] for w in ("one", "two")]
    np.testing.assert_allclose(*[[loss for _, loss in h if loss is not None] for h in losses], rtol=1e-6)
    assert "test" in json.loads((tmp_path / "two" / "metrics.json").read_text())
