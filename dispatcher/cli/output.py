"""How listing commands print: a table that fits, one block per record when it
would not (a narrow terminal, a pipe), or JSON with `--output json`.

Cells are never cut: a table is printed only when every cell fits whole;
otherwise each row becomes `column: value` lines, which wrap like text.
"""

from __future__ import annotations

import enum
import json
import sys
from collections.abc import Sequence
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from parkgate.cli.common import console


class Output(enum.StrEnum):
    table = "table"
    json = "json"


def output_option() -> Any:
    """The `--output/-o` option every listing command takes."""
    return typer.Option(
        Output.table, "--output", "-o", case_sensitive=False,
        help="table (one block per record when the table does not fit) or json.",
    )


def print_json(data: Any) -> None:
    """Plain JSON on stdout (no colour, no wrapping), for scripts."""
    sys.stdout.write(json.dumps(data, indent=2, default=str, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def print_rows(
    title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], *,
    right: Sequence[str] = (),
) -> None:
    """Rows as a table when it fits the console, else as records. Cells may hold
    rich markup (status colours); headers in `right` are right-aligned."""
    table = Table(title=title, title_justify="left")
    for header in headers:
        table.add_column(header, overflow="fold",
                         justify="right" if header in right else "left")
    for row in rows:
        table.add_row(*row)
    wide = console.options.update(width=max(console.width, 10_000))
    if not rows or console.measure(table, options=wide).maximum <= console.width:
        console.print(table)
        return
    console.print(f"[italic]{escape(title)}[/]")
    pad = max(len(h) for h in headers)
    for row in rows:
        console.print()
        for header, value in zip(headers, row, strict=True):
            lines = str(value).splitlines() or [""]
            console.print(f"[bold]{escape(header.ljust(pad))}[/]  {lines[0]}", soft_wrap=True)
            for more in lines[1:]:
                console.print(" " * (pad + 2) + more, soft_wrap=True)
