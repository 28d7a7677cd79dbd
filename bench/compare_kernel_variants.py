#!/usr/bin/env python3
"""Builds of the own kernel measured on one machine (scripts/device-run.sh, stage kernel-ab) as one table.

Each variant's CSV (bench/kernel_bench.cpp's columns, rows appended by every round) holds the own
kernel and cuDNN timed in turns. The table gives, per pass and case, each variant's own TFLOP/s
(median over the rounds) and own / cuDNN (the median of the rounds' ratios): the ratio to the cuDNN
timed beside it is what compares variants, since the GPU's clocks drift between rounds.

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


def table(paths: list[str]) -> str:
    names = [os.path.splitext(os.path.basename(path))[0] for path in paths]
    variants = [read_rounds(path) for path in paths]
    header = ["pass", "D", "causal", "S"] + [f"{name} own (x cuDNN)" for name in names]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for case in sorted(set().union(*variants)):
        pass_index, head_dim, causal, seq = case
        cells = [PASSES[pass_index], str(head_dim), "yes" if causal else "no",
                 f"{seq // 1024}k" if seq % 1024 == 0 else str(seq)]
        for rounds in variants:
            measured = [r for r in rounds.get(case, []) if "own" in r and "cudnn" in r]
            if not measured:
                cells.append("-")
                continue
            own = statistics.median(r["own"] for r in measured)
            ratio = statistics.median(r["own"] / r["cudnn"] for r in measured)
            cells.append(f"{own:.0f} ({ratio:.3f})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    compare_variants_main(__doc__.splitlines()[0], table)


if __name__ == "__main__":
    main()
