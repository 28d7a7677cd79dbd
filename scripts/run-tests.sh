#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: unit tests of the core, kernels and
# program, the distributed tests under mpirun at 1 to 8 ranks, the Python package's tests
# (`pip install .`, then pytest under mpiexec at 1, 2 and 3 ranks, and the README's example 50
# times in a row, each exiting cleanly), the C++ suites again
# built with AddressSanitizer, LeakSanitizer and UndefinedBehaviorSanitizer, and the libFuzzer
# targets of the .npy reader and the command line for 30 s each (SPATTN_FUZZ_SECONDS).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/install-dependencies.sh"
bash "$root/scripts/build.sh"
cd "$root/build"
ctest --output-on-failure --timeout 900

# The Python package: built by scikit-build-core into build-python/ (kept, so a second run only
# recompiles what changed) and installed into this python3's site-packages.
cd "$root"
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" python3 -m pip install --quiet --root-user-action=ignore --no-build-isolation --no-deps "$root"
bash "$root/tests/python/run-under-mpi.sh" 1 2 3
# The README's example 50 times in a row: every run must exit cleanly (no abort at teardown).
bash "$root/tests/python/teardown-check.sh" 50

bash "$root/scripts/run-sanitizers.sh"

# About two minutes: the library built with clang (uninstrumented), two small targets, 30 s each.
SPATTN_FUZZ_SECONDS="${SPATTN_FUZZ_SECONDS:-30}" bash "$root/scripts/run-fuzzers.sh"
