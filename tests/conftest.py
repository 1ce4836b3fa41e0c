"""Test session set-up: CPU only; one XLA compilation cache shared by the subprocesses of this session (fresh
per session, so tests stay hermetic but the tiny model's shapes compile once); and XLA's backend optimisation
off. The tests' models are tiny, so their time goes into compiling, not running: without LLVM's optimisation
passes the suite uses about a third less CPU, and what the programs compute is the same."""

import os
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAXNAT_COMPILATION_CACHE", tempfile.mkdtemp(prefix="jaxnat-xla-cache-"))
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()
