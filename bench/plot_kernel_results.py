#!/usr/bin/env python3
"""The kernel benchmark's CSV (bench/kernel_bench.cpp and bench/kernel_sdpa.py) as tables and a chart.

One table per pass (forward, backward, forward+backward), under a heading that names it, with one
row per (head dim, causal, sequence length), one TFLOP/s column per kernel and the ratios of the
own kernel to cuDNN (spattn's path) and to PyTorch's flash backend; the chart draws TFLOP/s against
sequence length, one row of panels per pass and one panel per (head dim, causal):

    python3 bench/plot_kernel_results.py kernel-bench.csv --out kernel-bench.png --markdown kernel-bench.md
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from typing import Sequence

from report_output import tokens_label

PASSES = ("forward", "backward", "forward+backward")
KERNELS = ("own", "own_fp32_out", "own_merge", "own_deterministic", "cudnn", "cudnn_deterministic", "sdpa_flash",
           "sdpa_cudnn")
RATIOS = (("own", "cudnn"), ("own", "sdpa_flash"))
# What merging into a running result and determinism cost, in tables that hold such a kernel.
VARIANT_RATIOS = (("own_merge", "own"), ("own_deterministic", "own"), ("cudnn_deterministic", "cudnn"))

Key = tuple[int, int, int]  # (head_dim, causal, seq)
Rates = dict[str, dict[Key, dict[str, float]]]  # pass -> case -> kernel -> TFLOP/s


def read_rates(path: str) -> Rates:
    """TFLOP/s by pass, case and kernel; a later row of the same one replaces an earlier."""
    rates: Rates = defaultdict(lambda: defaultdict(dict))
    with open(path, newline="") as stream:
        for row in csv.DictReader(stream):
            case = (int(row["head_dim"]), int(row["causal"]), int(row["seq"]))
            rates[row["pass"]][case][row["kernel"]] = float(row["tflops"])
    return rates


def passes_of(rates: Rates) -> list[str]:
    """The passes the CSV holds: forward, backward, forward+backward, then any other by name."""
    return sorted(rates, key=lambda name: (PASSES.index(name) if name in PASSES else len(PASSES), name))


def kernels_of(by_case: dict[Key, dict[str, float]]) -> list[str]:
    return [kernel for kernel in KERNELS if any(kernel in by_kernel for by_kernel in by_case.values())]


def markdown_table(by_case: dict[Key, dict[str, float]]) -> str:
    """One pass's table."""
    kernels = kernels_of(by_case)
    ratios = list(RATIOS) + [(a, b) for a, b in VARIANT_RATIOS if a in kernels]
    header = ["D", "causal", "S"] + kernels + [f"{a}/{b}" for a, b in ratios]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (head_dim, causal, seq) in sorted(by_case):
        by_kernel = by_case[(head_dim, causal, seq)]
        cells = [str(head_dim), "yes" if causal else "no", tokens_label(seq)]
        cells += [f"{by_kernel[kernel]:.0f}" if kernel in by_kernel else "-" for kernel in kernels]
        cells += [f"{by_kernel[a] / by_kernel[b]:.2f}" if a in by_kernel and b in by_kernel else "-" for a, b in ratios]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def markdown_tables(rates: Rates) -> str:
    """Every pass's table under a heading `### PASS TFLOP/s`, a blank line between them."""
    return "\n".join(f"### {name} TFLOP/s\n\n{markdown_table(rates[name])}" for name in passes_of(rates))


def plot(rates: Rates, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: benchmark machines have no display
    import matplotlib.pyplot as plt

    passes = passes_of(rates)
    panels = sorted({(head_dim, causal) for name in passes for head_dim, causal, _ in rates[name]})
    figure, axes = plt.subplots(len(passes), len(panels), figsize=(4.5 * len(panels), 3.8 * len(passes)),
                                squeeze=False)
    for axis_row, name in zip(axes, passes):
        for axis, (head_dim, causal) in zip(axis_row, panels):
            for kernel in kernels_of(rates[name]):
                points = sorted((seq, by_kernel[kernel]) for (d, c, seq), by_kernel in rates[name].items()
                                if d == head_dim and c == causal and kernel in by_kernel)
                if points:
                    axis.plot([seq for seq, _ in points], [rate for _, rate in points], marker="o", label=kernel,
                              color=f"C{KERNELS.index(kernel)}")  # one colour per kernel in every panel
            axis.set_xscale("log", base=2)
            axis.set_title(f"{name}, D {head_dim}, {'causal' if causal else 'no mask'}")
            axis.set_xlabel("sequence length")
            axis.set_ylabel(f"{name} TFLOP/s")
            axis.grid(True, alpha=0.3)
            if axis.lines:
                axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv")
    parser.add_argument("--out", help="the chart (PNG)")
    parser.add_argument("--markdown", help="the tables (markdown); printed when not given")
    args = parser.parse_args(argv)
    rates = read_rates(args.csv)
    if not rates:
        sys.exit(f"{args.csv}: no rows of results to draw (did the benchmark run?)")
    tables = markdown_tables(rates)
    if args.markdown:
        with open(args.markdown, "w") as stream:
            stream.write(tables)
    else:
        print(tables, end="")
    if args.out:
        plot(rates, args.out)


if __name__ == "__main__":
    main()
