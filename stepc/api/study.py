"""Studies over many runs: `sweep` (programs x params x hardware x traces, in parallel) and
`reproduce` (a figure of the paper's evaluation)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepc.api.arguments import (
    bool_arg,
    callback_arg,
    choice_arg,
    int_arg,
    int_values_arg,
    mapping_arg,
    path_arg,
    paths_arg,
)
from stepc.api.errors import InputError
from stepc.api.inputs import hardware, settings
from stepc.api.program import check
from stepc.explore import MAX_JOBS
from stepc.hw.memory import MEMORY_MODELS
from stepc.spelling import given, label, switch

if TYPE_CHECKING:
    from stepc.explore.runner import Earlier, Sweep
    from stepc.reproduction.report import Reproduced

MAX_POINTS = 10_000
set_ = set  # the builtin, which the `set=` argument (hardware overrides) shadows


def record_progress(progress) -> Callable[[dict], None] | None:
    """A per-record callback from a tqdm-like object (`update(1)` per point) or a
    function of the record."""
    if progress is None or not hasattr(progress, "update"):
        return progress
    return lambda record: progress.update(1)


@dataclass
class SweepResults:
    """A finished sweep: one record per point (the `results.jsonl` schema), in point order."""

    records: list[dict]
    reused: int = 0  # points taken from an earlier run (`resume=True`)
    ran: int = 0
    out: str | None = None  # the results file, if one was written

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[dict]:
        """The flat records of `to_records()` (`r["TILE_N"]`); `records` keeps the
        results file's own shape (params nested)."""
        return iter(self.to_records())

    def __repr__(self) -> str:
        failed = len(self.failed)
        where = f", out={self.out!r}" if self.out else ""
        return (f"SweepResults({len(self.records)} points: {len(self.records) - failed} ok, "
                f"{failed} failed; {self.ran} ran, {self.reused} reused{where})")

    @property
    def failed(self) -> list[dict]:
        """Records of points that did not finish (`status` error or deadlock)."""
        return [r for r in self.records if r["status"] != "ok"]

    def to_dict(self) -> dict:
        return {"records": self.records, "reused": self.reused, "ran": self.ran,
                "out": self.out}

    def to_records(self) -> list[dict]:
        """Flat records: each param and trace a column of its own (`TILE_N`, `trace routing`)."""
        rows = []
        for r in self.records:
            row = {k: v for k, v in r.items() if k not in ("schema", "params", "traces",
                                                          "key", "digests", "seal")}
            row.update(r["params"])
            row.update({f"trace {k}": v for k, v in r["traces"].items()})
            rows.append(row)
        return rows

    def to_pandas(self):
        """The flat records as a pandas DataFrame (`pip install 'stepc[pandas]'`)."""
        try:
            import pandas
        except ImportError:
            raise ImportError("to_pandas needs pandas: pip install 'stepc[pandas]' (or use "
                              "to_records())") from None
        return pandas.DataFrame(self.to_records())


@dataclass
class SweepPlan:
    """A sweep whose inputs are read and checked, ready to `run`."""

    sweep: Sweep
    warnings: list[str] = field(default_factory=list)  # hardware overrides no run reads

    def earlier(self) -> Earlier:
        """What the results file already holds for these points (for `resume`)."""
        return self.sweep.earlier()

    def run(self, resume: bool = False, progress=None) -> SweepResults:
        outcome = self.sweep.run(resume=resume, progress=record_progress(progress))
        return SweepResults(outcome.records, outcome.reused, outcome.ran, self.sweep.out)


def plan_sweep(programs: Sequence[str | os.PathLike] | str, grid: Mapping | None = None,
               params: Mapping[str, int] | None = None, hw: str | Sequence[str] = "paper-eval",
               set: Mapping[str, Any] | Sequence[str] | None = None,  # noqa: A002
               traces: Mapping[str, str | Sequence[str]] | None = None,
               timing_only: bool = True, jobs: int | None = None, out: str | None = None,
               resume: bool = False, executor=None) -> SweepPlan:
    """Check a sweep's programs, params, traces and hardware, and read its inputs."""
    from stepc.explore.runner import Sweep, grid_points
    from stepc.outputs import OutputPathError, check_output_path

    files = paths_arg("programs", programs)
    fixed = {k: int_arg(f"params[{k!r}]", v)
             for k, v in mapping_arg("params", params, "params to values").items()}
    grid = {k: int_values_arg("grid", k, vs)
            for k, vs in mapping_arg("grid", grid, "params to lists of values").items()}
    both = sorted(set_(fixed) & set_(grid))
    if both:
        raise InputError(f"{given('params', both[0])} and {given('grid', both[0])}: give the "
                         "param one or the other")
    grid.update({n: [v] for n, v in fixed.items()})
    trace_sets = {name: paths_arg(f"traces[{name!r}]", paths) for name, paths in
                  mapping_arg("traces", traces, "stream names to trace files").items()}
    hws = paths_arg("hw", hw) if hw else ["paper-eval"]
    bool_arg("timing_only", timing_only)
    bool_arg("resume", resume)
    if jobs is not None:
        jobs = int_arg("jobs", jobs, minimum=1, maximum=MAX_JOBS)
    if out is not None:
        out = path_arg("out", out)
        try:  # a directory or an unwritable place first: resuming cannot help those
            check_output_path(label("out"), out)
        except OutputPathError as e:
            raise InputError(str(e)) from None
        if out_exists(out) and not resume:
            raise InputError(f"{given('out', out)} exists: add {switch('resume')} to continue "
                             "that sweep, or choose another file")
        if resume and out_exists(out):
            results_file(out)
    total = len(files) * len(hws)
    for values in [*grid.values(), *trace_sets.values()]:
        total *= len(values)
    if total > MAX_POINTS:
        raise InputError(f"the sweep has more than {MAX_POINTS:,} points: narrow the grid")
    for name, paths in trace_sets.items():
        for path in paths:
            if not os.path.exists(path):
                raise InputError(f"{given('traces', name)}: no such file {path}")
    declared = {f: set_(check(f, **fixed).program().params) for f in files}
    unknown = sorted(set_(grid) - set_().union(*declared.values()))
    if unknown:
        which = files[0] if len(files) == 1 else "no program"
        raise InputError(f"{given('grid', unknown[0])}: {which} has no parameter "
                         f"`{unknown[0]}`")
    sets = settings(set)
    warnings = [w for h in hws for w in hardware(h, sets)[1]]
    points = grid_points(files, grid, hws, sets, trace_sets, timing_only, declared)
    workers = min(jobs or (os.cpu_count() or 1), max(len(points), 1))  # idle ones do nothing
    return SweepPlan(Sweep(points, out, workers, executor), warnings)


def sweep(programs: Sequence[str | os.PathLike] | str, grid: Mapping | None = None,
          params: Mapping[str, int] | None = None, hw: str | Sequence[str] = "paper-eval",
          set: Mapping[str, Any] | Sequence[str] | None = None,  # noqa: A002
          traces: Mapping[str, str | Sequence[str]] | None = None, timing_only: bool = True,
          jobs: int | None = None, out: str | None = None, resume: bool = False,
          progress=None, executor=None) -> SweepResults:
    """Simulate every combination of programs x `grid` values x hardware x trace files, in
    `jobs` worker processes (a concurrent.futures `executor`, e.g. Dask's, instead).

    `grid` maps a param to its values, `params` fixes params, `traces` maps an external
    stream to one trace file or a list of them. `out`: also append each record to this
    JSON-lines file (`resume=True` reuses its finished points). `progress`: a tqdm-like
    object (`update(1)` per point) or a function of each record. Failed points are records
    with `status` "error" or "deadlock", not exceptions."""
    callback_arg("progress", progress)
    plan = plan_sweep(programs, grid, params, hw, set, traces, timing_only, jobs, out,
                      resume, executor)
    return plan.run(resume, progress)


def results_file(path: str) -> None:
    """Refuse, before any point runs, a file to resume that is not sweep results."""
    from stepc.explore.runner import ResultsFileError, read_results
    try:
        read_results(path)
    except ResultsFileError as e:
        raise InputError(f"{label('out')} {e}; give {label('out')} a new file, or the results "
                         f"of an earlier sweep to {switch('resume')}") from None


def out_exists(path: str) -> bool:
    """Whether a results file is already there (a missing directory is not an error yet)."""
    return os.path.lexists(path)


def reproduce(figures: str | Sequence[str], data: str | None = None,
              out: str = "reproduction", jobs: int | None = None, model: str = "ref",
              fresh: bool = False, progress=None,
              on_figure: Callable[[str], None] | None = None) -> Iterator[Reproduced]:
    """Reproduce figures of the paper's evaluation (`"9"`, `["8", "9"]` or `"all"`): their
    points through one worker pool, and per figure a report beside the paper's claims
    under `out`. Yields each figure's summary as it finishes; `on_figure(figure)` is called
    when its points start to be collected, `progress` as for `sweep`."""
    from stepc.outputs import OutputPathError, check_output_path
    from stepc.reproduction.figures import available_figures

    have = available_figures()
    if isinstance(figures, (str, int)) and not isinstance(figures, bool):
        figures = [str(figures)]
    if not isinstance(figures, Sequence) or not figures or \
            not all(isinstance(f, (str, int)) and not isinstance(f, bool) for f in figures):
        raise InputError(f"figures: expected a figure like '9', a list of them or 'all', "
                         f"found {figures!r}")
    names = have if list(figures) == ["all"] else [str(f).removeprefix("fig") for f in figures]
    unknown = [f for f in names if f not in have]
    if unknown:
        raise InputError(f"no experiment spec for figure {unknown[0]} (have: "
                         f"{', '.join(have)}, or all)")
    if data is not None and not os.path.isdir(path_arg("data", data)):
        raise InputError(f"--data {data}: not a directory")
    out = path_arg("out", out)
    jobs = int_arg("jobs", jobs, minimum=1, maximum=MAX_JOBS) if jobs is not None else None
    choice_arg("model", model, tuple(MEMORY_MODELS))
    bool_arg("fresh", fresh)
    callback_arg("progress", progress)
    callback_arg("on_figure", on_figure)
    try:
        check_output_path(label("out"), out, directory=True)
    except OutputPathError as e:
        raise InputError(str(e)) from None
    return _reproduce(names, data, out, jobs, model, fresh, progress, on_figure)


def _reproduce(names: list[str], data: str | None, out: str, jobs: int | None, model: str,
               fresh: bool, progress, on_figure) -> Iterator[Reproduced]:
    """`reproduce` once its arguments are checked: a generator of the figures' summaries,
    each figure's report.md written as it arrives."""
    from contextlib import closing

    from stepc.explore.runner import ResultsFileError
    from stepc.report.reproduction import figure_report
    from stepc.reproduction.run import reproduce_figures
    from stepc.reproduction.spec import SpecError

    per_record = record_progress(progress)

    def collecting(figure: str):
        if on_figure is not None:
            on_figure(figure)
        return per_record

    try:
        with closing(reproduce_figures(names, data, out, jobs or (os.cpu_count() or 1),
                                       model, collecting, fresh)) as results:
            for result in results:  # closed with this generator: its pool stops at once
                done = result.summary
                Path(done.report).write_text(figure_report(result), encoding="utf-8")
                yield done
    except (SpecError, ResultsFileError) as e:
        raise InputError(str(e)) from None
