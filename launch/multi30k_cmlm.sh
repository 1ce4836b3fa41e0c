#!/usr/bin/env bash
# Multi30k En→De, CMLM and CMLMC on raw data beside the AR model (CMLMC's claim: close to AR without
# distillation): the queue's (launch/queue.sh) jobs of this paper and those they need, every stage resumable
# (re-run the script after a kill):
#   1. the AR model (configs/ar/multi30k.py), also the rescorer
#   2. CMLMC and the paper's ablation rows (CMLM, +MaskedAttn, +ConcatPE, +RevealPosition, +Corr) on the raw
#      data with the AR run's vocabulary and the same budget (STEPS updates of 4096 tokens), each evaluated with
#      10 mask-predict passes and length beam 3, plain / soft / hard constraints and the pass sweep 1, 2, 5, 7, 10
#   3. CMLMC again, its length candidates rescored by the AR model
#   4. decoding speed side by side: AR greedy and beam 4, CMLM and CMLMC with T = 10 forced, batch 1 and 64
# Usage: launch/multi30k_cmlm.sh [DATA_DIR] [RUNS_DIR (./runs)] [STEPS]     (2-core CPU: many hours)
# STEPS: the CMLM models' updates (default 2500); the queue's other settings (PYTHON, CORES, AR_STEPS...) apply.
set -euo pipefail
[ -z "${1:-}" ] || export DATA=$1  # else the queue's default
CMLM_STEPS=${3:-2500} ONLY="cmlm-revpos cmlm-corr cmlmc-rescored speed-cmlm cmlm-maskedattn cmlm-concatpe" \
    exec bash "$(dirname "$0")/queue.sh" "${2:-runs}"
