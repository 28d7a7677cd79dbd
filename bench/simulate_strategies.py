#!/usr/bin/env python3
"""The cost model's predictions for every strategy from one node to 1024 GPUs, as CSV, markdown
and a plot: per-GPU TFLOP/s (flash-attention convention, forward + backward = 3.5 x forward) and
exposed transfer time (what the transfers add beyond the compute) of one forward + backward call.

It asks `spattn plan --compare --json` (include/spattn/cost_model.hpp) for each case; nothing runs.
The sequence length of a case is the multiple of lcm(2N(N-1), 16N) nearest to tokens-per-GPU x N
(at 1024 GPUs that unit is 16368 tokens per GPU, so 8k rounds up to it),
so that every strategy's divisibility rule holds at once (hamilton's 2N(N-1) under a causal mask,
hamilton2's 2 N m with m = 8 ranks per node) and all strategies of a row compute the same problem.

    python bench/simulate_strategies.py --spattn build/spattn --preset nvswitch \\
        --out bench/results/simulation-nvswitch-2026-11-25
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import subprocess
from collections import defaultdict
from typing import Dict, List

STRATEGIES = ["ring", "zigzag", "ulysses", "usp", "allgather", "hamilton", "hamilton2"]
FIELDS = ["gpus", "tokens_per_gpu", "seq", "causal", "algo", "configuration", "fwd_bwd_ms", "compute_ms",
          "exposed_ms", "tflops_per_gpu", "not_applicable"]


def sequence_length(gpus: int, tokens_per_gpu: int) -> int:
    unit = math.lcm(2 * gpus * (gpus - 1), 16 * gpus)
    return max(1, round(tokens_per_gpu * gpus / unit)) * unit


def simulate(spattn: str, preset: str, gpus: int, tokens_per_gpu: int, causal: bool, heads: int, kv_heads: int,
             head_dim: int) -> List[dict]:
    seq = sequence_length(gpus, tokens_per_gpu)
    command = [spattn, "plan", "--compare", "--json", "--preset", preset, "--ranks", str(gpus), "--seq", str(seq),
               "--heads", str(heads), "--kv-heads", str(kv_heads), "--head-dim", str(head_dim)]
    if causal:
        command.append("--causal")
    model = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    flop = 4.0 * heads * float(seq) ** 2 * head_dim * (0.5 if causal else 1.0) * 3.5
    rows = []
    for strategy in model["strategies"]:
        row = {"gpus": gpus, "tokens_per_gpu": seq // gpus, "seq": seq, "causal": int(causal),
               "algo": strategy["algo"], "configuration": strategy.get("configuration") or "",
               "not_applicable": strategy["not_applicable"] or ""}
        if strategy["not_applicable"] is None:
            steps = strategy["forward"] + strategy["backward"]
            compute = sum(step["count"] * step["compute_s"] for step in steps)
            total = strategy["forward_backward_s"]
            row.update(fwd_bwd_ms=f"{total * 1e3:.3f}", compute_ms=f"{compute * 1e3:.3f}",
                       exposed_ms=f"{(total - compute) * 1e3:.3f}",
                       tflops_per_gpu=f"{flop / (gpus * total) / 1e12:.1f}")
        else:
            row.update(fwd_bwd_ms="", compute_ms="", exposed_ms="", tflops_per_gpu="")
        rows.append(row)
    return rows


def markdown(rows: List[dict], preset: str, heads: int, kv_heads: int, head_dim: int) -> str:
    by_case: Dict[tuple, Dict[str, dict]] = defaultdict(dict)
    for row in rows:
        by_case[(row["gpus"], row["causal"], row["tokens_per_gpu"])][row["algo"]] = row
    lines = [f"Predicted per-GPU TFLOP/s of one forward + backward call (cost model, preset {preset}, "
             f"B 1, H {heads}, HK {kv_heads}, D {head_dim}, bf16); exposed transfer ms in brackets; "
             "- where the strategy cannot run (heads, divisibility, one node for hamilton2).", ""]
    header = ("| GPUs | causal | tokens/GPU | " + " | ".join(STRATEGIES) +
              " | hamilton / ring | hamilton / zigzag | hamilton2 / zigzag |")
    lines += [header, "|" + "---|" * (len(STRATEGIES) + 6)]
    for (gpus, causal, tokens), strategies in sorted(by_case.items()):
        cells = []
        for algo in STRATEGIES:
            row = strategies.get(algo)
            cells.append(f"{row['tflops_per_gpu']} ({float(row['exposed_ms']):.1f})" if row and row["tflops_per_gpu"]
                         else "-")

        def ratio(algo: str, baseline: str) -> str:
            base, other = strategies.get(baseline), strategies.get(algo)
            if not (base and other and base["tflops_per_gpu"] and other["tflops_per_gpu"]):
                return "-"
            return f"{float(other['tflops_per_gpu']) / float(base['tflops_per_gpu']):.2f}"

        lines.append(f"| {gpus} | {'yes' if causal else 'no'} | {tokens} | " + " | ".join(cells) +
                     f" | {ratio('hamilton', 'ring')} | {ratio('hamilton', 'zigzag')} | "
                     f"{ratio('hamilton2', 'zigzag')} |")
    return "\n".join(lines) + "\n"


def plot(rows: List[dict], path: str, preset: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # writes files only
    import matplotlib.pyplot as plt

    colors = {algo: plt.get_cmap("tab10")(index) for index, algo in enumerate(STRATEGIES)}  # one per strategy
    gpu_counts = sorted({row["gpus"] for row in rows})
    figure, axes = plt.subplots(2, len(gpu_counts), figsize=(4 * len(gpu_counts), 7), sharey=True, squeeze=False)
    for column, gpus in enumerate(gpu_counts):
        for line, causal in enumerate((0, 1)):
            ax = axes[line][column]
            for algo in STRATEGIES:
                points = sorted((row["tokens_per_gpu"], float(row["tflops_per_gpu"])) for row in rows
                                if row["gpus"] == gpus and row["causal"] == causal and row["algo"] == algo and
                                row["tflops_per_gpu"])
                if points:
                    ax.plot([p[0] / 1024 for p in points], [p[1] for p in points], marker="o", color=colors[algo],
                            label=algo)
            ax.set_xscale("log", base=2)
            ax.set_title(f"{gpus} GPUs, {'causal' if causal else 'no mask'}")
            ax.set_xlabel("tokens per GPU (k)")
            if column == 0:
                ax.set_ylabel("predicted TFLOP/s per GPU")
            ax.grid(alpha=0.3)
    figure.legend(handles=[plt.Line2D([], [], color=colors[algo], marker="o", label=algo) for algo in STRATEGIES],
                  loc="lower center", ncol=len(STRATEGIES))
    figure.suptitle(f"cost model, preset {preset}: forward + backward per GPU")
    figure.tight_layout(rect=(0, 0.06, 1, 1))
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spattn", default="build/spattn", help="the spattn program")
    parser.add_argument("--preset", default="nvswitch", help="cluster preset of spattn plan")
    parser.add_argument("--gpus", default="8,16,64,256,1024", help="GPU counts, comma-separated")
    parser.add_argument("--tokens-per-gpu", default="8192,16384,32768,65536,131072", help="comma-separated")
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--out", required=True, help="path prefix of the .csv, .md and .png written")
    args = parser.parse_args()

    rows: List[dict] = []
    for gpus in (int(value) for value in args.gpus.split(",")):
        lengths = {sequence_length(gpus, int(value)) for value in args.tokens_per_gpu.split(",")}
        for seq in sorted(lengths):  # targets that round to one length run once
            for causal in (False, True):
                rows += simulate(args.spattn, args.preset, gpus, seq // gpus, causal, args.heads, args.kv_heads,
                                 args.head_dim)
    with open(args.out + ".csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    with open(args.out + ".md", "w") as handle:
        handle.write(markdown(rows, args.preset, args.heads, args.kv_heads, args.head_dim))
    plot(rows, args.out + ".png", args.preset)
    print(f"{len(rows)} rows into {args.out}.csv, .md, .png")


if __name__ == "__main__":
    main()
