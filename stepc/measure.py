"""One measurement of a program: a simulation (or none) with the analysis bound to its dims,
and every metric derived from them once.

`METRICS` names each metric with its unit, its meaning and whether the analysis gives it
exactly (once the dims are bound) or only a simulation does. Sweeps, `stepc tune`, the
paper's claims and plots, the API's `Run` and the reports read metrics from here: a new
metric is one `@metric` function below (and its test). `Measurement.to_dict()` holds the
measured fields of a sweep record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from stepc.sympy_lazy import sympy
from stepc.types import dim_json

if TYPE_CHECKING:
    import numpy as np

    from stepc.analyze import Analysis
    from stepc.energy import EnergyReport
    from stepc.hw import HardwareConfig
    from stepc.sim.run import SimResult
    from stepc.typecheck.checker import TypedProgram


@dataclass(frozen=True)
class Metric:
    """A metric: its name, unit, one-line meaning, axis label and table column header;
    `simulated` when only a simulation gives it; `higher_is_better` for the ones a search
    maximises; `memory_model`, the only memory model that measures it (None: every one)."""
    name: str
    unit: str
    meaning: str
    label: str
    column: str
    simulated: bool
    higher_is_better: bool
    memory_model: str | None
    derive: Callable[[Measurement], Any] = field(repr=False, compare=False)


METRICS: dict[str, Metric] = {}  # in the order of columns and lists


def metric(unit: str, label: str, column: str, simulated: bool = False,
           higher_is_better: bool = False, memory_model: str | None = None):
    """Register a metric derived by the decorated function (its docstring is the meaning)."""
    def register(derive: Callable[[Measurement], Any]):
        name, meaning = derive.__name__, derive.__doc__
        if meaning is None:
            raise TypeError(f"metric {name}: its docstring is its meaning")
        METRICS[name] = Metric(name, unit, meaning, label, column, simulated,
                               higher_is_better, memory_model, derive)
        return derive
    return register


def _total(m: Measurement, name: str, attr: str):
    """A total of the bound analysis (its `totals` when made already: each is a sum to
    simplify, the on-demand one a piecewise one)."""
    made = m.analysis.__dict__.get("totals")
    return dim_json(made[name] if made is not None else m.analysis.total(attr))


def _joules_or_mm2(v):
    """A float, or the JSON form of a value still symbolic in the program's dims."""
    v = sympy.sympify(v)
    return float(v) if v.is_number else dim_json(v)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@metric("cycles", "cycles", "cycles", simulated=True)
def cycles(m: Measurement) -> int:
    """Cycles until the last operator finished."""
    return m.simulation.cycles


@metric("bytes", "off-chip traffic (bytes)", "off-chip bytes")
def off_chip_bytes(m: Measurement):
    """Bytes of the tiles moved to and from off-chip memory."""
    return m.result.useful_bytes if m.result is not None else \
        _total(m, "off_chip_bytes", "off_chip")


@metric("bytes", "on-chip memory (bytes)", "on-chip bytes")
def on_chip_bytes(m: Measurement):
    """On-chip bytes the operators allocate."""
    return _total(m, "on_chip_bytes", "on_chip")


@metric("bytes", "on-chip memory, on demand (bytes)", "on demand")
def on_chip_bytes_on_demand(m: Measurement):
    """On-chip bytes, counting an operator only when its stream has elements."""
    return _total(m, "on_chip_bytes_on_demand", "on_chip_on_demand")


@metric("FLOPs", "FLOPs", "FLOPs")
def flops(m: Measurement):
    """Floating-point operations performed."""
    return m.result.flops if m.result is not None else _total(m, "flops", "flops")


@metric("fraction", "compute utilization (fraction of allocated)", "compute util.",
        simulated=True, higher_is_better=True)
def compute_utilization(m: Measurement) -> float | None:
    """FLOPs per cycle as a share of the allocated compute."""
    alloc, run = m["allocated_compute"], m.simulation
    return run.flops / run.cycles / alloc if alloc and run.cycles else None


@metric("fraction", "off-chip bandwidth utilization (fraction of peak)", "BW util.",
        simulated=True, higher_is_better=True)
def bw_utilization(m: Measurement) -> float | None:
    """Achieved off-chip bandwidth as a share of the peak."""
    run = m.simulation
    return run.achieved_bw / m.hw.peak_bw if run.cycles else None


@metric("FLOPs/cycle", "allocated compute (FLOPs/cycle)", "allocated FLOPs/cycle")
def allocated_compute(m: Measurement) -> int:
    """Compute throughput the operators allocate: the sum of the FLOPs/cycle
    (`compute_bw`) of every higher-order operator instance (per expert, per region) that
    sets one, or does arithmetic at the hardware's default, whatever its stream carries;
    routing, shape and memory operators allocate none."""
    return m.analysis.allocated_compute


@metric("units", "compute units allocated", "compute units")
def compute_units(m: Measurement) -> int:
    """Compute units the operators allocate: each arithmetic operator's FLOPs/cycle over
    one unit's (`area.unit_flops`), rounded up."""
    return m.energy.compute_units


@metric("mm2", "area (mm2)", "area mm2")
def area_mm2(m: Measurement):
    """Silicon the allocation needs: the compute units' multiply-add lanes and the on-chip
    bytes' SRAM bit cells (datapath and cells only: a lower bound)."""
    return _joules_or_mm2(m.energy.area_mm2)


@metric("J", "dynamic energy (J)", "dynamic J")
def energy_dynamic_j(m: Measurement):
    """Energy of the work itself: arithmetic, on-chip memory, FIFOs, fabric hops and
    off-chip traffic (with DRAM row activations when the dram model ran)."""
    return _joules_or_mm2(m.energy.dynamic_j)


def _component(name: str, meaning: str, simulated: bool = False):
    def derive(m: Measurement):
        return _joules_or_mm2(m.energy.by_component[name])
    derive.__name__, derive.__doc__ = f"energy_{name}_j", meaning
    label = name.replace("_", "-")
    return metric("J", f"{label} energy (J)", f"{label} J", simulated=simulated)(derive)


for _name, _meaning in (
        ("compute", "Energy of the arithmetic: FLOPs at their element type's cost."),
        ("sram", "Energy of on-chip memory reads and writes, by the memory's size class."),
        ("fifo", "Energy of writing and reading every stream element in its FIFO."),
        ("fabric", "Energy of moving every stream element one hop over the fabric."),
        ("off_chip", "Energy of the off-chip traffic (and DRAM row activations).")):
    _component(_name, _meaning)
_component("static", "Leakage of the allocated compute over the run's time.", simulated=True)


@metric("J", "energy (J)", "energy J", simulated=True)
def energy_j(m: Measurement):
    """Energy of the run: the dynamic energy and the allocated compute's leakage over its
    cycles at the accelerator clock."""
    return _joules_or_mm2(m.energy.total_j)


@metric("J*s", "energy-delay product (J*s)", "EDP J*s", simulated=True)
def edp(m: Measurement):
    """Energy times the run's time at the accelerator clock."""
    total = m["energy_j"]
    return total * m.energy.seconds if _number(total) else None


@metric("fraction", "row-buffer hit rate", "row hits", simulated=True, higher_is_better=True,
        memory_model="dram")
def row_hit_rate(m: Measurement) -> float | None:
    """Share of memory requests that found their DRAM row open (the dram model only)."""
    return m.simulation.row_hit_rate


@metric("FLOPs/byte", "operational intensity (FLOPs per off-chip byte)",
        "FLOPs/byte", higher_is_better=True)
def operational_intensity(m: Measurement) -> float | None:
    """FLOPs per byte of off-chip traffic (the roofline's x axis)."""
    f, b = m["flops"], m["off_chip_bytes"]
    return f / b if _number(f) and _number(b) and b else None


ANALYSIS_METRICS = tuple(n for n, s in METRICS.items() if not s.simulated)
SIM_METRICS = tuple(n for n, s in METRICS.items() if s.simulated)


@dataclass
class Measurement:
    """A run's metrics: `result`, the simulation (None: the analysis alone), and
    `analysis`, bound to the run's dims. `m["cycles"]` or `m.cycles` reads a metric."""
    analysis: Analysis
    hw: HardwareConfig
    result: SimResult | None = None
    _derived: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def __getitem__(self, name: str) -> Any:
        if name not in self._derived:
            spec = METRICS[name]
            if spec.simulated and self.result is None:
                raise KeyError(f"{name}: only a simulation measures it")
            self._derived[name] = spec.derive(self)
        return self._derived[name]

    def __getattr__(self, name: str) -> Any:
        if name in METRICS:
            return self[name]
        raise AttributeError(name)

    @cached_property
    def energy(self) -> EnergyReport:
        """Energy and area on `hw` (stepc.energy): dynamic from the bound analysis, static
        and row activations from the run when there is one."""
        from stepc.energy import energy_report
        r = self.result
        activations = r.memory.row_misses + r.memory.row_conflicts if r is not None else 0
        return energy_report(self.analysis, self.hw, self.analysis.total("on_chip"),
                             r.cycles if r is not None else None, activations)

    @property
    def simulation(self) -> SimResult:
        """The run, for what only a simulation measures (ValueError without one)."""
        if self.result is None:
            raise ValueError("only a simulation measures this")
        return self.result

    @property
    def values(self) -> dict[str, Any]:
        """Every metric this measurement gives (the simulated ones need `result`)."""
        return {name: self[name] for name, spec in METRICS.items()
                if self.result is not None or not spec.simulated}

    @cached_property
    def analysis_totals(self) -> dict[str, Any]:
        """The bound analysis's totals (sympy values) with the allocated compute."""
        return {**self.analysis.totals, "allocated_compute": self.analysis.allocated_compute}

    @property
    def deadlocked(self) -> bool:
        return bool(self.result is not None and self.result.deadlock)

    def to_dict(self, milestones: dict[str, str] | None = None) -> dict[str, Any]:
        """The measured fields of a sweep record: status, every metric, the memory model,
        and with `milestones` (name -> operator-name prefix) the cycle each was reached."""
        out = {"status": "deadlock" if self.deadlocked else "ok", **self.values,
               "hbm_model": self.hw.hbm.model}
        if milestones:
            out["finished"] = finish_cycles(self.simulation.ops, milestones)
        return out


def measure(typed: TypedProgram, hw: HardwareConfig, traces: dict[str, np.ndarray] | None = None,
            *, functional: bool = False, analysis: Analysis | None = None,
            result: SimResult | None = None, simulate: bool = True, **options) -> Measurement:
    """Measure a checked program on `hw`: simulate it (unless `result` is a finished run of
    it, or `simulate` is False), bind its symbolic `analysis` (made when not given) to the
    run's dims (or the traces'), and derive the metrics. `options` go to the simulator."""
    from stepc.analyze import analyze, trace_bindings

    if analysis is None:
        analysis = analyze(typed, "artifact", hw)
    if result is None and simulate:
        from stepc.sim.run import simulate as run
        result = run(typed, hw, traces, functional=functional, analysis=analysis, **options)
    if result is not None:
        return Measurement(analysis.bind(dict(result.bindings)), hw, result)
    bound = analysis.bind(trace_bindings(typed, traces)) if traces else analysis
    return Measurement(bound, hw)


def finish_cycles(ops, prefixes: dict[str, str]) -> dict[str, int | None]:
    """The cycle by which the operators named `prefix` or `prefix.*` had all finished, for
    each named prefix (None when no operator has that name)."""
    out: dict[str, int | None] = {}
    for name, prefix in prefixes.items():
        times = [o.finish for o in ops if o.name == prefix or o.name.startswith(prefix + ".")]
        out[name] = max(times) if times else None
    return out


def number(value) -> float | None:
    """A metric's value as a number; None while it is symbolic (or undefined)."""
    return value if _number(value) else None
