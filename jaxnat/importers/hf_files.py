"""The files of a Hugging Face `save_pretrained` directory that every Hugging Face format reads alike: JSON
(`config.json`, tokenizer files) and the weights (`model.safetensors`, else `pytorch_model.bin`), read as data."""

from __future__ import annotations

import json
import os

from jaxnat.errors import DataError
from jaxnat.importers import torch_file


def read_json(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise DataError(f"{path}: unreadable ({e.strerror})") from None
    except ValueError as e:
        raise DataError(f"{path}: not JSON ({e})") from None


def weights(directory: str) -> tuple[dict, str]:
    """({name: array}, the file they came from)."""
    path = os.path.join(directory, "model.safetensors")
    if os.path.isfile(path):
        from safetensors import SafetensorError
        from safetensors.numpy import load_file

        try:
            return load_file(path), path
        except (SafetensorError, OSError, ValueError) as e:
            raise DataError(f"{path}: unreadable safetensors file ({e})") from None
    path = os.path.join(directory, "pytorch_model.bin")
    if os.path.isfile(path):
        return torch_file.load(path), path
    raise DataError(f"{directory}: no weights (model.safetensors or pytorch_model.bin)")
