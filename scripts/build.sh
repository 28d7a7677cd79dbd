#!/usr/bin/env bash
# Configures and builds spattn (library, program, tests, benchmarks) into build/ at the
# repository root, with as many jobs as the machine has cores.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$root/build" -j "$(nproc)"
