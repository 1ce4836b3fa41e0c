"""What every source format's reader hands back (`Imported`), and the one rearrangement they all make of a table's
rows (`remap_rows`)."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class Imported:
    """What a source format's reader hands back.

    overrides: {"model.d_model": 512, ...} over jaxnat's default config; params: the parameter tree (numpy, layers
    as layer_0 …); settings, pieces, files: the vocabulary (`piece_vocab.write`'s arguments); about: what the
    source was ({"format", "architecture", ...}, for imported.json).
    """

    overrides: dict
    params: dict
    settings: dict
    pieces: dict
    files: dict
    about: dict


def remap_rows(matrix: np.ndarray, order: list[int], axis: int = 0) -> np.ndarray:
    """``matrix`` with its vocabulary axis in jaxnat's id order: row j of the result is row order[j] of the
    source (the reserved ids first; a reserved token the source lacks repeats a row, and the model holds its
    logit down: model.absent_tokens)."""
    return np.take(matrix, np.asarray(order), axis=axis)
