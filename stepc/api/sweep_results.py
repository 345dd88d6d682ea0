"""Results files of sweeps and reproductions as the CLI and scripts read them: reading and
ordering their records, labelling points, the Pareto front and its distances, plots, and
the figures `reproduce` knows."""

from stepc.explore.pareto import pareto_front, pid
from stepc.explore.plot import PlotError, SelectionError, bars, scatter
from stepc.explore.runner import (
    Interrupted,
    ResultsFileError,
    latest_records,
    point_label,
    point_order,
    read_results,
)

__all__ = ["Interrupted", "PlotError", "ResultsFileError", "SelectionError",
           "available_figures", "bars", "latest_records", "pareto_front", "pid",
           "point_label", "point_order", "read_results", "scatter"]


def available_figures() -> list[str]:
    """The figures `reproduce` knows, in the paper's order (loads the reproduction only
    when asked)."""
    from stepc.reproduction.figures import available_figures as figures
    return figures()
