#!/usr/bin/env python3
"""Checks in the SASS of the own Hopper forward that each key tile's softmax overlaps O's product.

In the consumers' key loop, S = Q K^T and O += P V are issued together; `wgmma.wait_group 1`
(SASS `WARPGROUP.DEPBAR.LE gsb0, 0x1`) waits for S, the softmax runs while O's product is still
in flight, and `wgmma.wait_group 0` (`... 0x0`) waits for O's product. ptxas is free to move the
second wait up ahead of the softmax (CUDA 13.0 did, bench/kernel-notes.md v7), which silently
costs the overlap: this check fails when a kernel has no exponential (MUFU.EX2) between the two
waits of its key loop. It needs cuobjdump (the CUDA toolkit's, or $CUOBJDUMP).

    python3 scripts/check-softmax-overlap.py build/src/kernels/hopper/CMakeFiles/spattn_hopper_kernels.dir/*.o
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys

WAIT_FOR_S = "WARPGROUP.DEPBAR.LE gsb0, 0x1"
WAIT_FOR_O = "WARPGROUP.DEPBAR.LE gsb0, 0x0"


def kernels_sass(cuobjdump: str, path: str) -> dict[str, list[str]]:
    """The SASS instructions of each kernel in an object file, by mangled name."""
    text = subprocess.run([cuobjdump, "-sass", path], check=True, capture_output=True, text=True).stdout
    kernels: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        function = re.search(r"Function : (\S+)", line)
        if function:
            current = kernels.setdefault(function.group(1), [])
        elif current is not None and re.match(r"\s*/\*[0-9a-f]{4,}\*/", line):
            current.append(line)
    return kernels


def exponentials_beside_product(instructions: list[str]) -> tuple[int, int]:
    """MUFU.EX2 between the key loop's two waits, and after the second (to the loop's end)."""
    first = next((i for i, line in enumerate(instructions) if WAIT_FOR_S in line), None)
    if first is None:
        return -1, -1
    second = next(i for i in range(first, len(instructions)) if WAIT_FOR_O in instructions[i])
    loop_end = next((i for i in range(second, len(instructions))
                     if re.search(r"\*/\s+BRA ", instructions[i])), len(instructions))
    count = lambda lines: sum("MUFU.EX2" in line for line in lines)
    return count(instructions[first:second]), count(instructions[second:loop_end])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("objects", nargs="+", help="object files of src/kernels/hopper")
    arguments = parser.parse_args()
    cuobjdump = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not cuobjdump:
        print("no cuobjdump on PATH (set CUOBJDUMP)", file=sys.stderr)
        return 2
    failures = checked = 0
    for path in arguments.objects:
        for name, instructions in kernels_sass(cuobjdump, path).items():
            if "forward_kernel" not in name:
                continue
            beside, after = exponentials_beside_product(instructions)
            checked += 1
            ok = beside > 0 and after == 0
            failures += not ok
            if beside < 0:  # every product waited for at once: ptxas serialized them (its C75xx notes say why)
                print(f"FAIL {os.path.basename(path)} {name}: no wait for S alone ({WAIT_FOR_S}): "
                      f"ptxas serialized the wgmma (see its 'Potential Performance Loss' notes)")
                continue
            print(f"{'ok  ' if ok else 'FAIL'} {os.path.basename(path)} {name}: {beside} exponentials beside O's "
                  f"product, {after} after its wait")
    if checked == 0:
        print("no own forward kernel in these objects", file=sys.stderr)
        return 2
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
