"""Reproducing the paper's evaluation: figure specs (`experiments/fig<N>.toml`), their runs
and reports, the checks of the paper's claims, the figure plots, and the fidelity tables of
the memory models against the reference simulator."""
