"""Design-space sweeps: grids of parameter overrides x hardware x traces, run in parallel,
results as JSON lines, Pareto fronts and the paper's Pareto Improvement Distance.

The package is callable: `stepc.sweep(programs, grid=...)` is `stepc.api.study.sweep`."""

from stepc.callable_package import make_callable

make_callable(__name__, "stepc.api.study:sweep")
