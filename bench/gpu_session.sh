#!/usr/bin/env bash
# One call of the Multi30k pipeline (launch/multi30k.py --gpu) on a GPU machine that cannot reach the network and
# keeps nothing between calls: this checkout copied there with .gpu/ beside it (bench/gpu_prepare.sh makes it;
# .gpu/runs holds what earlier calls brought back). Installs the carried wheels, runs the pipeline's jobs for at most
# SECONDS (0: no limit, the pipeline's --time-limit 0) with the constraint pairs made here, and leaves in $OUT what
# comes back:
#
#   pipeline.txt        the pipeline's output;  status.txt: where each job stands after it, and which of the
#                       study's targets hold (launch/targets.py)
#   runs.tar.gz.N       .gpu/runs without checkpoints (but --keep), TensorBoard logs and unfinished jobs' workdirs
#                       (metrics, hypotheses, histories, logs, reports, the distilled corpus, vocabularies), in
#                       parts of 15 MiB
#
#   bash bench/gpu_session.sh SECONDS [--keep JOB ...] [launch/multi30k.py options: --only JOB ..., --parallel N,
#                                                      --config.K=V ...]
#
# The copy of the checkout there has no .git: run it as JAXNAT_COMMIT=<git rev-parse HEAD here> bash bench/gpu_session.sh
# ... so that each workdir's runs.jsonl (and the reports' Runs table) names the commit (jaxnat/provenance.py).
#
# Back here: rm -rf .gpu/runs && cat FILES_AT/runs.tar.gz.* | tar -xz -C .gpu, and carry .gpu in the next call.
# Checkpoints do not come back (a base model's best is 170 MB; 8 files of 16 MiB come back, 64 MiB travel) but
# the best one of each --keep JOB (a small model's: the d 256, 3+3 AR model's is 27 MB): a job that reads another's
# checkpoint (the teacher's: distillation, stage 2 of the vectorized model, rescoring, the evaluated copies, the
# speed tables) runs in the same call as it or after a call that kept it; choose each call's --only accordingly.
set -uo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 && $1 =~ ^[0-9]+$ ]] || { echo "usage: bash bench/gpu_session.sh SECONDS [--keep JOB ...] [pipeline options]" >&2; exit 2; }
[[ -n ${OUT:-} && -d .gpu/multi30k && -d .gpu/pairs ]] || { echo "error: needs \$OUT and .gpu/ (bench/gpu_prepare.sh)" >&2; exit 2; }
limit=$1
shift
keep=()
while [[ ${1:-} == --keep ]]; do
  [[ -n ${2:-} ]] || { echo "error: --keep needs a job's name" >&2; exit 2; }
  keep+=("$2")
  shift 2
done
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .gpu/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
pipeline=(python3 launch/multi30k.py --data-dir .gpu/multi30k --runs .gpu/runs --gpu --align-from .gpu/pairs "$@")
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$OUT/pipeline.txt" 2>&1
"${pipeline[@]}" --time-limit "$limit" 2>&1 | tee -a "$OUT/pipeline.txt"
rc=$?
"${pipeline[@]}" --status >"$OUT/status.txt" 2>&1
# the study's targets against what is done so far (also in runs/reports/targets.md and .json)
python3 launch/targets.py --runs .gpu/runs >>"$OUT/status.txt" 2>&1
# what comes back: no checkpoints but the kept ones, no TensorBoard logs, and not the workdir of a job stopped by
# the time limit (it starts afresh next time: its checkpoint stays here)
skip=(-name checkpoints -o -name tensorboard)
for dir in .gpu/runs/*/; do
  name=$(basename "$dir")
  [[ -e .gpu/runs/pipeline/$name.log && ! -e .gpu/runs/pipeline/done/$name ]] && skip+=(-o -path "runs/$name")
done
{
  (cd .gpu && find runs \( "${skip[@]}" \) -prune -o -print)
  for job in "${keep[@]}"; do
    (cd .gpu && find "runs/$job/checkpoints" -maxdepth 0 && find "runs/$job/checkpoints/best") ||
      echo "warning: no best checkpoint of $job to keep" >&2
  done
} >/tmp/gpu_session_files
tar -C .gpu -cz --no-recursion -T /tmp/gpu_session_files | split -b 15M -d -a 1 - "$OUT/runs.tar.gz."
ls -la "$OUT"
(( $(ls "$OUT"/runs.tar.gz.* | wc -l) <= 6 )) || echo "warning: more parts than come back (8 files in all): keep less" >&2
exit $rc
