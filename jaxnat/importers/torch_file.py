"""PyTorch's checkpoint files (`torch.save`'s zip format, and the legacy format of torch before 1.6 in which fairseq's
released models of 2019 were saved: fairseq's `.pt`, Hugging Face's `pytorch_model.bin`) read as data, without
PyTorch; and written (`save`, the zip format), also without it.

A pickle can name any Python callable and have it called while loading; this reader's unpickler resolves only
the few names a checkpoint of tensors, dicts and settings needs (`_ALLOWED`: tensors rebuilt from their storages
as numpy arrays, ordered dicts, argparse's Namespace as a plain record) and refuses every other one with a
one-line error, as `torch.load(weights_only=True)` does. Tensors come back as numpy arrays.
"""

from __future__ import annotations

import argparse
import collections
import io
import os
import pickle
import struct
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
    """A tensor storage of the legacy format, whose bytes follow the pickle: key, dtype, numel, and for a view of
    another storage its offset and size (``view``: (offset, size) or None)."""


class _Deferred(types.SimpleNamespace):
    """A legacy-format tensor: its storage (`Storage`) and `_rebuild_tensor`'s other arguments."""


def _rebuild_tensor(storage, offset: int, size, stride, *_):
    """torch._utils._rebuild_tensor_v2's arguments -> a numpy array (read-only): a view of the storage's bytes
    where the tensor lies in them in C order (a checkpoint's parameters do), so that loading holds the file's
    bytes once, else a copy in C order; over a legacy storage not read yet, a `_Deferred` record of them."""
    if isinstance(storage, Storage):
        return _Deferred(storage=storage, args=(offset, size, stride))
    if not isinstance(storage, np.ndarray):  # a pickle that hands the rebuilder a string, a dict, …
        raise DataError(f"a tensor rebuilt from a {type(storage).__name__}, not a tensor storage (a damaged file?)")
    size, stride = tuple(int(n) for n in size), tuple(int(s) for s in stride)
    last = offset + sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else offset - 1
    if offset < 0 or len(size) != len(stride) or min(stride, default=0) < 0 or last >= len(storage):
        raise DataError(f"a tensor of shape {list(size)} at element {offset} lies outside its storage of "
                        f"{len(storage)} elements (a damaged file?)")
    item = storage.itemsize
    if not size:
        return storage[offset].copy()
    view = np.lib.stride_tricks.as_strided(storage[offset:], shape=tuple(size),
                                           strides=tuple(s * item for s in stride), writeable=False)
    return view if view.flags.c_contiguous else view.copy()


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
    """Resolves only `_ALLOWED`; a tensor storage record (persistent id) goes to ``storage(kind, key, numel,
    view)``, which returns its elements (zip format) or a `Storage` to read later (legacy format)."""

    def __init__(self, file, path: str, storage):
        super().__init__(file)
        self.path, self.storage = path, storage

    def find_class(self, module, name):
        if (module, name) not in _ALLOWED:
            raise DataError(f"{self.path}: refuses to load {module}.{name} (a checkpoint is read as data: tensors, "
                            f"dicts, numbers, strings; nothing else is called)")
        return _ALLOWED[(module, name)]

    def persistent_load(self, pid):
        # ('storage', storage class, key, location, number of elements[, view (key, offset, size) or None])
        if not (isinstance(pid, tuple) and len(pid) in (5, 6) and pid[0] == "storage" and pid[1] in _STORAGES):
            raise DataError(f"{self.path}: unknown tensor storage record {pid!r:.80}")
        view = pid[5] if len(pid) == 6 else None
        return self.storage(pid[1], pid[2], pid[4], view)


class _Plain(pickle.Unpickler):
    """The legacy format's headers and storage list: plain values only."""

    def find_class(self, module, name):
        raise DataError(f"refuses to load {module}.{name} in a checkpoint's header")


def _zip_storages(archive: zipfile.ZipFile, prefix: str, path: str):
    storages: dict[str, np.ndarray] = {}

    def storage(kind, key, numel, view):
        if key not in storages:
            dtype = np.dtype(_STORAGES[kind])
            try:  # no more than the record's bytes: a compressed member declaring gigabytes is not inflated
                with archive.open(f"{prefix}/data/{key}") as member:
                    raw = member.read(numel * dtype.itemsize)
            except KeyError:
                raise DataError(f"{path}: tensor storage {key} is missing (a truncated file?)") from None
            if len(raw) < numel * dtype.itemsize:
                raise DataError(f"{path}: tensor storage {key} holds {len(raw)} bytes, expected "
                                f"{numel * dtype.itemsize} (a truncated file?)")
            storages[key] = np.frombuffer(raw, dtype=dtype.newbyteorder("<"), count=numel)
        return storages[key]
    return storage


def _load_zip(path: str):
    with zipfile.ZipFile(path) as archive:
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if not pickles:
            raise DataError(f"{path}: a zip file without a PyTorch checkpoint in it (no data.pkl)")
        prefix = pickles[0].split("/")[0]
        with archive.open(pickles[0]) as f:
            return _Unpickler(f, path, _zip_storages(archive, prefix, path)).load()


ZIP_MAGIC = b"PK\x03\x04"  # the first bytes of a zip file (of its first entry), as torch.save's zip format starts
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C  # the first pickle of torch.save's format before 1.6


def _load_legacy(path: str, f):
    """torch.save's format before torch 1.6: pickles of the magic number, the protocol and the system's settings,
    then the object (its storages by key), then the storages' keys, then each storage's bytes in that order (its
    element count as a little-endian int64, then its elements)."""
    try:
        magic = _Plain(f).load()
    except (pickle.UnpicklingError, EOFError, ValueError, DataError):
        magic = None
    if magic != LEGACY_MAGIC:
        raise DataError(f"{path}: not a PyTorch checkpoint (neither torch.save's zip nor its legacy format)")
    _Plain(f).load()
    info = _Plain(f).load()
    if not (isinstance(info, dict) and info.get("little_endian", True)):
        raise DataError(f"{path}: a big-endian legacy checkpoint is not supported")
    pending: dict[str, Storage] = {}

    def storage(kind, key, numel, view):
        root = pending.setdefault(key, Storage(key=key, dtype=np.dtype(_STORAGES[kind]), numel=numel, data=None))
        if view is None:
            return root
        _, offset, size = view
        return Storage(key=key, dtype=root.dtype, numel=size, data=None, root=root, offset=offset)

    obj = _Unpickler(f, path, storage).load()
    for key in _Plain(f).load():
        if key not in pending:
            raise DataError(f"{path}: storage {key} is listed but no tensor uses it")
        st = pending[key]
        head = f.read(8)
        numel = int.from_bytes(head, "little") if len(head) == 8 else -1
        # checked against the bytes left before reading: a damaged count would ask for exabytes (MemoryError)
        if numel != st.numel or numel * st.dtype.itemsize > os.fstat(f.fileno()).st_size - f.tell():
            raise DataError(f"{path}: tensor storage {key} is cut short (a truncated file?)")
        st.data = np.frombuffer(f.read(numel * st.dtype.itemsize), dtype=st.dtype.newbyteorder("<"))

    def elements(st: Storage) -> np.ndarray:
        root = getattr(st, "root", None)
        if root is None:
            if st.data is None:
                raise DataError(f"{path}: tensor storage {st.key} is missing (a truncated file?)")
            return st.data
        return elements(root)[st.offset: st.offset + st.numel]

    def resolve(x):
        if isinstance(x, _Deferred):
            return _rebuild_tensor(elements(x.storage), *x.args)
        if isinstance(x, dict):
            for k in list(x):
                x[k] = resolve(x[k])
            return x
        if isinstance(x, list):
            x[:] = [resolve(v) for v in x]
            return x
        if isinstance(x, tuple):
            return type(x)(resolve(v) for v in x) if not hasattr(x, "_fields") else type(x)(*map(resolve, x))
        if isinstance(x, argparse.Namespace):
            for k, v in vars(x).items():
                setattr(x, k, resolve(v))
        return x

    return resolve(obj)


def load(path: str):
    """The object a `torch.save` file holds (the zip format of torch >= 1.6, or the legacy one before it), its
    tensors as numpy arrays. DataError (one line) for a file that is not one, is damaged, or names anything beyond
    tensors and plain containers."""
    try:
        with open(path, "rb") as f:
            if zipfile.is_zipfile(f):
                return _load_zip(path)
            f.seek(0)
            if f.read(4) == ZIP_MAGIC:  # a zip's start without its end (its central directory)
                raise DataError(f"{path}: a zip file cut short or damaged (no central directory): a truncated "
                                f"download or copy?")
            f.seek(0)
            return _load_legacy(path, f)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except DataError as e:
        raise e if str(e).startswith(path) else DataError(f"{path}: {e}") from None
    except EOFError:
        raise DataError(f"{path}: the checkpoint ends early (a truncated download or copy?)") from None
    except (pickle.UnpicklingError, zipfile.BadZipFile, ValueError, TypeError, OSError) as e:
        raise DataError(f"{path}: unreadable checkpoint ({type(e).__name__}: {e})") from None


# ----------------------------------------------------------------------------------------------- writing

class _Name:
    """A module-level name a pickle refers to (its GLOBAL opcode), written without importing it: PyTorch's tensor
    rebuilder and storage classes, which only the reader of the file resolves."""

    def __init__(self, module: str, name: str):
        self.module, self.name, self.__name__ = module, name, name

    def __call__(self, *_):
        raise TypeError(f"{self.module}.{self.name} is a name in a pickle, not callable here")


class _Storage:
    def __init__(self, array: np.ndarray):
        self.array = array


class _Tensor:
    """A numpy array that pickles as `torch.save` pickles a tensor: `_rebuild_tensor_v2` over its own storage."""

    def __init__(self, array: np.ndarray):
        self.array = np.asarray(array, dtype=array.dtype.newbyteorder("<"), order="C")  # (0-d stays 0-d)

    def __reduce__(self):
        shape = tuple(int(n) for n in self.array.shape)
        stride = tuple(int(s) // self.array.itemsize for s in self.array.strides)
        return (_Name("torch._utils", "_rebuild_tensor_v2"),
                (_Storage(self.array), 0, shape, stride, False, collections.OrderedDict()))


def _save_name(pickler, obj: _Name) -> None:
    pickler.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode("utf-8"))
    pickler.memoize(obj)


class _Writer(pickle._Pickler):  # the Python pickler: its dispatch table takes `_Name`
    dispatch = dict(pickle._Pickler.dispatch)
    dispatch[_Name] = _save_name

    def __init__(self, file):
        super().__init__(file, protocol=2)  # torch.save's
        self.storages: list[np.ndarray] = []

    def persistent_id(self, obj):
        if not isinstance(obj, _Storage):
            return None
        kind = next((k for k, t in _STORAGES.items() if np.dtype(t) == obj.array.dtype.newbyteorder("=")), None)
        if kind is None:
            raise ValueError(f"no PyTorch storage holds {obj.array.dtype} elements")
        self.storages.append(obj.array)
        return ("storage", _Name("torch", kind), str(len(self.storages) - 1), "cpu", int(obj.array.size))


def _record(archive: zipfile.ZipFile, name: str, data) -> None:
    """One uncompressed member whose bytes start at a multiple of 64 in the file, as PyTorch aligns them (a
    padding extra field, "FB", in its local header)."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type, info.file_size = zipfile.ZIP_STORED, len(data)
    zip64 = info.file_size * 1.05 > zipfile.ZIP64_LIMIT  # zipfile then adds its own 20-byte extra field
    at = archive.fp.tell() + 30 + len(name.encode("utf-8")) + 4 + 20 * zip64
    info.extra = b"FB" + struct.pack("<H", -at % 64) + b"Z" * (-at % 64)
    with archive.open(info, "w", force_zip64=zip64) as f:
        f.write(data)


def save(obj, path: str) -> None:
    """Writes ``obj`` (dicts, lists, numbers, strings, argparse Namespaces, numpy arrays as tensors) as `torch.save`
    does (the zip format of torch >= 1.6: data.pkl, each tensor's storage, byteorder, version), which `torch.load`
    and `load` read. Deterministic: the same object gives the same bytes."""
    def tensors(x):
        if isinstance(x, np.ndarray):
            return _Tensor(x)
        if isinstance(x, dict):
            return type(x)((k, tensors(v)) for k, v in x.items())
        if isinstance(x, (list, tuple)):
            return type(x)(tensors(v) for v in x)
        return x

    buffer = io.BytesIO()
    writer = _Writer(buffer)
    writer.dump(tensors(obj))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        _record(archive, "archive/data.pkl", buffer.getbuffer())
        _record(archive, "archive/byteorder", b"little")
        for key, array in enumerate(writer.storages):
            _record(archive, f"archive/data/{key}", memoryview(array.reshape(-1).view(np.uint8)))
        _record(archive, "archive/version", b"3\n")
