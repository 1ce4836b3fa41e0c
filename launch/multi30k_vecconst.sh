#!/usr/bin/env bash
# Multi30k En→De with vectorized lexical constraints (Wang et al. 2022): the queue's (launch/queue.sh) jobs of
# this paper and those they need, every stage resumable (re-run the script after a kill):
#   1. stage 1, the vanilla Transformer: configs/ar/multi30k.py (also the "vanilla" and "vanilla + VDBA" rows:
#      its evaluation with data.pairs_dir set adds test+pairs_hard, constrained beam search on the pairs' targets)
#   2. constraint pairs from eflomal alignments, and the code-switched variant (splits "<split>.cs")
#   3. stage 2, all parameters, from stage 1: α/β = 0.8/0.2 (decoded with beam search: test+pairs) and
#      α/β = 0.5/0.5 (decoded with VDBA: test+pairs_hard), and the code-switched 0.8/0.2 model (with the
#      vanilla rows of the code-switched test set: stage 1 evaluated on it)
#   4. decoding speed, batch 1 and 128, beside the AR model's beam search (bench/decode_speed.py --pairs)
#   5. stage 2 of the 0.8/0.2 model continued to 3 × STEPS (a copy of its workdir): does CSR keep rising?
# Usage: launch/multi30k_vecconst.sh [DATA_DIR] [RUNS_DIR (./runs)] [STEPS]     (2-core CPU: many hours)
# STEPS: stage 2's updates (default 1000); the queue's other settings (PYTHON, CORES, AR_STEPS...) apply.
set -euo pipefail
[ -z "${1:-}" ] || export DATA=$1  # else the queue's default
VECCONST_STEPS=${3:-1000} ONLY="ar-pairs vecconst vecconst-vdba vecconst-cs ar-pairs-cs speed-vecconst vecconst-long" \
    exec bash "$(dirname "$0")/queue.sh" "${2:-runs}"
