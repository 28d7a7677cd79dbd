#!/usr/bin/env bash
# The main job: installs what is missing for the library and the program alone (no test or
# Python dependencies), builds them, and runs a 4-rank zigzag ring attention, causal, forward and
# backward, checked against an fp64 reference, with its timing table.
# Extra arguments go to `spattn run` (e.g. --seq 8192 --dtype bf16 --json).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/install-dependencies.sh" --main-job
bash "$root/scripts/build.sh" --program
# Open MPI refuses root unless told; --oversubscribe lets 4 ranks share fewer cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun --oversubscribe -np 4 "$root/build/spattn" run --algo zigzag --causal --backward --check \
  --batch 1 --seq 2048 --heads 8 --kv-heads 2 --head-dim 64 --iters 3 --warmup 1 "$@"
