"""Stopping a training run cleanly: SIGTERM (a scheduler's preemption, `kill`) or Ctrl-C lets the step in flight
finish, writes a checkpoint at it and exits with 128 + the signal's number; the same command resumes exactly
there (a resumed run reproduces the uninterrupted one), so nothing trained since the last periodic checkpoint
is lost. A second Ctrl-C interrupts at once, as usual.

With several processes (jax.distributed) every process must stop at the same step, because checkpoints are
written collectively: JAX's preemption service catches SIGTERM there and agrees on the step
(`multihost_utils.reached_preemption_sync_point`), so no handler of ours is installed.
"""

from __future__ import annotations

import signal
import threading

import jax


class StopRequest:
    """Records the first SIGTERM/SIGINT between `install()` and `uninstall()`; `reached(step)` says whether to
    stop after `step`."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.signum: int | None = None
        self._previous: dict = {}

    def _handle(self, signum, frame):
        self.signum = signum
        # a second Ctrl-C is an ordinary KeyboardInterrupt
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def install(self) -> StopRequest:
        # several processes: JAX's preemption service decides; a thread other than the main one cannot install
        # handlers (a notebook's background training): there the signals keep their usual meaning
        if jax.process_count() == 1 and threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def uninstall(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    def reached(self, step: int) -> bool:
        if jax.process_count() > 1 and self.signum is None and _preemption_sync_point(step):
            self.signum = signal.SIGTERM
        return self.signum is not None


def _preemption_sync_point(step: int) -> bool:
    """Whether the processes agreed to stop after `step`; False when JAX's preemption service is off
    (jax_enable_preemption_service), which JAX reports with a RuntimeError."""
    from jax.experimental import multihost_utils

    try:
        return multihost_utils.reached_preemption_sync_point(step)
    except RuntimeError:
        return False
