#!/usr/bin/env python3
"""The per-step timeline of `spattn run --timeline FILE` as a chart and a table.

The chart has one panel per pass (forward, backward) and one lane per rank: each step's compute
sections as bars (a shade per step) and the time the rank stood waiting for its transfers (the
exposed transfer time) in red, on each rank's device clock from its call's start. The table has
one row per (pass, step): the slowest rank's compute and exposed wait, and the bytes a rank sent:

    python3 bench/plot_timeline.py timeline.csv --title "zigzag, 2x H200" --out timeline.png \\
        --markdown timeline.md
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

PASSES = ("forward", "backward")


@dataclass
class Span:
    rank: int
    step: int
    kind: str  # compute or comm_wait
    start_ms: float
    end_ms: float
    step_bytes_sent: int


def read_spans(path: str) -> dict[str, list[Span]]:
    """The spans of each pass in the file; an error names a file without any."""
    spans: dict[str, list[Span]] = defaultdict(list)
    with open(path, newline="") as stream:
        for row in csv.DictReader(stream):
            spans[row["pass"]].append(Span(int(row["rank"]), int(row["step"]), row["kind"],
                                           float(row["start_ms"]), float(row["end_ms"]),
                                           int(row["step_bytes_sent"])))
    if not spans:
        sys.exit(f"{path}: no timeline rows (was it written by spattn run --timeline?)")
    return spans


def step_table(spans: dict[str, list[Span]]) -> str:
    """Markdown: per pass and step, the slowest rank's compute and exposed wait, and bytes sent."""
    lines = ["| pass | step | compute ms (slowest rank) | exposed transfer ms (slowest rank) | MiB sent (most) |",
             "|---|---|---|---|---|"]
    for name in PASSES:
        if name not in spans:
            continue
        # (step, rank) -> kind -> milliseconds
        times: dict[tuple[int, int], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        sent: dict[int, int] = defaultdict(int)
        for span in spans[name]:
            times[(span.step, span.rank)][span.kind] += span.end_ms - span.start_ms
            sent[span.step] = max(sent[span.step], span.step_bytes_sent)
        for step in sorted({step for step, _ in times}):
            ranks = [kinds for (each, _), kinds in times.items() if each == step]
            compute = max(kinds["compute"] for kinds in ranks)
            waiting = max(kinds["comm_wait"] for kinds in ranks)
            lines.append(f"| {name} | {step} | {compute:.3f} | {waiting:.3f} | {sent[step] / 2**20:.1f} |")
    return "\n".join(lines) + "\n"


def plot(spans: dict[str, list[Span]], title: str, out: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    names = [name for name in PASSES if name in spans]
    ranks = sorted({span.rank for name in names for span in spans[name]})
    figure, axes = plt.subplots(len(names), 1, figsize=(12, 1.2 + 0.6 * len(ranks) * len(names)), squeeze=False)
    shades = plt.get_cmap("tab20c")
    for axis, name in zip(axes[:, 0], names):
        for span in spans[name]:
            waiting = span.kind == "comm_wait"
            color = "tab:red" if waiting else shades(span.step % 4)
            axis.barh(span.rank, span.end_ms - span.start_ms, left=span.start_ms, height=0.35 if waiting else 0.7,
                      color=color, edgecolor="none")
        exposed = {rank: sum(s.end_ms - s.start_ms for s in spans[name] if s.rank == rank and s.kind == "comm_wait")
                   for rank in ranks}
        axis.set_yticks(ranks, [f"rank {rank}\nwait {exposed[rank]:.2f} ms" for rank in ranks])
        axis.invert_yaxis()
        axis.set_title(name, loc="left")
        axis.set_xlabel("ms since the call began (each rank's device clock)")
    axes[0, 0].legend(handles=[Patch(color=shades(0), label="compute (a shade per step)"),
                               Patch(color="tab:red", label="waiting for transfers (exposed)")],
                      loc="upper right", fontsize="small")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(out, dpi=120)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("timeline", help="CSV of spattn run --timeline")
    parser.add_argument("--title", default="", help="the chart's title (strategy, ranks, machine)")
    parser.add_argument("--out", help="write the chart here (PNG)")
    parser.add_argument("--markdown", help="write the per-step table here")
    arguments = parser.parse_args(argv)
    spans = read_spans(arguments.timeline)
    table = step_table(spans)
    if arguments.markdown:
        with open(arguments.markdown, "w") as stream:
            stream.write(table)
    else:
        sys.stdout.write(table)
    if arguments.out:
        plot(spans, arguments.title, arguments.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
