"""The text report of `stepc analyze`: a rich table per statement (or operator) with totals,
the symbols, the roofline and hints for the dims left free."""

from __future__ import annotations

import re
from dataclasses import dataclass

import sympy
from rich import box
from rich.console import Console, JustifyMethod
from rich.table import Table

from stepc.analyze.analysis import Analysis, Roofline, add_all
from stepc.analyze.bindings import trace_decidable
from stepc.analyze.fold import fmt_folded
from stepc.energy import energy_bound
from stepc.hw import HardwareConfig
from stepc.report.roofline import roofline_lines
from stepc.report.types import KINDS
from stepc.symbol_families import family, fold_names
from stepc.tables import print_table
from stepc.types import natural_key


def fmt_value(e: sympy.Expr, unit: str = "") -> str:
    """Integers with thousands separators; exact non-integers to 4 significant digits (one
    decimal from 10,000 on, never in e-notation);
    symbolic expressions as the paper writes them, sums over symbol families folded."""
    e = sympy.sympify(e)
    if e.is_Integer:
        return f"{int(e):,}{unit}"
    if e.is_number:
        if e == sympy.nan:
            return "n/a"
        x = float(e)
        return f"{x:,.1f}{unit}" if abs(x) >= 10_000 else f"{x:,.4g}{unit}"
    return fmt_folded(e)


MAX_SHOWN = 200  # characters of one expression in the summary (--all: no limit)


def _clip(text: str, show_all: bool) -> str:
    """An expression cut to fit the summary, at a term boundary, saying where it is whole."""
    if show_all or len(text) <= MAX_SHOWN:
        return text
    depth, cut = 0, None
    for i, ch in enumerate(text[:MAX_SHOWN - 40]):  # the last " + " outside parentheses
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and text.startswith(" + ", i):
            cut = i
    return text if cut is None else text[:cut] + " + ... (--all or --format json: whole)"


def _human(e: sympy.Expr, unit: str) -> str:
    e = sympy.sympify(e)
    if not e.is_number or e == sympy.nan:
        return "symbolic" if e != sympy.nan else "n/a"
    x = float(e)
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}".rstrip()


@dataclass
class _Row:
    """One table row: an operator instance, or every instance of one statement."""

    name: str
    op: str
    count: int
    off_chip: sympy.Expr
    on_chip: sympy.Expr
    flops: sympy.Expr

    @property
    def costless(self) -> bool:
        return self.off_chip == 0 and self.on_chip == 0 and self.flops == 0


def _name_pattern(names: list[str]) -> str | None:
    """`ffn[*].up` for ffn[0].up, ffn[1].up, ...: indices that vary become `*`; None when
    the names differ elsewhere."""
    parts = [re.split(r"(\[\d+\])", n) for n in names]
    if len({len(p) for p in parts}) != 1:
        return None
    out = []
    for tokens in zip(*parts):
        if len(set(tokens)) == 1:
            out.append(tokens[0])
        elif all(re.fullmatch(r"\[\d+\]", t) for t in tokens):
            out.append("[*]")
        else:
            return None
    return "".join(out)


def _rows(a: Analysis, grouped: bool) -> list[_Row]:
    """Per operator instance, or (grouped) per statement: the instances one statement makes
    in loop iterations and graph instances, summed."""
    if not grouped:
        return [_Row(o.node, o.op, 1, o.off_chip, o.on_chip, o.flops) for o in a.ops]
    groups: dict[tuple, list] = {}
    for o in a.ops:
        groups.setdefault((o.span, o.op), []).append(o)
    rows = []
    for (_span, op), ops in groups.items():
        pattern = _name_pattern([o.node for o in ops])
        parts = [ops] if pattern else \
            list({re.sub(r"\[\d+\]", "[*]", o.node): [x for x in ops if re.sub(
                r"\[\d+\]", "[*]", x.node) == re.sub(r"\[\d+\]", "[*]", o.node)]
                for o in ops}.values())
        for part in parts:
            name = _name_pattern([o.node for o in part]) or part[0].node
            rows.append(_Row(name, op, len(part),
                             *(add_all([getattr(o, k) for o in part])
                               for k in ("off_chip", "on_chip", "flops"))))
    return rows


def _symbol_lines(a: Analysis) -> list[str]:
    """The symbols, one line per family of symbols made by one operator statement."""
    groups: dict[tuple, list[str]] = {}
    for name in sorted(a.symbols, key=natural_key):
        info = a.symbols[name]
        f = family(name)
        reason = info.reason
        if f is not None and len(f[1]) == 1:
            reason = re.sub(rf"\b{f[1][0]}\b", "i", reason)
        key = (f[0] if f else name, info.kind, info.span, reason, name in a.bindings)
        groups.setdefault(key, []).append(name)
    lines: list[str] = []
    for (_fam, _kind, _span, reason, _bound), names in groups.items():
        if len(fold_names(names)) != 1:  # not one run of a family: a line per symbol
            lines.extend(_symbol_line(a, [n], a.symbols[n].reason) for n in names)
        else:
            lines.append(_symbol_line(a, names, reason))
    return lines


def _symbol_line(a: Analysis, names: list[str], reason: str) -> str:
    info = a.symbols[names[0]]
    where = f" ({info.span})" if info.span else ""
    origins = sorted({a.symbols[n].origin for n in names}, key=natural_key)
    origin = (f"introduced by `{_name_pattern(origins) or origins[0]}`{where}"
              if info.origin else f"declared{where}")
    if len(names) == 1:
        value = f" = {fmt_value(a.bindings[info.name])}" if info.name in a.bindings else ""
        return f"  {info.name}{value}: {KINDS[info.kind]}, {origin}: {reason}"
    bound = ""
    if names[0] in a.bindings:
        vals = [fmt_value(a.bindings[n]) for n in names]
        bound = f" = {', '.join(vals)}" if len(vals) <= 8 else " (bound)"
    return (f"  {fold_names(names)[0]} ({len(names)} symbols){bound}: {KINDS[info.kind]}, "
            f"{origin}: {reason}")


def _trace_hints(a: Analysis, typed) -> list[str]:
    """Which --trace would make the free symbols concrete; which only a run decides."""
    free = set(a.free_symbols())
    if typed is None or not free:
        return []
    decidable = trace_decidable(typed, free)
    lines = [f"hint: --trace {name}=FILE binds {', '.join(fold_names(syms))} "
             "(see docs/analyze.md)" for name, syms in decidable.items()]
    rest = free - {s for syms in decidable.values() for s in syms}
    if rest:
        lines.append(f"hint: {', '.join(fold_names(rest))} depend on the run (timing or "
                     "on-chip data): `stepc sim` reports them")
    return lines


def energy_lines(a: Analysis, hw: HardwareConfig, roof: Roofline) -> list[str]:
    """`stepc analyze --energy`: the energy lower bound (the dynamic energy, and the
    leakage over the roofline's cycles when those are numbers) and the area."""
    bound = energy_bound(a, hw, roof)
    assert bound.total_j is not None  # cycles were given
    leak = "and leakage over the roofline's cycles" if roof.bound != "unknown" else \
        "no leakage while the roofline's cycles are symbolic"
    return [f"energy bound: >= {_human(bound.total_j * 1000, 'mJ')} (dynamic "
            f"{_human(bound.dynamic_j * 1000, 'mJ')}, {leak}; docs/energy.md)",
            f"area: {_human(bound.area_mm2, 'mm2')} ({bound.compute_units:,} compute units "
            f"and the on-chip bytes' SRAM)"]


def render_text(a: Analysis, console: Console, show_all: bool = False,
                hw: HardwareConfig | None = None, roof: Roofline | None = None,
                typed=None) -> None:
    """The cost table (one row per statement; --all: per operator instance), totals,
    symbols, roofline, a one-line summary and, while symbols stay free, a --trace hint."""
    def line(text: str) -> None:
        console.print(text, soft_wrap=True, markup=False)

    def val(e) -> str:
        return _clip(fmt_value(e), show_all)

    rows = _rows(a, grouped=not show_all)
    grouped = any(r.count > 1 for r in rows)
    table = Table(box=box.SIMPLE_HEAD, title=f"{a.program}  (on-chip model: {a.mode})",
                  title_justify="left")
    cols: list[tuple[str, JustifyMethod]] = [("operator", "left"), ("op", "left")]
    if grouped:
        cols.append(("n", "right"))
    cols += [("off-chip bytes", "right"), ("on-chip bytes", "right"), ("FLOPs", "right")]
    for col, just in cols:
        table.add_column(col, justify=just)
    hidden = 0
    cells: list[list[str] | None] = []
    for r in rows:
        if not show_all and r.costless:
            hidden += r.count
            continue
        cells.append([r.name, r.op, *([f"{r.count:,}"] if grouped else []),
                      val(r.off_chip), val(r.on_chip), val(r.flops)])
    t = a.totals
    cells += [None, ["total", "", *([f"{len(a.ops):,}"] if grouped else []),
                     val(t["off_chip_bytes"]), val(t["on_chip_bytes"]), val(t["flops"])]]
    print_table(console, table, cells)
    if grouped:
        line("(n: operator instances of the statement, from loop iterations and graph "
             "instances, summed; --all lists each)")
    if hidden:
        line(f"({hidden} operators with no cost not shown; --all shows them)")
    line(f"on-chip bytes, allocated on demand: {val(t['on_chip_bytes_on_demand'])}")
    line(f"operational intensity: {val(t['operational_intensity'])} FLOP/byte")
    if a.symbols:
        line("symbols:")
        for text in _symbol_lines(a):
            line(text)
    if roof is not None and hw is not None:
        for text in roofline_lines(roof, hw, a.allocated_compute, val, fmt_value):
            line(text)
    summary = (f"summary: off-chip {_human(t['off_chip_bytes'], 'B')}, on-chip "
               f"{_human(t['on_chip_bytes'], 'B')}, FLOPs {_human(t['flops'], '')}".rstrip())
    if roof is not None and roof.bound != "unknown":
        summary += f", >= {fmt_value(sympy.ceiling(roof.cycles))} cycles ({roof.bound}-bound)"
    free = a.free_symbols()
    if free:
        summary += f"; symbolic in {', '.join(fold_names(free))}"
    line(summary)
    for hint in _trace_hints(a, typed):
        line(hint)
