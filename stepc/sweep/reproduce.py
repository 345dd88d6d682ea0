"""Reproducing a figure of the paper: run its spec's points, check its claims, write a report.

A spec (`experiments/fig<N>.toml`) lists sweeps (program, fixed params, a grid, hardware,
trace globs relative to the data directory) and claims: an expression over point metrics
(`qwen_static[TILE_N=8].on_chip_bytes / qwen_dynamic.on_chip_bytes_on_demand`), the paper's
value and a relative tolerance. Without the paper's traces the points use stepc's seeded
synthetic traces, and the report says so.
"""

from __future__ import annotations

import ast
import csv
import glob
import itertools
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from stepc.sweep.runner import Point, Sweep, point_label, read_results

def _root() -> Path:
    """The checkout holding experiments/ and programs/: the working directory, else the
    source tree this module was loaded from."""
    cwd = Path.cwd()
    return cwd if (cwd / "experiments").is_dir() else Path(__file__).resolve().parents[2]
METRICS = ("cycles", "off_chip_bytes", "on_chip_bytes", "on_chip_bytes_on_demand", "flops",
           "compute_utilization", "bw_utilization", "allocated_compute")


class SpecError(Exception):
    """A bad experiment spec or claim expression."""


@dataclass
class Claim:
    text: str
    value: str
    paper: float | str
    tolerance: float


def available_figures() -> list[str]:
    return sorted((p.stem.removeprefix("fig") for p in (_root() / "experiments").glob(
        "fig*.toml")),
                  key=lambda s: (len(s), s))


def load_spec(figure: str) -> dict:
    path = _root() / "experiments" / f"fig{figure}.toml"
    if not path.exists():
        raise SpecError(f"no experiment spec for figure {figure} (have: "
                        f"{', '.join(available_figures())})")
    return tomllib.loads(path.read_text())


def spec_points(spec: dict, data: str | None, model: str) -> tuple[list[Point], list[str]]:
    """The points of every sweep, and notes on traces replaced by synthetic data."""
    points, notes = [], []
    for sw in spec.get("sweep", []):
        name = sw.get("name") or Path(sw["program"]).stem
        traces = {}
        for stream, pattern in sw.get("trace", {}).items():
            found = sorted(glob.glob(os.path.join(data, pattern))) if data else []
            if found:
                traces[stream] = found[0]
            else:
                notes.append(f"{name}: no trace matching `{pattern}` under the data "
                             "directory; used stepc's seeded synthetic routing instead")
        grid = sw.get("grid", {})
        names = sorted(grid)
        sets = tuple(spec.get("sets", [])) + tuple(sw.get("sets", [])) + \
            (f"hbm.model={model}",)
        for values in itertools.product(*(grid[n] for n in names)):
            params = {**sw.get("params", {}), **dict(zip(names, values))}
            points.append(Point(str(_root() / sw["program"]), tuple(sorted(params.items())),
                                sw.get("hw", "paper-eval"), sets,
                                tuple(sorted(traces.items())), True, name))
    return points, notes


_TERM = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[([^\]]*)\])?\.([a-z_]+)")


def evaluate_claim(expr: str, records: list[dict]) -> float:
    """Evaluate `tag[K=V,...].metric` terms combined with + - * / and numbers."""
    values = []

    def term(m: re.Match) -> str:
        tag, sel, metric = m.group(1), m.group(3), m.group(4)
        want = dict(kv.split("=") for kv in sel.split(",")) if sel else {}
        hits = [r for r in records if r.get("tag") == tag and
                all(str(r["params"].get(k.strip())) == v.strip() for k, v in want.items())]
        if len(hits) != 1:
            raise SpecError(f"`{m.group(0)}` selects {len(hits)} points, not one")
        if hits[0].get("status") != "ok":
            raise SpecError(f"`{m.group(0)}` did not finish ({hits[0].get('status')})")
        if metric not in METRICS:
            raise SpecError(f"unknown metric `{metric}`")
        values.append(float(hits[0][metric]))
        return f"v{len(values) - 1}"

    text = _TERM.sub(term, expr)
    tree = ast.parse(text, mode="eval")
    allowed = (ast.Expression, ast.BinOp, ast.Name, ast.Constant, ast.Load, ast.Div, ast.Mult,
               ast.Add, ast.Sub, ast.USub, ast.UnaryOp)
    if not all(isinstance(n, allowed) for n in ast.walk(tree)):
        raise SpecError(f"claim expression `{expr}` is not arithmetic over point metrics")
    return float(eval(compile(tree, "<claim>", "eval"),  # noqa: S307 - checked AST
                      {"__builtins__": {}}, {f"v{i}": v for i, v in enumerate(values)}))


def judge(claim: Claim, ours: float) -> bool:
    if isinstance(claim.paper, str):
        op, num = claim.paper.split()
        return {"<": ours < float(num), ">": ours > float(num)}[op]
    return abs(ours - claim.paper) <= claim.tolerance * abs(claim.paper) + 1e-12


def reproduce(figure: str, data: str | None, out_dir: str, jobs: int, model: str = "ref",
              progress=None) -> tuple[str, bool]:
    """Run a figure's spec; write results, CSV, plot and report; return (report path, ok)."""
    spec = load_spec(figure)
    points, notes = spec_points(spec, data, model)
    fig_dir = Path(out_dir) / f"fig{figure}"
    fig_dir.mkdir(parents=True, exist_ok=True)
    results = fig_dir / "results.jsonl"
    Sweep(points, str(results), jobs).run(resume=True, progress=progress)
    keys = {p.key for p in points}
    records = [r for r in read_results(str(results)) if r.get("key") in keys]
    _write_csv(records, fig_dir / "results.csv")
    plot_note = _plot(spec, records, fig_dir)
    errors = sorted({r.get("error", "") for r in records if r.get("status") == "error"})
    lines = [f"# Figure {figure}: {spec['title']}", ""]
    lines += [f"- error: {e}" for e in errors[:3]]
    uses_traces = any(sw.get("trace") for sw in spec.get("sweep", []))
    source = ("synthetic where noted" if notes else "the paper's traces") if uses_traces \
        else "no traces needed"
    lines.append(f"Points: {len(records)} ({sum(r['status'] == 'ok' for r in records)} ok). "
                 f"HBM model: `{model}`. Data: {source}.")
    lines += [f"- {n}" for n in notes]
    if spec.get("note"):
        lines += ["", spec["note"]]
    lines += ["", "| claim | paper | stepc | |", "|---|---|---|---|"]
    all_ok = True
    for c in spec.get("claim", []):
        claim = Claim(c["text"], c["value"], c["paper"], c.get("tolerance", 0.05))
        try:
            ours = evaluate_claim(claim.value, records)
            ok = judge(claim, ours)
            shown = f"{ours:.4g}"
        except SpecError as e:
            ok, shown = False, f"n/a ({e})"
        all_ok &= ok
        paper = claim.paper if isinstance(claim.paper, str) else f"{claim.paper:.4g}"
        mark = "reproduced" if ok else "NOT reproduced" + (
            " (synthetic data)" if notes else "")
        lines.append(f"| {claim.text} | {paper} | {shown} | {mark} |")
    lines += ["", "| point | cycles | off-chip bytes | on-chip bytes | on demand |",
              "|---|---|---|---|---|"]
    for r in sorted(records, key=point_label):
        def f(k):
            v = r.get(k)
            return f"{v:,}" if isinstance(v, int) else str(v)
        lines.append(f"| {point_label(r)} | {f('cycles')} | {f('off_chip_bytes')} | "
                     f"{f('on_chip_bytes')} | {f('on_chip_bytes_on_demand')} |")
    if plot_note:
        lines += ["", plot_note]
    report = fig_dir / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return str(report), all_ok


def _write_csv(records: list[dict], path: Path) -> None:
    fields = ["tag", "program", "params", "traces", "status", *METRICS, "wall_seconds"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        for r in records:
            w.writerow([r.get(k) if not isinstance(r.get(k), dict) else
                        " ".join(f"{a}={b}" for a, b in sorted(r[k].items())) for k in fields])


def _plot(spec: dict, records: list[dict], fig_dir: Path) -> str:
    opts = spec.get("plot")
    if not opts:
        return ""
    try:
        from stepc.sweep.plot import PlotError, scatter
        scatter(records, opts["x"], opts["y"], str(fig_dir / "figure.png"), opts.get("label"),
                "tag", opts.get("logx", False), opts.get("logy", False), True, force=True)
    except PlotError as e:
        return f"(no plot: {e})"
    return "![figure](figure.png)"
