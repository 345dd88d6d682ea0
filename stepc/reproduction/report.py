"""A figure's report: its CSV, plots and report.md from its sweep's outcome, with each
claim's value beside the paper's, the checks, the notes and the points' table."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

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
from stepc.reproduction.spec import Expanded, fmt_value, program_root

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



def write_report(figure: str, spec: dict, exp: Expanded, sweep, fig_dir: Path, outcome,
            model: str, data: str | None) -> Reproduced:
    """Write a figure's CSV, plots and report from its sweep's outcome."""
    records = [{**r, "labels": exp.labels.get(p.ident, {})}
               for p, r in zip(sweep.points, outcome.records)]
    _write_csv(records, fig_dir / "results.csv")
    from stepc.reproduction.figure_plots import spec_plots
    plot_lines = spec_plots(spec, records, fig_dir)
    done = Reproduced(str(fig_dir / "report.md"), reused=outcome.reused,
                      simulated=outcome.ran - outcome.shared, shared=outcome.shared,
                      failed_points=sum(r.get("status") != "ok" for r in records))
    lines = [f"# Figure {figure}: {spec['title']}", ""]
    lines += _run_lines(spec, records, outcome, exp.notes, model, data)
    if exp.chosen:
        lines += ["", "Params chosen from other figures' results:", "", *exp.chosen]
    if spec.get("note"):
        lines += ["", " ".join(spec["note"].split())]
    references = load_references(spec, data)
    lines += _claim_lines(spec, records, references, done, bool(exp.notes))
    if spec.get("assumptions"):
        lines += ["", "Assumptions (what the paper does not pin down):", ""]
        lines += [f"- {' '.join(a.split())}" for a in spec["assumptions"]]
    if spec.get("quirks"):
        lines += ["", "Known quirks of the paper's artifact that this figure touches:", ""]
        lines += [f"- {' '.join(q.split())}" for q in spec["quirks"]]
    lines += _point_lines(spec, records, figure)
    if plot_lines:
        lines += [""] + plot_lines
    Path(done.report).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return done


def _run_lines(spec: dict, records: list[dict], outcome, notes: list[str], model: str,
               data: str | None) -> list[str]:
    """What ran: points, reused and simulated, memory model, data, stepc's code."""
    errors = sorted({r.get("error", "") for r in records if r.get("status") == "error"})
    lines = [f"- error: {e}" for e in errors[:3]]
    uses_traces = any(sw.get("trace") for sw in spec.get("sweep", []))
    source = ("synthetic where noted" if notes else "the paper's traces") if uses_traces \
        else "no traces needed"
    own = [sw.get("name") or Path(sw["program"]).stem for sw in spec.get("sweep", [])
           if sw.get("own_model")]
    models = f"`{model}`" + (f" (own preset model: {', '.join(own)})" if own else "")
    lines.append(f"Points: {len(records)} ({sum(r['status'] == 'ok' for r in records)} ok). "
                 f"HBM model: {models}. Data: {source}.")
    why = ", ".join(f"{n} {reason}" for reason, n in sorted(outcome.why_run.items()))
    lines.append(f"Reused {outcome.reused} point(s) from an earlier run in this directory "
                 f"(same program and imports, traces, hardware and stepc); simulated "
                 f"{outcome.ran - outcome.shared} now" + (f" ({why})" if why else "") +
                 (f", and took {outcome.shared} from the identical points of other figures "
                  "in this run" if outcome.shared else "") + f". stepc {code_digest()}.")
    lines += [f"- {n}" for n in notes]
    for name, ref in spec.get("reference", {}).items():
        where = f"`{ref['file']}` under {data}" if data else "not at hand (no --data)"
        lines.append(f"- reference `{name}`: {ref.get('about', ref['file'])}; {where}")
    return lines


def _claim_lines(spec: dict, records: list[dict], references: dict, done: Reproduced,
                 synthetic: bool) -> list[str]:
    """The claims table, why the tolerances are what they are, why claims failed, and
    measurements without a paper claim."""
    lines = ["", "| # | claim | paper | accepted | stepc | |", "|---|---|---|---|---|---|"]
    failed: list[tuple[Claim, str]] = []
    reasons = []
    for i, c in enumerate(spec.get("claim", []), 1):
        claim = Claim.from_spec(c)
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
        if holds is None:
            done.needs_data += 1
        elif not claim.counts:
            done.checks_met += holds
            done.checks_missed += not holds
        elif holds:
            done.reproduced += 1
        else:
            done.not_reproduced += 1
        if holds is False:
            failed.append((claim, shown))
            verdict += " (synthetic data)" if synthetic else ""
        lines.append(f"| {i} | {claim.text} | {claim.paper_shown()} | {claim.accepted()} | "
                     f"{shown} | {verdict} |")
        reasons.append(f"{i}. {claim.reason}")
    lines += ["", "Why each claim's accepted values are what they are:", "", *reasons]
    if any(not Claim.from_spec(c).counts for c in spec.get("claim", [])):
        lines += ["", ("The paper column holds only the paper's own numbers; a value from "
                       "the artifact, its data or a target of stepc's is named in the "
                       "accepted column. stepc's own targets and claims judged on the points "
                       "a model was fitted on (in-sample) are checks, not reproductions: they "
                       "are not counted among the claims reproduced.")]
    if failed:
        lines += ["", "Why these claims are not reproduced or checks not met (likely reasons):",
                  ""]
        why_of: dict[str, list[str]] = {}  # claims sharing a reason are listed together
        for claim, shown in failed:
            why = fill_measured(" ".join(claim.quirk.split()), records, references) or \
                "no known artifact quirk explains it: " \
                "a difference between stepc and the artifact to investigate"
            why += "" if why.endswith((".", "!", "?", ")")) else "."
            why_of.setdefault(why, []).append(f"**{claim.text}** (stepc {shown})")
        for why, claims in why_of.items():
            if synthetic:
                why += " This run also used synthetic stand-ins for the paper's traces."
            lines.append(f"- {'; '.join(claims)}: {why}")
    if spec.get("measure"):
        lines += ["", "Measured, with no claim of the paper to compare:", "",
                  "| measure | stepc | note |", "|---|---|---|"]
        for m in spec["measure"]:
            try:
                shown = f"{evaluate_claim(m['value'], records, references):.4g}"
            except (NeedsData, SpecError) as e:
                shown = f"- ({e})"
            lines.append(f"| {m['text']} | {shown} | {' '.join(m.get('note', '').split())} |")
    return lines


def _point_lines(spec: dict, records: list[dict], figure: str) -> list[str]:
    columns = spec.get("columns", DEFAULT_COLUMNS)
    bad = [c for c in columns if c not in METRICS]
    if bad:
        raise SpecError(f"figure {figure}: unknown report column(s) {', '.join(bad)}")
    lines = ["", "| series | point | " + " | ".join(COLUMN_NAMES[c] for c in columns) + " |",
             "|---|---|" + "---|" * len(columns)]
    for r in records:
        lines.append(f"| {r.get('tag')} | {_point_name(r)} | " +
                     " | ".join(fmt_value(r.get(c)) if r.get("status") == "ok" else
                                str(r.get("status")) for c in columns) + " |")
    return lines


def _point_name(rec: dict) -> str:
    """Params and trace (window label, else file name) of a record."""
    parts = [f"{k}={v}" for k, v in sorted(rec["params"].items())]
    labels = rec.get("labels", {})
    for stream, path in sorted(rec.get("traces", {}).items()):
        parts.append(f"{stream}={labels.get(stream) or os.path.basename(path)}")
    return ", ".join(parts) or "-"


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
