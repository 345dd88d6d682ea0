"""A figure's results: its CSV and plots written from its sweep's outcome, and what its
report shows evaluated (each claim's value beside the paper's, the checks, the measures,
the points), for stepc.report to render as report.md."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stepc.explore.runner import code_digest
from stepc.measure import METRICS as MEASURED
from stepc.reproduction.claims import (
    METRICS,
    Claim,
    NeedsData,
    SpecError,
    evaluate_claim,
    fill_measured,
    load_references,
)
from stepc.reproduction.spec import Expanded, program_root

if TYPE_CHECKING:
    from stepc.reproduction.figure_plots import Plot

DEFAULT_COLUMNS = ("cycles", "off_chip_bytes", "on_chip_bytes", "on_chip_bytes_on_demand")
COLUMN_NAMES = {name: m.column for name, m in MEASURED.items()}


@dataclass
class Reproduced:
    """One figure's run: where its report is and what it found."""
    report: str
    reproduced: int = 0
    not_reproduced: int = 0
    needs_data: int = 0
    checks_met: int = 0  # stepc's own targets and in-sample checks: not reproductions
    checks_missed: int = 0
    failed_points: int = 0
    reused: int = 0
    simulated: int = 0
    shared: int = 0  # records taken from identical points of other figures in the run

    @property
    def ok(self) -> bool:
        return not self.not_reproduced and not self.failed_points


@dataclass(frozen=True)
class ClaimResult:
    """One claim judged on the run: its value as shown, its verdict and their reasons."""
    text: str
    paper: str  # the paper's own number or bound, `-` when it states none
    accepted: str  # the accepted values, with where the expected value comes from
    shown: str  # stepc's value (`-` when it needs data, `n/a (why)` when it cannot be had)
    verdict: str
    holds: bool | None  # None: it needs the paper's data
    counts: bool  # a reproduction, not one of stepc's own checks
    reason: str  # why the accepted values are what they are
    failure: str = ""  # the claim's quirk with the run's numbers filled in, when it fails


@dataclass(frozen=True)
class MeasureResult:
    """A measurement with no claim of the paper to compare: its value or why it has none."""
    text: str
    value: float | None
    error: str  # why there is no value
    note: str


@dataclass
class FigureResult:
    """A figure's run evaluated: what its report.md shows, and its summary."""
    figure: str
    spec: dict
    records: list[dict]  # one per point, with its selector labels
    model: str
    data: str | None
    notes: list[str]  # synthetic stand-ins for the paper's traces
    chosen: list[str]  # params chosen from other figures' results, and why
    why_run: dict[str, int]  # reason -> points (re)run for it
    digest: str  # stepc's code
    claims: list[ClaimResult]
    measures: list[MeasureResult]
    columns: tuple[str, ...]  # the metrics of the points' table
    plots: list[Plot]  # drawn in the figure's directory
    summary: Reproduced

    @property
    def synthetic(self) -> bool:
        """Whether synthetic stand-ins replaced some of the paper's traces."""
        return bool(self.notes)


def evaluate_figure(figure: str, spec: dict, exp: Expanded, sweep, fig_dir: Path, outcome,
                    model: str, data: str | None) -> FigureResult:
    """Write a figure's CSV and plots from its sweep's outcome and evaluate its claims."""
    records = [{**r, "labels": exp.labels.get(p.ident, {})}
               for p, r in zip(sweep.points, outcome.records)]
    _write_csv(records, fig_dir / "results.csv")
    from stepc.reproduction.figure_plots import spec_plots
    plots = spec_plots(spec, records, fig_dir)
    summary = Reproduced(str(fig_dir / "report.md"), reused=outcome.reused,
                         simulated=outcome.ran - outcome.shared, shared=outcome.shared,
                         failed_points=sum(r.get("status") != "ok" for r in records))
    references = load_references(spec, data)
    claims = [_judged(Claim.from_spec(c), records, references)
              for c in spec.get("claim", [])]
    for c in claims:
        _count(c, summary)
    return FigureResult(figure, spec, records, model, data, exp.notes, exp.chosen,
                        dict(outcome.why_run), code_digest(), claims,
                        [_measured(m, records, references) for m in spec.get("measure", [])],
                        _columns(spec, figure), plots, summary)


def _judged(claim: Claim, records: list[dict], references: dict) -> ClaimResult:
    """A claim's value over the records, and whether it holds."""
    holds = None
    try:
        ours = evaluate_claim(claim.value, records, references)
        shown = claim.shown(ours)
        holds = claim.holds(ours)
        verdict = claim.verdict(holds)
    except NeedsData as e:
        shown, verdict = "-", str(e)
    except SpecError as e:
        shown, verdict, holds = f"n/a ({e})", claim.verdict(False), False
    failure = fill_measured(" ".join(claim.quirk.split()), records, references) \
        if holds is False else ""
    return ClaimResult(claim.text, claim.paper_shown(), claim.accepted(), shown, verdict,
                       holds, claim.counts, claim.reason, failure)


def _count(claim: ClaimResult, summary: Reproduced) -> None:
    """Add a judged claim to the figure's counts."""
    if claim.holds is None:
        summary.needs_data += 1
    elif not claim.counts:
        summary.checks_met += claim.holds
        summary.checks_missed += not claim.holds
    elif claim.holds:
        summary.reproduced += 1
    else:
        summary.not_reproduced += 1


def _measured(measure: dict, records: list[dict], references: dict) -> MeasureResult:
    try:
        value, error = evaluate_claim(measure["value"], records, references), ""
    except (NeedsData, SpecError) as e:
        value, error = None, str(e)
    return MeasureResult(measure["text"], value, error, measure.get("note", ""))


def _columns(spec: dict, figure: str) -> tuple[str, ...]:
    """The metrics of the points' table: the spec's `columns`, all known metrics."""
    columns = tuple(spec.get("columns", DEFAULT_COLUMNS))
    bad = [c for c in columns if c not in METRICS]
    if bad:
        raise SpecError(f"figure {figure}: unknown report column(s) {', '.join(bad)}")
    return columns


def _write_csv(records: list[dict], path: Path) -> None:
    fields = ["tag", "program", "params", "traces", "status", *METRICS, "wall_seconds",
              "labels"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        root = program_root()
        for r in records:
            r = {**r, "program": os.path.relpath(r["program"], root)}
            w.writerow([r.get(k) if not isinstance(r.get(k), dict) else
                        " ".join(f"{a}={b}" for a, b in sorted(r[k].items())) for k in fields])
