#!/usr/bin/env bash
# Runs spattn's Python tests (the installed package) under mpiexec at each rank count given
# (default: 1 2 3), oversubscribed, one CPU thread per rank. Rank 0's pytest report goes to the
# terminal; the other ranks' go to files that are printed only when a run fails.
# Usage: tests/python/run-under-mpi.sh [RANKS...]   (extra pytest arguments in SPATTN_PYTEST_ARGS)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export SPATTN_RANK_LOGS="$logs"
# oneCCL (test_oneccl_transport.py) on ranks that share cores: its workers yield rather than spin,
# and ranks of one host meet in shared memory (README's oneCCL paragraph).
export CCL_YIELD=sched_yield FI_PROVIDER=shm CCL_ATL_SHM=1
cd "$root"  # the package comes from site-packages: python/spattn has no compiled _core
rank_counts=("$@")
((${#rank_counts[@]})) || rank_counts=(1 2 3)
status=0
for ranks in "${rank_counts[@]}"; do
  echo "== pytest tests/python at $ranks rank(s)"
  # shellcheck disable=SC2016  # expanded by each rank's shell
  if ! timeout 900 mpiexec --oversubscribe -n "$ranks" bash -c '
      rank="${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}"
      if [[ $rank == 0 ]]; then exec "$@"; fi
      exec "$@" >"$SPATTN_RANK_LOGS/rank$rank.log" 2>&1' rank \
      python3 -m pytest tests/python -q --color=no -p no:cacheprovider ${SPATTN_PYTEST_ARGS:-}; then
    status=1
    for log in "$logs"/rank*.log; do
      [[ -e $log ]] || continue
      echo "---- $(basename "$log" .log) of $ranks:"
      cat "$log"
    done
  fi
  rm -f "$logs"/rank*.log
done
exit "$status"
