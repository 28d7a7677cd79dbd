#!/usr/bin/env bash
# The long, local mode of the seeded random sweep (tests/distributed/fuzz_sweep_test.cpp): many
# random configurations (strategy, B, S, H, kv_heads, D, dtype, causal, window, scale, strategy
# options; some invalid on purpose) at every rank count from 1 to 8, each checked against the
# fp64 reference with the 2x criterion or for a clear Error on every rank. CI runs the same test
# with a few dozen cases.
#
#   scripts/fuzz-sweep.sh [SEED]      seed of the draws (default: the date, YYYYMMDD)
#   SPATTN_FUZZ_CASES=200             cases per rank count (default 200)
#   SPATTN_FUZZ_RANKS="3 4"           rank counts (default 1 2 3 4 5 6 7 8)
#   SPATTN_BUILD=build                the build folder with tests/distributed (default build/)
#
# Each case prints one line (seed, case index, rank count, configuration); a failing case runs
# alone with SPATTN_FUZZ_SEED=<seed> SPATTN_FUZZ_CASE=<index> at its rank count. Needs a build
# (scripts/build.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SPATTN_BUILD:-$root/build}"
export SPATTN_FUZZ_SEED="${1:-$(date +%Y%m%d)}"
export SPATTN_FUZZ_CASES="${SPATTN_FUZZ_CASES:-200}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

failed=()
for ranks in ${SPATTN_FUZZ_RANKS:-1 2 3 4 5 6 7 8}; do
  start=$SECONDS
  if mpirun --oversubscribe -np "$ranks" "$build/tests/distributed/spattn_distributed_tests" \
       --gtest_filter='Seeded/FuzzSweep.*' --gtest_brief=1; then
    echo "fuzz sweep: seed $SPATTN_FUZZ_SEED, $SPATTN_FUZZ_CASES cases at $ranks ranks passed in $((SECONDS - start)) s"
  else
    failed+=("$ranks")
  fi
done
if ((${#failed[@]})); then
  echo "fuzz sweep: seed $SPATTN_FUZZ_SEED failed at ranks: ${failed[*]}"
  exit 1
fi
