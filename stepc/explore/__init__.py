"""Design-space sweeps: grids of parameter overrides x hardware x traces, run in parallel,
results as JSON lines, Pareto fronts and the paper's Pareto Improvement Distance
(`stepc.sweep` is the API's door to them)."""

MAX_JOBS = 1024  # worker processes of one sweep, search or reproduction
