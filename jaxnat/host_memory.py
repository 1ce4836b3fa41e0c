"""How the C library's allocator keeps the host memory of XLA's CPU programs between steps.

XLA's CPU client allocates a program's temporaries (one buffer: 1.9 GB for EDITOR's Multi30k train step) with
``posix_memalign`` on one of its worker threads at every run and frees it at the end. glibc serves an allocation that
large from a fresh ``mmap`` (a worker thread's own arena cannot grow past 64 MB, so even its ``mmap`` limit does not
stop that) and unmaps it when freed, so every step touches its temporaries for the first time again: 480,000 page
faults a step for that buffer, about a second of a 2.4 s step on a 2-core AMD EPYC VM (docs/benchmarks.md). With one
arena for every thread, no ``mmap`` for large blocks and no trimming of the heap's top, a freed buffer stays in the
heap and the next step reuses it: a tenth of the page faults (EDITOR's step 2.1 -> 1.5 s). The price is that the
process keeps its largest footprint until it exits (AR's Multi30k run: 1.7 -> 2.7 GB).

Applied by the command line (`jaxnat.main`) before the backend starts its threads, on CPU runs only (an accelerator's
buffers are not the host's); ``JAXNAT_HOST_MEMORY=release`` leaves the allocator as it is.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os

log = logging.getLogger("jaxnat")

# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
# jax's accelerator plugins: with one installed and JAX_PLATFORMS unset, the run is not (only) on the CPU
ACCELERATOR_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin", "jax_rocm7_plugin", "libtpu")


def cpu_only() -> bool:
    """Whether jax will run on the CPU alone: JAX_PLATFORMS says so, or no accelerator plugin is installed."""
    platforms = os.environ.get("JAX_PLATFORMS", "")
    if platforms:
        return set(platforms.lower().split(",")) == {"cpu"}
    return not any(importlib.util.find_spec(name) for name in ACCELERATOR_PLUGINS)


def keep_freed_memory() -> bool:
    """One malloc arena, no mmap'd blocks, no trimming (see the module's docstring), on a CPU run with glibc, unless
    JAXNAT_HOST_MEMORY=release; call it before jax's backend starts (its worker threads take their arena at their
    first allocation). Returns whether the allocator was set."""
    choice = os.environ.get("JAXNAT_HOST_MEMORY", "keep")
    if choice not in ("keep", "release"):
        from jaxnat.errors import ConfigError

        raise ConfigError(f"JAXNAT_HOST_MEMORY={choice!r}: expected keep (the default) or release")
    if choice == "release" or not cpu_only():
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # glibc's; other C libraries (macOS, musl) have none or ignore these
    except AttributeError:
        return False
    # -1 as M_TRIM_THRESHOLD: never trim (mallopt(3))
    settings = ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, -1))
    applied = all(mallopt(param, value) == 1 for param, value in settings)
    if applied:
        log.debug("host memory: one arena, no mmap, no trimming (JAXNAT_HOST_MEMORY=release: glibc's defaults)")
    return applied
