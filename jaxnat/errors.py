"""User-facing errors: each carries one line that says what is wrong and how to fix it.

A command's entry point (`run_command`) catches `JaxnatError`, prints its message on one line and exits with code
2 (`Stopped`, `Interrupted`: 128 + the signal's number); anything else is a bug and keeps its traceback. It raises
`Terminated` on SIGTERM, so that a command a scheduler stops cleans up as after Ctrl-C.
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


def run_command(body, interrupted: str, catches=(JaxnatError,), prefix: str = "jaxnat: ", error_status: int = 2) -> int:
    """A command's exit status: ``body()``'s, its SIGTERM raised as Ctrl-C (`sigterm_interrupts`); an error of
    the user's input (``catches``) as `<prefix>error: …` on one line (``error_status``); `Stopped` and
    `Interrupted` as their own line and status; Ctrl-C or SIGTERM as `<prefix>interrupted; <interrupted>` (what
    it left and how to go on), 130 or 143. Not a traceback of wherever it stopped, nor a silent end."""
    try:
        with sigterm_interrupts():
            return body()
    except catches as e:
        if isinstance(e, (Stopped, Interrupted)):  # a stop on a signal: the line says what was kept
            print(f"{prefix}{e}", file=sys.stderr)
            return e.exit_code
        print(f"{prefix}error: {e}", file=sys.stderr)
        return error_status
    except KeyboardInterrupt as e:
        print(f"{prefix}interrupted; {interrupted}", file=sys.stderr)
        return interrupt_status(e)


def run_script(main, interrupted: str = "nothing measured is kept: the same command measures again"):
    """A script's entry point (bench/): `run_command` of ``main``, its lines without "jaxnat: " (not jaxnat's
    commands), a `JaxnatError` as `error: …` with exit 1."""
    raise SystemExit(run_command(main, interrupted, prefix="", error_status=1))
