"""The plots of a reproduced figure, drawn from its spec's `plot` tables: scatter plots of
one metric over another (or over a param such as R or B), bars of one series' metric
over another's (a speedup), and grouped bars of claim expressions, each with the bars'
values for the report."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stepc.explore.plot import PlotError, metric_label
from stepc.reproduction.claims import (
    METRICS,
    NeedsData,
    SpecError,
    evaluate_claim,
    geomean,
    point_field,
)


@dataclass(frozen=True)
class Bars:
    """The values of grouped bars: one row per group, one column per series."""
    header: list[str]
    names: list[str]
    cols: dict[str, list[float | None]]
    series: list[str]


@dataclass(frozen=True)
class Plot:
    """One plot of a figure: its file and title, its bars' values, or why it was not drawn."""
    name: str
    title: str
    bars: Bars | None = None  # a bar plot's values, kept even when it could not be drawn
    error: str = ""


def spec_plots(spec: dict, records: list[dict], fig_dir: Path) -> list[Plot]:
    """Every plot of the spec (`plot` is a table or a list of tables): figure.png,
    figure-2.png, ... drawn; what the report shows of each."""
    opts_list = spec.get("plot") or []
    if isinstance(opts_list, dict):
        opts_list = [opts_list]
    x_of = {sw.get("name") or Path(sw["program"]).stem: sw["plot_x"]
            for sw in spec.get("sweep", []) if "plot_x" in sw}
    plots = []
    for i, opts in enumerate(opts_list):
        name = "figure.png" if i == 0 else f"figure-{i + 1}.png"
        bars, error = None, ""
        try:
            kind = opts.get("kind", "scatter")
            if kind in ("ratio", "bars"):
                make = _ratio_bars if kind == "ratio" else _expression_bars
                bars, draw = make(opts, records, fig_dir / name)  # even without matplotlib
                draw()
            else:
                _scatter_plot(opts, records, x_of, fig_dir / name)
        except PlotError as e:
            error = str(e)
        plots.append(Plot(name, opts.get("title", "figure"), bars, error))
    return plots


def _value(rec: dict, name: str):
    """A metric of a record, else one of its params (e.g. the region count R)."""
    if name in METRICS or name in rec:
        return rec.get(name)
    return rec["params"].get(name)


def _scatter_plot(opts: dict, records: list[dict], x_of: dict[str, str], path: Path) -> None:
    from stepc.explore.plot import scatter
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
        xlabel = f"{metric_label(x)}; {', '.join(shown)}: " + \
            ", ".join(sorted({metric_label(x_of[t]) for t in shown}))
    # a param on x (regions R, batch B): tick exactly its values
    ticks = sorted({r[x] for r in recs if isinstance(r[x], (int, float))}) \
        if x not in METRICS and x_of.keys().isdisjoint({r.get("tag") for r in recs}) else None
    series_by = opts.get("series_by", "tag")
    if series_by != "tag" and len({r.get("tag") for r in recs}) > 1:
        series_by = f"tag,{series_by}"  # one series per model and value, never merged
    scatter(recs, x, y, str(path), opts.get("label"), series_by, opts.get("logx", False),
            opts.get("logy", False), opts.get("front", True), force=True, xlabel=xlabel,
            ylabel=opts.get("ylabel"), title=opts.get("title"), xticks=ticks)


def _ratio_bars(opts: dict, records: list[dict], path: Path):
    """Bars of series[metric] / over[metric] for points matched on `match` keys, grouped by
    `group` keys (reduced by a geometric mean when a group holds several points): a table of
    the bars' values, and a function drawing them."""
    metric = opts.get("metric", "cycles")
    over, series = opts["over"], opts["series"]
    match = opts["match"]
    group = opts.get("group", match)
    ok = [r for r in records if r.get("status") == "ok"]
    base = {tuple(point_field(r, k) for k in match): r for r in ok if r.get("tag") == over}
    groups: dict[tuple, dict[str, list[float]]] = {}
    for r in ok:  # records are in spec order, so groups keep it
        if r.get("tag") not in series:
            continue
        b = base.get(tuple(point_field(r, k) for k in match))
        if b is None or not isinstance(r.get(metric), (int, float)) or not b.get(metric):
            continue
        gkey = tuple(point_field(r, k) for k in group)
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
            cols[s].append(geomean(*vals) if vals else None)
    ylabel = opts.get("ylabel", f"{metric} / {over} {metric}")
    head = "geomean of " if reduce == "geomean" else ""
    header = [" ".join(group)] + [f"{head}{s} / {over}" for s in series]
    return Bars(header, names, cols, series), _bar_drawing(names, cols, ylabel, path, opts)


def _expression_bars(opts: dict, records: list[dict], path: Path):
    """Grouped bars: `groups` maps a group's name to one claim expression per bar series
    (`series`, the bars' names), e.g. each variant's speedup over a baseline per model."""
    series = opts["series"]
    cols: dict[str, list[float | None]] = {s: [] for s in series}
    for group, exprs in opts["groups"].items():
        if len(exprs) != len(series):
            raise PlotError(f"group `{group}` has {len(exprs)} bars for {len(series)} series")
        for s, expr in zip(series, exprs):
            try:
                cols[s].append(evaluate_claim(expr, records))
            except (NeedsData, SpecError):
                cols[s].append(None)
    names = list(opts["groups"])
    ylabel = opts.get("ylabel", "")
    header = [ylabel or "group"] + list(series)
    return Bars(header, names, cols, series), _bar_drawing(names, cols, ylabel, path, opts)


def _bar_drawing(names: list[str], cols: dict, ylabel: str, path: Path, opts: dict):
    """Draws the grouped bars (with a line at 1) when called."""
    from stepc.explore.plot import grouped_bars

    def draw() -> None:
        grouped_bars(names, cols, ylabel, str(path), hline=1.0, force=True,
                     title=opts.get("title"))
    return draw
