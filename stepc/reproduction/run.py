"""Reproducing a figure of the paper: run its spec's points, check its claims, write a report.

A spec (`stepc/reproduction/experiments/fig<N>.toml`, shipped with the package) lists sweeps (program,
fixed params, a grid, hardware, trace globs relative to the data directory), reference
tables (CSV files under the data directory) and claims (`stepc.reproduction.claims`). Without the
paper's traces the points use stepc's seeded synthetic traces, and the report says so;
claims that compare with reference data then say they need it.

A spec may also name sets of trace windows (`[trace_set.NAME]`, e.g. the nine KV-length
batches of one batch size); a sweep whose trace is `"@NAME"` runs once per window, and
claims select a window by its label (`dynamic[B=64,kv_lens=high_0961].cycles`). Claims
carry a `quirk` (the likely reason when they are not reproduced) and the figure a list of
`quirks` (known differences between the paper's artifact and a faithful run); the report
prints both, with every claim's accepted values and the reason for its tolerance.
"""

from __future__ import annotations

import csv
import glob
import itertools
import os
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import stepc
from stepc.explore.runner import Point, Sweep, code_digest
from stepc.measure import METRICS as MEASURED
from stepc.reproduction.claims import (
    METRICS,
    PLACEHOLDER,
    Claim,
    NeedsData,
    SpecError,
    claim_problems,
    evaluate_claim,
    expression_problems,
    fill_measured,
    load_references,
    validate_references,
)

DEFAULT_COLUMNS = ("cycles", "off_chip_bytes", "on_chip_bytes", "on_chip_bytes_on_demand")
COLUMN_NAMES = {name: m.column for name, m in MEASURED.items()}

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

__all__ = ["SpecError", "available_figures", "load_spec", "expand_spec", "spec_points",
           "check_claims", "evaluate_claim", "reproduce", "Reproduced"]


def _specs():
    return resources.files("stepc") / "reproduction" / "experiments"


def program_root() -> Path:
    """The directory holding `programs/`, which the specs' program paths start with: the
    copy installed with the package, else the source checkout this module belongs to."""
    package = Path(stepc.__file__).resolve().parent
    for root in (package, package.parent):
        if (root / "programs").is_dir():
            return root
    raise SpecError(f"the bundled programs are missing: looked for {package / 'programs'} "
                    f"and {package.parent / 'programs'} (reinstall stepc)")


def available_figures() -> list[str]:
    return sorted((p.name.removeprefix("fig").removesuffix(".toml") for p in _specs().iterdir()
                   if p.name.startswith("fig") and p.name.endswith(".toml")),
                  key=lambda s: (len(s), s))


def load_spec(figure: str) -> dict:
    spec_file = _specs() / f"fig{figure}.toml"
    if not spec_file.is_file():
        raise SpecError(f"no experiment spec for figure {figure} (have: "
                        f"{', '.join(available_figures()) or 'none'}; the specs ship in "
                        f"{_specs()})")
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
            f"{static_metric.replace('_', ' ')} ({_fmt(best[static_metric])}) to "
            f"`{ch['dynamic']}`'s {dynamic_metric.replace('_', ' ')} ({_fmt(target)})")
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


# ---------------------------------------------------------------- running and reporting
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


def make_sweep(figure: str, data: str | None, out_dir: str, jobs: int, model: str = "ref",
               fresh: bool = False, results: dict[str, list[dict]] | None = None
               ) -> tuple[dict, Expanded, Sweep, Path]:
    """A figure's spec, points and sweep (its inputs read, synthetic traces written);
    `results` holds the records of the figures its `[choose]` params depend on."""
    spec = load_spec(figure)
    fig_dir = Path(out_dir) / f"fig{figure}"
    fig_dir.mkdir(parents=True, exist_ok=True)
    chosen, chosen_lines = choose(spec, results or {})
    exp = expand_spec(spec, data, model, (fig_dir / "traces").resolve(), chosen)
    exp.chosen = chosen_lines
    if exp.writes:
        import numpy as np
        (fig_dir / "traces").mkdir(exist_ok=True)
        for path, arr in dict(exp.writes).items():  # a set used by several sweeps: once
            np.save(path, arr)
    results = fig_dir / "results.jsonl"
    if fresh and results.exists():
        results.unlink()
    return spec, exp, Sweep(exp.points, str(results), jobs), fig_dir


def reproduce(figure: str, data: str | None, out_dir: str, jobs: int, model: str = "ref",
              progress=None, fresh: bool = False) -> Reproduced:
    """Run a figure's spec (reusing records of an earlier run whose inputs are unchanged,
    unless `fresh`); write results, CSV, plots and report."""
    from contextlib import closing

    with closing(reproduce_figures([figure], data, out_dir, jobs, model,
                                   lambda _: progress, fresh)) as done:
        return next(done)


def reproduce_figures(figures: list[str], data: str | None, out_dir: str, jobs: int,
                      model: str = "ref", progress=lambda figure: None,
                      fresh: bool = False):
    """`reproduce` for several figures through one pool of `jobs` workers: every figure's
    points are submitted first, so no worker idles while a figure waits for its last
    point. A figure whose params are chosen from other figures' results (`[choose]`) is
    submitted once those are in; a figure it needs that was not asked for runs too (its
    records are kept, its report is not written). Yields each asked figure's `Reproduced`
    (`progress(figure)` gives the figure's per-record callback): first those that others
    choose from, then the others in the order asked, then those that choose. The points
    of figures on a chain of choices run before the others, so that a figure waiting on
    another's results does not start last and leave a worker idle at the end."""
    from stepc.explore.pool import LocalPool

    needs = {f: depends_on(load_spec(f)) for f in figures}
    extra = sorted({d for ds in needs.values() for d in ds} - set(figures))
    needs.update({d: depends_on(load_spec(d)) for d in extra})
    if any(needs[d] for d in extra):
        raise SpecError("a figure that others choose params from must not choose its own")
    chosen_from = {d for ds in needs.values() for d in ds}
    order = extra + [f for f in figures if f in chosen_from] + \
        [f for f in figures if not needs[f] and f not in chosen_from] + \
        [f for f in figures if needs[f]]
    results: dict[str, list[dict]] = {}
    started: dict[str, tuple] = {}
    pool = LocalPool(jobs)
    pending = []

    def start_ready() -> None:
        for figure in order:
            if figure not in started and all(d in results for d in needs[figure]):
                started[figure] = make_sweep(figure, data, out_dir, jobs, model, fresh,
                                             results)
                chained = bool(needs[figure]) or figure in chosen_from
                pending.append(started[figure][2].submit(pool, resume=True,
                                                         rank=0 if chained else 1))
    try:
        start_ready()
        for figure in order:
            spec, exp, sweep, fig_dir = started[figure]
            waiting = pending[list(started).index(figure)]
            try:
                outcome = waiting.collect(progress(figure))
            except BaseException:
                for other in pending:
                    other.keep_finished()
                raise
            results[figure] = [{**r, "labels": exp.labels.get(p.ident, {})}
                               for p, r in zip(sweep.points, outcome.records)]
            start_ready()
            if figure in figures:
                yield _report(figure, spec, exp, sweep, fig_dir, outcome, model, data)
    finally:
        if any(p.futures for p in pending):
            pool.terminate()  # stopped early: the remaining points are not wanted
        elif not pool.stopped:
            pool.shutdown()


def _report(figure: str, spec: dict, exp: Expanded, sweep, fig_dir: Path, outcome,
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
                     " | ".join(_fmt(r.get(c)) if r.get("status") == "ok" else
                                str(r.get("status")) for c in columns) + " |")
    return lines


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
        root = program_root()
        for r in records:
            r = {**r, "program": os.path.relpath(r["program"], root)}
            w.writerow([r.get(k) if not isinstance(r.get(k), dict) else
                        " ".join(f"{a}={b}" for a, b in sorted(r[k].items())) for k in fields])
