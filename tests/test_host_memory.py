"""jaxnat/host_memory.py: the allocator setting of CPU runs, its opt-out and a one-line error for a bad value."""

import pytest

from jaxnat import host_memory
from jaxnat.errors import ConfigError


def test_release_leaves_the_allocator_and_a_bad_value_is_an_error(monkeypatch):
    monkeypatch.setenv("JAXNAT_HOST_MEMORY", "release")
    assert not host_memory.keep_freed_memory()
    monkeypatch.setenv("JAXNAT_HOST_MEMORY", "sometimes")
    with pytest.raises(ConfigError, match="keep .* or release"):
        host_memory.keep_freed_memory()


def test_only_cpu_runs(monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "cuda,cpu")
    assert not host_memory.cpu_only()
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    assert host_memory.cpu_only()
