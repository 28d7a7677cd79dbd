"""Where the bench scripts' reports go: stdout, and a markdown file when one is asked for; how
their tables write a token count; and what the scripts that compare builds share (one CSV per
variant, the first the base): their command line and the note on builds timed in fewer rounds than
others."""

from __future__ import annotations

import argparse
from typing import Callable, Mapping, Sized


def write_report(text: str, markdown: str | None) -> None:
    """`text` to stdout, and to the file `markdown` unless it is None."""
    print(text, end="")
    if markdown:
        with open(markdown, "w") as out:
            out.write(text)


def tokens_label(tokens: int) -> str:
    """A sequence length or tokens per GPU as the tables write it: 8192 -> "8k", 600 -> "600"."""
    return f"{tokens // 1024}k" if tokens % 1024 == 0 else str(tokens)


def rounds_note(names: list[str], variants: list[Mapping[object, Sized]]) -> str:
    """A line under a table of builds (`names`) that were not all timed the same number of rounds
    (the device's budget ended the stage early), with each build's count; "" when they were. Each
    variant maps its table's rows to their rounds; its count is the most any row had."""
    rounds = [max((len(row_rounds) for row_rounds in variant.values()), default=0) for variant in variants]
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
