"""FIFO sizing of a program (`Program.fifo`, `stepc fifo`): the static minimum depth of each
FIFO on a reconvergent path, the depths the search measures for throughput, and what they
cost; the report it returns, and its text, are stepc.report.fifo's."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from stepc.api.arguments import bool_arg, int_arg
from stepc.api.errors import InputError, SimulationError
from stepc.api.inputs import hardware, trace_arrays, trace_input_error
from stepc.report.fifo import FifoReport, FifoRow

if TYPE_CHECKING:
    from stepc.fifo.static import FifoAnalysis
    from stepc.frontend import Compiled


def size_fifos(compiled: Compiled, hw=None,
               set: Mapping[str, Any] | Sequence[str] | None = None,  # noqa: A002
               traces: Mapping[str, Any] | None = None, tolerance: float = 0.01,
               search: bool = True, jobs: int | None = None) -> FifoReport:
    """`Program.fifo`: the static analysis, and with `search` the depths within
    `tolerance` (a fraction) of the unbounded-FIFO cycles, by simulation (independent
    runs `jobs` at a time; default: the machine's cores)."""
    from stepc.analyze import trace_bindings
    from stepc.explore import MAX_JOBS
    from stepc.fifo.search import fifo_classes, search_depths
    from stepc.fifo.static import analyze_fifos
    from stepc.fifo.trials import default_jobs
    from stepc.sim.kernel import SimError
    from stepc.traces import TraceError

    bool_arg("search", search)
    jobs = default_jobs() if jobs is None else int_arg("jobs", jobs, 1, MAX_JOBS)
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or \
            not 0 <= tolerance < 10:
        raise InputError(f"tolerance: expected a fraction from 0 to 10 (0.01 is 1%), found "
                         f"{tolerance!r}")
    config, _warnings = hardware(hw, set)
    typed = compiled.typed_program
    try:
        arrays = trace_arrays(traces)
        bindings = {k: v for k, v in trace_bindings(typed, arrays).items()} if arrays else {}
    except TraceError as e:
        raise trace_input_error(e, compiled.sources) from None
    analysis = analyze_fifos(typed)
    outcome = None
    if search and not analysis.loops:
        try:
            outcome = search_depths(analysis, config, arrays, tolerance, bindings, jobs)
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
        report.confirmation = _confirmed(compiled, outcome.cycles, report, classes, config,
                                         arrays, bindings)
    return report


def _confirmed(compiled, cycles: int, report: FifoReport, classes, config, arrays, bindings):
    """The run of the program with the searched depths written into its text; raises
    SimulationError when it is not the search's answer (`cycles` and the report's bytes)."""
    from stepc.fifo.confirm import confirm
    from stepc.sim.kernel import SimError

    try:
        done = confirm(compiled, classes, config, arrays, bindings)
    except SimError as e:
        raise SimulationError.of(e, compiled.typed_program.program.nodes) from None
    why = done.disagreement(cycles, report.fifo_bytes)
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
    return plain(fifo_bytes(compiled.typed_program, config, dict(bindings or {})))
