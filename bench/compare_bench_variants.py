#!/usr/bin/env python3
"""Builds of spattn measured by the distributed bench on one machine (scripts/device-run.sh, stage bench-ab) as one table.

Each variant's CSV (bench/gpu_attention_bench.cpp's columns, rows appended by every round) holds the
plans' rows and the one-GPU rows they are measured against. The table gives, per row of the bench
(implementation, strategy, tokens per GPU, kv heads, causal, pass), each variant's per-GPU TFLOP/s
(median over the rounds) and its ratio to the base's median; the builds took turns, so the GPUs'
clock drift falls on all of them alike.

    python3 bench/compare_bench_variants.py base.csv persistent.csv --markdown bench-ab.md
"""

from __future__ import annotations

import csv
import os
import statistics
from collections import defaultdict

from report_output import compare_variants_main, rounds_note, tokens_label

PASSES = ("forward", "backward", "forward+backward")

# (implementation, algorithm, GPUs, tokens per GPU, kv heads, causal, pass's index in PASSES)
Row = tuple[str, str, int, int, int, int, int]


def read_rounds(path: str) -> dict[Row, list[float]]:
    """Per bench row, its per-GPU TFLOP/s of every round, in the file's order."""
    rounds: dict[Row, list[float]] = defaultdict(list)
    with open(path, newline="") as stream:
        for row in csv.DictReader(stream):
            key = (row["implementation"], row["algorithm"], int(row["gpus"]), int(row["tokens_per_gpu"]),
                   int(row["kv_heads"]), int(row["causal"]), PASSES.index(row["pass"]))
            rounds[key].append(float(row["tflops_per_gpu"]))
    return rounds


def table(paths: list[str]) -> str:
    names = [os.path.splitext(os.path.basename(path))[0] for path in paths]
    variants = [read_rounds(path) for path in paths]
    header = ["implementation", "strategy", "tokens/GPU", "kv heads", "causal", "pass"]
    header += [names[0]] + [f"{name} (x {names[0]})" for name in names[1:]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    # Rows in the order of the bench's own output: by the shape of the whole sequence (one-GPU rows
    # beside the plans measured against them), then as the variants listed them.
    order: dict[Row, int] = {}
    for variant in variants:
        for key in variant:
            order.setdefault(key, len(order))
    for key in sorted(set().union(*variants), key=lambda k: (k[2] * k[3], k[4], k[5], order[k])):
        implementation, algorithm, _, tokens, kv_heads, causal, pass_index = key
        cells = [implementation, algorithm, tokens_label(tokens),
                 str(kv_heads), "yes" if causal else "no", PASSES[pass_index]]
        base = statistics.median(variants[0][key]) if key in variants[0] else None
        for index, rounds in enumerate(variants):
            if key not in rounds:
                cells.append("-")
                continue
            tflops = statistics.median(rounds[key])
            if index == 0 or base is None:
                cells.append(f"{tflops:.1f}")
            else:
                cells.append(f"{tflops:.1f} ({tflops / base:.3f})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n" + rounds_note(names, variants)


def main() -> None:
    compare_variants_main(__doc__.splitlines()[0], table)


if __name__ == "__main__":
    main()
