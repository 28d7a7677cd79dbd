#!/usr/bin/env python3
"""Sets measured times beside the cost model's predictions, as a markdown table.

For every spattn row of a benchmark CSV (bench/plot_results.py's header) this asks
`spattn plan --compare --json` for the same shape and rank count on a cluster preset, with the
kernel rate set to what one GPU measured on one rank's shard (the `spattn_local_shard` row of the
same size and pass): then the model predicts only what distribution adds, the steps and their
overlap with the transfers, and a prediction far from the measurement points at the schedule or
the communication, not at the kernel.

    python bench/compare_with_cost_model.py bench.csv --spattn build/spattn --preset nvswitch
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from typing import Dict, List, Tuple

LOCAL_SHARD = "spattn_local_shard"
MODEL_TIME_KEY = {"forward": "forward_s", "forward+backward": "forward_backward_s"}


def read_rows(path: str) -> List[dict]:
    with open(path, newline="") as handle:
        return [{key: (value or "").strip() for key, value in row.items()} for row in csv.DictReader(handle)]


def shape_key(row: dict) -> Tuple[str, ...]:
    return tuple(row[name] for name in ("batch", "heads", "kv_heads", "head_dim", "tokens_per_gpu", "causal",
                                        "dtype", "pass"))


def model_times(spattn: str, preset: str, row: dict, kernel_tflops: float) -> Dict[str, float]:
    """Seconds per call of every strategy the model can run at this row's shape, by strategy."""
    ranks = int(row["gpus"])
    command = [spattn, "plan", "--compare", "--json", "--preset", preset, "--ranks", str(ranks),
               "--seq", str(ranks * int(row["tokens_per_gpu"])), "--batch", row["batch"], "--heads", row["heads"],
               "--kv-heads", row["kv_heads"], "--head-dim", row["head_dim"], "--dtype", row["dtype"],
               "--tflops", f"{kernel_tflops:.3f}"]
    if row["causal"] == "1":
        command.append("--causal")
    model = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    return {strategy["algo"]: strategy[MODEL_TIME_KEY[row["pass"]]]
            for strategy in model["strategies"] if strategy["not_applicable"] is None}


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", help="a benchmark CSV with spattn rows and spattn_local_shard rows")
    parser.add_argument("--spattn", default="build/spattn", help="the spattn program (default build/spattn)")
    parser.add_argument("--preset", default="nvswitch", help="the cluster preset of spattn plan (default nvswitch)")
    arguments = parser.parse_args(argv)

    rows = read_rows(arguments.csv)
    local_rate = {shape_key(row): float(row["tflops_per_gpu"]) for row in rows if row["implementation"] == LOCAL_SHARD}
    print(f"measured ({arguments.csv}) against `spattn plan --compare --preset {arguments.preset}` with the kernel "
          f"rate of one GPU on one rank's shard\n")
    print("| GPUs | tokens/GPU | mask | pass | kv heads | kernel TFLOP/s | strategy | measured ms | model ms | "
          "measured / model |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    cache: Dict[Tuple[str, ...], Dict[str, float]] = {}
    for row in rows:
        if row["implementation"] != "spattn":
            continue
        key = shape_key(row)
        if key not in local_rate:
            print(f"no {LOCAL_SHARD} row for {key}: skipped", file=sys.stderr)
            continue
        cache_key = key + (row["gpus"],)
        if cache_key not in cache:
            cache[cache_key] = model_times(arguments.spattn, arguments.preset, row, local_rate[key])
        predicted = cache[cache_key].get(row["algorithm"])
        if predicted is None:
            continue
        measured_ms, predicted_ms = float(row["ms"]), 1e3 * predicted
        mask = "causal" if row["causal"] == "1" else "none"
        print(f"| {row['gpus']} | {int(row['tokens_per_gpu']) // 1024}k | {mask} | {row['pass']} | {row['kv_heads']} | "
              f"{local_rate[key]:.0f} | {row['algorithm']} | {measured_ms:.3f} | {predicted_ms:.3f} | "
              f"{measured_ms / predicted_ms:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
