#!/usr/bin/env python3
"""Puts attention benchmark CSVs on one chart and one table.

A throughput means something only beside its peers and its ideal: this reads the rows that
spattn's benchmark and bench/torch_context_parallel.py write (one header for both), draws per-GPU
TFLOP/s against tokens per GPU with every one-GPU ideal dashed, and prints a markdown table of
TFLOP/s and percent of ideal for result files.

    python bench/plot_results.py spattn.csv torch.csv --out results.png --markdown results.md
"""

from __future__ import annotations

import argparse
import csv
import itertools
import sys
from dataclasses import dataclass
from typing import Iterable, Sequence

import matplotlib

matplotlib.use("Agg")  # writes files only: benchmark machines have no display
import matplotlib.pyplot as plt  # noqa: E402  (must follow the backend choice)
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from report_output import tokens_label  # noqa: E402

CSV_HEADER = (
    "implementation", "algorithm", "gpus", "device", "batch", "heads", "kv_heads", "head_dim",
    "tokens_per_gpu", "causal", "dtype", "pass", "ms", "tflops_per_gpu", "ideal_tflops",
    "percent_of_ideal", "peak_memory_mib",
)
PASSES = ("forward", "forward+backward")
# spattn_one_gpu, torch_sdpa_one_gpu: one GPU over the whole global sequence, the ideal that a
# distributed run divides by.
IDEAL_SUFFIX = "_one_gpu"
DISTRIBUTED_STYLE = {"linestyle": "-", "marker": "o"}
IDEAL_STYLE = {"linestyle": "--", "marker": "x"}


@dataclass(frozen=True, order=True)
class Shape:
    """An attention problem apart from its length and mask."""

    heads: int
    kv_heads: int
    head_dim: int
    dtype: str
    batch: int

    def label(self) -> str:
        return (f"heads {self.heads}/{self.kv_heads}, head dim {self.head_dim}, {self.dtype}, "
                f"batch {self.batch}")


@dataclass(frozen=True)
class Measurement:
    """One CSV row, typed."""

    implementation: str
    algorithm: str
    gpus: int
    device: str
    shape: Shape
    tokens_per_gpu: int
    causal: bool
    pass_name: str
    tflops_per_gpu: float
    percent_of_ideal: float | None

    @property
    def is_ideal(self) -> bool:
        return self.implementation.endswith(IDEAL_SUFFIX)

    @property
    def global_tokens(self) -> int:
        return self.tokens_per_gpu * self.gpus

    @property
    def panel(self) -> tuple[Shape, bool, str]:
        return self.shape, self.causal, self.pass_name

    @property
    def identity(self) -> tuple:
        """What a repeated measurement has in common with the one it replaces."""
        return (self.implementation, self.algorithm, self.gpus, self.device, self.shape,
                self.tokens_per_gpu, self.causal, self.pass_name)


def parse_row(row: dict[str, str]) -> Measurement:
    percent = row["percent_of_ideal"].strip()
    return Measurement(
        implementation=row["implementation"], algorithm=row["algorithm"], gpus=int(row["gpus"]),
        device=row["device"],
        shape=Shape(int(row["heads"]), int(row["kv_heads"]), int(row["head_dim"]), row["dtype"],
                    int(row["batch"])),
        tokens_per_gpu=int(row["tokens_per_gpu"]), causal=row["causal"].strip() == "1",
        pass_name=row["pass"], tflops_per_gpu=float(row["tflops_per_gpu"]),
        percent_of_ideal=float(percent) if percent else None)


def read_measurements(paths: Iterable[str]) -> list[Measurement]:
    """Rows of every file; a row measured again (same configuration) replaces the earlier one."""
    by_identity: dict[tuple, Measurement] = {}
    for path in paths:
        with open(path, newline="") as source:
            reader = csv.DictReader(source)
            if tuple(reader.fieldnames or ()) != CSV_HEADER:
                raise SystemExit(f"{path}: header is not the benchmark header\n  expected: "
                                 f"{','.join(CSV_HEADER)}\n  found:    "
                                 f"{','.join(reader.fieldnames or ())}")
            for line_number, row in enumerate(reader, start=2):
                try:
                    measurement = parse_row(row)
                except (TypeError, ValueError) as error:
                    raise SystemExit(f"{path}:{line_number}: {error}") from error
                by_identity[measurement.identity] = measurement
    if not by_identity:
        raise SystemExit("no rows in " + ", ".join(paths))
    return list(by_identity.values())


def series_order(implementation: str, algorithm: str) -> tuple:
    """spattn first, then its peers, each by algorithm; ideals last."""
    return (implementation.endswith(IDEAL_SUFFIX), implementation != "spattn", implementation,
            algorithm)


def pass_order(pass_name: str) -> int:
    """forward before forward+backward; a pass this script does not know goes last."""
    return PASSES.index(pass_name) if pass_name in PASSES else len(PASSES)


def mask_label(causal: bool) -> str:
    return "causal" if causal else "no mask"


def panel_title(shape: Shape, causal: bool, pass_name: str, several_shapes: bool) -> str:
    title = f"{mask_label(causal)}, {pass_name}"
    return f"{title}\n{shape.label()}" if several_shapes else title


class SeriesStyles:
    """One colour per series on every panel, so that a line is recognised across the grid."""

    def __init__(self, labels: Sequence[str]) -> None:
        # tab10's colours are the easiest to tell apart; tab20 adds lighter twins past ten.
        palette = itertools.cycle(plt.get_cmap("tab10" if len(labels) <= 10 else "tab20").colors)
        self._colours = {label: next(palette) for label in labels}

    def colour(self, label: str) -> tuple:
        return self._colours[label]


def distributed_series(measurements: list[Measurement], several_gpu_counts: bool,
                       several_devices: bool) -> dict[str, list[Measurement]]:
    """Distributed measurements by line label; GPU count and device join it only where they vary."""
    series: dict[str, list[Measurement]] = {}
    for measurement in sorted(measurements, key=lambda m: (series_order(m.implementation,
                                                                        m.algorithm), m.gpus)):
        if measurement.is_ideal:
            continue
        label = f"{measurement.implementation} {measurement.algorithm}"
        if several_gpu_counts:
            label += f", {measurement.gpus} GPUs"
        if several_devices:
            label += f", {measurement.device}"
        series.setdefault(label, []).append(measurement)
    return series


def ideal_series(measurements: list[Measurement], several_gpu_counts: bool,
                 several_devices: bool) -> dict[str, list[tuple[int, float]]]:
    """Ideal points placed at the tokens per GPU of the distributed runs they stand beside.

    An ideal row holds the whole sequence S on one GPU; next to a run on N GPUs it belongs at
    x = S / N, for each N whose runs have a point there.
    """
    distributed_points = {(m.gpus, m.device, m.tokens_per_gpu)
                          for m in measurements if not m.is_ideal}
    gpu_counts = sorted({gpus for gpus, _, _ in distributed_points}) or [1]
    series: dict[str, list[tuple[int, float]]] = {}
    ideals = sorted((m for m in measurements if m.is_ideal),
                    key=lambda m: (m.implementation, m.device, m.global_tokens))
    for gpus in gpu_counts:
        for ideal in ideals:
            tokens_per_gpu, remainder = divmod(ideal.global_tokens, gpus)
            beside_a_run = (gpus, ideal.device, tokens_per_gpu) in distributed_points
            if remainder or (distributed_points and not beside_a_run):
                continue
            label = f"{ideal.implementation} (ideal"
            if several_gpu_counts:
                label += f" beside {gpus} GPUs"
            if several_devices:
                label += f", {ideal.device}"
            series.setdefault(label + ")", []).append((tokens_per_gpu, ideal.tflops_per_gpu))
    return series


def draw_panel(axes: Axes, measurements: list[Measurement], styles: SeriesStyles,
               several_gpu_counts: bool, several_devices: bool) -> None:
    x_values: set[int] = set()
    for label, points in distributed_series(measurements, several_gpu_counts,
                                            several_devices).items():
        points.sort(key=lambda m: m.tokens_per_gpu)
        xs = [m.tokens_per_gpu for m in points]
        axes.plot(xs, [m.tflops_per_gpu for m in points], color=styles.colour(label),
                  **DISTRIBUTED_STYLE)
        x_values.update(xs)
    for label, points in ideal_series(measurements, several_gpu_counts, several_devices).items():
        points.sort()
        xs = [x for x, _ in points]
        axes.plot(xs, [y for _, y in points], color=styles.colour(label), **IDEAL_STYLE)
        x_values.update(xs)
    axes.set_xscale("log", base=2)
    ticks = sorted(x_values)
    axes.set_xticks(ticks, [tokens_label(tokens) for tokens in ticks])
    axes.minorticks_off()
    axes.set_ylim(bottom=0)
    axes.grid(True, alpha=0.3)
    axes.set_xlabel("tokens per GPU")
    axes.set_ylabel("TFLOP/s per GPU")


def plot(measurements: list[Measurement], out_path: str, title: str) -> None:
    """One row of panels per (shape, mask), one column per pass; one legend for the figure."""
    shapes = sorted({m.shape for m in measurements})
    rows = sorted({(m.shape, m.causal) for m in measurements})
    passes = sorted({m.pass_name for m in measurements}, key=lambda name: (pass_order(name), name))
    several_gpu_counts = len({m.gpus for m in measurements if not m.is_ideal}) > 1
    several_devices = len({m.device for m in measurements}) > 1

    distributed_labels = list(distributed_series(measurements, several_gpu_counts,
                                                 several_devices))
    ideal_labels = list(ideal_series(measurements, several_gpu_counts, several_devices))
    labels = distributed_labels + ideal_labels
    styles = SeriesStyles(labels)
    figure, grid = plt.subplots(len(rows), len(passes), squeeze=False,
                                figsize=(5.2 * len(passes), 3.6 * len(rows)))
    for row, (shape, causal) in enumerate(rows):
        for column, pass_name in enumerate(passes):
            axes = grid[row][column]
            panel = [m for m in measurements if m.panel == (shape, causal, pass_name)]
            axes.set_title(panel_title(shape, causal, pass_name, len(shapes) > 1), fontsize=10)
            if panel:
                draw_panel(axes, panel, styles, several_gpu_counts, several_devices)
            else:
                axes.set_axis_off()

    # Built here rather than gathered from the panels: a series may be absent from some panels.
    handles = [*(Line2D([], [], color=styles.colour(label), **DISTRIBUTED_STYLE)
                 for label in distributed_labels),
               *(Line2D([], [], color=styles.colour(label), **IDEAL_STYLE)
                 for label in ideal_labels)]
    figure.suptitle(title if len(shapes) > 1 else f"{title}\n{shapes[0].label()}")
    figure.tight_layout()
    # Below the panels, outside them: savefig's tight box grows to take it in.
    figure.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0),
                  ncol=min(2, len(labels)), fontsize=9, frameon=False)
    figure.savefig(out_path, dpi=130, bbox_inches="tight")
    plt.close(figure)


def markdown_table(measurements: list[Measurement]) -> str:
    """Rows: configurations of the distributed runs; columns: implementations, then ideals."""
    distributed = [m for m in measurements if not m.is_ideal]
    ideals = {(m.implementation, m.device, m.shape, m.global_tokens, m.causal, m.pass_name): m
              for m in measurements if m.is_ideal}
    columns = sorted({(m.implementation, m.algorithm) for m in distributed},
                     key=lambda column: series_order(*column))
    ideal_columns = sorted({m.implementation for m in measurements if m.is_ideal})
    several_devices = len({m.device for m in measurements}) > 1

    configurations = sorted({(m.shape, m.causal, pass_order(m.pass_name), m.pass_name, m.gpus,
                              m.device, m.tokens_per_gpu) for m in distributed})
    cells = {(m.shape, m.causal, m.pass_name, m.gpus, m.device, m.tokens_per_gpu,
              m.implementation, m.algorithm): m for m in distributed}

    header = ["shape", "mask", "pass", "GPUs", *(["device"] if several_devices else []),
              "tokens/GPU", *(f"{name} {algorithm}" for name, algorithm in columns),
              *(f"{name} (ideal)" for name in ideal_columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for shape, causal, _, pass_name, gpus, device, tokens in configurations:
        row = [shape.label(), mask_label(causal), pass_name, str(gpus),
               *([device] if several_devices else []), tokens_label(tokens)]
        for implementation, algorithm in columns:
            cell = cells.get((shape, causal, pass_name, gpus, device, tokens, implementation,
                              algorithm))
            if cell is None:
                row.append("")
            elif cell.percent_of_ideal is None:
                row.append(f"{cell.tflops_per_gpu:.1f}")
            else:
                row.append(f"{cell.tflops_per_gpu:.1f} ({cell.percent_of_ideal:.0f}%)")
        for implementation in ideal_columns:
            ideal = ideals.get((implementation, device, shape, tokens * gpus, causal, pass_name))
            row.append("" if ideal is None else f"{ideal.tflops_per_gpu:.1f}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Plot per-GPU TFLOP/s from attention benchmark CSVs (spattn and peers) and "
                    "print a markdown table of TFLOP/s and percent of ideal.")
    parser.add_argument("csv", nargs="+", help="CSV files with the benchmark header; a "
                        "configuration measured again in a later file replaces the earlier row")
    parser.add_argument("--out", default="results.png", metavar="PATH.png")
    parser.add_argument("--title", default="Attention throughput per GPU")
    parser.add_argument("--markdown", metavar="PATH", help="also write the table here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_arguments(argv)
    measurements = read_measurements(args.csv)
    plot(measurements, args.out, args.title)
    table = markdown_table(measurements)
    sys.stdout.write(table)
    if args.markdown:
        with open(args.markdown, "w") as output:
            output.write(table)
    print(f"wrote {args.out}" + (f" and {args.markdown}" if args.markdown else ""),
          file=sys.stderr)


if __name__ == "__main__":
    main()
