"""How listing commands print: a table that fits, one block per record when it
would not (a narrow terminal, a pipe), or JSON with `--output json`.

Cells are never cut mid-token: a table is printed only when every cell fits
whole. On a terminal a listing first tries its shortened form (long ids cut to
the shortest prefix that is unique in the listing, git-style, marked `…`; the
columns named droppable left out), so the usual listing stays a table at 80
columns; `--wide` shows ids whole, and commands that take an id accept such a
prefix. When nothing fits, each row becomes `column: value` lines, which wrap
like text.
"""

from __future__ import annotations

import enum
import itertools
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from parkgate.cli.common import console

#: A cell: its text, or (whole text, shortened text) for an id a narrow table cuts.
Cell = str | tuple[str, str]

#: The shortest prefix `abbreviate` cuts an id to.
MIN_PREFIX = 8


class Output(enum.StrEnum):
    table = "table"
    json = "json"


def output_option() -> Any:
    """The `--output/-o` option every listing command takes."""
    return typer.Option(
        Output.table, "--output", "-o", case_sensitive=False,
        help="table (one block per record when the table does not fit) or json.",
    )


def wide_option() -> Any:
    """The `--wide` option: ids whole, every column (a table only if that fits)."""
    return typer.Option(False, "--wide", help="Show ids whole instead of shortened.")


def print_json(data: Any) -> None:
    """Plain JSON on stdout (no colour, no wrapping), for scripts."""
    sys.stdout.write(json.dumps(data, indent=2, default=str, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def abbreviate(values: Iterable[str | None]) -> dict[str, str]:
    """Each id -> its shortest prefix (at least MIN_PREFIX characters) that no other
    id of `values` shares, plus `…`; one length for the whole column, so it reads
    evenly. Ids no longer than that stay whole."""
    distinct = sorted({v for v in values if v})
    need = MIN_PREFIX
    for left, right in itertools.pairwise(distinct):
        common = 0
        for a, b in zip(left, right, strict=False):
            if a != b:
                break
            common += 1
        need = max(need, common + 1)
    return {v: v if len(v) <= need + 1 else v[:need] + "…" for v in distinct}


def shortened(values: Sequence[str | None], empty: str = "-") -> list[Cell]:
    """Cells for an id column: whole, and abbreviated when the table is narrow."""
    short = abbreviate(values)
    return [(escape(v), escape(short[v])) if v else empty for v in values]


def _whole(cell: Cell) -> str:
    return cell[0] if isinstance(cell, tuple) else cell


def _short(cell: Cell) -> str:
    return cell[1] if isinstance(cell, tuple) else cell


def _table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]],
           right: Sequence[str], caption: str | None) -> Table:
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left",
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for header in headers:
        table.add_column(header, overflow="fold",
                         justify="right" if header in right else "left")
    for row in rows:
        table.add_row(*row)
    return table


def _fits(table: Table) -> bool:
    wide = console.options.update(width=max(console.width, 10_000))
    return console.measure(table, options=wide).maximum <= console.width


def print_rows(
    title: str, headers: Sequence[str], rows: Sequence[Sequence[Cell]], *,
    right: Sequence[str] = (), drop: Sequence[str] = (), wide: bool = False,
) -> None:
    """Rows as a table when it fits the console, else as records. Cells may hold
    rich markup (status colours); headers in `right` are right-aligned. On a
    terminal, unless `wide`, the shortened cells and then the table without the
    columns in `drop` (in that order) are tried before records."""
    attempts: list[tuple[Any, Sequence[str]]] = [(_whole, ())]
    if not wide and console.is_terminal:
        attempts.append((_short, ()))
        attempts += [(_short, drop[: i + 1]) for i in range(len(drop))]
    for pick, skip in attempts:
        keep = [i for i, header in enumerate(headers) if header not in skip]
        cells = [[pick(row[i]) for i in keep] for row in rows]
        cut = pick is _short and any(
            isinstance(row[i], tuple) and row[i][0] != row[i][1] for row in rows for i in keep)
        notes = (["ids shortened"] if cut else []) + [f"no {h} column" for h in skip]
        caption = f"{', '.join(notes)}: --wide shows them whole" if notes else None
        table = _table(title, [headers[i] for i in keep], cells, right, caption)
        if not rows or _fits(table):
            console.print(table)
            return
    console.print(f"[italic]{escape(title)}[/]")
    pad = max(len(h) for h in headers)
    for row in rows:
        console.print()
        for header, value in zip(headers, row, strict=True):
            lines = _whole(value).splitlines() or [""]
            console.print(f"[bold]{escape(header.ljust(pad))}[/]  {lines[0]}", soft_wrap=True)
            for more in lines[1:]:
                console.print(" " * (pad + 2) + more, soft_wrap=True)
