#!/usr/bin/env bash
# Multi30k En→De, the whole edit-model pipeline, every stage resumable (re-run the script after a kill):
#   1. the AR teacher (configs/ar/multi30k.py)
#   2. its beam-4 translations of the training sources: a distilled training set
#   3. the Levenshtein Transformer and EDITOR on the distilled targets, each evaluated plain, with soft and with
#      hard constraints (BLEU, RIBES, CPR, term usage, latency, iterations and edit counts in its metrics.json;
#      EDITOR's edit trace of 8 sentences in its trace.html)
#   4. decoding speed of the three, side by side, and each refinement loop's overhead over its decoder passes
# Usage: launch/multi30k_edit_models.sh [DATA_DIR] [RUNS_DIR] [STEPS]
# (the 2-core dev CPU: 2500 steps take about 6 h per edit model; resumable)
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data/multi30k}
RUNS=${2:-runs}
STEPS=${3:-2500}
KD="$RUNS/kd-multi30k"

python -m jaxnat.main --config configs/ar/multi30k.py --workdir "$RUNS/ar-multi30k" --config.data.dir="$DATA" \
    --config.train.steps="$STEPS"
python -m jaxnat.main --mode distill --config configs/ar/multi30k.py --workdir "$RUNS/ar-multi30k" \
    --config.data.dir="$DATA" --output "$KD"
for model in levt editor; do  # the teacher's vocabulary, the same budget
    python -m jaxnat.main --config "configs/$model/multi30k.py" --workdir "$RUNS/$model-kd-multi30k" \
        --config.data.dir="$KD" --config.data.spm_from="$RUNS/ar-multi30k" --config.train.steps="$STEPS"
done
python bench/decode_speed.py --run "configs/ar/multi30k.py:$RUNS/ar-multi30k" \
    --run "configs/levt/multi30k.py:$RUNS/levt-kd-multi30k" --run "configs/editor/multi30k.py:$RUNS/editor-kd-multi30k" \
    --config.data.dir="$KD"
for model in levt editor; do
    python bench/refine_overhead.py --config "configs/$model/multi30k.py" --workdir "$RUNS/$model-kd-multi30k" \
        --config.data.dir="$KD"
done
