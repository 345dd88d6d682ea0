"""The FIFO sizing's report (`stepc fifo`, `Program.fifo`): each FIFO class's row, the
totals, its JSON document and its text (the FIFO table), and the `--fifo-bytes` line of
`stepc analyze` and `stepc sim`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stepc.schemas import schema

if TYPE_CHECKING:
    from rich.console import Console

    from stepc.fifo.confirm import Confirmation
    from stepc.source import Span


@dataclass
class FifoRow:
    """The FIFOs one `depth=` entry sets: one input of one call in the source."""

    producer: str
    consumer: str
    location: str  # the consumer call's file:line:col
    span: Span  # the consumer call's
    slot: int  # the consumer's input slot
    fifos: int  # FIFOs it sets (loop iterations, calls of a function)
    element: str  # the stream's element type (each distinct one, joined by " | ")
    sizes: list[int | None]  # each FIFO's element bytes (None: a dim left free)
    static_minimum: Any  # depth below which the run must deadlock (int, or an expression)
    data_dependent: bool  # selectors route the FIFO's reconvergence: measured, not derived
    settable: bool  # written in the source (not a fan-out stepc inserted)
    depth: int | None = None  # the searched depth (None: no search)

    @property
    def element_bytes(self) -> int | list[int] | None:
        """The bytes of one element: one number when its FIFOs share it, else each
        distinct one."""
        known = [s for s in self.sizes if s is not None]
        if len(known) < len(self.sizes):
            return None
        distinct = sorted(set(known))
        return distinct[0] if len(distinct) == 1 else distinct

    def bytes_at(self, depth: int | None) -> int | None:
        """Bytes of its FIFOs at `depth`, each at its own element's bytes."""
        known = [s for s in self.sizes if s is not None]
        if depth is None or len(known) < len(self.sizes):
            return None
        return depth * sum(known)

    @property
    def bytes(self) -> int | None:
        return self.bytes_at(self.depth)

    @property
    def notable(self) -> bool:
        """On a reconvergent path, or deepened by the search."""
        return self.data_dependent or self.static_minimum != 1 or (
            self.settable and (self.depth or 1) > 1)


@dataclass
class FifoReport:
    """`Program.fifo`: every FIFO class, dead loops, and the search's outcome."""

    program: str
    hw: str
    preset_depth: int
    tolerance: float
    rows: list[FifoRow]
    dead_loops: list[dict[str, Any]]  # {"location", "span", "stream", "reason"}
    unbounded_cycles: int | None = None
    cycles: int | None = None
    on_chip_bytes: Any = None  # the operators' on-chip bytes (symbolic without a run)
    runs: int = 0
    seconds: float = 0.0
    log: list[str] = field(default_factory=list)
    uniform_cycles: int | None = None  # every FIFO at the preset depth (0: deadlock)
    within_tolerance: bool = False
    fan_outs: list[dict[str, Any]] = field(default_factory=list)  # deeper than they can be
    confirmation: Confirmation | None = None  # the run of the searched depths

    @property
    def fifo_bytes(self) -> int | None:
        """Bytes of every FIFO at its searched depth."""
        sizes = [r.bytes for r in self.rows]
        known = [s for s in sizes if s is not None]
        return None if not sizes or len(known) < len(sizes) else sum(known)

    @property
    def uniform_bytes(self) -> int | None:
        """Bytes of every FIFO at the hardware's uniform depth."""
        sizes = [r.bytes_at(self.preset_depth) for r in self.rows]
        known = [s for s in sizes if s is not None]
        return None if len(known) < len(sizes) else sum(known)

    @property
    def deadlock_free(self) -> bool:
        return not self.dead_loops and (self.unbounded_cycles is None or self.cycles != 0)

    def to_dict(self) -> dict[str, Any]:
        from stepc.diagnostics import span_json
        return {"schema": schema("fifo"), "program": self.program, "hw": self.hw,
                "preset_depth": self.preset_depth, "tolerance": self.tolerance,
                "unbounded_cycles": self.unbounded_cycles, "cycles": self.cycles,
                "fifo_bytes": self.fifo_bytes, "uniform_bytes": self.uniform_bytes,
                "on_chip_bytes": _plain(self.on_chip_bytes)
                if self.on_chip_bytes is not None else None,
                "uniform_cycles": self.uniform_cycles,
                "within_tolerance": self.within_tolerance if self.cycles is not None else None,
                "confirmation": None if self.confirmation is None else {
                    "cycles": self.confirmation.cycles,
                    "fifo_bytes": self.confirmation.fifo_bytes,
                    "calls": self.confirmation.calls,
                    "files": sorted(self.confirmation.texts)},
                "fan_outs": [{k: v for k, v in f.items() if k != "span"} | {
                    "location": span_json(f["span"])} for f in self.fan_outs],
                "search_runs": self.runs, "search_seconds": round(self.seconds, 3),
                "dead_loops": [{"location": span_json(d["span"]), "stream": d["stream"],
                                "reason": d["reason"]} for d in self.dead_loops],
                "log": self.log,
                "fifos": [{"producer": r.producer, "consumer": r.consumer,
                           "location": span_json(r.span), "slot": r.slot, "fifos": r.fifos,
                           "element": r.element, "element_bytes": r.element_bytes,
                           "static_minimum": _plain(r.static_minimum),
                           "data_dependent": r.data_dependent, "settable": r.settable,
                           "depth": r.depth, "bytes": r.bytes} for r in self.rows]}

    def render(self, console: Console, show_all: bool = False) -> None:
        """The text report: the notable FIFOs (all with `show_all`) and the totals."""
        from rich.table import Table

        from stepc.tables import print_table

        def line(text: str) -> None:
            console.print(text, soft_wrap=True, highlight=False)
        line(f"{self.program} on {self.hw} (uniform FIFO depth {self.preset_depth})")
        for loop in self.dead_loops:
            line(f"  {loop['location']}: the feedback loop through `{loop['stream']}` "
                 f"deadlocks at any depth: {loop['reason']}")
        rows = [r for r in self.rows if show_all or r.notable]
        if rows:
            table = Table(box=None, pad_edge=False)
            for col in ("producer -> consumer", "at", "element", "static min", "depth",
                        "bytes"):
                table.add_column(col, justify="right" if col in ("static min", "depth",
                                                                 "bytes") else "left")
            print_table(console, table, [_cells(group) for group in _folded(rows)])
        else:
            line("  no FIFO on a reconvergent path")
        if self.unbounded_cycles is not None:
            self._render_search(line)
        if any(not r.settable for r in rows):
            line("  * a fan-out stepc inserted: its FIFOs keep the hardware's depth")

    def _render_search(self, line: Callable[[str], None]) -> None:
        """The search's lines of the text report."""
        if self.cycles and self.within_tolerance:
            line(f"  cycles: {self.cycles:,} with these depths, {self.unbounded_cycles:,} "
                 f"with unbounded FIFOs (tolerance {100 * self.tolerance:g}%)")
        elif self.cycles:
            line(f"  no depths within the tolerance: {self.cycles:,} cycles at the most the "
                 f"FIFOs held, {self.unbounded_cycles:,} with unbounded FIFOs (tolerance "
                 f"{100 * self.tolerance:g}%)")
        else:
            line("  no depths found that complete within the tolerance: "
                 + "; ".join(self.log[-1:]))
        line(f"  at the uniform depth {self.preset_depth}: " + _uniform_run(self))
        total, uniform = self.fifo_bytes, self.uniform_bytes
        if total is not None and uniform is not None:
            line(f"  FIFO bytes: {total:,} with these depths, {uniform:,} at the uniform "
                 f"depth {self.preset_depth} ({_saved(total, uniform)}"
                 + ("; that depth deadlocks" if self.uniform_cycles == 0 else "") + ")")
        on_chip = _plain(self.on_chip_bytes) if self.on_chip_bytes is not None else None
        if isinstance(on_chip, int) and total is not None:
            line(f"  on-chip memory: {on_chip:,} B of the operators, {on_chip + total:,} B "
                 "with these FIFOs")
        done = self.confirmation
        if done is not None:
            files = ", ".join(sorted(done.texts)) or "no file changes"
            line(f"  confirmed: the program with these depths written ({done.calls} "
                 f"call{'s' if done.calls != 1 else ''}: {files}) compiled from that text runs "
                 f"{done.cycles:,} cycles with {done.fifo_bytes:,} FIFO bytes "
                 "(`stepc sim --fifo-bytes`)")
        for f in self.fan_outs:
            line(f"  {f['location']}: `{f['stream']}`" + (f" (x{f['fifos']})" if f["fifos"] > 1
                                                         else "") +
                 f" feeds {f['consumers']} uses through a fan-out stepc inserted, which no "
                 f"`depth=` reaches (it keeps depth {self.preset_depth}); the program runs "
                 f"within the tolerance with it {f['depth']} deep: write the fan-out, "
                 f"`{f['suggestion']}`, and give each use its own output")
        line(f"  search: {self.runs} simulations in {self.seconds:.1f} s")


def _uniform_run(report: FifoReport) -> str:
    from stepc.fifo.search import UNIFORM_LIMIT
    if report.uniform_cycles == 0:
        return "the program deadlocks"
    if report.uniform_cycles is None:
        return f"the run passed {UNIFORM_LIMIT} times the unbounded cycles (stopped)"
    return f"{report.uniform_cycles:,} cycles"


FOLD_INPUTS = 8  # a call with more listed inputs than this shows them as one row


def _folded(rows: list[FifoRow]) -> list[list[FifoRow]]:
    """The rows in groups: one per row, but the many inputs of one call (a Reassemble of
    128 experts) as one group."""
    by_call: dict[tuple[str, str], list[FifoRow]] = {}
    for r in rows:
        by_call.setdefault((r.location, r.consumer), []).append(r)
    out = []
    for group in by_call.values():
        out += [group] if len(group) > FOLD_INPUTS else [[r] for r in group]
    return out


def _cells(group: list[FifoRow]) -> list[str]:
    """The table cells of one row, or of a call's inputs folded into one."""
    first, last = group[0], group[-1]
    if len(group) == 1:
        r = first
        return [f"{r.producer} -> {r.consumer}" + (f" (x{r.fifos})" if r.fifos > 1 else ""),
                f"{r.location}" + (f" input {r.slot}" if r.slot else ""), r.element,
                ("data" if r.data_dependent and r.static_minimum == 1
                 else str(_plain(r.static_minimum))),
                "-" if r.depth is None else f"{r.depth:,}" + ("" if r.settable else "*"),
                "-" if r.bytes is None else f"{r.bytes:,}"]
    depths = [r.depth for r in group if r.depth is not None]
    sizes = [r.bytes for r in group if r.bytes is not None]
    minima = sorted({str(_plain(r.static_minimum)) for r in group})
    data = all(r.data_dependent and r.static_minimum == 1 for r in group)
    return [f"{first.producer} .. {last.producer} -> {first.consumer}",
            f"{first.location} inputs {first.slot}..{last.slot}", first.element,
            "data" if data else "..".join(minima[:1] + minima[-1:][len(minima) < 2:]),
            f"{min(depths):,}..{max(depths):,}" if depths else "-",
            "-" if len(sizes) < len(group) else f"{sum(sizes):,}"]


def _saved(total: int, uniform: int) -> str:
    if uniform == 0:
        return "no FIFO bytes"
    change = 100 * (uniform - total) / uniform
    return f"{change:.1f}% saved" if change >= 0 else f"{-change:.1f}% more"


def _plain(v: Any) -> int | float | str | None:
    from stepc.types import dim_json
    return dim_json(v)


def fifo_line(fifos: dict[str, Any]) -> str:
    """The text line of `--fifo-bytes` (`stepc analyze`, `stepc sim`)."""
    def size(v: Any) -> str:
        return f"{v:,}" if isinstance(v, int) else str(v)
    return (f"FIFOs at their depths: {size(fifos['fifo_bytes'])} B; on-chip memory with "
            f"them: {size(fifos['on_chip_bytes_with_fifos'])} B")
