#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: unit tests of the core, kernels and
# program, and the distributed tests under mpirun at 1, 2, 3, 4 and 8 ranks.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/install-dependencies.sh"
bash "$root/scripts/build.sh"
cd "$root/build"
ctest --output-on-failure --timeout 900
