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
        if None in self.sizes:
            return None
        distinct = sorted(set(self.sizes))
        return distinct[0] if len(distinct) == 1 else distinct

    def bytes_at(self, depth: int | None) -> int | None:
        """Bytes of its FIFOs at `depth`, each at its own element's bytes."""
        if depth is None or None in self.sizes:
            return None
        return depth * sum(self.sizes)

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
    confirmation: Any = None  # stepc.fifo.confirm.Confirmation of the searched depths

    @property
    def fifo_bytes(self) -> int | None:
        """Bytes of every FIFO at its searched depth."""
        sizes = [r.bytes for r in self.rows]
        return None if not sizes or None in sizes else sum(sizes)

    @property
    def uniform_bytes(self) -> int | None:
        """Bytes of every FIFO at the hardware's uniform depth."""
        sizes = [r.bytes_at(self.preset_depth) for r in self.rows]
        return None if None in sizes else sum(sizes)

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
            self._render_search(line)
        if any(not r.settable for r in rows):
            line("  * a fan-out stepc inserted: its FIFOs keep the hardware's depth")

    def _render_search(self, line) -> None:
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
        report.uniform_cycles = outcome.uniform_cycles
        report.within_tolerance = outcome.within_tolerance
        report.fan_outs = _fan_outs(typed, outcome.fan_outs)
    if outcome is not None and outcome.cycles:
        report.confirmation = _confirmed(compiled, report, classes, config, arrays, bindings)
    return report


def _confirmed(compiled, report: FifoReport, classes, config, arrays, bindings):
    """The run of the program with the searched depths written into its text; raises
    SimulationError when it is not the search's answer."""
    from stepc.fifo.confirm import confirm
    from stepc.sim.kernel import SimError

    try:
        done = confirm(compiled, classes, config, arrays, bindings)
    except SimError as e:
        raise SimulationError.of(e, compiled.typed.program.nodes) from None
    why = done.disagreement(report.cycles, report.fifo_bytes)
    if why is not None:
        raise SimulationError(f"{compiled.name}: the searched FIFO depths are not confirmed: "
                              f"{why}; no depths are reported")
    return done


def _fan_outs(typed, needs) -> list[dict[str, Any]]:
    """The fan-outs stepc inserted that must be deeper, one per producer call: its stream,
    location, uses, the depth that suffices and the Broadcast that would say it."""
    prog = typed.program
    spans = {(e.src, e.port, e.dst, e.slot): e.span for e in prog.edges}
    out: dict[str, dict[str, Any]] = {}
    for need in needs:
        src, port, _dst, _slot = need.edge
        span = spans[need.edge]
        stream = prog.nodes[src].port_label(port).rsplit(".", 1)[-1]
        name = stream.split("[")[0]
        f = out.setdefault(str(span), {"stream": stream, "location": str(span), "span": span,
                                       "fifos": 0,
                                       "consumers": need.consumers, "depth": 0})
        f["fifos"] += 1
        f["depth"] = max(f["depth"], need.held)
        outputs = ", ".join(f"{name}_{i}" for i in range(need.consumers))
        f["suggestion"] = (f"{outputs} = Broadcast({name}, consumers={need.consumers}, "
                           f"depth={f['depth']})")
    return list(out.values())


def _row(typed, c, minima, bindings, searched: bool) -> FifoRow:
    import sympy

    from stepc.fifo.search import element_bytes

    prog = typed.program
    src, port, dst, _slot = c.edges[0]
    bound = sympy.Integer(c.static_minimum)
    for k in c.edges:
        if k in minima:
            bound = sympy.Max(bound, minima[k][0])
    elements = dict.fromkeys(str(st.elem) if st is not None else "?"
                             for st in (typed.types.get((k[0], k[1])) for k in c.edges))
    return FifoRow(prog.nodes[src].port_label(port), dst, c.key[0], prog.nodes[dst].span,
                   c.key[1], len(c.edges), " | ".join(elements),
                   [element_bytes(typed, k, bindings) for k in c.edges], bound,
                   c.data_dependent, c.settable, c.depth if searched else None)


def _loops(analysis: FifoAnalysis) -> list[dict[str, Any]]:
    prog = analysis.typed.program
    return [{"location": str(loop.feedback.span), "span": loop.feedback.span,
             "stream": prog.nodes[loop.feedback.src].port_label(loop.feedback.port),
             "reason": loop.reason} for loop in analysis.loops]


def apply_depths(compiled: Compiled, report: FifoReport) -> tuple[int, list[str]]:
    """Write the searched depths, as the confirmation run compiled them, into the program's
    files (imported ones included) as `depth=` attributes in the layout of `stepc fmt`,
    each through a temporary file and a rename. Returns the calls edited and the files
    written."""
    from stepc.fifo.confirm import write_texts

    path = compiled.name
    if compiled.sources.get(path) is None or not os.path.isfile(path):
        raise InputError(f"{path}: not a .step file stepc can write depths into")
    if report.confirmation is None:
        raise InputError(f"{path}: no confirmed depths to write (the search found none)")
    texts = report.confirmation.texts
    try:
        write_texts(texts)
    except PermissionError as e:
        raise InputError(f"{e.args[0]}: cannot write the depths into it; nothing was "
                         "written") from None
    return report.confirmation.calls, sorted(texts)


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
