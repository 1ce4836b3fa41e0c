"""The files of a Hugging Face `save_pretrained` directory that every Hugging Face format reads alike: JSON
(`config.json`, tokenizer files) and the weights (`model.safetensors`, else `pytorch_model.bin`, or their shards
with the index naming them), read as data."""

from __future__ import annotations

import json
import math
import os
import struct

import numpy as np

from jaxnat.errors import DataError
from jaxnat.importers import torch_file

# the weights' files by preference: (one file, the index of a sharded one); safetensors first
WEIGHTS = (("model.safetensors", "model.safetensors.index.json"), ("pytorch_model.bin", "pytorch_model.bin.index.json"))
SAFETENSORS_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "bfloat16", "I64": "<i8", "I32": "<i4",
                      "I16": "<i2", "I8": "i1", "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?"}


def read_json(path: str) -> dict:
    """The JSON object in ``path`` (every Hugging Face file jaxnat reads holds one); a one-line DataError for a
    file that is unreadable, not JSON (nested past Python's recursion limit too) or another JSON value."""
    try:
        with open(path, encoding="utf-8") as f:
            found = json.load(f)
    except OSError as e:
        raise DataError(f"{path}: unreadable ({e.strerror})") from None
    except (ValueError, RecursionError) as e:
        raise DataError(f"{path}: not JSON ({e})") from None
    if not isinstance(found, dict):
        raise DataError(f"{path}: not a JSON object (a map of names), as a Hugging Face model's JSON files are")
    return found


# The config.json keys the Hugging Face importers read, by what their values must be: a file edited by hand or
# damaged is refused in one line naming the key, not in a TypeError deep in the import's arithmetic
_WHOLE = ("d_model", "encoder_ffn_dim", "decoder_ffn_dim", "encoder_layers", "decoder_layers",
          "encoder_attention_heads", "decoder_attention_heads", "max_position_embeddings", "pad_token_id",
          "eos_token_id", "decoder_start_token_id")
CONFIG_VALUES = {**dict.fromkeys(_WHOLE, "a whole number >= 0"), "num_beams": "a whole number >= 0 or null",
                 **dict.fromkeys(("dropout", "attention_dropout", "activation_dropout"), "a number"),
                 **dict.fromkeys(("scale_embedding", "normalize_before", "share_encoder_decoder_embeddings",
                                  "tie_word_embeddings"), "true or false"),
                 **dict.fromkeys(("model_type", "activation_function"), "a string")}


def _is(value, what: str) -> bool:
    whole = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return {"a whole number >= 0": whole, "a whole number >= 0 or null": whole or value is None,
            "a number": isinstance(value, (int, float)) and not isinstance(value, bool),
            "true or false": isinstance(value, bool), "a string": isinstance(value, str)}[what]


def read_config(path: str) -> dict:
    """A model's config.json (`read_json`), each key of `CONFIG_VALUES` it holds checked: a one-line DataError
    naming the first that is not what it must be."""
    cfg = read_json(path)
    for key, what in CONFIG_VALUES.items():
        if key in cfg and not _is(cfg[key], what):
            raise DataError(f"{path}: {key} is {json.dumps(cfg[key])[:40]}, where it must be {what}")
    return cfg


def read_ids(path: str) -> dict[str, int]:
    """A vocabulary file mapping pieces to ids (vocab.json), each id a whole number >= 0: a one-line DataError
    otherwise."""
    vocab = read_json(path)
    if bad := next((piece for piece, i in vocab.items() if not _is(i, "a whole number >= 0")), None):
        raise DataError(f"{path}: the id of {bad!r} is {json.dumps(vocab[bad])[:40]}, where each must be a whole "
                        f"number >= 0")
    return vocab


def weights(directory: str) -> tuple[dict, str]:
    """({name: array}, the file they came from: the one file, or the index of its shards)."""
    for single, index in WEIGHTS:
        read = read_safetensors if single.endswith(".safetensors") else torch_file.load
        if os.path.isfile(os.path.join(directory, single)):
            return read(os.path.join(directory, single)), os.path.join(directory, single)
        at = os.path.join(directory, index)
        if os.path.isfile(at):
            weight_map = read_json(at).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise DataError(f"{at}: no weight_map (an index of a sharded checkpoint names each weight's file)")
            tensors = {}
            for shard in sorted(set(weight_map.values())):
                path = os.path.join(directory, os.path.basename(str(shard)))
                if not os.path.isfile(path):
                    raise DataError(f"{at} names {shard}, which {directory} lacks")
                tensors.update(read(path))
            return tensors, at
    raise DataError(f"{directory}: no weights (model.safetensors or pytorch_model.bin, or their shards' index)")


def read_safetensors(path: str) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file (8 bytes: the header's length; the header: JSON, each tensor's dtype, shape
    and byte range after the header; then the bytes), each read into its own array: memory grows by the file's size,
    never twice it (the `safetensors` package reads the whole file before copying it into arrays)."""
    def bad(why: str) -> DataError:
        return DataError(f"{path}: unreadable safetensors file ({why})")

    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise bad("shorter than its header")
            (n,) = struct.unpack("<Q", f.read(8))
            if n > size - 8:
                raise bad(f"a header of {n} bytes in a file of {size}")
            try:
                header = json.loads(f.read(n))
            except (ValueError, RecursionError) as e:
                raise bad(f"its header is not JSON: {e}") from None
            if not isinstance(header, dict):
                raise bad("its header is not a map")
            header.pop("__metadata__", None)
            found = []
            for name, entry in header.items():
                code = entry.get("dtype") if isinstance(entry, dict) else None
                if not isinstance(code, str) or code not in SAFETENSORS_DTYPES:
                    raise bad(f"{name}: dtype {code!r} is not one of {', '.join(SAFETENSORS_DTYPES)}")
                shape, offsets = entry.get("shape"), entry.get("data_offsets")
                if not (_whole_numbers(shape) and _whole_numbers(offsets) and len(offsets) == 2):
                    raise bad(f"{name}: no shape and data_offsets of whole numbers it can read")
                dtype, (begin, end) = _dtype(code), offsets
                count = math.prod(shape)  # Python's integers: a huge shape does not wrap round to a small count
                if not begin <= end <= size - 8 - n or end - begin != count * dtype.itemsize:
                    raise bad(f"{name}: bytes {begin}..{end} do not hold {code} {shape}")
                found.append((begin, end, name, dtype, shape))
            found.sort()
            for (_, end, name, *_), (begin, _, other, *_) in zip(found, found[1:]):
                if begin < end:  # two tensors in one place: a damaged header (the safetensors package refuses it too)
                    raise bad(f"{name} and {other} overlap at byte {begin}")
            tensors = {}
            for begin, _, name, dtype, shape in found:  # in the file's order
                f.seek(8 + n + begin)
                try:
                    tensors[name] = np.fromfile(f, dtype, math.prod(shape)).reshape(shape)
                except ValueError:  # numpy's limit on a dimension, reached by an empty tensor's [2**70, 0] alone
                    raise bad(f"{name}: shape {shape} is larger than numpy's arrays") from None
            return tensors
    except OSError as e:
        raise DataError(f"{path}: unreadable ({e.strerror})") from None


def write_safetensors(path: str, tensors: dict[str, np.ndarray]) -> None:
    """Writes float32 ``tensors`` as a safetensors file (`read_safetensors`'s format; names in sorted order, as the
    `safetensors` package orders them)."""
    header, offset = {}, 0
    for name in sorted(tensors):
        size = tensors[name].size * 4
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the tensors' bytes aligned to 8, as the package writes them
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name in sorted(tensors):
            f.write(np.ascontiguousarray(tensors[name], "<f4").data)  # a contiguous float32 array: not copied


def _whole_numbers(values) -> bool:
    return isinstance(values, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)


def _dtype(code: str) -> np.dtype:
    if code == "BF16":  # numpy has none: jax's (ml_dtypes')
        import jax.numpy as jnp

        return np.dtype(jnp.bfloat16)
    return np.dtype(SAFETENSORS_DTYPES[code])
