#!/usr/bin/env bash
# Multi30k En→De with vectorized lexical constraints (Wang et al. 2022), every stage resumable (re-run the
# script after a kill):
#   1. stage 1, the vanilla Transformer: configs/ar/multi30k.py (also the "vanilla" and "vanilla + VDBA" rows:
#      its evaluation with data.pairs_dir set adds test+pairs_hard, constrained beam search on the pairs' targets)
#   2. constraint pairs from eflomal alignments, and the code-switched variant (splits "<split>.cs")
#   3. stage 2, all parameters, from stage 1: α/β = 0.8/0.2 (decoded with beam search: test+pairs) and
#      α/β = 0.5/0.5 (decoded with VDBA: test+pairs_hard), and the code-switched 0.8/0.2 model
#   4. decoding speed, batch 1 and 128, beside the AR model's beam search (bench/decode_speed.py --pairs)
# Usage: launch/multi30k_vecconst.sh [DATA_DIR] [RUNS_DIR] [STEPS]     (2-core CPU: many hours; resumable)
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data/multi30k}
RUNS=${2:-runs}
STEPS=${3:-1000}
ALIGN="$RUNS/align-multi30k"

python -m jaxnat.main --config configs/ar/multi30k.py --workdir "$RUNS/ar-multi30k" --config.data.dir="$DATA" \
    --config.train.steps=2500
python -m jaxnat.data.alignment --data-dir "$DATA" --src en --tgt de --splits val,test_2016_flickr \
    --output "$ALIGN" --code-switch
# the vanilla rows: stage 1 evaluated with the pairs (a copy of the workdir, so that both metrics.json stay)
[ -d "$RUNS/ar-pairs-multi30k" ] ||
    { cp -r "$RUNS/ar-multi30k" "$RUNS/ar-pairs-multi30k" && rm -f "$RUNS/ar-pairs-multi30k/metrics.record.json"; }
[ -f "$RUNS/ar-pairs-multi30k/metrics.record.json" ] ||
    python -m jaxnat.main --mode eval --config configs/ar/multi30k.py --workdir "$RUNS/ar-pairs-multi30k" \
        --config.data.dir="$DATA" --config.data.pairs_dir="$ALIGN" --config.eval.throughput_batch=128
stage2() {  # CONFIG NAME OVERRIDES...
    local config=$1 name=$2; shift 2
    python -m jaxnat.main --config "$config" --workdir "$RUNS/$name-multi30k" --config.data.dir="$DATA" \
        --config.data.pairs_dir="$ALIGN" --config.train.init_from="$RUNS/ar-multi30k" \
        --config.train.steps="$STEPS" "$@"
}
stage2 configs/vecconst/multi30k.py vecconst
stage2 configs/vecconst/multi30k_vdba.py vecconst-vdba
stage2 configs/vecconst/multi30k.py vecconst-cs --config.data.dir="$ALIGN" --config.data.train_split=train.cs \
    --config.data.valid_split=val.cs --config.data.test_splits=test_2016_flickr.cs
# the paper's Table 5: speed at batch 1 and 128 relative to the AR model's plain beam search, in one run (the AR
# model with the pairs' phrases as constrained beam search, the vectorized model with its pairs, VDBA on both)
python bench/decode_speed.py --run "$RUNS/ar-multi30k" --run "$RUNS/vecconst-multi30k" --pairs --batch 128 \
    --config.data.dir="$DATA" --config.data.pairs_dir="$ALIGN"
