"""The roofline as text: the program's bound under `stepc analyze --hw`, and one operator's
with the program's in the language server's hover. Both read the analysis's `Roofline`
and `roofline_terms` (stepc.analyze): the numbers are computed in one place."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import sympy

from stepc.analyze import roofline_terms
from stepc.types import fmt_dim

if TYPE_CHECKING:
    from stepc.analyze.analysis import Analysis, Roofline
    from stepc.hw import HardwareConfig


def roofline_lines(roof: Roofline, hw: HardwareConfig, allocated_compute: int,
                   cycles: Callable[[sympy.Expr], str],
                   rate: Callable[[sympy.Expr], str]) -> list[str]:
    """The roofline block of the analysis report: memory and compute cycles (formatted by
    `cycles`), the off-chip rate (by `rate`) and which bound holds."""
    return [f"roofline ({hw.name}):",
            f"  memory  {cycles(roof.memory_cycles)} cycles "
            f"({rate(sympy.nsimplify(hw.peak_bw))} B/cycle off-chip)",
            f"  compute {cycles(roof.compute_cycles)} cycles "
            f"({allocated_compute:,} FLOP/cycle allocated)",
            "  " + (f"{roof.bound}-bound" if roof.bound != "unknown" else
                    "bound depends on the symbols")]


def operator_roofline_text(a: Analysis, hw: HardwareConfig, roof: Roofline, preset: str,
                           node: str) -> str:
    """The hover's roofline: one operator instance's off-chip bytes, FLOPs and least
    cycles, and the program's least cycles with its bound, on hardware `preset`."""
    cost = next((o for o in a.ops if o.node == node), None)
    lines = [f"roofline on `{preset}`:"]
    if cost is not None:
        mem, comp = roofline_terms(cost.off_chip, cost.flops, hw.peak_bw, cost.compute_bw)
        bound = sympy.Max(*[t for t in (mem, comp) if t != 0] or [0])
        lines.append(f"- this operator: {fmt_dim(cost.off_chip)} bytes off-chip, "
                     f"{fmt_dim(cost.flops)} FLOPs; at least {fmt_dim(bound)} cycles")
    lines.append(f"- the program: at least {fmt_dim(roof.cycles)} cycles ({roof.bound} bound)")
    return "\n".join(lines)
