"""Design-space sweeps: grids of parameter overrides x hardware x traces, run in parallel,
results as JSON lines, Pareto fronts and the paper's Pareto Improvement Distance.

The package is callable: `stepc.sweep(programs, grid=...)` is `stepc.api.study.sweep`."""

import sys
import types


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        """`stepc.api.study.sweep`: simulate every combination of programs x grid values x
        hardware x trace files in parallel; returns `SweepResults`."""
        from stepc.api.study import sweep
        return sweep(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
