#!/usr/bin/env python3
"""The kernel bench's sustained runs (spattn_kernel_bench --sustain S --windows WINDOWS.csv) beside
the GPU's clock samples taken meanwhile (bench/clock_samples.py): per run its TFLOP/s, the mean
power and median SM clock of the samples inside its window, how often the power cap held the clock
down there, and TFLOP/s per GHz of that clock, which compares kernels as if at one clock. Under the
cap, a kernel that takes more energy per operation runs at a lower clock: this table tells that
apart from a kernel that does less per cycle. GPU 0 only (the kernel bench's).

    python3 bench/power_by_window.py kernel-windows.csv clocks-kernel-bench.csv --markdown kernel-power.md
"""

from __future__ import annotations

import argparse
import csv
import statistics
from datetime import datetime

from clock_samples import TIMESTAMP_FORMAT, read_samples
from report_output import tokens_label, write_report

GPU = 0


def table(windows_path: str, clocks_path: str) -> str:
    samples = [sample for sample in read_samples(clocks_path) if sample.gpu == GPU]
    lines = ["| pass | D | causal | S | kernel | TFLOP/s | samples | power W | SM MHz | power-capped | TFLOP/s per GHz |",
             "|" + "---|" * 11]
    with open(windows_path, newline="") as stream:
        for window in csv.DictReader(stream):
            start = datetime.strptime(window["start"], TIMESTAMP_FORMAT)
            end = datetime.strptime(window["end"], TIMESTAMP_FORMAT)
            inside = [sample for sample in samples if start <= sample.time <= end and sample.loaded]
            tflops = float(window["tflops"])
            cells = [window["pass"], window["head_dim"], "yes" if window["causal"] == "1" else "no",
                     tokens_label(int(window["seq"])), window["kernel"], f"{tflops:.1f}",
                     str(len(inside))]
            if inside:
                power = [sample.power_w for sample in inside if sample.power_w is not None]
                clock = statistics.median(sample.sm_mhz for sample in inside)
                capped = sum(sample.power_capped for sample in inside)
                cells += [f"{statistics.mean(power):.0f}" if power else "-", f"{clock:.0f}",
                          f"{100 * capped / len(inside):.0f}%", f"{tflops / (clock / 1000):.1f}"]
            else:
                cells += ["-"] * 4
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("windows", help="spattn_kernel_bench --windows's CSV")
    parser.add_argument("clocks", help="the clock samples (scripts/device-run.sh's clocks-STAGE.csv)")
    parser.add_argument("--markdown", help="write the table here as well as to stdout")
    arguments = parser.parse_args()
    write_report(table(arguments.windows, arguments.clocks), arguments.markdown)


if __name__ == "__main__":
    main()
