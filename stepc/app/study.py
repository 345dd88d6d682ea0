"""The use cases of the study commands: `stepc sweep` (a grid of runs and its Pareto
front), `stepc plot` (a picture of a sweep's results) and `stepc reproduce` (the paper's
figures run and judged)."""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stepc.api import InputError
from stepc.explore import MAX_JOBS

if TYPE_CHECKING:
    from stepc.explore.runner import Interrupted
    from stepc.reproduction.report import Reproduced

__all__ = ["MAX_JOBS", "FigureDone", "Interrupted", "ParetoFront", "Plotted", "SweepOutcome",
           "figure_names", "plot", "reproduce", "sweep"]

ON_DEMAND = {"on_chip_bytes": "on_chip_bytes_on_demand"}  # what --on-demand charges instead


def __getattr__(name: str):
    """`Interrupted` (Ctrl-C stopped the points) loads the sweep runner when first asked:
    the commands' help imports this module for MAX_JOBS and runs no sweep."""
    if name == "Interrupted":
        from stepc.explore.runner import Interrupted
        return Interrupted
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class ParetoFront:
    """The Pareto-optimal points of a sweep over some metrics, and the distance of every
    other point to the baseline front (None: no baseline asked for, or none matched)."""

    ok: list[dict]  # the points that ran, in point order
    metrics: list[str]
    fields: list[dict[str, str]]  # per point: the field each metric reads
    front: list[int]
    chosen: str | None  # the --on-demand selection
    distances: dict[int, float] | None
    missing_baseline: bool  # baselines were asked for and select no point

    def lines(self) -> list[str]:
        from stepc.report.sweep import pareto_lines
        return pareto_lines(self.ok, self.metrics, self.fields, self.front, self.chosen,
                            self.distances)


@dataclass
class SweepOutcome:
    """A finished sweep: its records (the results file's shape), what ran and was reused."""

    records: list[dict]
    ran: int
    reused: int
    out: str

    def to_dict(self) -> dict:
        return {"records": self.records, "reused": self.reused, "ran": self.ran,
                "out": self.out}

    def written(self) -> str:
        """What the sweep added to its results file."""
        from stepc.report.sweep import written_line
        return written_line(self.ran, self.reused, self.out)

    def render(self, console) -> None:
        """The table of the points."""
        from stepc.report.sweep import points_table
        points_table(self.records, console)

    def errors(self) -> list[str]:
        """A line per point that failed with an error."""
        from stepc.report.sweep import error_lines
        return error_lines(self.records)

    def failures(self) -> Counter:
        """How many points failed, by status (`error`, `deadlock`)."""
        return Counter(r["status"] for r in self.records if r["status"] != "ok")

    def pareto(self, metrics: list[str], baselines: Sequence[tuple[str, str]] = (),
               on_demand: Sequence[tuple[str, str]] = ()) -> ParetoFront:
        """The front over `metrics` (minimised) of the points that ran; `baselines`
        (FIELD, VALUE) pairs select the baseline points, `on_demand` pairs the points
        charged on_chip_bytes_on_demand for on_chip_bytes. A metric some point lacks, or
        an `on_demand` that selects nothing, raises InputError."""
        from stepc.explore.pareto import pareto_front, pid
        from stepc.explore.points import point_order

        ok = sorted((r for r in self.records if r["status"] == "ok"), key=point_order)
        charged = [any(_matches(r, f, v) for f, v in on_demand) for r in ok]
        if on_demand and not any(charged):
            raise InputError("--on-demand selects no point")
        fields = [{m: ON_DEMAND.get(m, m) if charged[i] else m for m in metrics}
                  for i in range(len(ok))]
        for m in metrics:
            if any(not isinstance(r.get(fields[i][m]), (int, float)) for i, r in enumerate(ok)):
                raise InputError(f"--pareto {m}: not a numeric metric of every point")
        vals = [tuple(r[fields[i][m]] for m in metrics) for i, r in enumerate(ok)]
        base = [i for i, r in enumerate(ok) if all(_matches(r, f, v) for f, v in baselines)]
        distances = None
        if baselines and base:
            distances = {i: pid(vals[i], [vals[j] for j in base]) for i in range(len(ok))
                         if i not in base}
        chosen = " or ".join(f"{f}={v}" for f, v in on_demand) if on_demand else None
        return ParetoFront(ok, metrics, fields, pareto_front(vals), chosen, distances,
                           bool(baselines) and not base)


def _matches(rec: dict, field: str, value: str) -> bool:
    """Whether a record's field (`program`: its path or file name; a param; a metric) has
    the value."""
    if field == "program":
        return rec["program"] == value or os.path.basename(rec["program"]) in (
            value, value + ".step")
    if field in rec["params"]:
        return str(rec["params"][field]) == value
    return str(rec.get(field)) == value


def sweep(files: Sequence[str], grid: Mapping[str, list[int]], params: Mapping[str, int],
          hws: Sequence[str], sets: Sequence[str], traces: Mapping[str, list[str]],
          timing_only: bool, jobs: int | None, out: str, resume: bool, *,
          connect: Callable[[], contextlib.AbstractContextManager] | None = None,
          progress: Callable[[int], contextlib.AbstractContextManager] | None = None,
          log: Callable[[str], None] = lambda line: None) -> SweepOutcome:
    """Run every point of `files` x `grid` x `hws` x `traces`, appending each record to
    `out` (`resume`: reusing its finished points). `connect()` gives the executor the
    points run on (a context that closes it; default: local processes), `progress(total)`
    a context giving a per-record callback, `log` each warning and note as it comes. Bad
    input raises InputError (a program with errors: StepError); Ctrl-C, Interrupted."""
    from stepc.api import plan_sweep
    from stepc.report.sweep import resume_line

    plan = plan_sweep(list(files), grid, params, list(hws), sets, traces, timing_only, jobs,
                      out, resume)
    for warning in plan.warnings:
        log(f"warning: {warning}")
    points = len(plan.sweep.points)
    with connect() if connect else contextlib.nullcontext() as executor:
        if executor is not None:
            plan.sweep.executor = executor
        if resume:
            earlier = plan.earlier()
            log(resume_line(out, points, len(earlier.reusable), earlier.why_rerun))
        with progress(points) if progress else contextlib.nullcontext() as per_record:
            results = plan.run(resume=resume, progress=per_record)
    return SweepOutcome(results.records, results.ran, results.reused, out)


@dataclass
class Plotted:
    """A picture written from a sweep's results."""

    out: str
    shown: int  # the points drawn (those that ran)


def plot(results: str, out: str, *, bar: str | None = None, x: str = "on_chip_bytes",
         y: str = "cycles", label: str | None = None, group: str | None = None,
         logx: bool = False, logy: bool = False, relative: Mapping[str, str] | None = None,
         force: bool = False) -> Plotted:
    """A scatter plot of `y` over `x` with Pareto fronts (one series per `group`, default
    program), or with `bar` a bar chart of that metric (`relative`: divided into the
    baseline point's value), from the last record of each point in `results`. An
    unreadable results file, metric or selector raises InputError."""
    from stepc.explore.plot import PlotError, bars, scatter
    from stepc.explore.records import ResultsFileError, latest_records, read_results
    try:
        records = latest_records(read_results(results))
    except ResultsFileError as e:
        raise InputError(str(e)) from None
    try:
        if bar:
            bars(records, bar, out, dict(relative or {}), force, logy, label, group)
        else:
            scatter(records, x, y, out, label, group or "program", logx, logy, True, force)
    except PlotError as e:  # a format, metric, selector or missing extra
        raise InputError(str(e)) from None
    return Plotted(out, sum(r.get("status") == "ok" for r in records))


def figure_names() -> list[str]:
    """The figures `reproduce` knows, in the paper's order (light: loads no sympy)."""
    from stepc.reproduction.figures import available_figures
    return available_figures()


@dataclass
class FigureDone:
    """One reproduced figure: its verdict and where its points came from."""

    figure: str
    reproduced: Reproduced

    @property
    def failed_points(self) -> int:
        return self.reproduced.failed_points

    def line(self) -> str:
        from stepc.report.reproduction import figure_line
        return figure_line(self.figure, self.reproduced)


def reproduce(figure: str, data: str | None, out: str, jobs: int | None, model: str,
              fresh: bool, *, progress: contextlib.AbstractContextManager | None = None,
              on_figure: Callable[[str], None] | None = None) -> Iterator[FigureDone]:
    """Reproduce `figure` (or `all`) of the paper's evaluation under `out`: yields each
    figure as it finishes; `on_figure(figure)` is called as its points start to be
    collected, `progress` gives a per-record callback. Bad input raises InputError;
    Ctrl-C, Interrupted."""
    from stepc.api import reproduce as run

    current = [figure_names()[0] if figure == "all" else figure.removeprefix("fig")]

    def collecting(name: str) -> None:
        current[0] = name
        if on_figure is not None:
            on_figure(name)

    with progress if progress is not None else contextlib.nullcontext() as per_record:
        for done in run(figure, data, out, jobs, model, fresh, per_record, collecting):
            yield FigureDone(current[0], done)
