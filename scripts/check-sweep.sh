#!/usr/bin/env bash
# Runs `spattn run --check --backward` for every strategy, causal and not, at 1 to 8 ranks, and
# prints one line per run: the max errors against the fp64 reference (distributed / single
# device), the largest ratio of the two (worst) and the verdict (pass, fail, or error for a run
# that ended without its report). Needs a build (scripts/build.sh). Extra arguments go to every
# run, e.g. --dtype fp32. Strategies that do not exist at a rank count (hamilton at 4 and 6 ranks)
# are listed as such. SPATTN_SWEEP_PASS=forward checks the forward alone (out and lse);
# SPATTN_SWEEP_ALGOS="ring stripe" runs those strategies alone; SPATTN_SWEEP_JOBS=N runs N at a time.
# SPATTN_SWEEP_DOC_LENS=L1,L2,... runs every strategy that takes packed documents on those
# (--doc-lens, in place of --seq) and lists stripe, which takes none, as such; all-gather runs twice
# there, per document and over the whole sequence (--doc-split whole_sequence, Llama 3's split).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# The run's shape and strategy options at RANKS ranks: a length near 600 that splits for the
# strategy, 8 heads over 2 kv heads (ulysses, which splits heads over ranks: 4N over 2N, so that
# each rank's heads go in two stages, schedule/ulysses_stages.hpp).
run_arguments() {
  python3 - "$1" "$2" <<'PY'
import sys
algo, ranks = sys.argv[1], int(sys.argv[2])
heads, kv_heads, extra = 8, 2, []
unit = 2 * ranks
if algo in ("ring", "stripe"):
    unit = ranks
elif algo == "hamilton":
    unit = 2 * ranks * max(1, ranks - 1)
elif algo == "hamilton2":
    per_node = max([size for size in range(2, ranks // 2 + 1, 2) if ranks % size == 0], default=1)
    unit = 2 * ranks * per_node
    extra = ["--nodes", str(ranks // per_node)]
elif algo == "ulysses":
    heads, kv_heads, unit = 4 * ranks, 2 * ranks, ranks
elif algo == "usp":
    inner = max(size for size in (1, 2) if ranks % size == 0)
    unit = 2 * ranks
    extra = ["--inner", str(inner)]
seq = max(unit, round(600 / unit) * unit)
print(" ".join(["--seq", str(seq), "--heads", str(heads), "--kv-heads", str(kv_heads)] + extra))
PY
}

# One run: its line on stdout (an error's message above it); status 1 when it failed the check or
# ended without its report.
check_case() {
  local entry=$1 causal=$2 ranks=$3
  shift 3
  local algo=${entry%%:*} split=() shape=() flags=() line status=0
  [[ $entry == *:* ]] && split=(--doc-split "${entry#*:}")
  if [[ $algo == hamilton && ( $ranks == 4 || $ranks == 6 ) ]]; then
    printf '%-10s %-6s %-6s no Hamiltonian decomposition exists at %s ranks\n' "$algo" "$ranks" "$causal" "$ranks"
    return 0
  fi
  read -r -a shape <<<"$(run_arguments "$algo" "$ranks")"
  if [[ -n ${SPATTN_SWEEP_DOC_LENS:-} ]]; then
    if [[ $algo == stripe ]]; then
      printf '%-10s %-6s %-6s stripe takes no packed documents\n' "$algo" "$ranks" "$causal"
      return 0
    fi
    shape=(--doc-lens "$SPATTN_SWEEP_DOC_LENS" "${shape[@]:2}")  # in place of --seq S
  fi
  flags=("${shape[@]}" "${split[@]}" --head-dim 64 --dtype bf16)
  [[ $causal == yes ]] && flags+=(--causal)
  [[ ${SPATTN_SWEEP_PASS:-backward} == backward ]] && flags+=(--backward)
  # A failed check still ends with its report (and a non-zero status); a run that ends
  # without one (an error, a crash) is listed as an error, its message above its line.
  line=$(mpirun --oversubscribe -np "$ranks" "${SPATTN_BIN:-$root/build/spattn}" run --algo "$algo" --check \
         --json "${flags[@]}" "$@" | tail -n 1) || status=1
  if [[ $line != "{"* ]]; then
    printf '%-10s %-6s %-6s the run ended without its report: error\n' "$algo" "$ranks" "$causal"
    return 1
  fi
  python3 - "${entry/:whole_sequence//whole}" "$ranks" "$causal" "$line" <<'PY'
import json, sys
algo, ranks, causal, line = sys.argv[1:]
report = json.loads(line)
errors = report["max_errors"]
names = [name for name in ("out", "lse", "dq", "dk", "dv") if name in errors]
cells = ["%.2e/%.2e" % (errors[name]["distributed"], errors[name]["single_rank"]) if name in errors else "-"
         for name in ("out", "lse", "dq", "dk", "dv")]
# The worst ratio of distributed to single-device error (a zero single-device error counts as equal
# when the distributed one is zero too).
def ratio(name):
    distributed, single = errors[name]["distributed"], errors[name]["single_rank"]
    return distributed / single if single > 0 else (1.0 if distributed == 0 else float("inf"))
worst = max(names, key=ratio)
print("%-10s %-6s %-6s %-6s %s %-3s %-6s %s" % (algo, ranks, causal, report["shape"]["seq"],
                                                " ".join("%-21s" % c for c in cells), worst,
                                                "%.2fx" % ratio(worst), report["check"]))
PY
  return $status
}

# The runs go SPATTN_SWEEP_JOBS at a time (default 1; the checks' timings do not matter, so a device
# machine with cores to spare runs several), each into its own file, printed in the sweep's order as
# soon as every run before it is done: a sweep that a time limit ends keeps the lines it reached.
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cases=0 printed=0 failed=0
print_finished() {
  while ((printed < cases)) && [[ -e $scratch/$printed.status ]]; do
    cat "$scratch/$printed.out"
    [[ $(cat "$scratch/$printed.status") == 0 ]] || failed=1
    printed=$((printed + 1))
  done
}
printf '%-10s %-6s %-6s %-6s %-21s %-21s %-21s %-21s %-21s %-10s %s\n' algo ranks causal seq out lse dq dk dv worst check
read -r -a entries <<<"${SPATTN_SWEEP_ALGOS:-ring zigzag stripe ulysses hamilton hamilton2 allgather usp}"
[[ -n ${SPATTN_SWEEP_DOC_LENS:-} && " ${entries[*]} " == *" allgather "* ]] && entries+=(allgather:whole_sequence)
for entry in "${entries[@]}"; do
  for causal in no yes; do
    for ranks in ${SPATTN_SWEEP_RANKS:-1 2 3 4 5 6 7 8}; do
      while (($(jobs -rp | wc -l) >= ${SPATTN_SWEEP_JOBS:-1})); do
        wait -n || true
        print_finished
      done
      # The status file is written last: its presence says the run's output is complete.
      (
        status=0
        check_case "$entry" "$causal" "$ranks" "$@" >"$scratch/$cases.out" 2>&1 || status=1
        echo "$status" >"$scratch/$cases.status"
      ) &
      cases=$((cases + 1))
    done
  done
done
wait
print_finished
echo "cells: distributed / single-device max |error| against fp64; worst: the largest ratio of the two"
exit $failed
