#!/usr/bin/env python3
"""Where a kernel's warps wait, from Nsight Compute's per-instruction stall samples.

Reads the source page that scripts/device-run.sh's kernel-profile stage exports
(own-kernel-source.csv.gz: `ncu --import R --page source --csv --print-source sass`) and prints
1. the share of every stall reason over all samples;
2. the kernel's synchronization points (mbarrier waits, named barriers, wgmma waits, the first
   product of each shape, exits) in program order with the share of samples taken before each:
   the differences between two of them are the time spent between them (prologue, key loop,
   epilogue, producer);
3. the instructions with the most samples and their three main stall reasons.
"""

import argparse
import collections
import csv
import gzip

LANDMARKS = ("SYNCS.PHASECHK", "BAR.SYNC", "BAR.ARV", "WARPGROUP.DEPBAR", "EXIT")
SAMPLES = "Warp Stall Sampling (All Samples)"


def read_rows(path: str) -> tuple[list[str], list[list[str]]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as file:
        rows = list(csv.reader(file))
    # The first row names the kernel; the second holds the column names.
    return rows[1], rows[2:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source_csv", help="own-kernel-source.csv(.gz) from the kernel-profile stage")
    parser.add_argument("--top", type=int, default=30, help="instructions to list by samples (default 30)")
    args = parser.parse_args()

    header, rows = read_rows(args.source_csv)
    column = {name: index for index, name in enumerate(header)}
    reasons = [name for name in header if name.startswith("stall_") and "Not Issued" not in name]

    def count(row: list[str], name: str) -> int:
        value = row[column[name]]
        return int(value) if value.isdigit() else 0

    total = sum(count(row, SAMPLES) for row in rows)
    if total == 0:
        raise SystemExit(f"{args.source_csv}: no stall samples")
    print(f"{total} samples over {len(rows)} instructions\n\nstall reasons:")
    shares = collections.Counter({reason: sum(count(row, reason) for row in rows) for reason in reasons})
    for reason, samples in shares.most_common():
        if samples:
            print(f"  {reason[len('stall_'):]:<18} {100 * samples / total:5.1f}%")

    print("\nsynchronization points (share of samples before each; executions):")
    before = 0
    seen_shapes = set()
    for index, row in enumerate(rows):
        text = row[1].strip()
        opcode = text.split()[1] if text.startswith("@") else text.split()[0]
        first_of_shape = opcode.startswith("HGMMA") and opcode not in seen_shapes
        if first_of_shape:
            seen_shapes.add(opcode)
        if first_of_shape or text.lstrip("@!P0123456789 ").startswith(LANDMARKS):
            print(f"  {index:5d} {100 * before / total:5.1f}%  {text[:72]:<72} {row[column['Instructions Executed']]}")
        before += count(row, SAMPLES)

    print(f"\nthe {args.top} instructions with the most samples:")
    ranked = sorted(range(len(rows)), key=lambda index: -count(rows[index], SAMPLES))[: args.top]
    for index in sorted(ranked):
        row = rows[index]
        main_reasons = sorted(((count(row, reason), reason[len("stall_"):]) for reason in reasons), reverse=True)[:3]
        described = ", ".join(f"{reason} {samples}" for samples, reason in main_reasons if samples)
        print(f"  {index:5d} {100 * count(row, SAMPLES) / total:5.2f}%  {row[1].strip()[:60]:<60} {described}")


if __name__ == "__main__":
    main()
