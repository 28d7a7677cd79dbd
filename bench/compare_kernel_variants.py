#!/usr/bin/env python3
"""Builds of the own kernel measured on one machine (scripts/device-run.sh, stage kernel-ab) as one table.

Each variant's CSV (bench/kernel_bench.cpp's columns, rows appended by every round) holds the own
kernels (own, own_merge) and, when asked for, cuDNN, timed in turns. The table has a row per pass,
case and own kernel: each variant's TFLOP/s (median over the rounds), its ratio to the base's (the
first CSV), and, where cuDNN ran beside it, own / cuDNN (the median of the rounds' ratios: the
ratio to the cuDNN timed beside it compares variants across rounds in which the clocks drift).

    python3 bench/compare_kernel_variants.py base.csv three-stages.csv --markdown kernel-ab.md
"""

from __future__ import annotations

import csv
import os
import statistics
from collections import defaultdict

from report_output import compare_variants_main

PASSES = ("forward", "backward", "forward+backward")

Case = tuple[int, int, int, int]  # (pass's index in PASSES, head_dim, causal, seq)


def read_rounds(path: str) -> dict[Case, list[dict[str, float]]]:
    """Per case, one {kernel: TFLOP/s} per round, in the file's order."""
    rounds: dict[Case, list[dict[str, float]]] = defaultdict(list)
    with open(path, newline="") as stream:
        for row in csv.DictReader(stream):
            case = (PASSES.index(row["pass"]), int(row["head_dim"]), int(row["causal"]), int(row["seq"]))
            if not rounds[case] or row["kernel"] in rounds[case][-1]:
                rounds[case].append({})
            rounds[case][-1][row["kernel"]] = float(row["tflops"])
    return rounds


REFERENCE = "cudnn"


def is_own(kernel: str) -> bool:
    """The kernels the variants change: not cuDNN, not PyTorch's (bench/kernel_sdpa.py's sdpa_*)."""
    return kernel != REFERENCE and not kernel.startswith("sdpa")


def cell(rounds: list[dict[str, float]], kernel: str, base_median: float | None) -> str:
    """`kernel`'s median TFLOP/s over `rounds`, with its ratios to the base and to cuDNN."""
    measured = [r for r in rounds if kernel in r]
    if not measured:
        return "-"
    median = statistics.median(r[kernel] for r in measured)
    ratios = []
    if base_median is not None:
        ratios.append(f"{median / base_median:.3f} x base")
    beside_reference = [r for r in measured if REFERENCE in r]
    if beside_reference:
        ratios.append(f"{statistics.median(r[kernel] / r[REFERENCE] for r in beside_reference):.3f} x cuDNN")
    return f"{median:.0f}" + (f" ({', '.join(ratios)})" if ratios else "")


def table(paths: list[str]) -> str:
    names = [os.path.splitext(os.path.basename(path))[0] for path in paths]
    variants = [read_rounds(path) for path in paths]
    header = ["pass", "D", "causal", "S", "kernel"] + names
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for case in sorted(set().union(*variants)):
        pass_index, head_dim, causal, seq = case
        kernels = sorted({k for rounds in variants for r in rounds.get(case, []) for k in r if is_own(k)})
        for kernel in kernels:
            cells = [PASSES[pass_index], str(head_dim), "yes" if causal else "no",
                     f"{seq // 1024}k" if seq % 1024 == 0 else str(seq), kernel]
            base_rounds = [r for r in variants[0].get(case, []) if kernel in r]
            base_median = statistics.median(r[kernel] for r in base_rounds) if base_rounds else None
            for index, rounds in enumerate(variants):
                cells.append(cell(rounds.get(case, []), kernel, None if index == 0 else base_median))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    compare_variants_main(__doc__.splitlines()[0], table)


if __name__ == "__main__":
    main()
