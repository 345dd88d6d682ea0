"""A lower bound on a run's cycles before it starts, so a run that would never end in
practice (a dim of 2^64, requests of 10^12 tokens) is refused instead of started: the
roofline bound of its off-chip traffic and FLOPs, with the dims its external data fixes
bound and any other dim taken as 0."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from stepc.analyze import Analysis
    from stepc.hw import HardwareConfig
    from stepc.typecheck.checker import TypedProgram

MAX_RUN_CYCLES = 10**11  # cycles a run may need without --max-cycles (hours of simulation)


def cycles_lower_bound(analysis: Analysis, typed: TypedProgram, hw: HardwareConfig,
                       data: dict[str, np.ndarray]) -> int | None:
    """At least this many cycles (None when a cost cannot be evaluated exactly)."""
    import sympy

    from stepc.analyze import exact, roofline_terms, trace_bindings
    from stepc.traces import TraceError
    try:
        bound = {k: exact.number(sympy.sympify(v)) for k, v in
                 trace_bindings(typed, data).items()}
    except TraceError:
        return None  # the run reports the data that does not fit
    numbers = _DataOrZero(bound)
    traffic = flops = 0
    for o in analysis.ops:
        moved, computed = exact.value(sympy.sympify(o.off_chip), numbers), \
            exact.value(sympy.sympify(o.flops), numbers)
        if moved is None or computed is None:
            return None
        traffic, flops = traffic + moved, flops + computed
    return int(math.ceil(max(*roofline_terms(traffic, flops, hw.peak_bw,
                                             analysis.allocated_compute), 0)))


class _DataOrZero(dict):
    """A symbol's value: the one the data fixes, else 0 (costs grow with every dim)."""

    def __init__(self, by_name: dict):
        super().__init__()
        self.by_name = by_name

    def __missing__(self, symbol):
        return self.by_name.get(symbol.name) or 0


def refusal(cycles: int) -> str:
    """Why a run that needs `cycles` is not started, and how to bound it."""
    return (f"the run needs at least {cycles:,} cycles (the roofline bound of its off-chip "
            f"traffic and FLOPs for this data), more than the {MAX_RUN_CYCLES:,} stepc "
            "simulates unasked: make the dims smaller, or give --max-cycles N to stop the "
            "run at cycle N")
