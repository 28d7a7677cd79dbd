#!/usr/bin/env python3
"""The GPUs' clock samples that scripts/device-run.sh takes during its benchmark stages: nvidia-smi
--query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,<clock event reasons>
every 200 ms, without header or units. Read here, and summed up in the line the script records.

    python3 bench/clock_samples.py clocks-kernel-ab.csv
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from datetime import datetime

# Reason bits: the GPU idle (between runs, during builds), and its clock held down to keep the
# board's power under its cap (on the H200s, 700 W).
IDLE, SOFTWARE_POWER_CAP = 0x1, 0x4
TIMESTAMP_FORMAT = "%Y/%m/%d %H:%M:%S.%f"  # nvidia-smi's, local time


@dataclass
class Sample:
    time: datetime
    gpu: int
    sm_mhz: float
    power_w: float | None  # None where nvidia-smi had no reading
    reasons: int

    @property
    def loaded(self) -> bool:
        return not self.reasons & IDLE

    @property
    def power_capped(self) -> bool:
        return bool(self.reasons & SOFTWARE_POWER_CAP)


def read_rows(path: str) -> list[list[str]]:
    """The file's sample lines as cells (a line cut short when the sampler was stopped is left out)."""
    with open(path) as stream:
        return [[cell.strip() for cell in line.split(",")] for line in stream if line.count(",") >= 6]


def parse(row: list[str]) -> Sample | None:
    """A row as a Sample; None where a cell is not a reading (nvidia-smi's "[N/A]")."""
    try:
        power = float(row[4]) if row[4].replace(".", "", 1).isdigit() else None
        return Sample(datetime.strptime(row[0], TIMESTAMP_FORMAT), int(row[1]), float(row[2]), power,
                      int(row[6], 16))
    except ValueError:
        return None


def read_samples(path: str) -> list[Sample]:
    return [sample for sample in map(parse, read_rows(path)) if sample is not None]


def summary(path: str) -> str:
    """One line on the samples under load (idle ones would pull the median down to the idle clock):
    the median and lowest SM clock, the highest power, how often the power cap held the clock down
    and the median clock then."""
    rows = read_rows(path)
    loaded = [sample for sample in map(parse, rows) if sample is not None and sample.loaded]
    if not loaded:
        return f"no sample under load ({len(rows)} samples)"
    sm = [sample.sm_mhz for sample in loaded]
    power = [sample.power_w for sample in loaded if sample.power_w is not None]
    capped = [sample.sm_mhz for sample in loaded if sample.power_capped]
    held = f", median {statistics.median(capped):.0f} MHz there" if capped else ""
    return (f"under load {len(loaded)} of {len(rows)} samples: SM clock median {statistics.median(sm):.0f} MHz, "
            f"lowest {min(sm):.0f}; power highest {max(power) if power else 0:.0f} W; "
            f"held down by the power cap in {100 * len(capped) / len(loaded):.0f}% of them{held}")


if __name__ == "__main__":
    print(summary(sys.argv[1]))
