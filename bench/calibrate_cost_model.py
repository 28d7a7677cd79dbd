#!/usr/bin/env python3
"""Fits the cost model's link figures (and one kernel rate) to measured runs; prints model against measured.

For every distributed spattn row of a benchmark CSV (bench/plot_results.py's header) this takes
the model's steps from `spattn plan --compare --json` (what each step computes, and the bytes and
messages the busiest rank sends) and recomputes the model's time for other figures, under the
model's own rules (a step's transfer is messages x latency + bytes / bandwidth; an overlapped
step lasts the longer of its compute and its transfer, another the sum). Two fits, each
minimising the mean squared log of model / measured over all rows:

- links: the latency and the bandwidth within a node, with each row's kernel rate set to what one
  GPU measured on one rank's shard (the `spattn_local_shard` row of the same shape and pass), so
  that only what distribution adds is fitted;
- whole: the same two and one kernel rate for every shape, as `spattn plan` predicts with a
  preset.

Rows on more than one node are left out (the fit is for the links within a node).

    python3 bench/calibrate_cost_model.py bench/results/gpu-bench-h200x2-2026-11-23-gqa-sweep.csv \
        --spattn build/spattn --markdown calibration.md
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from report_output import write_report

LOCAL_SHARD = "spattn_local_shard"
PASSES = {"forward": ("forward",), "forward+backward": ("forward", "backward")}


@dataclass
class Row:
    strategy: str
    tokens_per_gpu: int
    causal: bool
    pass_name: str
    measured_s: float
    kernel_tflops: float  # one GPU on one rank's shard
    compute_s: np.ndarray  # per step kind, at kernel_tflops
    bytes: np.ndarray
    messages: np.ndarray
    counts: np.ndarray
    overlapped: np.ndarray

    def model_s(self, bandwidth, latency, tflops=None, step_cost=None):
        """Seconds under the model for figures that broadcast (bytes/s, s, TFLOP/s; step_cost: a
        fixed cost per step that the model does not have, in seconds)."""
        compute = self.compute_s if tflops is None else self.compute_s * self.kernel_tflops / tflops[..., None]
        transfer = self.messages * latency[..., None] + self.bytes / bandwidth[..., None]
        steps = np.where(self.overlapped, np.maximum(compute, transfer), compute + transfer)
        if step_cost is not None:
            steps = steps + step_cost[..., None]
        return (steps * self.counts).sum(axis=-1)


def read_csv(path: str) -> list[dict]:
    with open(path, newline="") as stream:
        return [{key: (value or "").strip() for key, value in row.items()} for row in csv.DictReader(stream)]


def shape_key(row: dict) -> tuple:
    return tuple(row[name] for name in ("batch", "heads", "kv_heads", "head_dim", "tokens_per_gpu", "causal", "dtype",
                                        "pass"))


def plan(spattn: str, preset: str, row: dict, tflops: float) -> dict:
    """`spattn plan --compare --json` for the row's shape, by strategy (those that apply)."""
    ranks = int(row["gpus"])
    command = [spattn, "plan", "--compare", "--json", "--preset", preset, "--ranks", str(ranks), "--seq",
               str(ranks * int(row["tokens_per_gpu"])), "--batch", row["batch"], "--heads", row["heads"], "--kv-heads",
               row["kv_heads"], "--head-dim", row["head_dim"], "--dtype", row["dtype"], "--tflops", f"{tflops:.3f}"]
    if row["causal"] == "1":
        command.append("--causal")
    model = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    return {"strategies": {s["algo"]: s for s in model["strategies"] if s["not_applicable"] is None}}


def plan_preset(spattn: str, preset: str) -> dict:
    """The preset's figures as `spattn plan --json` states them."""
    command = [spattn, "plan", "--json", "--preset", preset, "--ranks", "2"]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)["cluster"]


def load_rows(paths: list[str], spattn: str, preset: str) -> list[Row]:
    rows: list[Row] = []
    cache: dict[tuple, dict] = {}
    for path in paths:
        records = read_csv(path)
        local = {shape_key(r): float(r["tflops_per_gpu"]) for r in records if r["implementation"] == LOCAL_SHARD}
        for record in records:
            if record["implementation"] != "spattn" or int(record["gpus"]) < 2 or shape_key(record) not in local:
                continue
            tflops = local[shape_key(record)]
            key = shape_key(record) + (record["gpus"],)
            if key not in cache:
                cache[key] = plan(spattn, preset, record, tflops)
            model = cache[key]
            strategy = model["strategies"].get(record["algorithm"])
            if strategy is None:
                continue
            steps = [step for part in PASSES[record["pass"]] for step in strategy[part]]
            if any(step["inter_node_bytes"] for step in steps):
                continue
            rows.append(Row(record["algorithm"], int(record["tokens_per_gpu"]), record["causal"] == "1", record["pass"],
                            float(record["ms"]) * 1e-3, tflops,
                            np.array([s["compute_s"] for s in steps]), np.array([float(s["bytes"]) for s in steps]),
                            np.array([float(s["messages"]) for s in steps]), np.array([float(s["count"]) for s in steps]),
                            np.array([bool(s["overlapped"]) for s in steps])))
    return rows


def log_error(rows: list[Row], **figures) -> np.ndarray:
    """Mean squared log(model / measured) over the rows, for figures that broadcast."""
    total = 0.0
    for row in rows:
        total = total + np.log(row.model_s(**figures) / row.measured_s) ** 2
    return total / len(rows)


def fit(rows: list[Row], with_kernel: bool = False, with_step_cost: bool = False) -> dict:
    """The grid point of least log error: bandwidth 20-2000 GB/s, latency 1-1000 us, and where
    asked one kernel rate of 200-800 TFLOP/s or a fixed cost of 0-500 us per step."""
    axes = {"bandwidth": np.geomspace(20e9, 2000e9, 81), "latency": np.geomspace(1e-6, 1e-3, 61)}
    if with_kernel:
        axes["tflops"] = np.linspace(200, 800, 61)
    if with_step_cost:
        axes["step_cost"] = np.concatenate([[0.0], np.geomspace(1e-6, 5e-4, 50)])
    grids = dict(zip(axes, np.meshgrid(*axes.values(), indexing="ij")))
    error = log_error(rows, **grids)
    best = np.unravel_index(np.argmin(error), error.shape)
    return {name: float(grid[best]) for name, grid in grids.items()}


def ratio(row: Row, figures: dict) -> float:
    return float(row.model_s(**{name: np.array(value) for name, value in figures.items()})) / row.measured_s


def describe(figures: dict) -> str:
    text = f"{figures['bandwidth'] / 1e9:.0f} GB/s per GPU, {figures['latency'] * 1e6:.1f} us per message"
    if "tflops" in figures:
        text += f", kernel {figures['tflops']:.0f} TFLOP/s"
    if "step_cost" in figures:
        text += f", {figures['step_cost'] * 1e6:.0f} us more per step"
    return text


def report(rows: list[Row], cluster: dict, preset: str, paths: list[str]) -> str:
    preset_figures = {"bandwidth": cluster["within_node_bandwidth"], "latency": cluster["within_node_latency"]}
    preset_whole = dict(preset_figures, tflops=cluster["kernel_flops"] / 1e12)
    # The model is fitted where it is meant to hold (8k tokens per GPU and more); at 2k fixed costs
    # per call and per step that it does not model dominate, and the last fit says how large.
    large_rows = [r for r in rows if r.tokens_per_gpu > 2048]
    links = fit(large_rows)
    whole = fit(large_rows, with_kernel=True)
    with_step_cost = fit(rows, with_step_cost=True)
    fits = [("preset, local kernel rate", preset_figures), ("links fitted from 8k, local kernel rate", links),
            ("preset, its kernel rate", preset_whole), ("links and kernel rate fitted from 8k", whole),
            ("links and a cost per step fitted to all rows, local kernel rate", with_step_cost)]

    def mean_abs_percent(selected: list[Row], figures: dict) -> str:
        if not selected:
            return "-"
        return f"{100 * sum(abs(ratio(r, figures) - 1) for r in selected) / len(selected):.0f}%"

    lines = [f"Measured: {', '.join(paths)} ({len(rows)} distributed spattn rows). Preset `{preset}`: "
             f"{describe(preset_whole)}.", "",
             "| fit | figures | mean abs error, all rows | 2k tokens/GPU | 8k and more |", "|---|---|---|---|---|"]
    for name, figures in fits:
        small = [r for r in rows if r.tokens_per_gpu <= 2048]
        large = [r for r in rows if r.tokens_per_gpu > 2048]
        lines.append(f"| {name} | {describe(figures)} | {mean_abs_percent(rows, figures)} | "
                     f"{mean_abs_percent(small, figures)} | {mean_abs_percent(large, figures)} |")
    lines += ["", "Mean abs error by strategy (8k tokens per GPU and more; links fitted from 8k, local kernel rate):", "",
              "| strategy | rows | preset | fitted |", "|---|---|---|---|"]
    by_strategy = defaultdict(list)
    for row in rows:
        if row.tokens_per_gpu > 2048:
            by_strategy[row.strategy].append(row)
    for strategy in sorted(by_strategy):
        selected = by_strategy[strategy]
        lines.append(f"| {strategy} | {len(selected)} | {mean_abs_percent(selected, preset_figures)} | "
                     f"{mean_abs_percent(selected, links)} |")
    lines += ["", "Every row (model / measured; local kernel rate):", "",
              "| strategy | tokens/GPU | mask | pass | kernel TFLOP/s | measured ms | preset | links from 8k |",
              "|---|---|---|---|---|---|---|---|"]
    for row in sorted(rows, key=lambda r: (r.strategy, r.pass_name, r.causal, r.tokens_per_gpu)):
        lines.append(f"| {row.strategy} | {row.tokens_per_gpu // 1024}k | {'causal' if row.causal else 'none'} | "
                     f"{row.pass_name} | {row.kernel_tflops:.0f} | {row.measured_s * 1e3:.3f} | "
                     f"{ratio(row, preset_figures):.2f} | {ratio(row, links):.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="+", help="benchmark CSVs with spattn and spattn_local_shard rows")
    parser.add_argument("--spattn", default="build/spattn", help="the spattn program (default build/spattn)")
    parser.add_argument("--preset", default="nvswitch", help="cluster preset whose figures start (default nvswitch)")
    parser.add_argument("--markdown", help="write the tables here as well as to stdout")
    arguments = parser.parse_args()
    rows = load_rows(arguments.csv, arguments.spattn, arguments.preset)
    cluster = plan_preset(arguments.spattn, arguments.preset)
    if not rows:
        raise SystemExit("no distributed spattn row with a spattn_local_shard row of its shape")
    write_report(report(rows, cluster, arguments.preset, arguments.csv), arguments.markdown)


if __name__ == "__main__":
    main()
