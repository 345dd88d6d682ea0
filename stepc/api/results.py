"""What analyzing and simulating a program return: `Cost` and `Run`, plain dataclasses whose
`.to_dict()` is the document of `stepc analyze|sim --format json`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from stepc.api.arguments import bool_arg, callback_arg, int_arg, kind, mapping_arg, text_arg
from stepc.api.errors import Deadlock, InputError, SimulationError
from stepc.api.inputs import (
    hardware,
    no_such,
    numeric_array,
    trace_arrays,
    trace_input_error,
)
from stepc.spelling import given

if TYPE_CHECKING:
    import numpy as np

    from stepc.analyze import Analysis
    from stepc.analyze.analysis import Roofline
    from stepc.frontend import Compiled
    from stepc.hw import HardwareConfig
    from stepc.measure import Measurement
    from stepc.sim.run import SimResult

FUNCTIONAL_LIMIT = 256 * 2**20  # bytes of tensors above which values are skipped by default


def plain(e) -> Any:
    """An int when bound and integral, a float when numeric, else the sympy expression."""
    import sympy
    e = sympy.sympify(e)
    if e.is_Integer:
        return int(e)
    if e.is_number:
        return float(e)
    return e


@dataclass
class Cost:
    """Costs of a program (`stepc analyze`): totals and per-operator values are ints once
    every dim is bound, sympy expressions in the dims still free."""

    program: str
    onchip_model: str
    totals: dict[str, Any]  # off_chip_bytes, on_chip_bytes, on_chip_bytes_on_demand, flops, ...
    bindings: dict[str, Any]
    roofline: dict[str, Any] | None = None  # memory_cycles, compute_cycles, bound (with hw)
    warnings: list[str] = field(default_factory=list)
    analysis: Analysis | None = field(default=None, repr=False)
    hw: HardwareConfig | None = field(default=None, repr=False)
    roofline_bound: Any = field(default=None, repr=False)  # the Roofline, for renderers
    typed: Any = field(default=None, repr=False)  # the checked program, for trace hints

    @property
    def _analysis(self) -> Analysis:
        """The bound analysis the totals come from (`analyze_program` gives every Cost one)."""
        if self.analysis is None:
            raise ValueError(f"{self.program}: a Cost made without its analysis")
        return self.analysis

    @cached_property
    def per_op(self) -> dict[str, dict[str, Any]]:
        """Operator -> {op, off_chip_bytes, on_chip_bytes, on_chip_bytes_on_demand, flops,
        compute_bw}, built on first use (the text report does not read it, and each
        operator's on-demand cost is a piecewise formula to build)."""
        return {o.node: {"op": o.op, "off_chip_bytes": plain(o.off_chip),
                         "on_chip_bytes": plain(o.on_chip),
                         "on_chip_bytes_on_demand": plain(o.on_chip_on_demand),
                         "flops": plain(o.flops), "compute_bw": o.compute_bw}
                for o in self._analysis.ops}

    def render(self, console, show_all: bool = False) -> None:
        """The report of `stepc analyze` on a rich Console: one row per statement (every
        operator instance with `show_all`), totals, the roofline with hw, hints for the
        dims left free."""
        from stepc.report.analyze import render_text
        render_text(self._analysis, console, show_all, self.hw, self.roofline_bound, self.typed)

    def energy_lines(self) -> list[str]:
        """The energy lower bound and the area as text lines (needs a hardware
        configuration; docs/energy.md)."""
        from stepc.report.analyze import energy_lines
        if self.hw is None or self.roofline_bound is None:
            raise InputError("the energy bound needs a hardware configuration (hw=...)")
        return energy_lines(self._analysis, self.hw, self.roofline_bound)

    def to_dict(self, energy: bool = False) -> dict:
        """The document of `stepc analyze --format json`; `energy` adds the energy bound
        and the area (with a hardware configuration)."""
        from stepc.analyze.report import to_json
        doc = to_json(self._analysis, self.hw, self.roofline_bound)
        if energy and self.hw is not None and self.roofline_bound is not None:
            doc["energy"] = energy_bound_json(self._analysis, self.hw, self.roofline_bound)
        return doc


def analyze_program(compiled: Compiled, hw, sets, bind: Mapping[str, int] | None, traces,
                    onchip_model: str) -> Cost:
    """`Program.analyze`: the analysis with `traces` and `bind` applied."""
    import sympy

    from stepc.analyze import analyze, roofline, trace_bindings
    from stepc.ops import OPS
    from stepc.ops.base import ONCHIP_MODES

    if onchip_model not in ONCHIP_MODES:
        raise InputError(f"onchip_model: expected 'artifact' or 'paper', found {onchip_model!r}")
    config, warnings = hardware(hw, sets, roofline=True) if (hw is not None or sets) \
        else (None, [])
    typed = compiled.typed_program
    a = analyze(typed, onchip_model, config)
    values: dict = {}
    if traces or any("file" in n.attrs.get("gen", {}) for n in typed.program.nodes.values()
                     if OPS[n.op].external):  # numpy is loaded only for traces
        from stepc.traces import TraceError
        try:
            values.update(trace_bindings(typed, trace_arrays(traces)))
        except TraceError as e:
            raise trace_input_error(e, compiled.sources) from None
    known = {n: info.span for n, info in typed.symbols.infos.items()}
    for name, val in mapping_arg("bind", bind, "symbols to sizes").items():
        if name not in known:
            d = no_such("bind", name, "symbol", known)
            raise InputError(d.message, [d], compiled.sources)
        values[name] = sympy.Integer(int_arg(f"bind[{name!r}]", val, minimum=0))
    if values:
        a = a.bind(values)
    roof = roofline(a, config) if config is not None else None
    roof_dict = None if roof is None else {
        "memory_cycles": plain(roof.memory_cycles), "compute_cycles": plain(roof.compute_cycles),
        "bound": roof.bound}
    return Cost(a.program, onchip_model, {k: plain(v) for k, v in a.totals.items()},
                {k: plain(v) for k, v in a.bindings.items()}, roof_dict, warnings, a, config,
                roof, typed)


@dataclass
class Run:
    """What a simulation measured (`stepc sim`): a view over its `Measurement`, every value
    read from it."""

    measurement: Measurement = field(repr=False)  # every metric, and the run (its `result`)
    warnings: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        shown = ("program", "hw", "functional", "cycles", "off_chip_bytes", "flops", "busy",
                 "dims", "on_chip_bytes", "on_chip_bytes_on_demand", "compute_utilization",
                 "deadlock", "warnings")
        return f"Run({', '.join(f'{k}={getattr(self, k)!r}' for k in shown)})"

    @property
    def result(self) -> SimResult:
        """Every counter of the run."""
        return self.measurement.simulation

    @property
    def program(self) -> str:
        return self.result.program

    @property
    def hw(self) -> str:
        """The hardware configuration's name."""
        return self.measurement.hw.name

    @property
    def functional(self) -> bool:
        return self.result.functional

    @property
    def cycles(self) -> int:
        return self.measurement.cycles

    @property
    def off_chip_bytes(self) -> int:
        """Bytes of the tiles moved to and from HBM."""
        return self.measurement.off_chip_bytes

    @property
    def flops(self) -> int:
        return self.measurement.flops

    @property
    def busy(self) -> dict[str, int]:
        """Operator -> busy cycles."""
        return {o.name: o.busy for o in self.result.ops}

    @property
    def dims(self) -> dict[str, Any]:
        """The symbolic dims as this run determined them."""
        return {k: plain(v) for k, v in self.result.bindings.items()}

    @property
    def totals(self) -> dict[str, Any]:
        """The analysis's totals bound to this run's dims."""
        return self.measurement.analysis_totals

    @property
    def on_chip_bytes(self) -> Any:
        return plain(self.totals["on_chip_bytes"])

    @property
    def on_chip_bytes_on_demand(self) -> Any:
        return plain(self.totals["on_chip_bytes_on_demand"])

    @property
    def compute_utilization(self) -> float | None:
        return self.measurement.compute_utilization

    @property
    def outputs(self) -> dict[str, np.ndarray]:
        """The output tensors' values (a functional run's)."""
        return self.result.outputs

    @property
    def deadlock(self) -> list | None:
        """The blocked operators, when the run deadlocked."""
        return self.result.deadlock

    @property
    def energy(self) -> dict[str, Any]:
        """The run's energy (joules by component and per operator, EDP) and area (mm2,
        compute units): the `energy` and `area` blocks of `to_dict()` (docs/energy.md)."""
        return energy_json(self.measurement)

    @property
    def metrics(self) -> dict[str, Any]:
        """Every metric of the run, as a sweep record holds them (`stepc.measure.METRICS`
        gives each one's unit and meaning)."""
        return self.measurement.values

    def to_dict(self) -> dict:
        """The document of `stepc sim --format json`: the run's counters, the measured
        analysis, on-chip peak and compute utilization, and the deadlock."""
        from stepc.sim.report import run_json
        from stepc.types import dim_json
        m = self.measurement
        doc = run_json(self.result)
        doc["analysis"] = {k: dim_json(v) for k, v in m.analysis_totals.items()}
        doc["on_chip_peak_bytes"] = m.on_chip_bytes_on_demand
        doc["compute_utilization"] = m.compute_utilization
        doc["deadlock"] = None if not self.deadlock else [b.__dict__ for b in self.deadlock]
        doc.update(energy_json(m))
        return doc

    def render(self, console) -> None:
        """The text report of `stepc sim` on a rich console."""
        from stepc.report.sim import render_text
        render_text(self.measurement, console)


def energy_bound_json(a: Analysis, hw: HardwareConfig, roof: Roofline) -> dict:
    """The `energy` block of `stepc analyze --energy --format json`: the dynamic energy and
    the leakage over the roofline's cycles (when those are numbers), a lower bound."""
    from stepc.energy import energy_bound
    from stepc.types import dim_json
    bound = energy_bound(a, hw, roof)
    return {"lower_bound_joules": dim_json(bound.total_j),
            "dynamic_joules": dim_json(bound.dynamic_j),
            "by_component": {k: dim_json(v) for k, v in bound.by_component.items()},
            "area_mm2": dim_json(bound.area_mm2), "compute_units": bound.compute_units}


def energy_json(m: Measurement) -> dict:
    """The `energy` and `area` blocks of a run's document: the measurement record's
    energy and area metrics, and each operator's dynamic energy by component."""
    from stepc.energy import COMPONENTS
    from stepc.types import dim_json
    report = m.energy
    return {
        "energy": {"joules": m["energy_j"], "dynamic_joules": m["energy_dynamic_j"],
                   "edp": m["edp"], "seconds": report.seconds,
                   "by_component": {k: m[f"energy_{k}_j"] for k in COMPONENTS},
                   "ops": {o.node: {k: dim_json(v) for k, v in o.joules.items()}
                           for o in report.ops if o.total != 0}},
        "area": {"mm2": m["area_mm2"], "compute_mm2": report.compute_mm2,
                 "sram_mm2": dim_json(report.sram_mm2), "compute_units": m["compute_units"],
                 "allocated_compute": m["allocated_compute"]},
    }


def tensor_bytes(compiled: Compiled) -> int:
    """Bytes of the program's tensors (values are skipped by default above 256 MiB)."""
    import math

    from stepc.types import DTYPE_BYTES
    return sum(math.prod(t.shape) * DTYPE_BYTES[t.dtype]
               for t in compiled.typed_program.program.tensors.values())


def _cycle_progress(progress):
    """A kernel progress callback (gets the current cycle) from a tqdm-like object, which
    `update`s by the cycles since the last call, or from a plain function."""
    if progress is None or not hasattr(progress, "update"):
        return progress
    last = [0]

    def advance(cycle: int) -> None:
        progress.update(cycle - last[0])
        last[0] = cycle
    return advance


def simulate_program(compiled: Compiled, hw, sets, traces, timing_only: bool | None,
                     max_cycles: int | None, trace_ops: bool, progress,
                     values: Mapping[str, np.ndarray] | None = None) -> Run:
    """`Program.simulate`: run, bind the analysis to the run's dims, raise `Deadlock`."""
    from stepc.analyze import analyze
    from stepc.measure import measure
    from stepc.sim.kernel import SimError
    from stepc.sim.report import deadlock_text
    from stepc.sim.run import simulate
    from stepc.traces import TraceError

    config, warnings = hardware(hw, sets)
    if max_cycles is not None:
        max_cycles = int_arg("max_cycles", max_cycles, minimum=1)
    callback_arg("progress", progress)
    bool_arg("trace_ops", trace_ops)
    if timing_only is not None:
        bool_arg("timing_only", timing_only)
    if values is not None:
        values = tensor_values(compiled, values)
    if timing_only is None:
        timing_only = tensor_bytes(compiled) > FUNCTIONAL_LIMIT
    typed = compiled.typed_program
    tick = _cycle_progress(progress)
    a = analyze(typed, "artifact", config)
    try:
        arrays = trace_arrays(traces)
        result = simulate(typed, config, arrays, functional=not timing_only,
                          trace_ops=trace_ops, max_cycles=max_cycles, progress=tick,
                          values=values, analysis=a)
    except TraceError as e:
        raise trace_input_error(e, compiled.sources) from None
    except SimError as e:
        raise SimulationError.of(e, typed.program.nodes) from None
    if tick is not None:
        tick(result.cycles)  # the kernel reports now and then: end on the last cycle
    measured = measure(typed, config, analysis=a, result=result)
    run = Run(measured, warnings)
    if result.deadlock:
        from stepc.fifo.hint import deadlock_hint
        raise Deadlock(run, deadlock_text(result, typed.program.nodes, typed.program.edges,
                                          deadlock_hint(typed, config, result)))
    return run


def tensor_values(compiled: Compiled, values) -> dict[str, np.ndarray]:
    """`simulate(values=...)` as arrays, each naming a tensor of the program."""
    tensors = compiled.typed_program.program.tensors
    out = {}
    for name, value in mapping_arg("values", values, "tensor names to arrays").items():
        if name not in tensors:
            d = no_such("values", name, "tensor", {t: tensors[t].span for t in tensors})
            raise InputError(d.message, [d], compiled.sources)
        out[name] = numeric_array(f"values[{name!r}]", value)
    return out


def dot_text(compiled: Compiled, collapse: bool, annotate, title: str | None) -> str:
    """`Program.dot`: DOT text, shaded by a Cost, a Run or a {node: Heat | fraction}."""
    from stepc.viz.dot import Heat, analysis_heat, to_dot

    bool_arg("collapse", collapse)
    if title is not None:
        text_arg("title", title)
    if annotate is not None and not isinstance(annotate, (Cost, Run, Mapping)):
        raise InputError(f"annotate: expected a Cost, a Run or a mapping of nodes to "
                         f"fractions, found {kind(annotate)}")
    heat, default_title = None, None
    if isinstance(annotate, Cost):
        heat, unbound = analysis_heat(annotate.analysis)
        default_title = f"{compiled.name}: shaded by share of off-chip traffic"
        if unbound:
            names = ", ".join(unbound[:4]) + (f", ... ({len(unbound)} dims)"
                                              if len(unbound) > 4 else "")
            default_title += (f" (unbound {names} taken as 1; bind with {given('bind')}/"
                              f"{given('traces')})")
    elif isinstance(annotate, Run):
        cycles = annotate.cycles
        heat = {name: Heat(busy / cycles if cycles else 0.0,
                           f"busy {100 * busy / max(cycles, 1):.1f}%")
                for name, busy in annotate.busy.items() if busy}
        default_title = f"{compiled.name}: shaded by busy cycles"
    elif annotate is not None:
        heat = {k: v if isinstance(v, Heat) else Heat(fraction(k, v))
                for k, v in annotate.items()}
    return to_dot(compiled.typed_program, collapse=collapse, heat=heat,
                  title=title or default_title)


def fraction(node: str, value) -> float:
    """A node's shade for `dot(annotate={node: fraction})`: a number in 0..1."""
    import math
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value) or not 0 <= value <= 1:
        raise InputError(f"annotate[{node!r}]: expected a fraction in 0..1 or a Heat, found "
                         f"{kind(value)}")
    return float(value)
