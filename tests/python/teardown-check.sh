#!/usr/bin/env bash
# Runs the README's Python example at a smaller shape (a 2-rank CPU zigzag forward and backward,
# set up by spattn.setup_distributed) RUNS times in a row (default 50) and fails if any run does
# not exit cleanly: an abort at exit ("terminate called without an active exception") or a hang.
# Usage: tests/python/teardown-check.sh [RUNS]
set -euo pipefail
runs="${1:-50}"
script="$(mktemp --suffix=.py)"
log="$(mktemp)"
trap 'rm -f "$script" "$log"' EXIT
cat >"$script" <<'PYTHON'
import torch, spattn
rank, world_size, device = spattn.setup_distributed()
B, S, H, HK, D = 1, 256, 4, 2, 32
layout = spattn.sequence_layout("zigzag", S, H, HK, causal=True)
torch.manual_seed(0)
q, k, v = (torch.randn(B, S, h, D) for h in (H, HK, HK))
q, k, v = (layout.shard(x, rank).requires_grad_() for x in (q, k, v))
out = spattn.zigzag_ring_flash_attn_func(q, k, v, causal=True)
out.sum().backward()
PYTHON
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for ((run = 1; run <= runs; ++run)); do
  if ! timeout 120 mpiexec --oversubscribe -n 2 python3 "$script" >"$log" 2>&1 || grep -q "terminate called" "$log"; then
    echo "teardown-check: run $run of $runs did not exit cleanly:"
    cat "$log"
    exit 1
  fi
done
echo "teardown-check: $runs runs of the README example at 2 ranks exited cleanly"
