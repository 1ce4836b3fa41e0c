"""Data parallelism over a device mesh with `NamedSharding` (what "pjit" means in current JAX).

One mesh axis, `data`: batches are split along their first dimension, parameters and optimizer state are
replicated. Every process plans the same global batch from (seed, step) and builds only its own rows.
"""

from __future__ import annotations

import logging

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxnat.errors import ConfigError

log = logging.getLogger("jaxnat")


def make_mesh(devices=None) -> jax.sharding.Mesh:
    """A 1-D `data` mesh over `devices` (default: all). Auto axis types: XLA propagates shardings itself."""
    devices = jax.devices() if devices is None else devices
    return jax.make_mesh((len(devices),), ("data",), axis_types=(jax.sharding.AxisType.Auto,), devices=devices)


def replicated(mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def first_local_device() -> jax.sharding.SingleDeviceSharding:
    """This process's first device: where a restored checkpoint's parameters, and so decoding, live."""
    return jax.sharding.SingleDeviceSharding(jax.local_devices()[0])


def local_copy(tree):
    """A replicated tree's arrays as this process's own on its first device, as a restored checkpoint's are:
    decoding them during training compiles the very program that decoding the checkpoint after training finds in
    the compilation cache (replicated inputs would make it a program of its own, compiled twice a run)."""
    one = first_local_device()
    return jax.tree.map(lambda x: jax.device_put(x.addressable_data(0), one), tree)


def batch_sharding(mesh) -> NamedSharding:
    return NamedSharding(mesh, P("data"))


def shard_batch(batch: dict[str, np.ndarray], mesh) -> dict[str, jax.Array]:
    """This process's rows of a global batch -> global arrays sharded along `data`.

    `batch` holds this process's contiguous block of the global batch's rows (all of it with one process; see
    `TrainBatcher`'s `process`), as `make_array_from_process_local_data` wants.
    """
    sharding = batch_sharding(mesh)
    n = jax.process_count()
    return {k: jax.make_array_from_process_local_data(sharding, x, (x.shape[0] * n, *x.shape[1:]))
            for k, x in batch.items()}


def distributed_settings(env) -> tuple[str, int, int] | None:
    """(coordinator address, process count, this process's id) from JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and
    JAX_PROCESS_ID (what launch/multiprocess.sh sets from COORDINATOR, NUM_PROCESSES and PROCESS_ID); None without
    JAX_COORDINATOR_ADDRESS. A malformed value is a one-line `ConfigError` here, not JAX's traceback."""
    address = env.get("JAX_COORDINATOR_ADDRESS")
    if address is None:
        return None
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"JAX_COORDINATOR_ADDRESS={address!r} is not HOST:PORT (the host of process 0 and a free "
                          f"port there)")
    numbers = []
    for name in ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        value = env.get(name, "")
        if not value.isdigit():
            raise ConfigError(f"{name}={value!r} is not an integer of 0 or more (a multi-process run, "
                              f"JAX_COORDINATOR_ADDRESS set, needs the process count in JAX_NUM_PROCESSES and this "
                              f"process's 0-based index in JAX_PROCESS_ID)")
        numbers.append(int(value))
    count, index = numbers
    if not 0 <= index < count:
        raise ConfigError(f"JAX_PROCESS_ID={index} with JAX_NUM_PROCESSES={count}: the processes are numbered 0 to "
                          f"JAX_NUM_PROCESSES - 1, one each")
    return address, count, index


def check_port_free(address: str) -> None:
    """A one-line `ConfigError` when this host cannot listen at the port of ``address``, as process 0's coordinator
    must, checked before JAX tries: its failure is a traceback, and at times a segmentation fault."""
    import os
    import socket

    port = int(address.rpartition(":")[2])
    dual = socket.has_dualstack_ipv6()  # JAX listens at [::]:port
    try:
        family = socket.AF_INET6 if dual else socket.AF_INET
        socket.create_server(("", port), family=family, dualstack_ipv6=dual).close()
    except OSError as e:
        why = os.strerror(e.errno) if e.errno else str(e)
        raise ConfigError(f"process 0 cannot listen at JAX_COORDINATOR_ADDRESS={address} ({why}): name a "
                          f"free port (COORDINATOR of launch/multiprocess.sh) for every process") from None


INITIALIZATION_TIMEOUT_S = 300  # JAX's default: how long a process waits for all the others at the coordinator


def maybe_initialize_distributed() -> None:
    """Calls `jax.distributed.initialize()` when this is one process of several.

    Explicit: JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID (launch/multiprocess.sh).
    SLURM: more than one task (launch/slurm.sbatch); JAX reads the rest from SLURM's environment.
    """
    import os

    env = os.environ
    settings = distributed_settings(env)
    if settings or int(env.get("SLURM_NTASKS", "1")) > 1:
        # CPU devices of several processes need a collectives backend (GPUs use NCCL whatever this says)
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if settings:
        address, count, index = settings
        # JAX says nothing while it waits, and a process that never comes ends every other one with an abort
        log.info("process %d of %d: waiting for every process at %s (up to %d s, then JAX aborts)", index, count,
                 address, INITIALIZATION_TIMEOUT_S)
        if index == 0:
            check_port_free(address)
        jax.distributed.initialize(address, count, index, initialization_timeout=INITIALIZATION_TIMEOUT_S)
    elif int(env.get("SLURM_NTASKS", "1")) > 1:
        jax.distributed.initialize()


def check_same_command(command: str) -> None:
    """A one-line `ConfigError` in every process when another process runs another ``command`` (the mode and the
    whole config as text): each would train its own copy of the "replicated" parameters with its own settings
    (another train.lr: no error, the checkpoint process 0's) or wait forever for a program the others never run
    (another batch shape). One process: nothing to compare."""
    if jax.process_count() == 1:
        return
    import hashlib

    from jax.experimental import multihost_utils

    digest = np.frombuffer(hashlib.sha256(command.encode()).digest(), np.uint32)
    others = differing_rows(multihost_utils.process_allgather(digest))
    if others:
        raise ConfigError(f"process {', '.join(map(str, others))} of {jax.process_count()} runs another command than "
                          f"process 0 (another --mode, config file or --config.KEY=VALUE): start every process with "
                          f"the same arguments")


def differing_rows(rows: np.ndarray) -> list[int]:
    """The indices of the rows of ``rows`` that differ from its first."""
    return [i for i, row in enumerate(rows) if not np.array_equal(row, rows[0])]


def in_process_zero(what: str, fn):
    """Runs `fn`, a change to the shared workdir, in process 0 alone, between two barriers: every process has read
    the workdir as it was (a process running late read a config.json process 0 was writing, stopped, and left it
    waiting for good) before the change, and sees it whole after. Returns fn's value in process 0, None in the
    others. One process: just `fn()`."""
    if jax.process_count() == 1:
        return fn()
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices(f"{what}: read")
    out = fn() if jax.process_index() == 0 else None
    multihost_utils.sync_global_devices(what)
    return out


def one_process_first(what: str, fn):
    """Runs `fn` in process 0 (`in_process_zero`), then in the others: files process 0 writes into the shared
    workdir (the vocabulary) are complete before the others read them. One process: just `fn()`."""
    out = in_process_zero(what, fn)
    return out if jax.process_index() == 0 else fn()


def agreed(flag: bool) -> bool:
    """Process 0's ``flag`` in every process: a decision read from the shared workdir, which one process may read
    after another has written to it, taken once for all (a process that chose otherwise would leave the others
    waiting in a collective it never runs)."""
    if jax.process_count() == 1:
        return flag
    from jax.experimental import multihost_utils

    return bool(multihost_utils.broadcast_one_to_all(np.bool_(flag)))
