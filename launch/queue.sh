#!/usr/bin/env bash
# The Multi30k quality runs of docs/results.md for the vectorized-constraints, NAT and CMLM papers as one job
# list served by one worker per CPU core, each worker pinned to its core (two pinned XLA processes beat two
# that share both cores by about 12% on the 2-core development machine). Resumable: run it again after a kill or
# in the next session; every job resumes from its newest checkpoint, and a finished job is not run again.
#
#   1. the AR model and the word alignments, one after another on all cores (everything after needs the AR
#      model, so nothing else would keep a core busy);
#   2. the rest, in the order below (the shortest pipelines first, so that their rows land soonest): a worker
#      takes the first job that is neither done nor running and whose prerequisites are done, so no core idles
#      while the other has a long queue.
#
# Usage: launch/queue.sh [RUNS_DIR]     (default ~/jaxnat-runs)
#        launch/queue.sh --status [RUNS_DIR]: where each job stands (and a training job's newest checkpoint)
# Environment: DATA (Multi30k folder, default ../shared/data/multi30k), SRC (the code the jobs run: a frozen
# `git archive` of a commit, so that a later checkout cannot change a run it resumes; default this checkout),
# SRC_AR (the AR model's code, default SRC), SRC_BENCH (the speed jobs' code, default SRC), PYTHON (default
# python), CORES (default: nproc), POLL (seconds a worker waits for another's job to finish before looking
# again, default 60), ONLY (job names: run only these and the jobs they need; launch/multi30k_{vecconst,nat,
# cmlm}.sh are this queue with one paper's jobs), and the training budgets in updates: AR_STEPS (2500),
# VECCONST_STEPS (stage 2, 1000), NAT_STEPS (2500), CMLM_STEPS (2500).
# State under RUNS_DIR/queue: done/<job> once a job succeeded, failed/<job> (cleared at each start), <job>.log,
# lock/<job> held (flock) while a job runs.
set -uo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
STATUS=
[ "${1:-}" = --status ] && { STATUS=1; shift; }
RUNS=$(realpath -m "${1:-$HOME/jaxnat-runs}")
DATA=$(realpath -m "${DATA:-$HERE/../shared/data/multi30k}")
SRC=$(realpath "${SRC:-$HERE}")
SRC_AR=$(realpath "${SRC_AR:-$SRC}")
SRC_BENCH=$(realpath "${SRC_BENCH:-$SRC}")
PYTHON=${PYTHON:-python}
CORES=${CORES:-$(nproc)}
POLL=${POLL:-60}
AR_STEPS=${AR_STEPS:-2500} VECCONST_STEPS=${VECCONST_STEPS:-1000} NAT_STEPS=${NAT_STEPS:-2500}
CMLM_STEPS=${CMLM_STEPS:-2500}
Q="$RUNS/queue"
KD="$RUNS/kd-multi30k"
ALIGN="$RUNS/align-multi30k"
AR="$RUNS/ar-multi30k"
mkdir -p "$Q/done" "$Q/failed" "$Q/lock"

main() { PYTHONPATH="$SRC" "$PYTHON" -m jaxnat.main "$@"; }
# a copy of a finished workdir evaluated once more with other decoding settings (both metrics.json stay; an
# evaluation writes metrics.record.json last, so a killed one is redone)
eval_copy() {  # FROM TO MAIN_ARGS...
    local from=$1 to=$2; shift 2
    [ -d "$to" ] || { copy "$from" "$to" && rm -f "$to/metrics.record.json"; }
    [ -f "$to/metrics.record.json" ] || main --mode eval --workdir "$to" "$@"
}
# a copy of a finished training workdir trained on to a larger train.steps (it resumes from the copied newest
# checkpoint) and evaluated at the end as any run
train_copy() {  # FROM TO MAIN_ARGS...
    local from=$1 to=$2; shift 2
    { [ -d "$to" ] || copy "$from" "$to"; } && main --workdir "$to" "$@"
}
copy() {  # FROM TO: whole or not at all (a copy cut short by a kill leaves only TO.partial)
    rm -rf "$2.partial" && cp -r "$1" "$2.partial" && mv "$2.partial" "$2"
}

declare -a JOBS=()
declare -A NEEDS=() CMD=()
job() { JOBS+=("$1"); NEEDS[$1]=$2; CMD[$1]=$3; }  # NAME "PREREQUISITES" "COMMAND"

job ar "" "PYTHONPATH='$SRC_AR' '$PYTHON' -m jaxnat.main --config configs/ar/multi30k.py --workdir '$AR' \
    --config.data.dir='$DATA' --config.train.steps=$AR_STEPS"
job align "" "PYTHONPATH='$SRC' '$PYTHON' -m jaxnat.data.alignment --data-dir '$DATA' --src en --tgt de \
    --splits val,test_2016_flickr --output '$ALIGN' --code-switch"
FIRST=(ar align)

# issue 16: the vanilla rows (the AR model with the pairs), stage 2 at α/β 0.8/0.2 and 0.5/0.5, code-switched
PAIRS="--config.data.dir='$DATA' --config.data.pairs_dir='$ALIGN'"
job vecconst "ar align" "main --config configs/vecconst/multi30k.py --workdir '$RUNS/vecconst-multi30k' $PAIRS \
    --config.train.init_from='$AR' --config.train.steps=$VECCONST_STEPS"
job ar-pairs "ar align" "eval_copy '$AR' '$RUNS/ar-pairs-multi30k' --config configs/ar/multi30k.py $PAIRS \
    --config.eval.throughput_batch=128"
job vecconst-vdba "ar align" "main --config configs/vecconst/multi30k_vdba.py \
    --workdir '$RUNS/vecconst-vdba-multi30k' $PAIRS --config.train.init_from='$AR' --config.train.steps=$VECCONST_STEPS"
CS="--config.data.dir='$ALIGN' --config.data.pairs_dir='$ALIGN' --config.data.train_split=train.cs \
    --config.data.valid_split=val.cs --config.data.test_splits=test_2016_flickr.cs"
job vecconst-cs "ar align" "main --config configs/vecconst/multi30k.py --workdir '$RUNS/vecconst-cs-multi30k' $CS \
    --config.train.init_from='$AR' --config.train.steps=$VECCONST_STEPS"
# the vanilla rows of the code-switched test set (the paper's Table 4)
job ar-pairs-cs "ar align" "eval_copy '$AR' '$RUNS/ar-pairs-cs-multi30k' --config configs/ar/multi30k.py $CS"
# the speed table, in one run (bench/decode_speed.py alternates the models inside each repeat)
SPEED="PYTHONPATH='$SRC_BENCH' '$PYTHON' '$SRC_BENCH/bench/decode_speed.py' --run '$AR'"
job speed-vecconst "vecconst" "$SPEED --run '$RUNS/vecconst-multi30k' --pairs --unpacked --batch 128 \
    --config.data.dir='$DATA' --config.data.pairs_dir='$ALIGN'"
# issue 15: the AR model's distilled training set; NAT-base, Coverage-NAT (K_dec sweep 1…7), Coverage-NAT + SCA,
# each rescored by the AR model
job distill "ar" "main --mode distill --config configs/ar/multi30k.py --workdir '$AR' --config.data.dir='$DATA' \
    --output '$KD'"
NAT="--config.data.dir='$KD' --config.data.spm_from='$AR'"
job natbase "distill" "main --config configs/nat/multi30k.py --workdir '$RUNS/natbase-multi30k' $NAT \
    --config.train.steps=$NAT_STEPS --config.nat.coverage=false --config.eval.iteration_sweep="
job covnat "distill" "main --config configs/nat/multi30k.py --workdir '$RUNS/covnat-multi30k' $NAT \
    --config.train.steps=$NAT_STEPS"
job covnat-sca "covnat" "main --config configs/nat/multi30k_sca.py --workdir '$RUNS/covnat-sca-multi30k' $NAT \
    --config.train.init_from='$RUNS/covnat-multi30k'"
RESCORE="--config.data.dir='$KD' --config.nat.length_beam=9 --config.nat.rescorer='$AR' \
    --config.eval.iteration_sweep="
job natbase-rescored "natbase" "eval_copy '$RUNS/natbase-multi30k' '$RUNS/natbase-rescored-multi30k' \
    --config configs/nat/multi30k.py --config.nat.coverage=false $RESCORE"
job covnat-rescored "covnat" "eval_copy '$RUNS/covnat-multi30k' '$RUNS/covnat-rescored-multi30k' \
    --config configs/nat/multi30k.py $RESCORE"
job covnat-sca-rescored "covnat-sca" "eval_copy '$RUNS/covnat-sca-multi30k' '$RUNS/covnat-sca-rescored-multi30k' \
    --config configs/nat/multi30k_sca.py $RESCORE"
# (SCA fine-tunes the weights, not the cost of a pass: Coverage-NAT's speed is timed as soon as `covnat` lands)
job speed-nat "natbase covnat" "$SPEED --run '$RUNS/natbase-multi30k' --run '$RUNS/covnat-multi30k' \
    --config.data.dir='$KD'"
# the control of the SCA phase (the paper's Table III, β = 0): the same 500 updates at 1e-5 without SCA
job covnat-ft "covnat" "main --config configs/nat/multi30k_sca.py --workdir '$RUNS/covnat-ft-multi30k' $NAT \
    --config.train.init_from='$RUNS/covnat-multi30k' --config.nat.sca_weight=0"
# issue 14: the CMLMC paper's Table 1 rows on raw data with the AR model's vocabulary, the same budget
CMLM="--config.data.dir='$DATA' --config.data.spm_from='$AR' --config.train.steps=$CMLM_STEPS"
NO_REVPOS="--config.cmlm.masked_attn=false --config.cmlm.concat_pe=false"
job cmlmc "ar" "main --config configs/cmlm/multi30k.py --workdir '$RUNS/cmlmc-multi30k' $CMLM"
# (rescoring evaluates CMLMC's own parameters again: its rows land together)
job cmlmc-rescored "cmlmc" "eval_copy '$RUNS/cmlmc-multi30k' '$RUNS/cmlmc-rescored-multi30k' \
    --config configs/cmlm/multi30k.py --config.data.dir='$DATA' --config.cmlm.rescorer='$AR' \
    --config.eval.constraints= --config.eval.iteration_sweep="
job cmlm "ar" "main --config configs/cmlm/multi30k.py --workdir '$RUNS/cmlm-multi30k' $CMLM $NO_REVPOS \
    --config.cmlm.correction=false"
# (timed as soon as plain CMLM lands, before the last ablation row takes the core: a pass costs the same whatever
# the loss trained it)
job speed-cmlm "cmlm cmlmc" "$SPEED --run '$RUNS/cmlm-multi30k' --run '$RUNS/cmlmc-multi30k' --full-canvas \
    --config.data.dir='$DATA'"
job cmlm-revpos "ar" "main --config configs/cmlm/multi30k.py --workdir '$RUNS/cmlm-revpos-multi30k' $CMLM \
    --config.cmlm.correction=false"
job cmlm-corr "ar" "main --config configs/cmlm/multi30k.py --workdir '$RUNS/cmlm-corr-multi30k' $CMLM $NO_REVPOS"
# issue 16 again: does a longer stage 2 bring the vectorized model's CSR with beam search nearer the paper's?
job vecconst-long "vecconst" "train_copy '$RUNS/vecconst-multi30k' '$RUNS/vecconst-long-multi30k' \
    --config configs/vecconst/multi30k.py $PAIRS --config.train.init_from='$AR' \
    --config.train.steps=$((3 * VECCONST_STEPS))"  # the copied run's own settings, but for the budget
# the two halves of RevealPosition (the CMLMC paper's Table A.1)
job cmlm-maskedattn "ar" "main --config configs/cmlm/multi30k.py --workdir '$RUNS/cmlm-maskedattn-multi30k' $CMLM \
    --config.cmlm.concat_pe=false --config.cmlm.correction=false"
job cmlm-concatpe "ar" "main --config configs/cmlm/multi30k.py --workdir '$RUNS/cmlm-concatpe-multi30k' $CMLM \
    --config.cmlm.masked_attn=false --config.cmlm.correction=false"

if [ -n "${ONLY:-}" ]; then  # keep the named jobs and, transitively, their prerequisites
    declare -A KEEP=()
    keep() {
        [ -n "${CMD[$1]+set}" ] || { echo "queue.sh: no job '$1' (jobs: ${JOBS[*]})" >&2; exit 2; }
        [ -n "${KEEP[$1]+set}" ] && return
        KEEP[$1]=1
        local need
        for need in ${NEEDS[$1]}; do keep "$need"; done
    }
    for name in $ONLY; do keep "$name"; done
    kept=()
    for name in "${JOBS[@]}"; do [ -n "${KEEP[$name]+set}" ] && kept+=("$name"); done
    JOBS=("${kept[@]}") kept=()
    for name in "${FIRST[@]}"; do [ -n "${KEEP[$name]+set}" ] && kept+=("$name"); done
    FIRST=("${kept[@]}")
fi

run_job() {  # NAME [CORE]: runs it under its lock (-n: skip it when another process holds it); 0 if it ran
    local name=$1 core=${2:-} pin=()
    [ -n "$core" ] && pin=(taskset -c "$core")
    exec {fd}>"$Q/lock/$name"
    flock -n "$fd" || { exec {fd}>&-; return 1; }
    if [ ! -f "$Q/done/$name" ]; then
        echo "$(date '+%F %T') start $name${core:+ on core $core}"
        if (cd "$SRC" && export -f main eval_copy train_copy copy && export SRC PYTHON &&
            "${pin[@]}" bash -c "${CMD[$name]}") >> "$Q/$name.log" 2>&1; then
            # the line before the marker: a worker that sees the marker starts a dependent job at once, and its
            # "start" line must not come first in the shared log
            echo "$(date '+%F %T') done $name"; touch "$Q/done/$name"
        else
            touch "$Q/failed/$name"; echo "$(date '+%F %T') FAILED $name (see $Q/$name.log)"
        fi
    fi
    exec {fd}>&-
}
ready() {  # NAME: not done, not failed, prerequisites done
    [ -f "$Q/done/$1" ] || [ -f "$Q/failed/$1" ] && return 1
    local need
    for need in ${NEEDS[$1]}; do [ -f "$Q/done/$need" ] || return 1; done
}
worker() {  # CORE
    local name progress pending
    while true; do
        progress=0
        for name in "${JOBS[@]}"; do
            ready "$name" && run_job "$name" "$1" && { progress=1; break; }
        done
        [ "$progress" = 1 ] && continue
        # nothing runnable: wait while another worker may still finish a prerequisite, else stop
        pending=0
        for name in "${JOBS[@]}"; do [ -f "$Q/done/$name" ] || [ -f "$Q/failed/$name" ] || pending=1; done
        [ "$pending" = 1 ] && [ "$(busy)" != 0 ] || break
        sleep "$POLL"
    done
    echo "$(date '+%F %T') worker on core $1: nothing left to run"
}
busy() {  # how many job locks are held now
    local f n=0
    for f in "$Q/lock/"*; do flock -n "$f" true 2>/dev/null || n=$((n + 1)); done
    echo "$n"
}

status() {  # one line a job: done, failed (at the last start), running, or to run; the newest checkpoint's step
    local name state steps wd last bleu
    for name in "${JOBS[@]}"; do
        if [ -f "$Q/done/$name" ]; then state=done
        elif ! flock -n "$Q/lock/$name" true 2>/dev/null; then state=running
        elif [ -f "$Q/failed/$name" ]; then state="FAILED (see $Q/$name.log)"
        else state="to run"
        fi
        # a training job's progress (not a distillation's or evaluation's: --mode)
        if [ "$state" != done ] && [[ ${CMD[$name]} != *"--mode "* && ${CMD[$name]} =~ --workdir\ \'([^\']*)\' ]]; then
            wd=${BASH_REMATCH[1]} steps=
            [[ ${CMD[$name]} =~ steps=([0-9]+) ]] && steps=" of ${BASH_REMATCH[1]}"
            last=$(ls "$wd/checkpoints/last" 2>/dev/null | grep -E "^[0-9]+$" | sort -n | tail -1)  # not a tmp dir
            [ -n "$last" ] && state+=", step $last$steps"
            bleu=$(sed -n 's/^{"step": \([0-9]*\),.*"valid_bleu": \([0-9]*\.[0-9][0-9]\).*/\2 at step \1/p' \
                "$wd/history.jsonl" 2>/dev/null | tail -1)
            [ -n "$bleu" ] && state+=", valid BLEU $bleu"
        fi
        printf '%-20s %s\n' "$name" "$state"
    done
}
[ -n "$STATUS" ] && { status; exit 0; }

rm -f "$Q/failed/"*  # a new start tries them again
for name in "${FIRST[@]}"; do  # on all cores, waiting for one started by hand
    ready "$name" || continue
    exec {wait_fd}>"$Q/lock/$name"; flock "$wait_fd"; exec {wait_fd}>&-
    run_job "$name"
done
for ((core = 0; core < CORES; core++)); do worker "$core" & done
wait
