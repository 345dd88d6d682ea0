"""Reproducing a figure of the paper: run its spec's points, check its claims, write a report.

A spec (`experiments/fig<N>.toml`) lists sweeps (program, fixed params, a grid, hardware,
trace globs relative to the data directory) and claims: an expression over point metrics
(`qwen_static[TILE_N=8].on_chip_bytes / qwen_dynamic.on_chip_bytes_on_demand`), the paper's
value and a relative tolerance. Without the paper's traces the points use stepc's seeded
synthetic traces, and the report says so.

A spec may also name sets of trace windows (`[trace_set.NAME]`, e.g. the nine KV-length
batches of one batch size); a sweep whose trace is `"@NAME"` runs once per window, and
claims select a window by its label (`dynamic[B=64,kv_lens=high_0961].cycles`). Claims may
carry a `quirk` (the likely reason when they are not reproduced) and the figure a list of
`quirks` (known differences between the paper's artifact and a faithful run); the report
prints both.
"""

from __future__ import annotations

import ast
import csv
import glob
import itertools
import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from stepc.sweep.runner import Point, Sweep, read_results


def _root() -> Path:
    """The checkout holding experiments/ and programs/: the working directory, else the
    source tree this module was loaded from."""
    cwd = Path.cwd()
    return cwd if (cwd / "experiments").is_dir() else Path(__file__).resolve().parents[2]


METRICS = ("cycles", "off_chip_bytes", "on_chip_bytes", "on_chip_bytes_on_demand", "flops",
           "compute_utilization", "bw_utilization", "allocated_compute")
DEFAULT_COLUMNS = ("cycles", "off_chip_bytes", "on_chip_bytes", "on_chip_bytes_on_demand")
COLUMN_NAMES = {"cycles": "cycles", "off_chip_bytes": "off-chip bytes",
                "on_chip_bytes": "on-chip bytes", "on_chip_bytes_on_demand": "on demand",
                "flops": "FLOPs", "compute_utilization": "compute util.",
                "bw_utilization": "BW util.", "allocated_compute": "allocated FLOPs/cycle"}

SPEC_KEYS = {"figure", "title", "plot", "note", "sets", "sweep", "claim", "quirks",
             "trace_set", "columns"}
SWEEP_KEYS = {"program", "name", "params", "grid", "hw", "sets", "trace", "plot_x"}
CLAIM_KEYS = {"text", "value", "paper", "tolerance", "quirk"}
TRACE_SET_KEYS = {"batch", "synthetic", "windows"}
WINDOW_KEYS = {"label", "file", "group", "first", "std", "seed"}


class SpecError(Exception):
    """A bad experiment spec or claim expression."""


@dataclass
class Claim:
    text: str
    value: str
    paper: float | str
    tolerance: float
    quirk: str = ""


@dataclass
class Expanded:
    """A spec's points, each point's selector labels (trace windows), notes on synthetic
    stand-ins, and the trace files the points read that must be written first."""
    points: list[Point]
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    writes: list[tuple[Path, object]] = field(default_factory=list)


def available_figures() -> list[str]:
    return sorted((p.stem.removeprefix("fig") for p in (_root() / "experiments").glob(
        "fig*.toml")),
                  key=lambda s: (len(s), s))


def load_spec(figure: str) -> dict:
    path = _root() / "experiments" / f"fig{figure}.toml"
    if not path.exists():
        raise SpecError(f"no experiment spec for figure {figure} (have: "
                        f"{', '.join(available_figures())})")
    spec = tomllib.loads(path.read_text())
    validate_spec(spec, path.name)
    return spec


def validate_spec(spec: dict, where: str = "spec") -> None:
    """Unknown keys are typos: a misspelt `quirk` would silently drop a note."""
    def unknown(table: dict, allowed: set, what: str) -> None:
        extra = sorted(set(table) - allowed)
        if extra:
            raise SpecError(f"{where}: {what} has unknown key(s) {', '.join(extra)} "
                            f"(allowed: {', '.join(sorted(allowed))})")
    unknown(spec, SPEC_KEYS, "the spec")
    for i, sw in enumerate(spec.get("sweep", [])):
        unknown(sw, SWEEP_KEYS, f"sweep {i + 1}")
        if "program" not in sw:
            raise SpecError(f"{where}: sweep {i + 1} has no `program`")
    for i, c in enumerate(spec.get("claim", [])):
        unknown(c, CLAIM_KEYS, f"claim {i + 1}")
        missing = {"text", "value", "paper"} - set(c)
        if missing:
            raise SpecError(f"{where}: claim {i + 1} lacks {', '.join(sorted(missing))}")
    for name, ts in spec.get("trace_set", {}).items():
        unknown(ts, TRACE_SET_KEYS, f"trace set `{name}`")
        for w in ts.get("windows", []):
            unknown(w, WINDOW_KEYS, f"a window of trace set `{name}`")
            if "label" not in w or "file" not in w:
                raise SpecError(f"{where}: every window of trace set `{name}` needs a "
                                "`label` and a `file`")


# ---------------------------------------------------------------- points
def _window_trace(set_name: str, ts: dict, index: int, w: dict, data: str | None,
                  trace_dir: Path | None, exp: Expanded, synthetic: list[str]) -> str:
    """The trace file of one window: the data file itself, its first N values (written to
    the trace directory), or a seeded synthetic stand-in (written there too)."""
    found = sorted(glob.glob(os.path.join(data, w["file"]))) if data else []
    first = w.get("first")
    if found and first is None:
        return found[0]
    tag = f"{set_name}_{w['label']}" + ("" if found else ".synthetic")
    path = (trace_dir / f"{tag}.npy") if trace_dir is not None else Path(f"<{tag}>")
    if trace_dir is not None:
        import numpy as np

        from stepc.traces import load_array, synthetic_kv_lengths
        if found:
            arr = load_array(found[0])
        else:
            gen = dict(ts.get("synthetic", {}))
            if gen.pop("kind", "kv_lengths") != "kv_lengths":
                raise SpecError(f"trace set `{set_name}`: only `kv_lengths` synthetic "
                                "stand-ins exist")
            if "batch" not in ts:
                raise SpecError(f"trace set `{set_name}` needs a `batch` for its synthetic "
                                "stand-ins")
            arr = synthetic_kv_lengths(ts["batch"], gen.get("mean", 1024),
                                       w.get("std", gen.get("std", 512)),
                                       w.get("seed", index), gen.get("max_len"))
        exp.writes.append((path, np.asarray(arr[:first] if first else arr)))
    if not found:
        synthetic.append(w["label"])
    return str(path)


def expand_spec(spec: dict, data: str | None, model: str,
                trace_dir: Path | None = None) -> Expanded:
    """Every point of every sweep. A trace `"@SET"` (or `"@SET:LABEL"`) sweeps over the
    windows of a trace set; without a trace directory the windows' derived files (prefixes,
    synthetic stand-ins) are named but not made, which is enough to check the claims."""
    exp = Expanded([])
    sets = spec.get("trace_set", {})
    stand_ins: dict[str, list[str]] = {}  # trace set -> windows replaced by synthetic data
    for sw in spec.get("sweep", []):
        name = sw.get("name") or Path(sw["program"]).stem
        fixed: dict[str, str] = {}
        axes: list[tuple[str, list[tuple[str, dict]]]] = []
        for stream, pattern in sw.get("trace", {}).items():
            if pattern.startswith("@"):
                set_name, _, only = pattern[1:].partition(":")
                if set_name not in sets:
                    raise SpecError(f"{name}: no trace set `{set_name}` in the spec")
                ts = sets[set_name]
                windows = list(enumerate(ts.get("windows", [])))
                if only:
                    windows = [(i, w) for i, w in windows if w["label"] == only]
                    if not windows:
                        raise SpecError(f"{name}: trace set `{set_name}` has no window "
                                        f"`{only}`")
                synthetic = stand_ins.setdefault(set_name, [])
                items = []
                for i, w in windows:
                    path = _window_trace(set_name, ts, i, w, data, trace_dir, exp, synthetic)
                    labels = {stream: w["label"]}
                    if "group" in w:
                        labels[f"{stream}.group"] = w["group"]
                    items.append((path, labels))
                axes.append((stream, items))
                continue
            found = sorted(glob.glob(os.path.join(data, pattern))) if data else []
            if found:
                fixed[stream] = found[0]
            else:
                exp.notes.append(f"{name}: no trace matching `{pattern}` under the data "
                                 "directory; used stepc's seeded synthetic routing instead")
        grid = sw.get("grid", {})
        names = sorted(grid)
        sets_ = tuple(spec.get("sets", [])) + tuple(sw.get("sets", [])) + \
            (f"hbm.model={model}",)
        for values in itertools.product(*(grid[n] for n in names)):
            params = {**sw.get("params", {}), **dict(zip(names, values))}
            for chosen in itertools.product(*(items for _, items in axes)):
                traces = dict(fixed)
                labels: dict[str, str] = {}
                for (stream, _), (path, lab) in zip(axes, chosen):
                    traces[stream] = path
                    labels.update(lab)
                p = Point(str(_root() / sw["program"]), tuple(sorted(params.items())),
                          sw.get("hw", "paper-eval"), sets_, tuple(sorted(traces.items())),
                          True, name)
                exp.points.append(p)
                if labels:
                    exp.labels[p.key] = labels
    for set_name, synthetic in stand_ins.items():
        if synthetic:
            replaced = list(dict.fromkeys(synthetic))
            gen = sets[set_name].get("synthetic", {})
            exp.notes.append(
                f"trace set `{set_name}`: {len(replaced)} window(s) not under the data "
                "directory; used seeded synthetic KV lengths (log-normal, mean "
                f"{gen.get('mean', 1024)}, each window's std) instead: {', '.join(replaced)}")
    return exp


def spec_points(spec: dict, data: str | None, model: str,
                trace_dir: Path | None = None) -> tuple[list[Point], list[str]]:
    """The points of every sweep, and notes on traces replaced by synthetic data."""
    exp = expand_spec(spec, data, model, trace_dir)
    return exp.points, exp.notes


# ---------------------------------------------------------------- claims
_TERM = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[([^\]]*)\])?\.([a-z_]+)")


def _geomean(*xs: float) -> float:
    if not xs or any(x <= 0 for x in xs):
        raise SpecError("geomean() needs positive values")
    return math.prod(xs) ** (1 / len(xs))


FUNCTIONS = {"geomean": _geomean, "min": min, "max": max}


def _selector(sel: str | None) -> dict[str, str]:
    if not sel:
        return {}
    try:
        return {k.strip(): v.strip() for k, v in (kv.split("=") for kv in sel.split(","))}
    except ValueError:
        raise SpecError(f"bad selector `[{sel}]` (want KEY=VALUE,...)") from None


def _field(rec: dict, key: str) -> str | None:
    """A selector key names a param of the point, else a label (a trace window)."""
    if key in rec.get("params", {}):
        return str(rec["params"][key])
    return rec.get("labels", {}).get(key)


def select(records: list[dict], tag: str, want: dict[str, str]) -> list[dict]:
    return [r for r in records if r.get("tag") == tag and
            all(_field(r, k) == v for k, v in want.items())]


def claim_terms(expr: str) -> list[tuple[str, str, dict[str, str], str]]:
    """The `tag[K=V,...].metric` terms of a claim: (text, tag, selector, metric)."""
    return [(m.group(0), m.group(1), _selector(m.group(3)), m.group(4))
            for m in _TERM.finditer(expr)]


def _arith(expr: str, text: str) -> ast.Expression:
    try:
        tree = ast.parse(" ".join(text.split()), mode="eval")  # a claim may span lines
    except SyntaxError as e:
        raise SpecError(f"claim expression `{expr}` does not parse: {e.msg}") from None
    allowed = (ast.Expression, ast.BinOp, ast.Name, ast.Constant, ast.Load, ast.Div, ast.Mult,
               ast.Add, ast.Sub, ast.Pow, ast.USub, ast.UnaryOp, ast.Call)
    for n in ast.walk(tree):
        ok = isinstance(n, allowed)
        if isinstance(n, ast.Call):
            ok = isinstance(n.func, ast.Name) and n.func.id in FUNCTIONS and not n.keywords
        elif isinstance(n, ast.Name):
            ok = n.id in FUNCTIONS or re.fullmatch(r"v\d+", n.id) is not None
        elif isinstance(n, ast.Constant):
            ok = isinstance(n.value, (int, float)) and not isinstance(n.value, bool)
        if not ok:
            raise SpecError(f"claim expression `{expr}` is not arithmetic over point metrics "
                            f"(allowed functions: {', '.join(FUNCTIONS)})")
    return tree


def evaluate_claim(expr: str, records: list[dict]) -> float:
    """Evaluate `tag[K=V,...].metric` terms combined with + - * / **, numbers and
    geomean/min/max. K is a param of the point or the stream of a trace window."""
    values = []

    def term(m: re.Match) -> str:
        tag, want, metric = m.group(1), _selector(m.group(3)), m.group(4)
        if metric not in METRICS:
            raise SpecError(f"unknown metric `{metric}`")
        hits = select(records, tag, want)
        if len(hits) != 1:
            raise SpecError(f"`{m.group(0)}` selects {len(hits)} points, not one")
        if hits[0].get("status") != "ok":
            raise SpecError(f"`{m.group(0)}` did not finish ({hits[0].get('status')})")
        value = hits[0].get(metric)
        if not isinstance(value, (int, float)):
            raise SpecError(f"`{m.group(0)}` is not a number ({value})")
        values.append(float(value))
        return f"v{len(values) - 1}"

    tree = _arith(expr, _TERM.sub(term, expr))
    try:
        return float(eval(compile(tree, "<claim>", "eval"),  # noqa: S307 - checked AST
                          {"__builtins__": {}, **FUNCTIONS},
                          {f"v{i}": v for i, v in enumerate(values)}))
    except ZeroDivisionError:
        raise SpecError(f"claim expression `{expr}` divides by zero") from None


def check_claims(spec: dict) -> list[str]:
    """Without running anything: every claim parses, and each of its terms names a known
    metric and selects exactly one point of the spec's sweeps."""
    exp = expand_spec(spec, None, "ref")
    recs = [{"tag": p.tag, "params": dict(p.params), "labels": exp.labels.get(p.key, {})}
            for p in exp.points]
    problems = []
    for c in spec.get("claim", []):
        terms = claim_terms(c["value"])
        if not terms:
            problems.append(f"{c['text']}: no `tag.metric` term")
        for text, tag, want, metric in terms:
            if metric not in METRICS:
                problems.append(f"{c['text']}: `{text}`: unknown metric `{metric}`")
            n = len(select(recs, tag, want))
            if n != 1:
                problems.append(f"{c['text']}: `{text}` selects {n} points, not one")
        try:
            _arith(c["value"], _TERM.sub("v0", c["value"]))
        except SpecError as e:
            problems.append(f"{c['text']}: {e}")
        if isinstance(c["paper"], str) and not re.fullmatch(r"[<>] -?[0-9.]+(e-?\d+)?",
                                                              c["paper"]):
            problems.append(f"{c['text']}: paper `{c['paper']}` is not `< N` or `> N`")
    return problems


def judge(claim: Claim, ours: float) -> bool:
    if isinstance(claim.paper, str):
        op, num = claim.paper.split()
        return {"<": ours < float(num), ">": ours > float(num)}[op]
    return abs(ours - claim.paper) <= claim.tolerance * abs(claim.paper) + 1e-12


# ---------------------------------------------------------------- running and reporting
def reproduce(figure: str, data: str | None, out_dir: str, jobs: int, model: str = "ref",
              progress=None) -> tuple[str, bool]:
    """Run a figure's spec; write results, CSV, plot and report; return (report path, ok)."""
    spec = load_spec(figure)
    fig_dir = Path(out_dir) / f"fig{figure}"
    fig_dir.mkdir(parents=True, exist_ok=True)
    exp = expand_spec(spec, data, model, (fig_dir / "traces").resolve())
    if exp.writes:
        import numpy as np
        (fig_dir / "traces").mkdir(exist_ok=True)
        for path, arr in dict(exp.writes).items():  # a set used by several sweeps: once
            np.save(path, arr)
    points, notes = exp.points, exp.notes
    results = fig_dir / "results.jsonl"
    Sweep(points, str(results), jobs).run(resume=True, progress=progress)
    order = {p.key: i for i, p in enumerate(points)}
    latest = {r["key"]: r for r in read_results(str(results)) if r.get("key") in order}
    records = sorted(latest.values(), key=lambda r: order[r["key"]])
    for r in records:
        r["labels"] = exp.labels.get(r["key"], {})
    _write_csv(records, fig_dir / "results.csv")
    plot_lines = _plots(spec, records, fig_dir)
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
        lines += ["", " ".join(spec["note"].split())]
    lines += ["", "| claim | paper | stepc | |", "|---|---|---|---|"]
    all_ok = True
    failed: list[tuple[Claim, str]] = []
    for c in spec.get("claim", []):
        claim = Claim(c["text"], c["value"], c["paper"], c.get("tolerance", 0.05),
                      c.get("quirk", ""))
        try:
            ours = evaluate_claim(claim.value, records)
            ok = judge(claim, ours)
            shown = f"{ours:.7g}" if claim.tolerance == 0 else f"{ours:.4g}"  # exact claims
        except SpecError as e:
            ok, shown = False, f"n/a ({e})"
        all_ok &= ok
        if isinstance(claim.paper, str):
            paper = claim.paper
        else:
            paper = f"{claim.paper:.4g} ± {claim.tolerance:.0%}" if claim.tolerance \
                else f"{claim.paper:.7g} (exact)"
        mark = "reproduced" if ok else "NOT reproduced" + (
            " (synthetic data)" if notes else "")
        lines.append(f"| {claim.text} | {paper} | {shown} | {mark} |")
        if not ok:
            failed.append((claim, shown))
    if failed:
        lines += ["", "Why these claims are not reproduced (likely reasons):", ""]
        reasons: dict[str, list[str]] = {}  # claims sharing a reason are listed together
        for claim, shown in failed:
            why = " ".join(claim.quirk.split()) or "no known artifact quirk explains it: " \
                "a difference between stepc and the artifact to investigate"
            why += "" if why.endswith((".", "!", "?", ")")) else "."
            reasons.setdefault(why, []).append(f"**{claim.text}** (stepc {shown})")
        for why, claims in reasons.items():
            if notes:
                why += " This run also used synthetic stand-ins for the paper's traces."
            lines.append(f"- {'; '.join(claims)}: {why}")
    if spec.get("quirks"):
        lines += ["", "Known quirks of the paper's artifact that this figure touches:", ""]
        lines += [f"- {' '.join(q.split())}" for q in spec["quirks"]]
    columns = spec.get("columns", DEFAULT_COLUMNS)
    bad = [c for c in columns if c not in METRICS]
    if bad:
        raise SpecError(f"figure {figure}: unknown report column(s) {', '.join(bad)}")
    lines += ["", "| series | point | " + " | ".join(COLUMN_NAMES[c] for c in columns) + " |",
              "|---|---|" + "---|" * len(columns)]
    for r in records:
        lines.append(f"| {r.get('tag')} | {_point_name(r)} | " +
                     " | ".join(_fmt(r.get(c)) if r.get("status") == "ok" else
                                str(r.get("status")) for c in columns) + " |")
    if plot_lines:
        lines += [""] + plot_lines
    report = fig_dir / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return str(report), all_ok


def _fmt(v) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


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
        for r in records:
            w.writerow([r.get(k) if not isinstance(r.get(k), dict) else
                        " ".join(f"{a}={b}" for a, b in sorted(r[k].items())) for k in fields])


def _plots(spec: dict, records: list[dict], fig_dir: Path) -> list[str]:
    """Every plot of the spec (`plot` is a table or a list of tables): figure.png,
    figure-2.png, ...; report lines that show them (or say why one could not be drawn)."""
    opts_list = spec.get("plot") or []
    if isinstance(opts_list, dict):
        opts_list = [opts_list]
    x_of = {sw.get("name") or Path(sw["program"]).stem: sw["plot_x"]
            for sw in spec.get("sweep", []) if "plot_x" in sw}
    from stepc.sweep.plot import PlotError
    lines = []
    for i, opts in enumerate(opts_list):
        name = "figure.png" if i == 0 else f"figure-{i + 1}.png"
        try:
            if opts.get("kind", "scatter") == "ratio":
                table, draw = _ratio_bars(opts, records, fig_dir / name)
                lines += table  # the bars' values, even without matplotlib
                draw()
            else:
                _scatter_plot(opts, records, x_of, fig_dir / name)
        except PlotError as e:
            lines.append(f"(no plot {name}: {e})")
            continue
        lines.append(f"![{opts.get('title', 'figure')}]({name})")
    return lines


def _value(rec: dict, name: str):
    """A metric of a record, else one of its params (e.g. the region count R)."""
    if name in METRICS or name in rec:
        return rec.get(name)
    return rec["params"].get(name)


def _scatter_plot(opts: dict, records: list[dict], x_of: dict[str, str], path: Path) -> None:
    from stepc.sweep.plot import scatter
    x, y = opts["x"], opts["y"]
    tags = opts.get("tags")
    recs = []
    for r in records:
        if r.get("status") != "ok" or (tags and r.get("tag") not in tags):
            continue
        recs.append({**r, x: _value(r, x_of.get(r.get("tag"), x)), y: _value(r, y)})
    xlabel = opts.get("xlabel")
    shown = sorted(t for t in x_of if any(r.get("tag") == t for r in recs))
    if xlabel is None and shown:
        xlabel = f"{x.replace('_', ' ')}; {', '.join(shown)}: " + \
            ", ".join(sorted({x_of[t].replace('_', ' ') for t in shown}))
    # a param on x (regions R, batch B): tick exactly its values
    ticks = sorted({r[x] for r in recs if isinstance(r[x], (int, float))}) \
        if x not in METRICS and x_of.keys().isdisjoint({r.get("tag") for r in recs}) else None
    scatter(recs, x, y, str(path), opts.get("label"), "tag", opts.get("logx", False),
            opts.get("logy", False), opts.get("front", True), force=True, xlabel=xlabel,
            ylabel=opts.get("ylabel"), title=opts.get("title"), xticks=ticks)


def _ratio_bars(opts: dict, records: list[dict], path: Path):
    """Bars of series[metric] / over[metric] for points matched on `match` keys, grouped by
    `group` keys (reduced by a geometric mean when a group holds several points): a table of
    the bars for the report, and a function drawing them."""
    from stepc.sweep.plot import PlotError, grouped_bars
    metric = opts.get("metric", "cycles")
    over, series = opts["over"], opts["series"]
    match = opts["match"]
    group = opts.get("group", match)
    ok = [r for r in records if r.get("status") == "ok"]
    base = {tuple(_field(r, k) for k in match): r for r in ok if r.get("tag") == over}
    groups: dict[tuple, dict[str, list[float]]] = {}
    for r in ok:  # records are in spec order, so groups keep it
        if r.get("tag") not in series:
            continue
        b = base.get(tuple(_field(r, k) for k in match))
        if b is None or not isinstance(r.get(metric), (int, float)) or not b.get(metric):
            continue
        gkey = tuple(_field(r, k) for k in group)
        groups.setdefault(gkey, {}).setdefault(r["tag"], []).append(r[metric] / b[metric])
    if not groups:
        raise PlotError(f"no `{over}` point matches a point of {', '.join(series)}")
    reduce = opts.get("reduce")
    names = [" ".join(f"{k}={v}" if k in ("B", "R") else str(v) for k, v in zip(group, g))
             for g in groups]
    cols: dict[str, list[float | None]] = {s: [] for s in series}
    for g in groups.values():
        for s in series:
            vals = g.get(s, [])
            if len(vals) > 1 and reduce != "geomean":
                raise PlotError(f"several `{s}` points per group; set reduce = \"geomean\"")
            cols[s].append(_geomean(*vals) if vals else None)
    ylabel = opts.get("ylabel", f"{metric} / {over} {metric}")
    head = "geomean of " if reduce == "geomean" else ""
    out = ["| " + " ".join(group) + " | " + " | ".join(f"{head}{s} / {over}" for s in series)
           + " |", "|---|" + "---|" * len(series)]
    for i, n in enumerate(names):
        out.append(f"| {n} | " + " | ".join("-" if cols[s][i] is None else f"{cols[s][i]:.3f}"
                                            for s in series) + " |")

    def draw() -> None:
        grouped_bars(names, cols, ylabel, str(path), hline=1.0, force=True,
                     title=opts.get("title"))
    return out + [""], draw
