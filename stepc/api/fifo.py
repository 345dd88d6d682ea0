"""`stepc fifo`: FIFO sizing of a program: the static minimum depth of each FIFO on a
reconvergent path, the depths the search measures for throughput, and what they cost."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stepc.api.arguments import bool_arg
from stepc.api.errors import InputError, SimulationError
from stepc.api.inputs import hardware, trace_arrays, trace_input_error
from stepc.schemas import schema

if TYPE_CHECKING:
    from stepc.fifo.static import FifoAnalysis
    from stepc.frontend import Compiled


@dataclass
class FifoRow:
    """The FIFOs one `depth=` entry sets: one input of one call in the source."""

    producer: str
    consumer: str
    location: str  # the consumer call's file:line:col
    span: Any  # the consumer call's Span
    slot: int  # the consumer's input slot
    fifos: int  # FIFOs it sets (loop iterations, calls of a function)
    element: str  # the stream's element type
    element_bytes: int | None
    static_minimum: Any  # depth below which the run must deadlock (int, or an expression)
    data_dependent: bool  # selectors route the FIFO's reconvergence: measured, not derived
    settable: bool  # written in the source (not a fan-out stepc inserted)
    depth: int | None = None  # the searched depth (None: no search)

    @property
    def bytes(self) -> int | None:
        if self.depth is None or self.element_bytes is None:
            return None
        return self.depth * self.element_bytes * self.fifos

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

    @property
    def fifo_bytes(self) -> int | None:
        """Bytes of every FIFO at its searched depth."""
        sizes = [r.bytes for r in self.rows]
        return None if not sizes or None in sizes else sum(sizes)

    @property
    def uniform_bytes(self) -> int | None:
        """Bytes of every FIFO at the hardware's uniform depth."""
        sizes = [r.element_bytes for r in self.rows]
        if None in sizes:
            return None
        return sum(self.preset_depth * r.element_bytes * r.fifos for r in self.rows)

    @property
    def deadlock_free(self) -> bool:
        return not self.dead_loops and (self.unbounded_cycles is None or self.cycles != 0)

    def to_dict(self) -> dict:
        from stepc.diagnostics import span_json
        return {"schema": schema("fifo"), "program": self.program, "hw": self.hw,
                "preset_depth": self.preset_depth, "tolerance": self.tolerance,
                "unbounded_cycles": self.unbounded_cycles, "cycles": self.cycles,
                "fifo_bytes": self.fifo_bytes, "uniform_bytes": self.uniform_bytes,
                "on_chip_bytes": _plain(self.on_chip_bytes)
                if self.on_chip_bytes is not None else None,
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

    def render(self, console, show_all: bool = False) -> None:
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
            if self.cycles:
                line(f"  cycles: {self.cycles:,} with these depths, {self.unbounded_cycles:,} "
                     f"with unbounded FIFOs (tolerance {100 * self.tolerance:g}%)")
            else:
                line("  no depths found that complete within the tolerance: "
                     + "; ".join(self.log[-1:]))
            total, uniform = self.fifo_bytes, self.uniform_bytes
            if total is not None and uniform is not None:
                line(f"  FIFO bytes: {total:,} with these depths, {uniform:,} at the uniform "
                     f"depth {self.preset_depth} ({_saved(total, uniform)})")
            on_chip = _plain(self.on_chip_bytes) if self.on_chip_bytes is not None else None
            if isinstance(on_chip, int) and total is not None:
                line(f"  on-chip memory: {on_chip:,} B of the operators, {on_chip + total:,} B "
                     "with these FIFOs")
            line(f"  search: {self.runs} simulations in {self.seconds:.1f} s")
        if any(not r.settable for r in rows):
            line("  * a fan-out stepc inserted: its FIFOs keep the hardware's depth")


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
    sizes = [r.bytes for r in group]
    minima = sorted({str(_plain(r.static_minimum)) for r in group})
    data = all(r.data_dependent and r.static_minimum == 1 for r in group)
    return [f"{first.producer} .. {last.producer} -> {first.consumer}",
            f"{first.location} inputs {first.slot}..{last.slot}", first.element,
            "data" if data else "..".join(minima[:1] + minima[-1:][len(minima) < 2:]),
            f"{min(depths):,}..{max(depths):,}" if depths else "-",
            "-" if None in sizes else f"{sum(sizes):,}"]


def _saved(total: int, uniform: int) -> str:
    if uniform == 0:
        return "no FIFO bytes"
    change = 100 * (uniform - total) / uniform
    return f"{change:.1f}% saved" if change >= 0 else f"{-change:.1f}% more"


def _plain(v):
    from stepc.types import dim_json
    return dim_json(v)


def size_fifos(compiled: Compiled, hw=None,
               set: Mapping[str, Any] | Sequence[str] | None = None,  # noqa: A002
               traces: Mapping[str, Any] | None = None, tolerance: float = 0.01,
               search: bool = True) -> FifoReport:
    """`Program.fifo`: the static analysis, and with `search` the depths within
    `tolerance` (a fraction) of the unbounded-FIFO cycles, by simulation."""
    from stepc.analyze import trace_bindings
    from stepc.fifo.search import fifo_classes, search_depths
    from stepc.fifo.static import analyze_fifos
    from stepc.sim.kernel import SimError
    from stepc.traces import TraceError

    bool_arg("search", search)
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or \
            not 0 <= tolerance < 10:
        raise InputError(f"tolerance: expected a fraction from 0 to 10 (0.01 is 1%), found "
                         f"{tolerance!r}")
    config, _warnings = hardware(hw, set)
    typed = compiled.typed
    try:
        arrays = trace_arrays(traces)
        bindings = {k: v for k, v in trace_bindings(typed, arrays).items()} if arrays else {}
    except TraceError as e:
        raise trace_input_error(e, compiled.sources) from None
    analysis = analyze_fifos(typed)
    outcome = None
    if search and not analysis.loops:
        try:
            outcome = search_depths(analysis, config, arrays, tolerance, bindings)
        except TraceError as e:
            raise trace_input_error(e, compiled.sources) from None
        except SimError as e:
            raise SimulationError.of(e, typed.program.nodes) from None
        classes = outcome.classes
        bindings = {**outcome.bindings, **bindings}
    else:
        classes = fifo_classes(analysis, config.fabric.fifo_depth, bindings)
    minima = analysis.minimum_depths(lambda k: config.fabric.fifo_depth, bindings)
    searched = outcome is not None and outcome.unbounded_cycles > 0  # else: no depth helps
    rows = [_row(typed, c, minima, bindings, searched) for c in classes]
    order = typed.program.order
    rows.sort(key=lambda r: (order.get(r.consumer, 0), r.slot))
    report = FifoReport(compiled.name, config.name, config.fabric.fifo_depth, tolerance, rows,
                        _loops(analysis))
    if outcome is not None:
        report.unbounded_cycles, report.cycles = outcome.unbounded_cycles, outcome.cycles
        report.runs, report.seconds, report.log = outcome.runs, outcome.seconds, outcome.log
        report.on_chip_bytes = outcome.on_chip_bytes
    return report


def _row(typed, c, minima, bindings, searched: bool) -> FifoRow:
    import sympy

    from stepc.fifo.search import element_bytes

    prog = typed.program
    src, port, dst, _slot = c.edges[0]
    bound = sympy.Integer(c.static_minimum)
    for k in c.edges:
        if k in minima:
            bound = sympy.Max(bound, minima[k][0])
    st = typed.types.get((src, port))
    return FifoRow(prog.nodes[src].port_label(port), dst, c.key[0], prog.nodes[dst].span,
                   c.key[1], len(c.edges),
                   str(st.elem) if st is not None else "?",
                   element_bytes(typed, c.edges[0], bindings), bound, c.data_dependent,
                   c.settable, c.depth if searched else None)


def _loops(analysis: FifoAnalysis) -> list[dict[str, Any]]:
    prog = analysis.typed.program
    return [{"location": str(loop.feedback.span), "span": loop.feedback.span,
             "stream": prog.nodes[loop.feedback.src].port_label(loop.feedback.port),
             "reason": loop.reason} for loop in analysis.loops]


def apply_depths(compiled: Compiled, report: FifoReport) -> tuple[int, list[str]]:
    """Write the searched depths into the program's own file as `depth=` attributes, in
    the layout of `stepc fmt`, through a temporary file and a rename. Returns the calls
    edited and the locations left alone, each with why (a call in an imported file)."""
    from stepc.fifo.apply import CallDepths, with_depths
    from stepc.fifo.capacity import input_depths
    from stepc.grammar.format import format_source
    from stepc.sim.report import write_atomic

    path = compiled.name
    source = compiled.sources.get(path)
    if source is None or not os.path.isfile(path):
        raise InputError(f"{path}: not a .step file stepc can write depths into")
    nodes = compiled.typed.program.nodes
    calls: dict[str, CallDepths] = {}
    skipped: list[str] = []
    for r in report.rows:
        if r.depth is None or not r.settable:
            continue
        node = nodes[r.consumer]
        current = input_depths(node, report.preset_depth)
        if r.depth == current[r.slot]:
            continue
        if r.span.file != path:
            skipped.append(f"{r.location}: in {r.span.file}, not the program's file "
                           f"(`{r.producer} -> {r.consumer}` wants depth {r.depth})")
            continue
        call = calls.setdefault(str(r.span), CallDepths(r.span, len(current), current, {}))
        call.depths[r.slot] = r.depth
    if calls:
        text = format_source(with_depths(source.text, list(calls.values())), path)
        write_atomic(path, lambda f: f.write(text.encode("utf-8")))
    return len(calls), skipped


def fifo_capacity_bytes(compiled: Compiled, hw=None, bindings: Mapping[str, Any] | None = None):
    """Bytes of every FIFO at its depth (the consumer's `depth=`, else the hardware's
    `fabric.fifo_depth`) times its element's bytes: an int once `bindings` (dim name ->
    value) fix every dim, else an expression in the dims left."""
    from stepc.api.results import plain
    from stepc.fifo.capacity import fifo_bytes

    config = hw if hw is not None and not isinstance(hw, str) else hardware(hw)[0]
    return plain(fifo_bytes(compiled.typed, config, dict(bindings or {})))


def fifo_totals(compiled: Compiled, hw, bindings: Mapping[str, Any] | None,
                on_chip_bytes) -> dict[str, Any]:
    """`--fifo-bytes` of `stepc analyze` and `stepc sim`: the FIFO bytes at their depths
    and the operators' on-chip bytes with them, as JSON values (ints, or expressions as
    stepc prints them)."""
    import sympy

    from stepc.types import dim_json
    fifos = sympy.sympify(fifo_capacity_bytes(compiled, hw, bindings))
    return {"fifo_bytes": dim_json(fifos),
            "on_chip_bytes_with_fifos": dim_json(fifos + sympy.sympify(on_chip_bytes))}
