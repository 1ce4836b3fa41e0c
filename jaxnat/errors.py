"""User-facing errors: each carries one line that says what is wrong and how to fix it.

`jaxnat.main` catches `JaxnatError`, prints its message on one line and exits with code 2; anything else
is a bug and keeps its traceback.
"""


class JaxnatError(Exception):
    """Base class of errors caused by the user's input (config, data, files)."""


class ConfigError(JaxnatError):
    """A config file, key or value is invalid."""


class DataError(JaxnatError):
    """A data file or corpus is missing, empty, undecodable or inconsistent."""
