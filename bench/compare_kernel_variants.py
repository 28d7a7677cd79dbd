#!/usr/bin/env python3
"""Builds of the own kernel measured on one machine (scripts/device-run.sh, stage kernel-ab) as one table.

Each variant's CSV (bench/kernel_bench.cpp's columns, rows appended by every round) holds the own
kernels (own, own_merge, own_deterministic) and, when asked for, cuDNN's, timed in turns. The table
has a row per pass, case and own kernel: each variant's TFLOP/s (median over the rounds), its ratio
to the base's (the first CSV), and, where cuDNN ran beside it, own / cuDNN (the median of the
rounds' ratios: the ratio to the cuDNN timed beside it compares variants across rounds in which the
clocks drift). The kernels that no build changes (cuDNN's, PyTorch's) follow, marked unchanged:
their ratios to the base are the comparison's noise, which a line under the table sums up.

    python3 bench/compare_kernel_variants.py base.csv three-stages.csv --markdown kernel-ab.md
"""

from __future__ import annotations

import csv
import os
import statistics
from collections import defaultdict

from report_output import compare_variants_main, rounds_note, tokens_label

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
UNCHANGED_MARK = " (unchanged)"


def is_own(kernel: str) -> bool:
    """The kernels the variants change: not cuDNN's (cudnn, cudnn_deterministic), not PyTorch's
    (bench/kernel_sdpa.py's sdpa_*)."""
    return not kernel.startswith(("cudnn", "sdpa"))


def median_rate(rounds: list[dict[str, float]], kernel: str) -> float | None:
    """`kernel`'s median TFLOP/s over the `rounds` that timed it; None where none did."""
    measured = [r[kernel] for r in rounds if kernel in r]
    return statistics.median(measured) if measured else None


def cell(rounds: list[dict[str, float]], kernel: str, base_median: float | None) -> str:
    """`kernel`'s median TFLOP/s over `rounds`, with its ratios to `base_median` (None: this is the
    base) and to the cuDNN timed beside it."""
    median = median_rate(rounds, kernel)
    if median is None:
        return "-"
    ratios = []
    if base_median is not None:
        ratios.append(f"{median / base_median:.3f} x base")
    beside_reference = [r for r in rounds if kernel in r and REFERENCE in r]
    if beside_reference and kernel != REFERENCE:
        ratios.append(f"{statistics.median(r[kernel] / r[REFERENCE] for r in beside_reference):.3f} x cuDNN")
    return f"{median:.0f}" + (f" ({', '.join(ratios)})" if ratios else "")


def table(paths: list[str]) -> str:
    names = [os.path.splitext(os.path.basename(path))[0] for path in paths]
    variants = [read_rounds(path) for path in paths]
    header = ["pass", "D", "causal", "S", "kernel"] + names
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    unchanged_ratios = []  # every unchanged kernel's median in each other build over the base build's
    for case in sorted(set().union(*variants)):
        pass_index, head_dim, causal, seq = case
        kernels = sorted({k for rounds in variants for r in rounds.get(case, []) for k in r},
                         key=lambda k: (not is_own(k), k))
        for kernel in kernels:
            cells = [PASSES[pass_index], str(head_dim), "yes" if causal else "no",
                     tokens_label(seq), kernel + ("" if is_own(kernel) else UNCHANGED_MARK)]
            base, *others = (rounds.get(case, []) for rounds in variants)
            base_median = median_rate(base, kernel)
            cells.append(cell(base, kernel, None))
            cells += [cell(rounds, kernel, base_median) for rounds in others]
            lines.append("| " + " | ".join(cells) + " |")
            if not is_own(kernel) and base_median is not None:
                unchanged_ratios += [m / base_median for m in (median_rate(r, kernel) for r in others) if m is not None]
    return "\n".join(lines) + "\n" + noise_note(unchanged_ratios) + rounds_note(names, variants)


def noise_note(unchanged_ratios: list[float]) -> str:
    """A line on how far the unchanged kernels' medians moved between builds (their ratios to the
    base build's): an own kernel's ratio within that is not a difference; "" when none ran."""
    if not unchanged_ratios:
        return ""
    apart = [abs(ratio - 1.0) for ratio in unchanged_ratios]
    return (f"\nNoise: the unchanged kernels' medians moved up to {100 * max(apart):.1f}% from the base build's "
            f"(median {100 * statistics.median(apart):.1f}%).\n")


def main() -> None:
    compare_variants_main(__doc__.splitlines()[0], table)


if __name__ == "__main__":
    main()
