"""Data parallelism over a device mesh with `NamedSharding` (what "pjit" means in current JAX).

One mesh axis, `data`: batches are split along their first dimension, parameters and optimizer state are
replicated. Every process plans the same global batch from (seed, step) and builds only its own rows.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P


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


def maybe_initialize_distributed() -> None:
    """Calls `jax.distributed.initialize()` when this is one process of several.

    Explicit: JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID (launch/multiprocess.sh).
    SLURM: more than one task (launch/slurm.sbatch); JAX reads the rest from SLURM's environment.
    """
    import os

    env = os.environ
    if "JAX_COORDINATOR_ADDRESS" in env or int(env.get("SLURM_NTASKS", "1")) > 1:
        # CPU devices of several processes need a collectives backend (GPUs use NCCL whatever this says)
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if "JAX_COORDINATOR_ADDRESS" in env:
        jax.distributed.initialize(env["JAX_COORDINATOR_ADDRESS"], int(env["JAX_NUM_PROCESSES"]),
                                   int(env["JAX_PROCESS_ID"]))
    elif int(env.get("SLURM_NTASKS", "1")) > 1:
        jax.distributed.initialize()


def one_process_first(what: str, fn):
    """Runs `fn` in process 0, then (after a barrier) in the others: files process 0 writes into the shared
    workdir (the vocabulary) are complete before the others read them. One process: just `fn()`."""
    if jax.process_count() == 1:
        return fn()
    from jax.experimental import multihost_utils

    out = fn() if jax.process_index() == 0 else None
    multihost_utils.sync_global_devices(what)
    return out if jax.process_index() == 0 else fn()
