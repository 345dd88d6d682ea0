"""A figure's experiment spec: loading and checking it, and expanding it into points.

A spec (`stepc/reproduction/experiments/fig<N>.toml`, shipped with the package) lists
sweeps (program, fixed params, a grid, hardware, trace globs relative to the data
directory), reference tables (CSV files under the data directory) and claims
(`stepc.reproduction.claims`). Without the paper's traces the points use stepc's seeded
synthetic traces, and the report says so; claims that compare with reference data then say
they need it.

A spec may also name sets of trace windows (`[trace_set.NAME]`, e.g. the nine KV-length
batches of one batch size); a sweep whose trace is `"@NAME"` runs once per window, and
claims select a window by its label (`dynamic[B=64,kv_lens=high_0961].cycles`). Claims
carry a `quirk` (the likely reason when they are not reproduced) and the figure a list of
`quirks` (known differences between the paper's artifact and a faithful run); the report
prints both, with every claim's accepted values and the reason for its tolerance.
"""

from __future__ import annotations

import glob
import itertools
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import stepc
from stepc.explore.runner import Point
from stepc.reproduction.claims import (
    PLACEHOLDER,
    SpecError,
    claim_problems,
    expression_problems,
    validate_references,
)
from stepc.reproduction.figures import available_figures, specs

SPEC_KEYS = {"figure", "title", "plot", "note", "sets", "sweep", "claim", "measure", "quirks",
             "trace_set", "columns", "reference", "choose", "assumptions"}
CHOOSE_KEYS = {"figure", "static", "dynamic", "param", "axis", "about"}
CHOOSE_AXES = {"memory": ("on_chip_bytes", "on_chip_bytes_on_demand"),
               "performance": ("cycles", "cycles")}
SWEEP_KEYS = {"program", "name", "params", "grid", "hw", "sets", "trace", "plot_x",
              "own_model", "milestones"}
CLAIM_KEYS = {"text", "value", "paper", "expected", "source", "in_sample", "tolerance",
              "tolerance_reason", "quirk"}
MEASURE_KEYS = {"text", "value", "note"}
PLOT_KEYS = {"scatter": {"kind", "title", "tags", "x", "y", "label", "series_by", "xlabel",
                         "ylabel", "logx", "logy", "front"},
             "ratio": {"kind", "title", "metric", "over", "series", "match", "group", "reduce",
                       "ylabel"},
             "bars": {"kind", "title", "series", "groups", "ylabel"}}
TRACE_SET_KEYS = {"batch", "synthetic", "windows"}
WINDOW_KEYS = {"label", "file", "group", "first", "std", "seed"}

__all__ = ["SpecError", "available_figures", "check_claims", "expand_spec", "load_spec",
           "spec_points"]


def program_root() -> Path:
    """The directory holding `programs/`, which the specs' program paths start with: the
    copy installed with the package, else the source checkout this module belongs to."""
    package = Path(stepc.__file__).resolve().parent
    for root in (package, package.parent):
        if (root / "programs").is_dir():
            return root
    raise SpecError(f"the bundled programs are missing: looked for {package / 'programs'} "
                    f"and {package.parent / 'programs'} (reinstall stepc)")


def load_spec(figure: str) -> dict:
    spec_file = specs() / f"fig{figure}.toml"
    if not spec_file.is_file():
        raise SpecError(f"no experiment spec for figure {figure} (have: "
                        f"{', '.join(available_figures()) or 'none'}; the specs ship in "
                        f"{specs()})")
    spec = tomllib.loads(spec_file.read_text(encoding="utf-8"))
    validate_spec(spec, spec_file.name)
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
    for kind, keys in (("claim", CLAIM_KEYS), ("measure", MEASURE_KEYS)):
        for i, c in enumerate(spec.get(kind, [])):
            unknown(c, keys, f"{kind} {i + 1}")
            missing = {"text", "value"} & keys - set(c)
            if kind == "claim" and not {"paper", "expected"} & set(c):
                missing.add("paper")
            if missing:
                raise SpecError(f"{where}: {kind} {i + 1} lacks {', '.join(sorted(missing))}")
    validate_references(spec, where)
    plots = spec.get("plot", [])
    for i, opts in enumerate([plots] if isinstance(plots, dict) else plots):
        kind = opts.get("kind", "scatter")
        if kind not in PLOT_KEYS:
            raise SpecError(f"{where}: plot {i + 1} has unknown kind `{kind}` (scatter, ratio, "
                            "bars)")
        unknown(opts, PLOT_KEYS[kind], f"plot {i + 1}")
    for name, ch in spec.get("choose", {}).items():
        unknown(ch, CHOOSE_KEYS, f"choice `{name}`")
        missing = sorted(CHOOSE_KEYS - {"about"} - set(ch))
        if missing:
            raise SpecError(f"{where}: choice `{name}` lacks {', '.join(missing)}")
        if ch["axis"] not in CHOOSE_AXES:
            raise SpecError(f"{where}: choice `{name}`: axis `{ch['axis']}` is not one of "
                            f"{', '.join(sorted(CHOOSE_AXES))}")
    for name, ts in spec.get("trace_set", {}).items():
        unknown(ts, TRACE_SET_KEYS, f"trace set `{name}`")
        for w in ts.get("windows", []):
            unknown(w, WINDOW_KEYS, f"a window of trace set `{name}`")
            if "label" not in w or "file" not in w:
                raise SpecError(f"{where}: every window of trace set `{name}` needs a "
                                "`label` and a `file`")


# ---------------------------------------------------------------- points
@dataclass
class Expanded:
    """A spec's points, each point's selector labels (trace windows), notes on synthetic
    stand-ins, and the trace files the points read that must be written first."""
    points: list[Point]
    labels: dict[str, dict[str, str]] = field(default_factory=dict)  # by Point.ident
    notes: list[str] = field(default_factory=list)
    writes: list[tuple[Path, object]] = field(default_factory=list)
    chosen: list[str] = field(default_factory=list)  # report lines: params chosen, and why


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


def depends_on(spec: dict) -> list[str]:
    """The figures whose results the spec's `[choose.NAME]` params are chosen from."""
    return sorted({ch["figure"] for ch in spec.get("choose", {}).values()})


def choose(spec: dict, results: dict[str, list[dict]]) -> tuple[dict[str, object], list[str]]:
    """Each `[choose.NAME]`'s param value, and a report line saying why. Among the points of
    figure `figure`'s series `static` that lie on their Pareto front (cycles, on-chip bytes),
    the one closest to the series `dynamic`'s point along `axis` (memory: its on-chip bytes
    against the dynamic point's on demand, as Figure 9 charges them; performance: cycles),
    closeness being |log(static / dynamic)|."""
    import math

    from stepc.explore.pareto import pareto_front
    chosen: dict[str, object] = {}
    lines = []
    for name, ch in spec.get("choose", {}).items():
        recs = results.get(ch["figure"], [])
        statics = [r for r in recs if r.get("tag") == ch["static"]]
        dynamic = [r for r in recs if r.get("tag") == ch["dynamic"]]
        failed = [r for r in statics + dynamic if r.get("status") != "ok"]
        if len(dynamic) != 1 or not statics or failed:
            why = f": {failed[0].get('error') or failed[0].get('status')}" if failed else ""
            raise SpecError(f"choice `{name}` needs figure {ch['figure']}'s points "
                            f"`{ch['static']}` and one `{ch['dynamic']}`, all run{why}")
        static_metric, dynamic_metric = CHOOSE_AXES[ch["axis"]]
        front = [statics[i] for i in pareto_front([(r["cycles"], r["on_chip_bytes"])
                                                   for r in statics])]
        target = dynamic[0][dynamic_metric]
        best = min(front, key=lambda r: abs(math.log(r[static_metric] / target)))
        chosen[name] = best["params"][ch["param"]]
        lines.append(
            f"- `{name}`: {ch['param']} = {chosen[name]} ({ch.get('about', ch['axis'])}): of "
            f"figure {ch['figure']}'s `{ch['static']}` front ({ch['param']} = "
            f"{', '.join(str(r['params'][ch['param']]) for r in front)}), the closest in "
            f"{static_metric.replace('_', ' ')} ({fmt_value(best[static_metric])}) to "
            f"`{ch['dynamic']}`'s {dynamic_metric.replace('_', ' ')} ({fmt_value(target)})")
    return chosen, lines


def _chosen_param(value, spec: dict, picked: dict | None, sweep: str):
    """A param value; `"@NAME"` is the value of `[choose.NAME]` (kept as the text while
    nothing is chosen yet, which is enough to check the claims)."""
    if not (isinstance(value, str) and value.startswith("@")):
        return value
    if value[1:] not in spec.get("choose", {}):
        raise SpecError(f"{sweep}: param value `{value}` names no `[choose.{value[1:]}]`")
    return value if picked is None else picked[value[1:]]


def expand_spec(spec: dict, data: str | None, model: str,
                trace_dir: Path | None = None, picked: dict | None = None) -> Expanded:
    """Every point of every sweep. A trace `"@SET"` (or `"@SET:LABEL"`) sweeps over the
    windows of a trace set; without a trace directory the windows' derived files (prefixes,
    synthetic stand-ins) are named but not made, which is enough to check the claims.
    A param `"@NAME"` takes the value `picked[NAME]` (see `choose`)."""
    exp = Expanded([])
    sets = spec.get("trace_set", {})
    stand_ins: dict[str, list[str]] = {}  # trace set -> windows replaced by synthetic data
    root = program_root()
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
            (() if sw.get("own_model") else (f"hbm.model={model}",))
        for values in itertools.product(*(grid[n] for n in names)):
            params = {k: _chosen_param(v, spec, picked, name) for k, v in
                      {**sw.get("params", {}), **dict(zip(names, values))}.items()}
            for chosen in itertools.product(*(items for _, items in axes)):
                traces = dict(fixed)
                labels: dict[str, str] = {}
                for (stream, _), (path, lab) in zip(axes, chosen):
                    traces[stream] = path
                    labels.update(lab)
                p = Point(str(root / sw["program"]), tuple(sorted(params.items())),
                          sw.get("hw", "paper-eval"), sets_, tuple(sorted(traces.items())),
                          True, name,
                          milestones=tuple(sorted(sw.get("milestones", {}).items())))
                exp.points.append(p)
                if labels:
                    exp.labels[p.ident] = labels
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


def check_claims(spec: dict) -> list[str]:
    """Without running anything: every claim parses, has a tolerance with a stated reason,
    and each of its terms names a known metric and selects exactly one point (a series:
    at least one) of the spec's sweeps; every reference it names is in the spec; every
    `{expr}` of a quirk is such an expression too."""
    exp = expand_spec(spec, None, "ref")
    recs = [{"tag": p.tag, "params": dict(p.params), "labels": exp.labels.get(p.ident, {})}
            for p in exp.points]
    refs = set(spec.get("reference", {}))
    problems = []
    for c in [*spec.get("claim", []), *spec.get("measure", [])]:
        problems += expression_problems(c["text"], c["value"], recs, refs)
        for m in PLACEHOLDER.finditer(c.get("quirk", "")):
            problems += expression_problems(c["text"] + " (quirk)", m.group(1), recs, refs)
            try:
                format(1.0, m.group(2) or ".4g")
            except ValueError:
                problems.append(f"{c['text']} (quirk): bad format `{m.group(2)}`")
        if "paper" in c or "expected" in c:
            problems += [f"{c['text']}: {p}" for p in claim_problems(c)]
    return problems


def fmt_value(v) -> str:
    """A measured value as reports show it: ints with thousands separators, floats to 4
    significant digits."""
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
