"""User-facing errors: each carries one line that says what is wrong and how to fix it.

`jaxnat.main` catches `JaxnatError`, prints its message on one line and exits with code 2 (`Stopped`, `Interrupted`:
128 + the signal's number); anything else is a bug and keeps its traceback.
"""

import signal


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


class Interrupted(JaxnatError):
    """Ctrl-C stopped a command that does not resume (`--mode translate`); the message says what it left behind."""

    exit_code = 128 + signal.SIGINT
