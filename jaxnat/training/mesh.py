"""Data parallelism over a device mesh with `NamedSharding` (what "pjit" means in current JAX).

One mesh axis, `data`: batches are split along their first dimension, parameters and optimizer state are
replicated. Every process builds the same global batch from (seed, step) and contributes its own rows.
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


def batch_sharding(mesh) -> NamedSharding:
    return NamedSharding(mesh, P("data"))


def shard_batch(batch: dict[str, np.ndarray], mesh) -> dict[str, jax.Array]:
    """Global host batch (identical on every process) -> arrays sharded along `data`.

    Each process passes only its own contiguous block of rows, as `make_array_from_process_local_data` wants.
    """
    sharding = batch_sharding(mesh)
    n, p = jax.process_count(), jax.process_index()

    def put(x):
        rows = x.shape[0] // n
        return jax.make_array_from_process_local_data(sharding, x[p * rows:(p + 1) * rows], x.shape)

    return {k: put(v) for k, v in batch.items()}


def maybe_initialize_distributed() -> None:
    """Calls `jax.distributed.initialize()` when this is one process of several.

    Explicit: JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID (launch/multiprocess.sh).
    SLURM: more than one task (launch/slurm.sbatch); JAX reads the rest from SLURM's environment.
    """
    import os

    env = os.environ
    if "JAX_COORDINATOR_ADDRESS" in env:
        jax.distributed.initialize(env["JAX_COORDINATOR_ADDRESS"], int(env["JAX_NUM_PROCESSES"]),
                                   int(env["JAX_PROCESS_ID"]))
    elif int(env.get("SLURM_NTASKS", "1")) > 1:
        jax.distributed.initialize()
