#!/usr/bin/env bash
# Multi30k En→De, NAT-base vs Coverage-NAT w/o SCA vs Coverage-NAT on distilled data at equal budgets: the queue's
# (launch/queue.sh) jobs of this paper and those they need, every stage resumable (re-run the script after a kill):
#   1. the AR teacher and its distilled training set (configs/ar/multi30k.py)
#   2. NAT-base and Coverage-NAT (pre-training, K_train = 5), STEPS updates of 4096 tokens each, on the teacher's
#      vocabulary; Coverage-NAT is evaluated at K_dec = 1 … 7 (the paper's Figure 2)
#   3. Coverage-NAT's fine-tuning phase with sentence-level coverage agreement (configs/nat/multi30k_sca.py),
#      and its control: the same phase without SCA (β = 0, the paper's Table III)
#   4. each of the three again with 9 candidate lengths rescored by the teacher (a copy of the workdir, so that
#      both metrics.json stay): BLEU with and without rescoring, repeated-token ratios short / long, latency
#   5. decoding speed side by side: AR greedy and beam 4, NAT-base and Coverage-NAT, batch 1 and 64
# Usage: launch/multi30k_nat.sh [DATA_DIR] [RUNS_DIR (./runs)] [STEPS]     (2-core CPU: many hours)
# STEPS: the NAT models' updates (default 2500); the queue's other settings (PYTHON, CORES, AR_STEPS...) apply.
set -euo pipefail
[ -z "${1:-}" ] || export DATA=$1  # else the queue's default
NAT_STEPS=${3:-2500} ONLY="natbase-rescored covnat-rescored covnat-sca-rescored speed-nat covnat-ft" \
    exec bash "$(dirname "$0")/queue.sh" "${2:-runs}"
