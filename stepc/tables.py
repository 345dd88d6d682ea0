"""Tables for people: whole, or as plain rows when they do not fit.

A rich table narrower than its content wraps inside cells and splits names and expressions
(`LinearOffChi`/`pLoad`); `print_table` prints the table only when it fits the console's
width at its natural width, and otherwise one plain line per row (`name  header = value`),
which a terminal may wrap but which keeps every name and expression whole.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

NATURAL_WIDTH = 100_000  # wide enough that no table wraps when measured


def natural_width(table: Table) -> int:
    """The width of `table` with nothing wrapped."""
    buf = io.StringIO()
    Console(file=buf, width=NATURAL_WIDTH, color_system=None, highlight=False,
            emoji=False).print(table)
    return max((len(line.rstrip()) for line in buf.getvalue().splitlines()), default=0)


def print_table(console: Console, table: Table, rows: Sequence[Sequence[str] | None]) -> None:
    """`table` (its columns declared, no rows yet) with `rows` (None: a rule between
    sections) on `console`; as plain rows when it would not fit the console's width."""
    for row in rows:
        if row is None:
            table.add_section()
        else:
            table.add_row(*row)
    for column in table.columns:
        column.no_wrap = True
    if natural_width(table) <= console.width:
        console.print(table)
        return
    headers = [str(c.header) for c in table.columns]
    if table.title:
        console.print(str(table.title), soft_wrap=True, markup=False, highlight=False)
    for row in rows:
        if row is None:
            continue
        cells = [row[0]] + [f"{h} = {v}" for h, v in zip(headers[1:], row[1:], strict=True)
                            if v.strip()]
        console.print("  ".join(cells), soft_wrap=True, markup=False, highlight=False)
