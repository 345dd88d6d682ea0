"""The text of a reproduction (`stepc reproduce`): each figure's report.md, with each
claim's value beside the paper's, the checks, the notes and the points' table; and one
line per figure, its verdict on the paper's claims and where its points came from."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from stepc.reproduction.report import COLUMN_NAMES
from stepc.reproduction.spec import fmt_value

if TYPE_CHECKING:
    from stepc.reproduction.figure_plots import Bars, Plot
    from stepc.reproduction.report import FigureResult, Reproduced

NO_QUIRK = ("no known artifact quirk explains it: "
            "a difference between stepc and the artifact to investigate")


def figure_report(result: FigureResult) -> str:
    """A figure's report.md: what ran, the claims, assumptions, quirks, points and plots."""
    spec = result.spec
    lines = [f"# Figure {result.figure}: {spec['title']}", ""]
    lines += _run_lines(result)
    if result.chosen:
        lines += ["", "Params chosen from other figures' results:", "", *result.chosen]
    if spec.get("note"):
        lines += ["", " ".join(spec["note"].split())]
    lines += _claim_lines(result)
    lines += _metric_lines(spec)
    if spec.get("assumptions"):
        lines += ["", "Assumptions (what the paper does not pin down):", ""]
        lines += [f"- {' '.join(a.split())}" for a in spec["assumptions"]]
    if spec.get("quirks"):
        lines += ["", "Known quirks of the paper's artifact that this figure touches:", ""]
        lines += [f"- {' '.join(q.split())}" for q in spec["quirks"]]
    lines += _point_lines(result)
    if result.plots:
        lines += [""] + _plot_lines(result.plots)
    return "\n".join(lines) + "\n"


def _metric_lines(spec: dict) -> list[str]:
    """How each metric the claims read is counted: its meaning in the measurement record
    (stepc/measure.py), the one definition every report, sweep and search uses."""
    from stepc.measure import METRICS
    used = sorted({name for claim in spec.get("claim", [])
                   for name in re.findall(r"\.(\w+)", str(claim.get("value", "")))
                   if name in METRICS})
    if not used:
        return []
    return ["", "How the claims' metrics are counted (stepc's measurement record):", "",
            *(f"- `{n}` ({METRICS[n].unit}): {' '.join(METRICS[n].meaning.split())}"
              for n in used)]


def _run_lines(result: FigureResult) -> list[str]:
    """What ran: points, reused and simulated, memory model, data, stepc's code."""
    spec, records, done = result.spec, result.records, result.summary
    errors = sorted({r.get("error", "") for r in records if r.get("status") == "error"})
    lines = [f"- error: {e}" for e in errors[:3]]
    uses_traces = any(sw.get("trace") for sw in spec.get("sweep", []))
    source = ("synthetic where noted" if result.synthetic else "the paper's traces") \
        if uses_traces else "no traces needed"
    own = [sw.get("name") or Path(sw["program"]).stem for sw in spec.get("sweep", [])
           if sw.get("own_model")]
    models = f"`{result.model}`" + (f" (own preset model: {', '.join(own)})" if own else "")
    lines.append(f"Points: {len(records)} ({sum(r['status'] == 'ok' for r in records)} ok). "
                 f"HBM model: {models}. Data: {source}.")
    why = ", ".join(f"{n} {reason}" for reason, n in sorted(result.why_run.items()))
    lines.append(f"Reused {done.reused} point(s) from an earlier run in this directory "
                 f"(same program and imports, traces, hardware and stepc); simulated "
                 f"{done.simulated} now" + (f" ({why})" if why else "") +
                 (f", and took {done.shared} from the identical points of other figures "
                  "in this run" if done.shared else "") + f". stepc {result.digest}.")
    lines += [f"- {n}" for n in result.notes]
    for name, ref in spec.get("reference", {}).items():
        where = f"`{ref['file']}` under {result.data}" if result.data else \
            "not at hand (no --data)"
        lines.append(f"- reference `{name}`: {ref.get('about', ref['file'])}; {where}")
    return lines


def _claim_lines(result: FigureResult) -> list[str]:
    """The claims table, why the tolerances are what they are, why claims failed, and
    measurements without a paper claim."""
    synthetic = result.synthetic
    lines = ["", "| # | claim | paper | accepted | stepc | |", "|---|---|---|---|---|---|"]
    for i, c in enumerate(result.claims, 1):
        verdict = c.verdict + (" (synthetic data)" if synthetic and c.holds is False else "")
        lines.append(f"| {i} | {c.text} | {c.paper} | {c.accepted} | {c.shown} | {verdict} |")
    lines += ["", "Why each claim's accepted values are what they are:", "",
              *(f"{i}. {c.reason}" for i, c in enumerate(result.claims, 1))]
    if any(not c.counts for c in result.claims):
        lines += ["", ("The paper column holds only the paper's own numbers; a value from "
                       "the artifact, its data or a target of stepc's is named in the "
                       "accepted column. stepc's own targets and claims judged on the points "
                       "a model was fitted on (in-sample) are checks, not reproductions: they "
                       "are not counted among the claims reproduced.")]
    failed = [c for c in result.claims if c.holds is False]
    if failed:
        lines += ["", "Why these claims are not reproduced or checks not met (likely reasons):",
                  ""]
        why_of: dict[str, list[str]] = {}  # claims sharing a reason are listed together
        for c in failed:
            why = c.failure or NO_QUIRK
            why += "" if why.endswith((".", "!", "?", ")")) else "."
            why_of.setdefault(why, []).append(f"**{c.text}** (stepc {c.shown})")
        for why, claims in why_of.items():
            if synthetic:
                why += " This run also used synthetic stand-ins for the paper's traces."
            lines.append(f"- {'; '.join(claims)}: {why}")
    if result.measures:
        lines += ["", "Measured, with no claim of the paper to compare:", "",
                  "| measure | stepc | note |", "|---|---|---|"]
        for m in result.measures:
            shown = f"- ({m.error})" if m.value is None else f"{m.value:.4g}"
            lines.append(f"| {m.text} | {shown} | {' '.join(m.note.split())} |")
    return lines


def _point_lines(result: FigureResult) -> list[str]:
    """The points' table: series, point and the chosen metrics (or the point's status)."""
    columns = result.columns
    lines = ["", "| series | point | " + " | ".join(COLUMN_NAMES[c] for c in columns) + " |",
             "|---|---|" + "---|" * len(columns)]
    for r in result.records:
        lines.append(f"| {r.get('tag')} | {_point_name(r)} | " +
                     " | ".join(fmt_value(r.get(c)) if r.get("status") == "ok" else
                                str(r.get("status")) for c in columns) + " |")
    return lines


def _plot_lines(plots: list[Plot]) -> list[str]:
    """Each plot's bars (a bar plot's values), then its image or why it was not drawn."""
    lines = []
    for plot in plots:
        if plot.bars is not None:
            lines += _bar_table(plot.bars)
        lines.append(f"(no plot {plot.name}: {plot.error})" if plot.error else
                     f"![{plot.title}]({plot.name})")
    return lines


def _bar_table(bars: Bars) -> list[str]:
    """A Markdown table of grouped bars: one row per group, one column per series."""
    out = ["| " + " | ".join(bars.header) + " |", "|---|" + "---|" * len(bars.series)]
    for i, n in enumerate(bars.names):
        out.append(f"| {n} | " + " | ".join("-" if bars.cols[s][i] is None else
                                            f"{bars.cols[s][i]:.3f}" for s in bars.series)
                   + " |")
    return out + [""]


def _point_name(rec: dict) -> str:
    """Params and trace (window label, else file name) of a record."""
    parts = [f"{k}={v}" for k, v in sorted(rec["params"].items())]
    labels = rec.get("labels", {})
    for stream, path in sorted(rec.get("traces", {}).items()):
        parts.append(f"{stream}={labels.get(stream) or os.path.basename(path)}")
    return ", ".join(parts) or "-"


def figure_line(figure: str, done: Reproduced) -> str:
    """How many of the figure's claims reproduced, its points reused, simulated, shared
    and failed, and its report."""
    judged = done.reproduced + done.not_reproduced
    checks = done.checks_met + done.checks_missed
    verdict = f"{done.reproduced} of {judged} claims reproduced" + (
        f" ({done.needs_data} need the paper's data: --data DIR)"
        if done.needs_data else "") + (
        f", {done.checks_met} of {checks} of stepc's own checks met (not "
        "reproductions)" if checks else "")
    points = f"{done.reused} points reused, {done.simulated} simulated" + (
        f", {done.shared} shared with other figures" if done.shared else "") + (
        f", {done.failed_points} FAILED" if done.failed_points else "")
    return f"figure {figure}: {verdict}; {points}: {done.report}"
