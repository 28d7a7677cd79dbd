"""Where the bench scripts' reports go: stdout, and a markdown file when one is asked for; and the
command line shared by the scripts that compare builds (one CSV per variant, the first the base)."""

from __future__ import annotations

import argparse
from typing import Callable


def write_report(text: str, markdown: str | None) -> None:
    """`text` to stdout, and to the file `markdown` unless it is None."""
    print(text, end="")
    if markdown:
        with open(markdown, "w") as out:
            out.write(text)


def compare_variants_main(description: str, table: Callable[[list[str]], str]) -> None:
    """Parses `CSV... [--markdown PATH]` and reports `table` of the CSVs."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("csv", nargs="+", help="one CSV per variant, named for it (the first is the base)")
    parser.add_argument("--markdown", help="write the table here as well as to stdout")
    arguments = parser.parse_args()
    write_report(table(arguments.csv), arguments.markdown)
