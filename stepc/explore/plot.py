"""Plots of sweep results (matplotlib, headless): Pareto scatter plots and bar charts.

Needs the optional `plot` extra (`pip install 'stepc[plot]'`). Files carry a
"stepc plot" marker in their metadata so a later run may replace them; other files are
never overwritten without `--force`.
"""

from __future__ import annotations

import os
from pathlib import Path

from stepc.explore.pareto import pareto_front
from stepc.explore.runner import natural_key, point_label, point_order
from stepc.measure import METRICS

MARKER = "stepc plot"
FORMATS = (".png", ".svg", ".pdf")


# Axis labels of the records' metrics (and of the time a point took to run).
METRIC_LABELS = {**{name: m.label for name, m in METRICS.items()},
                 "wall_seconds": "simulation wall time (s)"}


def metric_label(name: str) -> str:
    """The axis label of a metric or param (a param is named as it is written)."""
    return METRIC_LABELS.get(name, name)


class PlotError(Exception):
    """A plotting problem the user can fix."""


class SelectionError(PlotError):
    """A selector (`--relative-to`) that picks no point or several: a usage error."""


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise PlotError("plots need matplotlib: pip install 'stepc[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _series_name(rec: dict, group: str) -> str:
    """The series of a record: by program, tag, or a field or param; several joined by
    commas (`tag,TB`: `hdl_like TB=16`)."""
    if "," in group:
        return " ".join(_series_name(rec, g) for g in group.split(","))
    if group == "program":
        return os.path.basename(rec["program"]).removesuffix(".step")
    if group == "tag":
        return rec.get("tag") or os.path.basename(rec["program"]).removesuffix(".step")
    return f"{group}={rec['params'].get(group, rec.get(group))}"


def _check_out(out: str, force: bool) -> Path:
    path = Path(out)
    if path.suffix.lower() not in FORMATS:
        raise PlotError(f"-o {out}: unknown format (use {', '.join(FORMATS)})")
    if path.exists() and not force and MARKER.encode() not in path.read_bytes():
        raise PlotError(f"-o {out}: the file exists and was not written by stepc plot; "
                        "use --force to overwrite it")
    return path


def _save(fig, path: Path) -> None:
    meta = {"Creator": MARKER} if path.suffix.lower() == ".pdf" else \
        {"Software": MARKER} if path.suffix.lower() == ".png" else {"Creator": MARKER}
    tmp = path.with_name(f".{path.name}.tmp{path.suffix}")
    fig.savefig(tmp, metadata=meta, bbox_inches="tight", dpi=150)
    os.replace(tmp, path)


ENG_FROM = 1e4  # linear-axis values from this size are written in compact units (500k, 2M)


def _compact(value: float, _pos=None) -> str:
    """A tick label: `500k`, `1.5M` for large values (no separate "1e6" offset), else as is."""
    from matplotlib.ticker import EngFormatter
    return EngFormatter(sep="")(value) if abs(value) >= ENG_FROM else f"{value:g}"


def _linear_axis(axis) -> None:
    """A linear axis whose labels carry their own magnitude instead of an offset text."""
    from matplotlib.ticker import FuncFormatter
    axis.set_major_formatter(FuncFormatter(_compact))


def _log_axis(axis) -> None:
    """A log axis labelled per decade in compact units (200M, 1G), and at 2 and 5 within a
    decade only when the axis spans less than two decades (else those labels crowd)."""
    from matplotlib.ticker import EngFormatter, LogLocator, NullFormatter
    axis.axes.set_xscale("log") if axis is axis.axes.xaxis else axis.axes.set_yscale("log")
    lo, hi = sorted(axis.get_view_interval())
    axis.set_major_locator(LogLocator(base=10))
    axis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
    axis.set_major_formatter(EngFormatter(sep=""))
    few_decades = lo > 0 and hi / lo < 100
    axis.set_minor_formatter(EngFormatter(sep="") if few_decades else NullFormatter())


def _scale(axis, log: bool) -> None:
    _log_axis(axis) if log else _linear_axis(axis)


def _points(records: list[dict]) -> list[dict]:
    """The finished points; a PlotError when there is none (a blank picture helps nobody)."""
    ok = [r for r in records if r.get("status") == "ok"]
    if not ok:
        failed = f" ({len(records)} failed)" if records else ""
        raise PlotError(f"the results hold no finished point to plot{failed}")
    return ok


def _check_metric(ok: list[dict], metric: str) -> None:
    """A PlotError naming the numeric metrics every point has (and the closest one) when
    `metric` is not among them."""
    if all(isinstance(r.get(metric), (int, float)) and not isinstance(r.get(metric), bool)
           for r in ok):
        return
    import difflib
    names = sorted(k for k in ok[0] if all(
        isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool) for r in ok))
    close = difflib.get_close_matches(metric, names, n=1)
    hint = f" (did you mean `{close[0]}`?)" if close else ""
    raise PlotError(f"`{metric}` is not a numeric metric of every point{hint}; they have: "
                    f"{', '.join(names)}")


def scatter(records: list[dict], x: str, y: str, out: str, label: str | None = None,
            group: str = "program", logx: bool = False, logy: bool = False,
            front: bool = True, force: bool = False, xlabel: str | None = None,
            ylabel: str | None = None, title: str | None = None,
            xticks: list[float] | None = None) -> None:
    """One series per `group`, points labeled with param `label`, Pareto fronts drawn (or,
    without `front`, each series' points joined in x order)."""
    path = _check_out(out, force)
    plt = _pyplot()
    ok = _points(records)
    for m in (x, y):
        _check_metric(ok, m)
    fig, ax = plt.subplots(figsize=(6, 4.2))
    series: dict[str, list[dict]] = {}
    for r in ok:
        series.setdefault(_series_name(r, group), []).append(r)
    marks: list[tuple[float, float, str]] = []
    for i, (name, recs) in enumerate(sorted(series.items(), key=lambda s: natural_key(s[0]))):
        xs, ys = [r[x] for r in recs], [r[y] for r in recs]
        dots = ax.scatter(xs, ys, label=name, s=28, marker="os^Dv<>p*h"[i % 10])
        if label:
            marks += [(r[x], r[y], str(r["params"].get(label, r.get(label))))
                      for r in recs if label in r["params"] or label in r]
        if len(recs) > 1:
            idx = pareto_front(list(zip(xs, ys))) if front else range(len(xs))
            idx = sorted(idx, key=lambda i: xs[i])
            ax.plot([xs[i] for i in idx], [ys[i] for i in idx], linewidth=1, alpha=0.6,
                    color=dots.get_facecolor()[0])  # the line in its series' colour
    ax.set_xlabel(xlabel or metric_label(x))
    ax.set_ylabel(ylabel or metric_label(y))
    if title:
        ax.set_title(title, fontsize=9)
    for axis, log in ((ax.xaxis, logx), (ax.yaxis, logy)):
        _scale(axis, log)
    if xticks:
        ax.set_xticks(xticks, [f"{t:g}" for t in xticks])
        ax.minorticks_off()
    _annotate(ax, merged_labels(ax, marks))
    ax.grid(True, alpha=0.3)
    if series:
        ax.legend(fontsize=8)
    _save(fig, path)
    plt.close(fig)


def merged_labels(ax, marks: list[tuple[float, float, str]], pixels: float = 3.0
                  ) -> list[tuple[tuple[float, float], str]]:
    """Point labels, those of points drawn within `pixels` of each other (coinciding) joined
    into one (`16, 32`)."""
    ax.get_xlim(), ax.get_ylim()  # settle the autoscaled limits before reading positions
    out: list[tuple[tuple[float, float], tuple[float, float], list[str]]] = []
    for px, py, text in marks:
        sx, sy = ax.transData.transform((px, py))
        for (ox, oy), _, texts in out:
            if abs(sx - ox) <= pixels and abs(sy - oy) <= pixels:
                if text not in texts:
                    texts.append(text)
                break
        else:
            out.append(((sx, sy), (px, py), [text]))
    return [(at, ", ".join(sorted(texts, key=natural_key))) for _, at, texts in out]


LABEL_OFFSETS = ((3, 3), (3, -10), (-3, 3), (-3, -10))  # points: right/left, above/below


def _annotate(ax, labels: list[tuple[tuple[float, float], str]]) -> None:
    """Label points beside them, each on the first side where it overlaps no earlier label."""
    renderer = ax.figure.canvas.get_renderer()
    placed = []
    for at, text in labels:
        for dx, dy in LABEL_OFFSETS:
            ann = ax.annotate(text, at, fontsize=7, xytext=(dx, dy), textcoords="offset points",
                              ha="left" if dx > 0 else "right")
            box = ann.get_window_extent(renderer)
            if not any(box.overlaps(b) for b in placed):
                break
            ann.remove()
        else:  # crowded on every side: the first one
            ann = ax.annotate(text, at, fontsize=7, xytext=LABEL_OFFSETS[0],
                              textcoords="offset points")
            box = ann.get_window_extent(renderer)
        placed.append(box)


def bars(records: list[dict], metric: str, out: str, relative_to: dict | None = None,
         force: bool = False, logy: bool = False, label: str | None = None,
         group: str | None = None) -> None:
    """One bar per point; with `relative_to`, the baseline's metric divided by each point's
    (a speedup for cycles). `label` names the bars by one param (else by the whole point),
    `group` colours them by a field or param (with a legend), `logy` makes the value axis
    logarithmic."""
    path = _check_out(out, force)
    plt = _pyplot()
    ok = sorted(_points(records),
                key=lambda r: (natural_key(_series_name(r, group)) if group else (),
                               point_order(r)))
    if label and any(label not in r["params"] and label not in r for r in ok):
        raise PlotError(f"--label {label}: not a param or field of every point")
    _check_metric(ok, metric)
    values = [r[metric] for r in ok]
    ylabel = metric_label(metric)
    if relative_to:
        base = _baseline(ok, relative_to)
        values = [base[metric] / v if v else 0 for v in values]
        named = ", ".join(f"{k}={v}" for k, v in relative_to.items())
        ylabel = f"{metric.replace('_', ' ')} of {named} / each point's"
    fig, ax = plt.subplots(figsize=(max(5, 0.5 * len(ok)), 4))
    names = [_series_name(r, group) for r in ok] if group else [None] * len(ok)
    for name in dict.fromkeys(names):
        idx = [i for i, n in enumerate(names) if n == name]
        ax.bar(idx, [values[i] for i in idx], label=name)
    ticks = [f"{label}={r['params'].get(label, r.get(label))}" if label else point_label(r)
             for r in ok]
    ax.set_xticks(range(len(ok)), ticks, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(ylabel)
    _scale(ax.yaxis, logy)
    if group:
        ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    _save(fig, path)
    plt.close(fig)


def _baseline(records: list[dict], relative_to: dict) -> dict:
    """The one point every `FIELD=VALUE` of `relative_to` selects."""
    def selected(r: dict) -> bool:
        return all(str(r["params"].get(k, r.get(k))) == v or
                   (k == "program" and os.path.basename(r["program"]).startswith(v))
                   for k, v in relative_to.items())
    base = [r for r in records if selected(r)]
    given = " ".join(f"--relative-to {k}={v}" for k, v in relative_to.items())
    if not base:
        raise SelectionError(f"{given} selects no point")
    if len(base) > 1:
        shown = "; ".join(point_label(r) for r in base[:4]) + ("; ..." if len(base) > 4 else "")
        raise SelectionError(f"{given} selects {len(base)} points ({shown}): add "
                             "--relative-to FIELD=VALUE until one point remains")
    return base[0]


def grouped_bars(groups: list[str], series: dict[str, list[float | None]], ylabel: str,
                 out: str, hline: float | None = None, force: bool = False,
                 title: str | None = None) -> None:
    """Side-by-side bars: one group per entry of `groups`, one bar per series (a missing
    value leaves a gap); an optional horizontal reference line (1.0 for ratios)."""
    path = _check_out(out, force)
    plt = _pyplot()
    n = max(1, len(series))
    width = 0.8 / n
    fig, ax = plt.subplots(figsize=(max(5.0, 0.3 * len(groups) * n + 1.5), 4))
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (n - 1) / 2) * width for g, v in enumerate(values) if v is not None]
        ax.bar(xs, [v for v in values if v is not None], width, label=name)
    if hline is not None:
        ax.axhline(hline, color="black", linewidth=0.8)
    long = max((len(g) for g in groups), default=0) > 6
    ax.set_xticks(range(len(groups)), groups, rotation=60 if long else 0,
                  ha="right" if long else "center", fontsize=7)
    ax.set_ylabel(ylabel)
    _linear_axis(ax.yaxis)
    if title:
        ax.set_title(title, fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8)
    _save(fig, path)
    plt.close(fig)
