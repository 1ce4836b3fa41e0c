#!/usr/bin/env bash
# The CMLMC paper's four ablation rows (CMLM, +RevealPosition, +correction, CMLMC) on Multi30k En→De raw data,
# trained side by side at the CPU queue's budget (launch/queue.sh: STEPS updates of 4096 tokens,
# configs/cmlm/multi30k.py; the vocabulary is trained with the AR run's settings, so it is the AR run's). In
# three phases, the cheapest first, so that a run cut short still has its main figures:
#   1. train the rows at once (each evaluated plain on the test split at the end: metrics.plain.json);
#   2. `jaxnat.positions` on each (positions.txt);
#   3. each evaluated again with the pass sweep 1, 2, 5, 7, 10 and soft / hard constraints (metrics.json).
# Every phase resumes: re-run the script after a kill. Logs: RUNS/<row>.{train,positions,eval}.log.
# Usage: launch/multi30k_cmlm_rows.sh DATA_DIR RUNS_DIR [STEPS (2500)] [--config.KEY=VALUE ...: every run]
# Environment: PYTHON (default python), ROWS (default: all four), PIN=1: the i-th row's processes on core
# i mod nproc (two pinned XLA processes beat two that share both cores by about 12% on a 2-core machine).
# On one GPU the four rows share the card, but each compiles its train step for every batch shape
# (data.bucket_*): on an H200 that took all of a 9-minute lease before the first update (docs/results.md).
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 DATA_DIR RUNS_DIR [STEPS] [--config.KEY=VALUE ...]" >&2; exit 2; }
DATA=$(realpath "$1") RUNS=$(realpath -m "$2") STEPS=${3:-2500}
shift $(( $# < 3 ? $# : 3 ))
PYTHON=${PYTHON:-python}
cd "$(dirname "$0")/.."
mkdir -p "$RUNS"
# four processes on one card: each takes memory as it needs it; the compiled decoders are shared on disk (the
# rows with and without RevealPosition decode with the same two graphs)
export XLA_PYTHON_CLIENT_PREALLOCATE=false JAX_COMPILATION_CACHE_DIR="$RUNS/xla-cache"
NO_REVPOS="--config.model.masked_attn=false --config.model.concat_pe=false"
declare -A FLAGS=([cmlm]="$NO_REVPOS --config.train.correction=false" [cmlm-revpos]="--config.train.correction=false"
                  [cmlm-corr]="$NO_REVPOS" [cmlmc]="")
ROWS=${ROWS:-cmlm cmlm-revpos cmlm-corr cmlmc}
py() { if [ -n "${PIN:-}" ]; then taskset -c "$CORE" "$PYTHON" "$@"; else "$PYTHON" "$@"; fi; }
main() {  # ROW LOG ARGS...: jaxnat.main on the row's workdir with its flags
    local row=$1 log=$2; shift 2
    # shellcheck disable=SC2086  # FLAGS holds several words
    py -m jaxnat.main --config configs/cmlm/multi30k.py --workdir "$RUNS/$row" --config.data.dir="$DATA" \
        --config.train.steps="$STEPS" ${FLAGS[$row]} "$@" >> "$RUNS/$row.$log.log" 2>&1
}
each() {  # PHASE: run PHASE for every row at once, wait, and report the rows that failed
    local pids=() row failed=0 i=0
    for row in $ROWS; do CORE=$((i % $(nproc))) "$1" "$row" & pids+=($!); i=$((i + 1)); done
    for i in "${!pids[@]}"; do wait "${pids[$i]}" || { failed=1; echo "$1 failed: $(echo $ROWS | cut -d' ' -f$((i+1)))"; }; done
    echo "$(date +%T) $1 done"; return $failed
}
train() {
    [ -f "$RUNS/$1/metrics.plain.json" ] && return
    main "$1" train --config.eval.iteration_sweep= --config.eval.constraints= "${EXTRA[@]}" &&
        cp "$RUNS/$1/metrics.json" "$RUNS/$1/metrics.plain.json"
}
positions() {
    [ -s "$RUNS/$1/positions.txt" ] ||
        { py -m jaxnat.positions "$RUNS/$1" > "$RUNS/$1/positions.part" 2>> "$RUNS/$1.positions.log" &&
          mv "$RUNS/$1/positions.part" "$RUNS/$1/positions.txt"; }
}
evaluate() { main "$1" eval --mode eval "${EXTRA[@]}"; }  # the config's own sweep and constraints
EXTRA=("$@")
# a stopped script stops its runs (each writes a checkpoint first): the python processes are the jobs' children
trap 'for p in $(jobs -p); do pkill -TERM -P "$p"; done; wait; exit 143' TERM INT
each train && each positions; each evaluate
