#!/usr/bin/env bash
# Multi30k En→De, NAT-base vs Coverage-NAT w/o SCA vs Coverage-NAT on distilled data at equal budgets, every stage
# resumable (re-run the script after a kill):
#   1. the AR teacher and its distilled training set (as launch/multi30k_edit_models.sh: configs/ar/multi30k.py)
#   2. NAT-base and Coverage-NAT (pre-training, K_train = 5), STEPS updates of 4096 tokens each, on the teacher's
#      vocabulary; Coverage-NAT is evaluated at K_dec = 1 … 7 (the paper's Figure 2)
#   3. Coverage-NAT's fine-tuning phase with sentence-level coverage agreement (configs/nat/multi30k_sca.py)
#   4. each of the three again with 9 candidate lengths rescored by the teacher (a copy of the workdir, so that
#      both metrics.json stay): BLEU with and without rescoring, repeated-token ratios short / long, latency
#   5. decoding speed side by side: AR greedy and beam 4, NAT-base and Coverage-NAT, batch 1 and 64
# Usage: launch/multi30k_nat.sh [DATA_DIR] [RUNS_DIR] [STEPS]     (2-core CPU: many hours; resumable)
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data/multi30k}
RUNS=${2:-runs}
STEPS=${3:-2500}
KD="$RUNS/kd-multi30k"

python -m jaxnat.main --config configs/ar/multi30k.py --workdir "$RUNS/ar-multi30k" --config.data.dir="$DATA" \
    --config.train.steps="$STEPS"
python -m jaxnat.main --mode distill --config configs/ar/multi30k.py --workdir "$RUNS/ar-multi30k" \
    --config.data.dir="$DATA" --output "$KD"  # a finished distillation is not redone
nat() {  # CONFIG NAME OVERRIDES...
    local config=$1 name=$2; shift 2
    python -m jaxnat.main --config "$config" --workdir "$RUNS/$name-multi30k" --config.data.dir="$KD" \
        --config.data.spm_from="$RUNS/ar-multi30k" "$@"
}
nat configs/nat/multi30k.py natbase --config.train.steps="$STEPS" --config.model.coverage=false \
    --config.eval.iteration_sweep=
nat configs/nat/multi30k.py covnat --config.train.steps="$STEPS"
nat configs/nat/multi30k_sca.py covnat-sca --config.train.init_from="$RUNS/covnat-multi30k"
for name in natbase covnat covnat-sca; do
    config=configs/nat/multi30k.py
    [ "$name" = covnat-sca ] && config=configs/nat/multi30k_sca.py
    copy="$RUNS/$name-rescored-multi30k"  # evaluated once (metrics.record.json is written last)
    [ -d "$copy" ] || { cp -r "$RUNS/$name-multi30k" "$copy" && rm -f "$copy/metrics.record.json"; }
    [ -f "$copy/metrics.record.json" ] || python -m jaxnat.main --mode eval --config "$config" --workdir "$copy" \
        --config.data.dir="$KD" --config.model.coverage=$([ "$name" = natbase ] && echo false || echo true) \
        --config.eval.length_beam=9 --config.eval.rescorer="$RUNS/ar-multi30k" --config.eval.iteration_sweep=
done
python bench/decode_speed.py --run "$RUNS/ar-multi30k" --run "$RUNS/natbase-multi30k" --run "$RUNS/covnat-sca-multi30k" \
    --config.data.dir="$KD"
