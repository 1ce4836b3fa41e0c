#!/bin/bash
# Multi-process training without a scheduler: run this script once on every host with the same arguments
# and a distinct PROCESS_ID (0 .. NUM_PROCESSES-1).
#
#   COORDINATOR=host0:12345 NUM_PROCESSES=2 PROCESS_ID=0 launch/multiprocess.sh configs/ar/wmt14_en_de.py /shared/runs/wmt14
set -euo pipefail
: "${COORDINATOR:?set COORDINATOR=host:port, the host of process 0}"
: "${NUM_PROCESSES:?set NUM_PROCESSES}"
: "${PROCESS_ID:?set PROCESS_ID}"
export JAX_COORDINATOR_ADDRESS=$COORDINATOR JAX_NUM_PROCESSES=$NUM_PROCESSES JAX_PROCESS_ID=$PROCESS_ID
CONFIG=${1:?usage: launch/multiprocess.sh CONFIG WORKDIR [--config.key=value ...]}
WORKDIR=${2:?}
shift 2
exec python -m jaxnat.main --config "$CONFIG" --workdir "$WORKDIR" "$@"
