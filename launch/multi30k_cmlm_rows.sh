#!/usr/bin/env bash
# The CMLMC paper's four ablation rows (CMLM, +RevealPosition, +correction, CMLMC) on Multi30k En→De raw data,
# and on request its Table A.1 rows (RevealPosition's halves alone: cmlm-maskedattn, cmlm-concatpe),
# trained side by side at the CPU queue's budget (launch/queue.sh: STEPS updates of 4096 tokens,
# configs/cmlm/multi30k.py; the vocabulary is trained with the AR run's settings, so it is the AR run's). The
# rows run at once, each in three steps, the cheapest first, so that a run cut short still has its main figures:
#   1. train (evaluated plain on the test split at the end: metrics.plain.json);
#   2. `jaxnat.models.cmlm.positions` (positions.txt);
#   3. evaluate again with the pass sweep 1, 2, 5, 7, 10 and soft / hard constraints (metrics.json, kept as
#      metrics.full.json).
# Every step resumes: re-run the script after a kill; it exits 1 if a row failed (its output says where). Logs:
# RUNS/<row>.{train,positions,eval}.log.
# Usage: launch/multi30k_cmlm_rows.sh DATA_DIR RUNS_DIR [STEPS (2500)] [--config.KEY=VALUE ...: every run]
# Environment: PYTHON (default python), ROWS (default: the four of Table 1), PIN=1: the i-th row's processes on core
# i mod nproc (two pinned XLA processes beat two that share both cores by about 12% on a 2-core machine).
# On one GPU the four rows share the card, but each first compiles its train step for every batch shape
# (data.bucket_*): on an H200 that took more than a 9-minute lease (docs/benchmarks.md, "On a GPU").
set -uo pipefail
fail() { echo "multi30k_cmlm_rows.sh: $*" >&2; exit 2; }
[ $# -ge 2 ] || fail "usage: DATA_DIR RUNS_DIR [STEPS] [--config.KEY=VALUE ...]"
[ -d "$1" ] || fail "no data directory $1"
DATA=$(realpath "$1") RUNS=$(realpath -m "$2") STEPS=${3:-2500}
shift $(( $# < 3 ? $# : 3 ))
PYTHON=${PYTHON:-python}
NO_MASKED="--config.cmlm.masked_attn=false" NO_CONCAT="--config.cmlm.concat_pe=false"
NO_CORR="--config.cmlm.correction=false"
declare -A FLAGS=([cmlm]="$NO_MASKED $NO_CONCAT $NO_CORR" [cmlm-revpos]="$NO_CORR" [cmlm-corr]="$NO_MASKED $NO_CONCAT"
                  [cmlmc]="" [cmlm-maskedattn]="$NO_CONCAT $NO_CORR" [cmlm-concatpe]="$NO_MASKED $NO_CORR")
ROWS=${ROWS:-cmlm cmlm-revpos cmlm-corr cmlmc}
for row in $ROWS; do [ -n "${FLAGS[$row]+set}" ] || fail "no row '$row' (rows: ${!FLAGS[*]})"; done
cd "$(dirname "$0")/.."
mkdir -p "$RUNS"
# several processes on one GPU take its memory as they need it (compiled programs are shared through jaxnat's
# compilation cache, JAXNAT_COMPILATION_CACHE)
export XLA_PYTHON_CLIENT_PREALLOCATE=false
py() { if [ -n "${PIN:-}" ]; then taskset -c "$CORE" "$PYTHON" "$@"; else "$PYTHON" "$@"; fi; }
main() {  # ROW LOG ARGS...: jaxnat.main on the row's workdir with its flags
    local row=$1 log=$2; shift 2
    # shellcheck disable=SC2086  # FLAGS holds several words
    py -m jaxnat.main --config configs/cmlm/multi30k.py --workdir "$RUNS/$row" --config.data.dir="$DATA" \
        --config.train.steps="$STEPS" ${FLAGS[$row]} "$@" >> "$RUNS/$row.$log.log" 2>&1
}
train() {
    [ -f "$RUNS/$1/metrics.plain.json" ] ||
        { main "$1" train --config.eval.iteration_sweep= --config.eval.constraints= "${EXTRA[@]}" &&
          cp "$RUNS/$1/metrics.json" "$RUNS/$1/metrics.plain.json"; }
}
positions() {
    [ -s "$RUNS/$1/positions.txt" ] ||
        { py -m jaxnat.models.cmlm.positions "$RUNS/$1" > "$RUNS/$1/positions.part" 2>> "$RUNS/$1.positions.log" &&
          mv "$RUNS/$1/positions.part" "$RUNS/$1/positions.txt"; }
}
evaluate() {  # the config's own pass sweep and constraints
    [ -f "$RUNS/$1/metrics.full.json" ] ||
        { main "$1" eval --mode eval "${EXTRA[@]}" && cp "$RUNS/$1/metrics.json" "$RUNS/$1/metrics.full.json"; }
}
row() {  # ROW: its three steps, each only once the one before it succeeded
    local step
    for step in train positions evaluate; do "$step" "$1" || { echo "$(date +%T) $1: $step failed"; return 1; }; done
    echo "$(date +%T) $1 done"
}
EXTRA=("$@")
# a stopped script stops its runs (each writes a checkpoint first): the python processes are the jobs' children
trap 'for p in $(jobs -p); do pkill -TERM -P "$p"; done; wait; exit 143' TERM INT
declare -A PID=()
i=0
for r in $ROWS; do CORE=$((i % $(nproc))) row "$r" & PID[$r]=$!; i=$((i + 1)); done
status=0
for r in $ROWS; do wait "${PID[$r]}" || status=1; done
exit $status
