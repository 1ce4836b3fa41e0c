#!/usr/bin/env bash
# Makes .gpu/ (ignored by git), what a GPU machine without network access needs beside the checkout, which it cannot
# fetch there: the Multi30k En-De files, their constraint pairs (eflomal runs here, not there) and the wheels of
# jaxnat's core dependencies that the GPU image lacks (ml-collections; Python 3.12).
#
#   bash bench/gpu_prepare.sh [DATA_DIR=../shared/data/multi30k]
#
# Then, on the device machine (carry .gpu), one command:
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/whl/*.whl &&
#   PYTHONPATH=/tmp/site:$PWD python3 bench/gpu_figures.py --data-dir .gpu/multi30k --pairs-dir .gpu/pairs --out $OUT
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/data/multi30k}
for f in train val test_2016_flickr; do
  for l in en de; do
    [[ -f "$data/$f.$l.gz" ]] || { echo "error: $data/$f.$l.gz not found (DATA_DIR: the Multi30k directory)" >&2; exit 2; }
  done
done
mkdir -p .gpu/multi30k .gpu/whl
cp "$data"/{train,val,test_2016_flickr}.{en,de}.gz .gpu/multi30k/
if [[ ! -f .gpu/pairs/train.pairs.jsonl ]]; then
  python -m jaxnat.data.alignment --data-dir .gpu/multi30k --src en --tgt de --splits val,test_2016_flickr \
    --output .gpu/pairs
fi
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform any -d .gpu/whl ml-collections==1.1.0
du -sh .gpu
