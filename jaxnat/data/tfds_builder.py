"""Parallel corpora as TFDS ArrayRecord datasets, built and read without TensorFlow.

What works without TensorFlow (tensorflow-datasets 4.9.10, checked):

* Building: a `tfds.core.GeneratorBasedBuilder` subclass with `file_format="array_record"` and
  `download_and_prepare()` writes `{data_dir}/{name}/{version}/` (ArrayRecord shards, `dataset_info.json`,
  `features.json`). Its `DatasetInfo` must be built directly (`tfds.core.DatasetInfo(builder=...)`):
  `dataset_info_from_configs` wants a package directory with metadata files. `file_format="tfrecord"`
  does NOT work without TensorFlow (writing fails with "No module named 'tensorflow'").
* Reading: `tfds.data_source(name, data_dir=...)` finds the prepared dataset from its files alone (no builder
  class needed; the builders made here are not even registered) and returns random-access
  `ArrayRecordDataSource`s whose examples are dicts of numpy values (text as UTF-8 bytes). GCS look-ups
  are disabled by default in tfds, so nothing touches the network.

`build_parallel_tfds` turns local line-aligned text files (see `jaxnat.data.text`) into such a dataset with
one text feature per language code (the layout of TFDS' translation datasets), keeping the line order. It is
idempotent: an existing build from the same files is reused; one from different files is an error.

Public TFDS translation datasets (e.g. `wmt14_translate/de-en`, `wmt16_translate/ro-en`) are read by the same
`load_tfds_splits`, but only once prepared in ArrayRecord format. Preparing them needs TensorFlow (their
builder modules import it) and network access to download the corpora, e.g. on a machine with both:

    pip install tensorflow tensorflow-datasets
    tfds build wmt14_translate/de-en --data_dir=DATA_DIR --file_format=array_record

then copy DATA_DIR over and set `tfds_data_dir` to it. A dataset prepared in the default tfrecord format
cannot be read here (random access needs ArrayRecord); rebuild it with `--file_format=array_record`.
If a dataset is not prepared, `load_tfds_splits` raises a one-line `DataError` saying so.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import types
from typing import Mapping, Sequence

from jaxnat.data.text import read_parallel
from jaxnat.errors import ConfigError, DataError
from jaxnat.optional import require

log = logging.getLogger(__name__)

DEFAULT_VERSION = "1.0.0"
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_SPLIT_RE = re.compile(r"^\w+$")
_FORMAT_TAG = "jaxnat_parallel_text/1"
_READ_CHUNK = 8192


def _tfds():
    # imported here: ~0.5 s, and only this module needs it (an optional dependency, the tfds extra)
    return require("tensorflow_datasets", "a TFDS dataset (data.source=tfds)")


def default_data_dir() -> str:
    """TFDS' default data directory (`$TFDS_DATA_DIR` or ~/tensorflow_datasets)."""
    _tfds()
    from tensorflow_datasets.core import constants

    return os.path.expanduser(os.environ.get("TFDS_DATA_DIR") or constants.DATA_DIR)


def _file_digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fingerprint(files: Mapping[str, tuple[str, str]], src_lang: str, tgt_lang: str) -> str:
    parts = [_FORMAT_TAG, src_lang, tgt_lang]
    for split in sorted(files):
        src_path, tgt_path = files[split]
        for path in (src_path, tgt_path):
            if not os.path.isfile(path):
                raise DataError(f"{path}: file not found")
        parts += [split, _file_digest(src_path), _file_digest(tgt_path)]
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()


def _make_builder_class(name: str):
    tfds = _tfds()

    class _ParallelText(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        """Line-aligned text files -> one Text feature per language; examples keep the line order."""

        VERSION = tfds.core.Version(DEFAULT_VERSION)

        def __init__(self, *, files, src_lang, tgt_lang, description, **kwargs):
            self._files = dict(files)
            self._src_lang = src_lang
            self._tgt_lang = tgt_lang
            self._description = description
            super().__init__(**kwargs)

        def _info(self):
            features = tfds.features.FeaturesDict(
                {self._src_lang: tfds.features.Text(), self._tgt_lang: tfds.features.Text()}
            )
            return tfds.core.DatasetInfo(
                builder=self,
                description=self._description,
                features=features,
                supervised_keys=(self._src_lang, self._tgt_lang),
                disable_shuffling=True,  # keep line order: outputs of a test set are written in input order
            )

        def _split_generators(self, dl_manager):
            return {
                split: self._generate_examples(src_path, tgt_path)
                for split, (src_path, tgt_path) in self._files.items()
            }

        def _generate_examples(self, src_path, tgt_path):
            src, tgt = read_parallel(src_path, tgt_path)
            for i, (s, t) in enumerate(zip(src, tgt)):
                yield i, {self._src_lang: s, self._tgt_lang: t}

    # The builder's name is a class attribute; a fresh, unregistered class per dataset name.
    return types.new_class(
        "ParallelText_" + name, (_ParallelText,), {"skip_registration": True}, lambda ns: ns.update(name=name)
    )


def _check_langs(src_lang: str, tgt_lang: str) -> None:
    if not src_lang or not tgt_lang or src_lang == tgt_lang:
        raise ConfigError(f"src_lang and tgt_lang must be two different codes, got {src_lang!r} and {tgt_lang!r}")


def build_parallel_tfds(
    name: str,
    data_dir: str | None,
    files: Mapping[str, tuple[str, str]],
    src_lang: str,
    tgt_lang: str,
) -> str:
    """Builds (or reuses) the ArrayRecord TFDS dataset `name` in `data_dir` from local text files.

    Args:
      name: dataset name, snake_case (`[a-z][a-z0-9_]*`), e.g. "multi30k_de_en".
      data_dir: TFDS data directory (None: TFDS' default).
      files: split name -> (source file, target file), plain or gzip text, one sentence per line.
      src_lang, tgt_lang: language codes, used as the feature names.

    Returns:
      The dataset's directory, `{data_dir}/{name}/1.0.0`.

    Raises:
      ConfigError: invalid name, split name or languages.
      DataError: a bad input file, or an existing dataset of that name built from other files.
    """
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ConfigError(f"TFDS dataset name must match [a-z][a-z0-9_]* to be built locally, got {name!r}")
    _check_langs(src_lang, tgt_lang)
    if not files:
        raise ConfigError(f"no splits given to build TFDS dataset {name!r}")
    for split in files:
        if not _SPLIT_RE.match(split):
            raise ConfigError(f"TFDS split names must be letters, digits or '_', got {split!r}")
    data_dir = os.path.abspath(os.path.expanduser(data_dir or default_data_dir()))
    dataset_dir = os.path.join(data_dir, name, DEFAULT_VERSION)
    fingerprint = _fingerprint(files, src_lang, tgt_lang)
    description = json.dumps(
        {
            "format": _FORMAT_TAG,
            "fingerprint": fingerprint,
            "src_lang": src_lang,
            "tgt_lang": tgt_lang,
            "files": {k: [os.path.abspath(p) for p in v] for k, v in sorted(files.items())},
        },
        sort_keys=True,
    )

    info_path = os.path.join(dataset_dir, "dataset_info.json")
    if os.path.isfile(info_path):
        try:
            with open(info_path, encoding="utf-8") as f:
                old = json.loads(json.load(f).get("description") or "{}")
        except (OSError, ValueError, AttributeError):
            old = {}
        if old.get("fingerprint") == fingerprint:
            log.info("reusing TFDS dataset %s", dataset_dir)
            return dataset_dir
        raise DataError(
            f"{dataset_dir}: a TFDS dataset {name!r} built from other files already exists; "
            f"delete it or choose another tfds_name"
        )

    tfds = _tfds()
    builder_cls = _make_builder_class(name)
    builder = builder_cls(
        files=files, src_lang=src_lang, tgt_lang=tgt_lang, description=description,
        data_dir=data_dir, file_format="array_record",
    )
    os.makedirs(data_dir, exist_ok=True)
    tfds.disable_progress_bar()
    builder.download_and_prepare(
        download_dir=os.path.join(data_dir, "downloads"),
        download_config=tfds.download.DownloadConfig(
            download_mode=tfds.download.GenerateMode.REUSE_DATASET_IF_EXISTS,
            try_download_gcs=False,
        ),
    )
    log.info("built TFDS dataset %s", dataset_dir)
    return dataset_dir


def _decode(value) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if hasattr(value, "item"):  # numpy scalar/0-d array
        return _decode(value.item())
    return str(value)


def _read_source(source, src_lang: str, tgt_lang: str, where: str) -> tuple[list[str], list[str]]:
    n = len(source)
    srcs: list[str] = []
    tgts: list[str] = []
    for start in range(0, n, _READ_CHUNK):
        idx = list(range(start, min(n, start + _READ_CHUNK)))
        examples = source.__getitems__(idx) if hasattr(source, "__getitems__") else [source[i] for i in idx]
        for ex in examples:
            if start == 0 and not srcs and (src_lang not in ex or tgt_lang not in ex):
                raise DataError(
                    f"{where}: examples have features {sorted(ex)}, not {src_lang!r} and {tgt_lang!r}; "
                    f"check src_lang/tgt_lang"
                )
            srcs.append(_decode(ex[src_lang]).strip())
            tgts.append(_decode(ex[tgt_lang]).strip())
    return srcs, tgts


def load_tfds_splits(
    name: str,
    data_dir: str | None,
    splits: Sequence[str],
    src_lang: str,
    tgt_lang: str,
) -> dict[str, tuple[list[str], list[str]]]:
    """Reads splits of a prepared ArrayRecord TFDS dataset with `tfds.data_source` (no TensorFlow).

    `name` may include a config (`wmt14_translate/de-en`) and a version (`.../de-en:1.0.0`); split names may
    use TFDS slicing (`train[:10%]`). The languages are the feature names, as in TFDS translation datasets.

    Raises:
      DataError: the dataset is not prepared in `data_dir`, is not in ArrayRecord format, lacks a split, or
        has no feature for a language.
    """
    _check_langs(src_lang, tgt_lang)
    tfds = _tfds()
    data_dir = os.path.abspath(os.path.expanduser(data_dir or default_data_dir()))
    where = f"TFDS dataset {name!r} in {data_dir}"
    prepare_hint = (
        f"prepare it where TensorFlow and network are available with `tfds build {name} "
        f"--data_dir={data_dir} --file_format=array_record` (see jaxnat/data/tfds_builder.py)"
    )
    try:
        sources = tfds.data_source(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError:
        raise DataError(f"{where} is not prepared; {prepare_hint}") from None
    except NotImplementedError:
        raise DataError(
            f"{where} is not stored as ArrayRecord (tfds.data_source needs it); {prepare_hint}"
        ) from None
    except ModuleNotFoundError as e:
        raise DataError(f"{where} is not prepared and loading its builder needs {e.name!r}; {prepare_hint}") from None
    except AssertionError as e:  # a registered builder (TensorFlow installed) without prepared data
        raise DataError(f"{where} is not prepared ({' '.join(str(e).split())[:200]}); {prepare_hint}") from None
    except (OSError, ValueError) as e:
        raise DataError(f"{where} cannot be opened ({type(e).__name__}: {' '.join(str(e).split())[:300]})") from None

    out: dict[str, tuple[list[str], list[str]]] = {}
    for split in splits:
        base = split.split("[", 1)[0]
        if base not in sources:
            raise DataError(f"{where} has no split {base!r} (splits: {', '.join(sorted(sources))})")
        source = sources[base]
        if base != split:
            try:
                source = tfds.data_source(name, split=split, data_dir=data_dir)
            except (ValueError, AssertionError) as e:
                raise DataError(f"{where}: bad split {split!r} ({' '.join(str(e).split())[:200]})") from None
        out[split] = _read_source(source, src_lang, tgt_lang, f"{where}, split {split!r}")
        if not out[split][0]:
            raise DataError(f"{where}: split {split!r} is empty")
    return out
