#!/usr/bin/env bash
# Configures and builds spattn into build/ at the repository root, with as many jobs as the
# machine has cores: the library, program, tests and benchmarks, or with --program the library
# and the `spattn` program alone (scripts/run-main-job.sh). The choice is passed to CMake either
# way, so that a build folder configured for one purpose serves the other.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
with_tests=ON
case "${1:-}" in
  "") ;;
  --program) with_tests=OFF ;;
  *) echo "build.sh: unknown option '$1' (allowed: none, --program)" >&2; exit 2 ;;
esac
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release -DSPATTN_BUILD_TESTS="$with_tests" -DSPATTN_BUILD_BENCH="$with_tests"
cmake --build "$root/build" -j "$(nproc)"
