"""Energy and area of a program on a hardware description: per operator and in total, from
its bound analysis (`stepc.analyze.access` says where its bytes go), the coefficients of
the hardware's `[energy]` and `[area]` tables and, for the static energy and DRAM row
activations, a simulated run. docs/energy.md states every rule and cites every default.

Dynamic energy of one operator, in pJ:

- compute: FLOPs x (multiply energy of its input tiles' element type + add energy of its
  output tiles') / 2, a FLOP being half a fused multiply-add (`PRECISION` maps element
  types to the coefficients' classes);
- sram: bytes written and read in its on-chip memory x the 64-bit access energy of the
  memory's size class / 8 (the smallest class at least as large; the largest beyond it);
- fifo: bytes its input streams deliver x 2 (enqueue and dequeue) x the smallest SRAM
  class's energy per byte;
- fabric: the same bytes x 8 x the wire energy per bit and millimetre x one hop, the
  pitch of a unit tile (one compute unit beside one memory unit, as squares);
- off_chip: its off-chip bytes x 8 x the energy per bit;

and for a run, static: logic leakage per mm2 x the allocated compute area x the run's time
at the accelerator clock, and each DRAM row activation (the `dram` model counts them).
Area: each operator's compute units (its FLOPs/cycle over `area.unit_flops`, rounded up)
x the multiply-add lanes of a unit (multipliers of the input type, adders of the output
type) x their area, and the on-chip bytes in SRAM bit cells.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

import sympy

from stepc.analyze.exact import number
from stepc.hw.config import CLOCK_KEY

if TYPE_CHECKING:
    from stepc.analyze import Analysis
    from stepc.analyze.analysis import OpCost, Roofline
    from stepc.hw import HardwareConfig

PJ, UM2_PER_MM2 = 1e-12, 1e6
# element type -> the class of its arithmetic coefficients: bf16 is charged as fp16 (its
# 8-bit mantissa multiplier is smaller: an upper bound), integer and address types as
# 32-bit integers, operators without tiles as 32-bit integers
PRECISION = {"bf16": "fp16", "f16": "fp16", "f32": "fp32", "i32": "int32", "u32": "int32",
             "u64": "int32", "bool": "int32", "": "int32"}
SRAM_CLASSES = ((8 * 2**10, "sram_8kib_pj"), (32 * 2**10, "sram_32kib_pj"),
                (2**20, "sram_1mib_pj"))  # (largest size in bytes, its coefficient)
DYNAMIC = ("compute", "sram", "fifo", "fabric", "off_chip")
COMPONENTS = (*DYNAMIC, "static")


def flop_pj(hw: HardwareConfig, mul: str, add: str) -> float:
    """Energy of one FLOP: half a multiply on `mul` tiles plus half an add into `add`
    tiles (an operator multiplies its inputs' element type, accumulates in its output's)."""
    e = hw.energy
    return (getattr(e, f"{PRECISION[mul]}_mul_pj") + getattr(e, f"{PRECISION[add]}_add_pj")) / 2


def lane_um2(hw: HardwareConfig, mul: str, add: str) -> float:
    """Area of one multiply-add lane: a multiplier on `mul` and an adder on `add`."""
    a = hw.area
    return getattr(a, f"{PRECISION[mul]}_mul_um2") + getattr(a, f"{PRECISION[add]}_add_um2")


def unit_mm2(hw: HardwareConfig, mul: str, add: str) -> float:
    """Area of one compute unit: `unit_flops / 2` multiply-add lanes."""
    return hw.area.unit_flops / 2 * lane_um2(hw, mul, add) / UM2_PER_MM2


def sram_mm2(hw: HardwareConfig, nbytes) -> float | sympy.Expr:
    """Area of `nbytes` of on-chip memory in bit cells (a float for a number of bytes)."""
    n = number(nbytes) if isinstance(nbytes, sympy.Basic) else nbytes
    if n is not None:
        return float(n) * 8 * hw.area.sram_bit_um2 / UM2_PER_MM2
    return nbytes * sympy.Float(8 * hw.area.sram_bit_um2 / UM2_PER_MM2)


def hop_mm(hw: HardwareConfig) -> float:
    """One fabric hop: the side of a square holding one bf16 compute unit and one memory
    unit of `area.unit_bytes`."""
    return math.sqrt(unit_mm2(hw, "bf16", "bf16") + sram_mm2(hw, hw.area.unit_bytes))


def sram_pj_per_byte(hw: HardwareConfig, size):
    """Energy per byte accessed in an on-chip memory of `size` bytes (64-bit accesses): a
    float for a number of bytes, a piecewise expression for a symbolic size."""
    classes = [(limit, getattr(hw.energy, key) / 8) for limit, key in SRAM_CLASSES]
    if not isinstance(size, sympy.Basic) or size.is_number:
        return next((pj for limit, pj in classes if size <= limit), classes[-1][1])
    pieces = [(sympy.Float(pj), sympy.Le(size, limit)) for limit, pj in classes[:-1]]
    return sympy.Piecewise(*pieces, (sympy.Float(classes[-1][1]), True))


def compute_units(o: OpCost, hw: HardwareConfig) -> int:
    """Compute units an operator allocates: its FLOPs/cycle over one unit's, rounded up."""
    return -(-o.compute_bw // hw.area.unit_flops) if o.compute_bw else 0


def _types(o: OpCost) -> tuple[str, str]:
    """(the element type an operator multiplies, the one it adds into)."""
    return (o.access.in_dtype, o.access.dtype) if o.access is not None else ("", "")


Joules: TypeAlias = "float | sympy.Expr"  # a float once the dims are bound, else sympy


@dataclass(frozen=True)
class OpEnergy:
    """One operator's dynamic energy by component (joules) and its compute area (mm2)."""

    node: str
    op: str
    joules: dict[str, Joules]
    compute_mm2: float

    @property
    def total(self) -> Joules:
        return _sum(list(self.joules.values()))


def _times(count, pj: float) -> Joules:
    """`count` (bytes, FLOPs: a number or a sympy expression) x `pj` picojoules, in
    joules: a float when `count` is a number (no sympy arithmetic in a bound run)."""
    x = number(count) if isinstance(count, sympy.Basic) else count
    if x is not None:
        return float(x) * pj * PJ
    return count * sympy.Float(pj * PJ)


def _sum(values: list[Joules]) -> Joules:
    if all(isinstance(v, float) for v in values):
        return sum(values, 0.0)
    return sympy.Add(*values)


def op_energy(o: OpCost, hw: HardwareConfig, hop: float) -> OpEnergy:
    """The dynamic energy and compute area of one (bound) operator."""
    e, a = hw.energy, o.access
    joules: dict[str, Joules] = {
        "compute": _times(o.flops, flop_pj(hw, *_types(o))),
        "sram": 0.0, "fifo": 0.0, "fabric": 0.0,
        "off_chip": _times(o.off_chip, 8 * e.off_chip_pj_per_bit)}
    if a is not None:
        accessed = a.sram_write + a.sram_read
        if accessed != 0:
            size = number(a.sram_size)
            joules["sram"] = _times(accessed, sram_pj_per_byte(hw, size)) \
                if size is not None else accessed * sram_pj_per_byte(hw, a.sram_size) * PJ
        joules["fifo"] = _times(a.streamed, 2 * e.sram_8kib_pj / 8)
        joules["fabric"] = _times(a.streamed, 8 * e.wire_pj_per_bit_mm * hop)
    return OpEnergy(o.node, o.op, joules, compute_units(o, hw) * unit_mm2(hw, *_types(o)))


@dataclass(frozen=True)
class EnergyReport:
    """A program's energy and area on one hardware description: per operator, by
    component, the static energy over `cycles` (None: no run) and the allocation."""

    ops: list[OpEnergy]
    by_component: dict[str, Joules]  # "static" only with cycles
    compute_mm2: float
    sram_mm2: float | sympy.Expr
    compute_units: int
    seconds: float | sympy.Expr | None  # the run's time at the accelerator clock

    @property
    def dynamic_j(self) -> Joules:
        return _sum([self.by_component[k] for k in DYNAMIC])

    @property
    def total_j(self) -> Joules | None:
        if self.seconds is None:
            return None
        return _sum([self.dynamic_j, self.by_component["static"]])

    @property
    def area_mm2(self) -> float | sympy.Expr:
        return self.compute_mm2 + self.sram_mm2


def clock_hz(hw: HardwareConfig) -> float:
    """The accelerator clock (`dram.accel_clock_mhz`) in Hz."""
    return hw.value(CLOCK_KEY) * 1e6


def energy_report(analysis: Analysis, hw: HardwareConfig, on_chip_bytes,
                  cycles=None, activations: int = 0) -> EnergyReport:
    """Energy and area of a bound `analysis` on `hw`; `on_chip_bytes` is the allocation the
    area counts (the analysis's, FIFOs added when asked); `cycles` (a run's, or the
    roofline's lower bound, symbolic or not) and `activations` (a run's) price the static
    energy and the row activations (no cycles: the dynamic energy alone)."""
    hop = hop_mm(hw)
    ops = [op_energy(o, hw, hop) for o in analysis.ops]
    by: dict[str, Joules] = {k: _sum([o.joules[k] for o in ops]) for k in DYNAMIC}
    by["off_chip"] += activations * hw.energy.activation_pj * PJ
    compute_mm2 = sum(o.compute_mm2 for o in ops)
    seconds: float | sympy.Expr | None = None
    if cycles is not None:
        n = number(cycles) if isinstance(cycles, sympy.Basic) else cycles
        seconds = float(n) / clock_hz(hw) if n is not None else \
            cycles / sympy.Float(clock_hz(hw))
        by["static"] = hw.energy.leakage_mw_per_mm2 * 1e-3 * compute_mm2 * seconds
    units = sum(compute_units(o, hw) for o in analysis.ops)
    return EnergyReport(ops, by, compute_mm2, sram_mm2(hw, on_chip_bytes), units, seconds)


def energy_bound(analysis: Analysis, hw: HardwareConfig, roof: Roofline) -> EnergyReport:
    """A lower bound without a run (`stepc analyze --energy`): the dynamic energy, and the
    leakage over the roofline's cycles when those are numbers (none while symbolic)."""
    return energy_report(analysis, hw, analysis.total("on_chip"),
                         roof.cycles if roof.bound != "unknown" else 0)
