"""Optional dependencies: packages that only one feature needs, installed by an extra of setup.cfg and imported
only where that feature runs, so that training needs nothing beyond jaxnat's core dependencies (README.md).

    extra         package              what needs it
    tfds          tensorflow-datasets  data.source=tfds (`jaxnat.data.tfds_builder`), with array-record
    align         eflomal              constraint pairs from word alignments (`python -m jaxnat.data.alignment`)
    tensorboard   tensorboardX         TensorBoard logs of a training run (without it: history.jsonl only)
    plots         matplotlib           curves.png of a run, report plots (without it: skipped, with a log line)

``pip install -e '.[test]'`` installs all of them. A feature asked for without its package stops with a one-line
`MissingDependency` naming the extra (`require`); where the feature is only a by-product of a run, the run goes
on without it (`optional`).
"""

from __future__ import annotations

import importlib

from jaxnat.errors import ConfigError

# module → (the package that installs it, the extra of setup.cfg that lists that package)
PACKAGES = {
    "tensorflow_datasets": ("tensorflow-datasets", "tfds"),
    "eflomal": ("eflomal", "align"),
    "tensorboardX": ("tensorboardX", "tensorboard"),
    "matplotlib": ("matplotlib", "plots"),
}


class MissingDependency(ConfigError):
    """A feature was asked for whose optional package is not installed."""


def install_hint(module: str) -> str:
    """The command that installs ``module``'s extra, as README.md installs jaxnat (from its source tree)."""
    return f"pip install -e '.[{PACKAGES[module][1]}]' in jaxnat's directory"


def optional(module: str):
    """``module`` imported, or None when its package (or a package it needs) is not installed."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError:
        return None


def require(module: str, feature: str):
    """``module`` imported; a one-line `MissingDependency` saying that ``feature`` needs it when it is not installed."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        package, _ = PACKAGES[module]
        inner = f" (it needs {e.name}, which is missing)" if e.name and e.name.split(".")[0] != module else ""
        raise MissingDependency(f"{feature} needs {package}, which is not installed{inner}: "
                                f"{install_hint(module)}") from None
