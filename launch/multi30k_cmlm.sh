#!/usr/bin/env bash
# Multi30k En→De, CMLM and CMLMC on raw data beside the AR model (CMLMC's claim: close to AR without
# distillation), every stage resumable (re-run the script after a kill):
#   1. the AR model (configs/ar/multi30k.py, --config.train.steps=STEPS), also the rescorer
#   2. CMLMC and the paper's ablation rows (CMLM, +MaskedAttn, +ConcatPE, +RevealPosition, +Corr) on the raw
#      data with the AR run's
#      vocabulary and the same budget (STEPS updates of 4096 tokens), each evaluated with 10 mask-predict
#      passes and length beam 3, plain / soft / hard constraints and the pass sweep 1, 2, 5, 7, 10
#   3. CMLMC again, its length candidates rescored by the AR model
#   4. decoding speed side by side: AR greedy and beam 4, CMLM and CMLMC with T = 10 forced, batch 1 and 64
# Usage: launch/multi30k_cmlm.sh [DATA_DIR] [RUNS_DIR] [STEPS]     (2-core CPU: many hours; resumable)
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data/multi30k}
RUNS=${2:-runs}
STEPS=${3:-2500}
CMLM="--config.model.masked_attn=false --config.model.concat_pe=false --config.train.correction=false"

python -m jaxnat.main --config configs/ar/multi30k.py --workdir "$RUNS/ar-multi30k" --config.data.dir="$DATA" \
    --config.train.steps="$STEPS"
run() {  # NAME OVERRIDES...
    local name=$1; shift
    python -m jaxnat.main --config configs/cmlm/multi30k.py --workdir "$RUNS/$name-multi30k" --config.data.dir="$DATA" \
        --config.data.spm_from="$RUNS/ar-multi30k" --config.train.steps="$STEPS" "$@"
}
run cmlmc
run cmlm $CMLM
run cmlm-maskedattn --config.model.concat_pe=false --config.train.correction=false
run cmlm-concatpe --config.model.masked_attn=false --config.train.correction=false
run cmlm-revpos --config.train.correction=false
run cmlm-corr --config.model.masked_attn=false --config.model.concat_pe=false
# a copy of the CMLMC run, evaluated once with the rescorer (its metrics.json beside the plain one; an evaluation
# writes metrics.record.json last, so a killed one is redone)
copy="$RUNS/cmlmc-rescored-multi30k"
[ -d "$copy" ] || { cp -r "$RUNS/cmlmc-multi30k" "$copy" && rm -f "$copy/metrics.record.json"; }
[ -f "$copy/metrics.record.json" ] ||
    python -m jaxnat.main --mode eval --config configs/cmlm/multi30k.py --workdir "$copy" \
        --config.data.dir="$DATA" --config.eval.rescorer="$RUNS/ar-multi30k" --config.eval.constraints= \
        --config.eval.iteration_sweep=
python bench/decode_speed.py --run "$RUNS/ar-multi30k" --run "$RUNS/cmlm-multi30k" --run "$RUNS/cmlmc-multi30k" \
    --config.data.dir="$DATA"
