#!/usr/bin/env bash
# Makes .gpu/ (ignored by git), what a GPU machine without network access needs beside the checkout, which it cannot
# fetch there: the Multi30k En-De files, their constraint pairs and code-switched splits (eflomal runs here, not
# there) and the wheels of jaxnat's core dependencies that the GPU image lacks (ml-collections, sacremoses,
# subword-nmt) or may hold in other versions than the ones the test suite passed with on jax 0.11.2 and Python 3.12
# (flax, optax, orbax-checkpoint): pure Python, whose own needs the image has (but mock, which subword-nmt lists and
# its apply_bpe, what jaxnat uses, does not import).
# Every core dependency (jaxnat/optional.py, CORE: a command stops at its start without one) must be shipped by
# the image or carried: the script checks that first, and alone with --check.
#
#   bash bench/gpu_prepare.sh [DATA_DIR=../shared/data/multi30k]     (in jaxnat's virtual environment)
#   bash bench/gpu_prepare.sh --check
#
# Then, on the device machine (carry .gpu), the measurements of one GPU:
#   python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .gpu/whl/*.whl &&
#   PYTHONPATH=/tmp/site:$PWD python3 bench/gpu_figures.py --data-dir .gpu/multi30k --pairs-dir .gpu/pairs --out $OUT
# or the Multi30k pipeline: bash bench/gpu_session.sh SECONDS [...]
set -euo pipefail
cd "$(dirname "$0")/.."
# the core dependencies in the GPU image (the device tool's package list of nvidia-h200's image, read 2026-11-17:
# jax 0.11.2 with its CUDA 13 plugin, Python 3.12), and the wheels carried for the others
image_ships=(jax jaxlib numpy sentencepiece sacrebleu safetensors tqdm pyyaml)
carried=(ml-collections==1.1.0 sacremoses==0.2.0 subword-nmt==0.3.8 flax==0.12.12 optax==0.2.8 orbax-checkpoint==0.12.8)
python - "${image_ships[@]}" -- "${carried[@]}" <<'PY'
import sys
from jaxnat.optional import CORE
args = sys.argv[1:]
had = set(args[:args.index("--")]) | {c.split("==")[0] for c in args[args.index("--") + 1:]}
missing = sorted(set(CORE.values()) - had)
if missing:
    sys.exit(f"error: core dependencies neither in the GPU image nor carried: {' '.join(missing)} (bench/gpu_prepare.sh)")
PY
[[ ${1:-} == --check ]] && exit 0
data=${1:-../shared/data/multi30k}
for f in train val test_2016_flickr; do
  for l in en de; do
    [[ -f "$data/$f.$l.gz" ]] || { echo "error: $data/$f.$l.gz not found (DATA_DIR: the Multi30k directory)" >&2; exit 2; }
  done
done
mkdir -p .gpu/multi30k .gpu/whl
cp "$data"/{train,val,test_2016_flickr}.{en,de}.gz .gpu/multi30k/
# launch/multi30k.py's align job, made here (a rerun skips the files that exist)
python -m jaxnat.data.alignment --data-dir .gpu/multi30k --src en --tgt de --splits val,test_2016_flickr \
  --output .gpu/pairs --code-switch
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform any -d .gpu/whl "${carried[@]}"
du -sh .gpu
