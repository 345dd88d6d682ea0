"""What `stepc import -o` and `stepc export` report once their files are written."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


def render_import(console: Console, output: str | None, operators: int) -> None:
    """The program file written and its operators (nothing when the program went to the
    caller instead)."""
    if output:
        console.out(f"wrote {output} ({operators} operators)", highlight=False)


def render_export(console: Console, output: str, operators: int, side_directory: str,
                  side_files: list[str], notes: list[str]) -> None:
    """The graph and side files written, then what the graph fixes that the program left
    open."""
    console.out(f"wrote {output} ({operators} operators)" +
                (f" and {len(side_files)} side files in {side_directory}" if side_files
                 else ""), highlight=False)
    for note in notes:
        console.out(f"stepc: note: {note}", highlight=False)
