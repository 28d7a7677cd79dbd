#!/usr/bin/env python3
"""The kernel benchmark's CSV (bench/kernel_bench.cpp and bench/kernel_sdpa.py) as a table and a chart.

The table has one row per (head dim, causal, sequence length), one TFLOP/s column per kernel
and the ratios of the own kernel to cuDNN (spattn's path) and to PyTorch's flash backend; the
chart draws TFLOP/s against sequence length, one panel per (head dim, causal):

    python3 bench/plot_kernel_results.py kernel-bench.csv --out kernel-bench.png --markdown kernel-bench.md
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from typing import Sequence

KERNELS = ("own", "own_fp32_out", "cudnn", "sdpa_flash", "sdpa_cudnn")
RATIOS = (("own", "cudnn"), ("own", "sdpa_flash"))

Key = tuple[int, int, int]  # (head_dim, causal, seq)


def read_rates(path: str) -> dict[Key, dict[str, float]]:
    """TFLOP/s by case and kernel (forward rows only); a later row of the same case replaces an earlier."""
    rates: dict[Key, dict[str, float]] = defaultdict(dict)
    with open(path, newline="") as stream:
        for row in csv.DictReader(stream):
            if row["pass"] != "forward":
                continue
            rates[(int(row["head_dim"]), int(row["causal"]), int(row["seq"]))][row["kernel"]] = float(row["tflops"])
    return rates


def markdown_table(rates: dict[Key, dict[str, float]]) -> str:
    kernels = [kernel for kernel in KERNELS if any(kernel in by_kernel for by_kernel in rates.values())]
    header = ["D", "causal", "S"] + kernels + [f"{a}/{b}" for a, b in RATIOS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (head_dim, causal, seq) in sorted(rates):
        by_kernel = rates[(head_dim, causal, seq)]
        cells = [str(head_dim), "yes" if causal else "no", f"{seq // 1024}k" if seq % 1024 == 0 else str(seq)]
        cells += [f"{by_kernel[kernel]:.0f}" if kernel in by_kernel else "-" for kernel in kernels]
        cells += [f"{by_kernel[a] / by_kernel[b]:.2f}" if a in by_kernel and b in by_kernel else "-" for a, b in RATIOS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(rates: dict[Key, dict[str, float]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: benchmark machines have no display
    import matplotlib.pyplot as plt

    panels = sorted({(head_dim, causal) for head_dim, causal, _ in rates})
    figure, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.8), squeeze=False)
    for axis, (head_dim, causal) in zip(axes[0], panels):
        for kernel in KERNELS:
            points = sorted((seq, by_kernel[kernel]) for (d, c, seq), by_kernel in rates.items()
                            if d == head_dim and c == causal and kernel in by_kernel)
            if points:
                axis.plot([seq for seq, _ in points], [rate for _, rate in points], marker="o", label=kernel)
        axis.set_xscale("log", base=2)
        axis.set_title(f"D {head_dim}, {'causal' if causal else 'no mask'}")
        axis.set_xlabel("sequence length")
        axis.set_ylabel("forward TFLOP/s")
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv")
    parser.add_argument("--out", help="the chart (PNG)")
    parser.add_argument("--markdown", help="the table (markdown); printed when not given")
    args = parser.parse_args(argv)
    rates = read_rates(args.csv)
    table = markdown_table(rates)
    if args.markdown:
        with open(args.markdown, "w") as stream:
            stream.write(table)
    else:
        print(table, end="")
    if args.out:
        plot(rates, args.out)


if __name__ == "__main__":
    main()
