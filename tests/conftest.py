"""Test session set-up: CPU only, and one XLA compilation cache shared by the subprocesses of this session
(fresh per session, so tests stay hermetic but the tiny model's shapes compile once)."""

import os
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAXNAT_COMPILATION_CACHE", tempfile.mkdtemp(prefix="jaxnat-xla-cache-"))
