"""PyTorch's checkpoint files (`torch.save`'s zip format: fairseq's `.pt`, Hugging Face's `pytorch_model.bin`) read
as data, without PyTorch.

A pickle can name any Python callable and have it called while loading; this reader's unpickler resolves only
the few names a checkpoint of tensors, dicts and settings needs (`_ALLOWED`: tensors rebuilt from their storages
as numpy arrays, ordered dicts, argparse's Namespace as a plain record) and refuses every other one with a
one-line error, as `torch.load(weights_only=True)` does. Tensors come back as numpy arrays.
"""

from __future__ import annotations

import argparse
import collections
import pickle
import types
import zipfile

import ml_dtypes
import numpy as np

from jaxnat.errors import DataError

# storage class name -> element type (torch.save names a tensor's storage by its typed class)
_STORAGES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "BFloat16Storage": ml_dtypes.bfloat16, "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_,
}


class Storage(types.SimpleNamespace):
    """One tensor storage: its element type and the archive entry holding its bytes (read when a tensor uses it)."""


def _rebuild_tensor(storage: np.ndarray, offset: int, size, stride, *_):
    """torch._utils._rebuild_tensor_v2's arguments -> a numpy array (a copy, in C order)."""
    item = storage.itemsize
    if not size:
        return storage[offset].copy()
    return np.lib.stride_tricks.as_strided(storage[offset:], shape=tuple(size),
                                           strides=tuple(s * item for s in stride)).copy()


def _rebuild_parameter(data, *_):
    return data


class _Namespace(argparse.Namespace):
    """argparse.Namespace as fairseq's older checkpoints pickle their settings: attributes only."""


def _ordered_dict(*args):
    return collections.OrderedDict(*args)


_ALLOWED = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("collections", "OrderedDict"): _ordered_dict,
    ("argparse", "Namespace"): _Namespace,
    **{("torch", name): name for name in _STORAGES},
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, archive: zipfile.ZipFile, prefix: str, path: str):
        super().__init__(file)
        self.archive, self.prefix, self.path = archive, prefix, path
        self.storages: dict[str, np.ndarray] = {}

    def find_class(self, module, name):
        if (module, name) not in _ALLOWED:
            raise DataError(f"{self.path}: refuses to load {module}.{name} (a checkpoint is read as data: tensors, "
                            f"dicts, numbers, strings; nothing else is called)")
        return _ALLOWED[(module, name)]

    def persistent_load(self, pid):
        # ('storage', storage class, key, location, number of elements)
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and pid[1] in _STORAGES):
            raise DataError(f"{self.path}: unknown tensor storage record {pid!r:.80}")
        _, kind, key, _, numel = pid
        if key not in self.storages:
            try:
                raw = self.archive.read(f"{self.prefix}/data/{key}")
            except KeyError:
                raise DataError(f"{self.path}: tensor storage {key} is missing (a truncated file?)") from None
            dtype = np.dtype(_STORAGES[kind])
            if len(raw) < numel * dtype.itemsize:
                raise DataError(f"{self.path}: tensor storage {key} holds {len(raw)} bytes, expected "
                                f"{numel * dtype.itemsize} (a truncated file?)")
            self.storages[key] = np.frombuffer(raw, dtype=dtype.newbyteorder("<"), count=numel)
        return self.storages[key]


def load(path: str):
    """The object a `torch.save` zip file holds, its tensors as numpy arrays. DataError (one line) for a file that
    is not one, is damaged, or names anything beyond tensors and plain containers."""
    try:
        archive = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (zipfile.BadZipFile, OSError) as e:
        raise DataError(f"{path}: not a PyTorch checkpoint in the zip format of torch >= 1.6 ({e}); load and save "
                        f"it once with a recent torch (torch.save) to convert it") from None
    with archive:
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if not pickles:
            raise DataError(f"{path}: a zip file without a PyTorch checkpoint in it (no data.pkl)")
        prefix = pickles[0].split("/")[0]
        try:
            with archive.open(pickles[0]) as f:
                return _Unpickler(f, archive, prefix, path).load()
        except DataError:
            raise
        except (pickle.UnpicklingError, EOFError, zipfile.BadZipFile, ValueError, TypeError) as e:
            raise DataError(f"{path}: unreadable checkpoint ({type(e).__name__}: {e})") from None
