"""Where the bench scripts' reports go: stdout, and a markdown file when one is asked for; and what
the scripts that compare builds share (one CSV per variant, the first the base): their command
line and the note on builds timed in fewer rounds than others."""

from __future__ import annotations

import argparse
from typing import Callable


def write_report(text: str, markdown: str | None) -> None:
    """`text` to stdout, and to the file `markdown` unless it is None."""
    print(text, end="")
    if markdown:
        with open(markdown, "w") as out:
            out.write(text)


def rounds_note(names: list[str], rounds: list[int]) -> str:
    """A line under a table of builds (`names`) that were not all timed the same number of `rounds`
    (the device's budget ended the stage early), with each build's count; "" when they were."""
    if len(set(rounds)) <= 1:
        return ""
    return "\nRounds timed: " + ", ".join(f"{name} {count}" for name, count in zip(names, rounds)) + ".\n"


def compare_variants_main(description: str, table: Callable[[list[str]], str]) -> None:
    """Parses `CSV... [--markdown PATH]` and reports `table` of the CSVs."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("csv", nargs="+", help="one CSV per variant, named for it (the first is the base)")
    parser.add_argument("--markdown", help="write the table here as well as to stdout")
    arguments = parser.parse_args()
    write_report(table(arguments.csv), arguments.markdown)
