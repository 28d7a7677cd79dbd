#!/usr/bin/env bash
# Runs `spattn run --check --backward` for ring and zigzag, causal and not, at 1 to 8 ranks, and
# prints one line per run (max errors against the fp64 reference and the verdict). Needs a build
# (scripts/build.sh). Extra arguments go to every run, e.g. --dtype fp32.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# 1680 = 2 x lcm(1..8): every rank count splits it in both layouts.
shape=(--seq 1680 --heads 8 --kv-heads 2 --head-dim 64 --dtype bf16)
failed=0
printf "%-7s %-6s %-6s %-21s %-21s %-21s %-21s %-21s %s\n" algo ranks causal out lse dq dk dv check
for algo in ring zigzag; do
  for causal in no yes; do
    for ranks in 1 2 3 4 5 6 7 8; do
      flags=("${shape[@]}")
      [[ $causal == yes ]] && flags+=(--causal)
      line=$(mpirun --oversubscribe -np "$ranks" "$root/build/spattn" run --algo "$algo" --backward --check --json \
             "${flags[@]}" "$@" | tail -n 1) || failed=1
      python3 - "$algo" "$ranks" "$causal" "$line" <<'PY'
import json, sys
algo, ranks, causal, line = sys.argv[1:]
report = json.loads(line)
errors = report["max_errors"]
cells = ["%.2e/%.2e" % (errors[name]["distributed"], errors[name]["single_rank"]) for name in ("out", "lse", "dq", "dk", "dv")]
print("%-7s %-6s %-6s %s %s" % (algo, ranks, causal, " ".join("%-21s" % c for c in cells), report["check"]))
PY
    done
  done
done
echo "cells: distributed / single-rank max |error| against fp64"
exit $failed
