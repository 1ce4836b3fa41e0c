"""Optional dependencies: packages that only one feature needs, installed by an extra of setup.cfg and imported
only where that feature runs, so that training needs nothing beyond jaxnat's core dependencies (README.md).

    extra         package              what needs it
    tfds          tensorflow-datasets  data.source=tfds (`jaxnat.data.tfds_builder`), with array-record
    align         eflomal              constraint pairs from word alignments (`python -m jaxnat.data.alignment`)
    tensorboard   tensorboardX         TensorBoard logs of a training run (without it: history.jsonl only)
    plots         matplotlib           curves.png of a run, report plots (without it: skipped, with a log line)
    zh            rjieba               Chinese words for drawn constraints (`jaxnat.data.words.dictionary_words`;
                                       without it: characters, with a warning)
    ct2           ctranslate2          --mode export --to ctranslate2:DIR (`jaxnat.exporters`)

``pip install -e '.[test]'`` installs all of them. A feature asked for without its package stops with a one-line
`MissingDependency` naming the extra (`require`); where the feature is only a by-product of a run, the run goes
on without it (`optional`).

The core dependencies (`CORE`, setup.cfg's install_requires) are checked when a command starts (`check_core`): an
image that ships jax and runs jaxnat from its source tree may lack one, and a run should say so at once rather
than at its evaluation, after the training.
"""

from __future__ import annotations

import importlib
import importlib.util

from jaxnat.errors import ConfigError

# module → (the package that installs it, the extra of setup.cfg that lists that package)
PACKAGES = {
    "tensorflow_datasets": ("tensorflow-datasets", "tfds"),
    "eflomal": ("eflomal", "align"),
    "tensorboardX": ("tensorboardX", "tensorboard"),
    "matplotlib": ("matplotlib", "plots"),
    "rjieba": ("rjieba", "zh"),
    "ctranslate2": ("ctranslate2", "ct2"),
}


# module → the package of setup.cfg's install_requires that installs it
CORE = {
    "jax": "jax", "jaxlib": "jaxlib", "flax": "flax", "optax": "optax", "orbax.checkpoint": "orbax-checkpoint",
    "sentencepiece": "sentencepiece", "sacrebleu": "sacrebleu", "sacremoses": "sacremoses",
    "ml_collections": "ml-collections", "numpy": "numpy", "tqdm": "tqdm",
    "subword_nmt": "subword-nmt", "yaml": "pyyaml",
}


class MissingDependency(ConfigError):
    """A package that a feature asked for (or, `check_core`, any command) needs is not installed."""


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


def check_core() -> None:
    """A one-line `MissingDependency` naming every core dependency that cannot be imported (found, not imported:
    milliseconds)."""
    missing = [package for module, package in CORE.items() if _findable(module) is None]
    if missing:
        names = " ".join(missing)
        raise MissingDependency(f"jaxnat needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
                                f"not installed: pip install -e . in jaxnat's directory (or pip install {names})")


def _findable(module: str):
    """``module``'s spec, or None where it (or its parent package) is missing."""
    try:
        return importlib.util.find_spec(module)
    except ModuleNotFoundError:  # "orbax.checkpoint" without orbax
        return None
