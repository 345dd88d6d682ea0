"""Claims of an experiment spec: expressions over point metrics, references, tolerances.

A claim's `value` is arithmetic (`+ - * / **`, numbers, `geomean`, `min`, `max`) over
`tag[KEY=V,...].metric` terms, each selecting exactly one point, and over comparisons of a
whole series with a reference table read from the data directory at run time:
`max_rel_error(swiglu.cycles, paper_sim)`, `mape(...)`, `pearson(...)`. The claim holds when
the value is within its tolerance of the paper's number (`effect`: a fraction of the
paper's effect, ratio - 1; `abs`: absolute; `rel`: relative) or past the paper's bound
(`"> 1"`, `"< 1.01"`).
"""

from __future__ import annotations

import ast
import csv
import math
import os
import re
from dataclasses import dataclass

from stepc.measure import METRICS as MEASURED

METRICS = tuple(MEASURED)  # what a claim may read of a point
FINISHED = "finished_"  # `tag.finished_NAME`: the cycle the point's milestone NAME was reached
TOLERANCE_KINDS = {"effect": "of the effect (ratio - 1)", "abs": "absolute",
                   "rel": "relative"}
REFERENCE_KEYS = {"file", "match", "value", "about"}


class SpecError(Exception):
    """A bad experiment spec or claim expression."""


class NeedsData(Exception):
    """A claim compares with reference data that is not at hand (no `--data`)."""


SOURCES = {"paper": "the paper's", "artifact": "the artifact's", "data": "the data's",
           "target": "stepc's target"}  # where a claim's expected value comes from


@dataclass
class Claim:
    text: str
    value: str
    expected: float | str  # the judged value: a number, or a bound "> N" / "< N"
    tolerance: tuple[str, float] | None = None  # (kind, amount) for a number
    reason: str = ""  # why this tolerance (or bound)
    quirk: str = ""
    paper: float | str | None = None  # the paper's own number or bound (None: it has none)
    source: str = "paper"  # of `expected`: a key of SOURCES
    in_sample: bool = False  # judged on the points a model was fitted on: no reproduction

    @classmethod
    def from_spec(cls, c: dict) -> Claim:
        tol = c.get("tolerance")
        source = c.get("source", "paper")
        return cls(c["text"], c["value"], c.get("expected", c.get("paper")),
                   next(iter(tol.items())) if isinstance(tol, dict) and tol else None,
                   " ".join(c.get("tolerance_reason", "").split()), c.get("quirk", ""),
                   c.get("paper"), source, bool(c.get("in_sample", False)))

    @property
    def counts(self) -> bool:
        """Whether the claim is a reproduction: of the paper's or its artifact's or data's
        numbers, judged on points no model was fitted on (not stepc's own targets)."""
        return self.source != "target" and not self.in_sample

    def verdict(self, holds: bool) -> str:
        if self.counts:
            return "reproduced" if holds else "NOT reproduced"
        kind = "in-sample " if self.in_sample else ""
        return f"{kind}{'target' if self.source == 'target' else 'check'} " + \
            ("met" if holds else "missed")

    def band(self) -> tuple[float, float] | None:
        """The values that reproduce a numeric claim."""
        if isinstance(self.expected, str) or self.tolerance is None:
            return None
        kind, amount = self.tolerance
        scale = {"effect": abs(self.expected - 1), "abs": 1.0, "rel": abs(self.expected)}[kind]
        return self.expected - amount * scale, self.expected + amount * scale

    def holds(self, ours: float) -> bool:
        if isinstance(self.expected, str):
            op, num = self.expected.split()
            return ours < float(num) if op == "<" else ours > float(num)
        lo, hi = self.band()
        return lo - 1e-12 <= ours <= hi + 1e-12

    def shown(self, value: float) -> str:
        """A value with the decimals that tell whether it is inside the band."""
        band = self.band()
        if band is None:
            return f"{value:.4g}"
        if band[0] == band[1]:
            return f"{value:.7g}"
        decimals = max(0, math.ceil(-math.log10((band[1] - band[0]) / 2)) + 1)
        return f"{value:.{decimals}f}"

    def paper_shown(self) -> str:
        """The paper column: the paper's own number or bound, `-` when it states none."""
        if self.paper is None:
            return "-"
        return self.paper if isinstance(self.paper, str) else f"{self.paper:.7g}"

    def accepted(self) -> str:
        """The accepted values, as the report shows them, with where the expected value
        comes from when it is not the paper's."""
        origin = "" if self.source == "paper" else f" ({SOURCES[self.source]})"
        if isinstance(self.expected, str):
            return self.expected + origin
        kind, amount = self.tolerance
        if amount == 0:
            return f"exactly {self.expected:.7g}{origin}"
        lo, hi = self.band()
        how = f"± {amount:.3g} {TOLERANCE_KINDS[kind]}" if kind == "abs" else \
            f"± {amount:.0%} {TOLERANCE_KINDS[kind]}"
        around = f"; {SOURCES[self.source]} {self.expected:.7g}" if origin else ""
        return f"{self.shown(lo)} to {self.shown(hi)} ({how}{around})"


def claim_problems(c: dict) -> list[str]:
    """What is wrong with a claim's paper value, tolerance and stated reason."""
    out = []
    source = c.get("source", "paper")
    if source not in SOURCES:
        out.append(f"source `{source}` is not one of {', '.join(SOURCES)}")
    if source == "paper" and "expected" in c:
        out.append("`expected` is for a value that is not the paper's: give its `source`")
    if source != "paper" and "expected" not in c:
        out.append(f"a claim judged on {SOURCES.get(source, source)} value needs `expected` "
                   "(`paper` is only the paper's own number)")
    paper, tol = c.get("expected", c.get("paper")), c.get("tolerance")
    if isinstance(paper, str):
        if not re.fullmatch(r"[<>] -?[0-9.]+(e-?\d+)?", paper):
            out.append(f"paper `{paper}` is not `< N` or `> N`")
        if tol is not None:
            out.append("a bound takes no tolerance")
    elif not isinstance(paper, (int, float)) or isinstance(paper, bool):
        out.append(f"paper `{paper}` is not a number or a bound")
    elif not (isinstance(tol, dict) and len(tol) == 1 and set(tol) <= set(TOLERANCE_KINDS)):
        out.append("a number needs `tolerance = { effect = F }`, `{ abs = F }` or "
                   "`{ rel = F }`")
    else:
        (kind, amount), = tol.items()
        if not isinstance(amount, (int, float)) or amount < 0:
            out.append(f"tolerance {kind} = {amount} is not a number >= 0")
        elif kind == "effect" and amount >= 1:
            out.append("an effect tolerance of 100 % or more accepts no effect at all")
        elif kind == "rel" and abs(paper - 1) <= amount * abs(paper) and paper != 1:
            out.append(f"a relative band of {amount:.0%} around {paper} contains 1, so it "
                       "cannot tell the effect from none: use `effect` or `abs`")
    if not c.get("tolerance_reason", "").strip():
        out.append("no `tolerance_reason` (why this tolerance or bound)")
    return out


# ---------------------------------------------------------------- reference tables
@dataclass
class Reference:
    """Rows of a CSV under the data directory: `match` maps a sweep param to the column
    holding its value, `value` names the column compared with a metric."""
    name: str
    rows: list[dict[str, str]]
    match: dict[str, str]
    value: str


def validate_references(spec: dict, where: str) -> None:
    for name, ref in spec.get("reference", {}).items():
        extra = sorted(set(ref) - REFERENCE_KEYS)
        if extra:
            raise SpecError(f"{where}: reference `{name}` has unknown key(s) "
                            f"{', '.join(extra)} (allowed: {', '.join(sorted(REFERENCE_KEYS))})")
        missing = {"file", "match", "value"} - set(ref)
        if missing:
            raise SpecError(f"{where}: reference `{name}` lacks {', '.join(sorted(missing))}")


def load_references(spec: dict, data: str | None) -> dict[str, Reference | str]:
    """Each reference table of a spec, or why it is not at hand."""
    out: dict[str, Reference | str] = {}
    for name, ref in spec.get("reference", {}).items():
        if data is None:
            out[name] = f"needs the paper's data (`{ref['file']}` under --data DIR)"
            continue
        path = os.path.join(data, ref["file"])
        try:
            with open(path, newline="", encoding="utf-8") as f:
                rows = list(csv.DictReader(f))
        except OSError:
            out[name] = f"needs the paper's data (no `{ref['file']}` under {data})"
            continue
        columns = [*ref["match"].values(), ref["value"]]
        lacking = [c for c in columns if rows and c not in rows[0]]
        if not rows or lacking:
            raise SpecError(f"reference `{name}`: {path} has no rows or lacks column(s) "
                            f"{', '.join(lacking)}")
        out[name] = Reference(name, rows, dict(ref["match"]), ref["value"])
    return out


def _number(text: str) -> str:
    """A CSV cell as a param value is written: `16.0` and `16` are the same tile."""
    try:
        f = float(text)
    except ValueError:
        return text.strip()
    return str(int(f)) if f.is_integer() else str(f)


def _paired(series: list[dict], metric: str, ref: Reference, term: str
            ) -> tuple[list[float], list[float]]:
    """stepc's metric and the reference value for every reference row (each row must match
    exactly one point of the series; points without a row are not compared)."""
    ours, theirs = [], []
    for row in ref.rows:
        want = {param: _number(row[col]) for param, col in ref.match.items()}
        hits = [r for r in series if all(point_field(r, k) == v for k, v in want.items())]
        where = ", ".join(f"{k}={v}" for k, v in want.items())
        if len(hits) != 1:
            raise SpecError(f"`{term}`: reference `{ref.name}` row {where} matches "
                            f"{len(hits)} points, not one")
        ours.append(_metric(hits[0], metric, f"{term} at {where}"))
        theirs.append(float(row[ref.value]))
    return ours, theirs


def _rel_errors(ours: list[float], theirs: list[float]) -> list[float]:
    if any(t == 0 for t in theirs):
        raise SpecError("a reference value is 0: no relative error")
    return [abs(o - t) / abs(t) for o, t in zip(ours, theirs)]


def _pearson(ours: list[float], theirs: list[float]) -> float:
    import numpy as np
    if len(ours) < 2 or np.std(ours) == 0 or np.std(theirs) == 0:
        raise SpecError("pearson() needs two or more points that vary")
    return float(np.corrcoef(ours, theirs)[0, 1])


SERIES_FUNCTIONS = {
    "max_rel_error": lambda o, t: max(_rel_errors(o, t)),
    "mape": lambda o, t: sum(_rel_errors(o, t)) / len(o),
    "pearson": _pearson,
}


# ---------------------------------------------------------------- expressions
_TERM = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[([^\]]*)\])?\.([a-z_]+)")
_SERIES = re.compile(r"\b(" + "|".join(SERIES_FUNCTIONS) + r")\(\s*(" + _TERM.pattern +
                     r")\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)")


def geomean(*xs: float) -> float:
    if not xs or any(x <= 0 for x in xs):
        raise SpecError("geomean() needs positive values")
    return math.prod(xs) ** (1 / len(xs))


FUNCTIONS = {"geomean": geomean, "min": min, "max": max}


def _selector(sel: str | None) -> dict[str, str]:
    if not sel:
        return {}
    try:
        return {k.strip(): v.strip() for k, v in (kv.split("=") for kv in sel.split(","))}
    except ValueError:
        raise SpecError(f"bad selector `[{sel}]` (want KEY=VALUE,...)") from None


def point_field(rec: dict, key: str) -> str | None:
    """A selector key names a param of the point, else a label (a trace window)."""
    if key in rec.get("params", {}):
        return str(rec["params"][key])
    return rec.get("labels", {}).get(key)


def select(records: list[dict], tag: str, want: dict[str, str]) -> list[dict]:
    return [r for r in records if r.get("tag") == tag and
            all(point_field(r, k) == v for k, v in want.items())]


def known_metric(metric: str) -> bool:
    """A metric every record has, or a milestone's finish cycle (`finished_NAME`)."""
    return metric in METRICS or (metric.startswith(FINISHED) and len(metric) > len(FINISHED))


def _metric(rec: dict, metric: str, term: str) -> float:
    if rec.get("status") != "ok":
        raise SpecError(f"`{term}` did not finish ({rec.get('status')})")
    if metric.startswith(FINISHED):
        value = rec.get("finished", {}).get(metric[len(FINISHED):])
    else:
        value = rec.get(metric)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise SpecError(f"`{term}` is not a number ({value})")
    return float(value)


def claim_terms(expr: str) -> list[tuple[str, str, dict[str, str], str]]:
    """The single-point `tag[K=V,...].metric` terms of a claim: (text, tag, selector,
    metric). Series compared with a reference are `series_terms`."""
    rest = _SERIES.sub("v0", expr)
    return [(m.group(0), m.group(1), _selector(m.group(3)), m.group(4))
            for m in _TERM.finditer(rest)]


def series_terms(expr: str) -> list[tuple[str, str, dict[str, str], str, str]]:
    """The `fn(tag[K=V].metric, reference)` calls of a claim: (text, tag, selector, metric,
    reference name)."""
    return [(m.group(0), m.group(3), _selector(m.group(5)), m.group(6), m.group(7))
            for m in _SERIES.finditer(expr)]


def arith(expr: str, text: str) -> ast.Expression:
    """`text` (the claim with its terms replaced by v0, v1, ...) as a checked AST."""
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
                            f"(allowed functions: {', '.join([*FUNCTIONS, *SERIES_FUNCTIONS])})")
    return tree


def evaluate_claim(expr: str, records: list[dict],
                   references: dict[str, Reference | str] | None = None) -> float:
    """Evaluate a claim expression over records (with `labels` for trace windows). Raises
    NeedsData when it compares with a reference that is not at hand."""
    references = references or {}
    values: list[float] = []

    def name(v: float) -> str:
        values.append(v)
        return f"v{len(values) - 1}"

    def series(m: re.Match) -> str:
        text, fn, tag, want, metric, ref = (m.group(0), m.group(1), m.group(3),
                                            _selector(m.group(5)), m.group(6), m.group(7))
        if metric not in METRICS:
            raise SpecError(f"unknown metric `{metric}`")
        table = references.get(ref)
        if table is None:
            raise SpecError(f"`{text}`: no reference `{ref}` in the spec")
        if isinstance(table, str):
            raise NeedsData(table)
        points = select(records, tag, want)
        if not points:
            raise SpecError(f"`{text}` selects no point")
        return name(SERIES_FUNCTIONS[fn](*_paired(points, metric, table, text)))

    def term(m: re.Match) -> str:
        tag, want, metric = m.group(1), _selector(m.group(3)), m.group(4)
        if not known_metric(metric):
            raise SpecError(f"unknown metric `{metric}`")
        hits = select(records, tag, want)
        if len(hits) != 1:
            raise SpecError(f"`{m.group(0)}` selects {len(hits)} points, not one")
        return name(_metric(hits[0], metric, m.group(0)))

    text = _TERM.sub(term, _SERIES.sub(series, expr))
    tree = arith(expr, text)
    try:
        return float(eval(compile(tree, "<claim>", "eval"),  # noqa: S307 - checked AST
                          {"__builtins__": {}, **FUNCTIONS},
                          {f"v{i}": v for i, v in enumerate(values)}))
    except ZeroDivisionError:
        raise SpecError(f"claim expression `{expr}` divides by zero") from None


# `{expr}` or `{expr:FORMAT}` in a claim's quirk: a number measured by this run
PLACEHOLDER = re.compile(r"\{([^{}:]+)(?::([^{}]+))?\}")


def fill_measured(text: str, records: list[dict],
                  references: dict[str, Reference | str] | None = None) -> str:
    """`text` with each `{expr}` replaced by the expression's value over the records
    (formatted `.4g` or as `{expr:FORMAT}` says; `n/a` when a point is missing)."""
    def value(m: re.Match) -> str:
        try:
            v = evaluate_claim(m.group(1), records, references)
        except (SpecError, NeedsData):
            return "n/a"
        return format(v, m.group(2) or ".4g")
    return PLACEHOLDER.sub(value, text)


def expression_problems(what: str, value: str, records: list[dict],
                        references: set[str]) -> list[str]:
    """What is wrong with one claim expression over the points' records (settings only):
    unknown metrics, terms that select no or several points, unknown references, syntax."""
    problems = []
    terms, series = claim_terms(value), series_terms(value)
    if not terms and not series:
        problems.append(f"{what}: no `tag.metric` term")
    for text, tag, want, metric in terms:
        if not known_metric(metric):
            problems.append(f"{what}: `{text}`: unknown metric `{metric}`")
        n = len(select(records, tag, want))
        if n != 1:
            problems.append(f"{what}: `{text}` selects {n} points, not one")
    for text, tag, want, metric, ref in series:
        if metric not in METRICS:
            problems.append(f"{what}: `{text}`: unknown metric `{metric}`")
        if not select(records, tag, want):
            problems.append(f"{what}: `{text}` selects no point")
        if ref not in references:
            problems.append(f"{what}: `{text}`: no reference `{ref}` in the spec")
    try:
        arith(value, _TERM.sub("v0", _SERIES.sub("v0", value)))
    except SpecError as e:
        problems.append(f"{what}: {e}")
    return problems
