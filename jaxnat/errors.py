"""User-facing errors: each carries one line that says what is wrong and how to fix it.

`jaxnat.main` catches `JaxnatError`, prints its message on one line and exits with code 2 (`Stopped`, `Interrupted`:
128 + the signal's number); anything else is a bug and keeps its traceback. It raises `Terminated` on SIGTERM, so
that a command a scheduler stops cleans up as after Ctrl-C.
"""

import contextlib
import signal
import sys


class JaxnatError(Exception):
    """Base class of errors caused by the user's input (config, data, files)."""


class ConfigError(JaxnatError):
    """A config file, key or value is invalid."""


class DataError(JaxnatError):
    """A data file or corpus is missing, empty, undecodable or inconsistent."""


class Stopped(JaxnatError):
    """Training stopped on a signal after writing a checkpoint (jaxnat/training/stop.py); `exit_code` is 128 + the
    signal's number."""

    def __init__(self, signum: int, step: int):
        self.exit_code = 128 + signum
        super().__init__(f"stopped by {signal.Signals(signum).name} after step {step} (checkpoint written); "
                         f"the same command resumes from it")


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's preemption, `kill`), raised where Ctrl-C raises KeyboardInterrupt (`jaxnat.main`)."""


def _terminated(signum, frame):
    raise Terminated()


@contextlib.contextmanager
def sigterm_interrupts():
    """Within it SIGTERM raises `Terminated`, so that a command stops through its Ctrl-C clean-up and line (it
    ended at once, without a line, a file it wrote cut). The caller's handler is back after it. (With several
    processes, JAX's preemption service installs its own handler over this one.)"""
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def interrupt_status(interruption: KeyboardInterrupt) -> int:
    """The exit status of a command that ``interruption`` stopped: 128 + SIGTERM's or SIGINT's number."""
    return 128 + (signal.SIGTERM if isinstance(interruption, Terminated) else signal.SIGINT)


class Interrupted(JaxnatError):
    """Ctrl-C or SIGTERM (``interruption``) stopped a command that does not resume (`--mode translate`); the message
    says what it left behind."""

    def __init__(self, message: str, interruption: KeyboardInterrupt):
        self.exit_code = interrupt_status(interruption)
        super().__init__(message)


def run_script(main, interrupted: str = "nothing measured is kept: the same command measures again"):
    """A script's entry point (bench/): ``main()``'s exit status, a `JaxnatError` as `error: …` on one line (exit
    1), Ctrl-C or SIGTERM as `interrupted; <interrupted>` (exit 130 or 143), not a traceback of where it stopped."""
    try:
        with sigterm_interrupts():
            status = main()
    except JaxnatError as e:  # the user's input (a config, a key, a workdir)
        raise SystemExit(f"error: {e}") from None
    except KeyboardInterrupt as e:
        print(f"interrupted; {interrupted}", file=sys.stderr)
        raise SystemExit(interrupt_status(e)) from None
    raise SystemExit(status)
