"""Rendering an Analysis: a rich table per operator with totals (text) and a JSON document."""

from __future__ import annotations

import sympy
from rich import box
from rich.console import Console
from rich.table import Table

from stepc.analyze.analysis import Analysis, Roofline
from stepc.hw import HardwareConfig
from stepc.types import fmt_dim

KINDS = {"dynamic": "dynamic-regular", "ragged": "ragged", "param": "param"}


def fmt_value(e: sympy.Expr, unit: str = "") -> str:
    """Integers with thousands separators; exact non-integers to 4 significant digits;
    symbolic expressions as the paper writes them."""
    e = sympy.sympify(e)
    if e.is_Integer:
        return f"{int(e):,}{unit}"
    if e.is_number:
        if e == sympy.nan:
            return "n/a"
        return f"{float(e):,.4g}{unit}"
    return fmt_dim(e)


def json_value(e: sympy.Expr):
    """An int when fully bound and integral, a float when numeric, else a sympy string."""
    e = sympy.sympify(e)
    if e.is_Integer:
        return int(e)
    if e.is_number:
        return None if e == sympy.nan else float(e)
    return sympy.sstr(e)


def _human(e: sympy.Expr, unit: str) -> str:
    e = sympy.sympify(e)
    if not e.is_number or e == sympy.nan:
        return "symbolic" if e != sympy.nan else "n/a"
    x = float(e)
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}".rstrip()


def render_text(a: Analysis, console: Console, show_all: bool = False,
                hw: HardwareConfig | None = None, roof: Roofline | None = None) -> None:
    """The per-operator table, totals, symbols, roofline and a one-line summary."""
    def line(text: str) -> None:
        console.print(text, soft_wrap=True)

    table = Table(box=box.SIMPLE_HEAD, title=f"{a.program}  (on-chip model: {a.mode})",
                  title_justify="left")
    for col, just in (("operator", "left"), ("op", "left"), ("off-chip bytes", "right"),
                      ("on-chip bytes", "right"), ("FLOPs", "right")):
        table.add_column(col, justify=just, overflow="fold")
    shown = 0
    for o in a.ops:
        if not show_all and o.off_chip == 0 and o.on_chip == 0 and o.flops == 0:
            continue
        shown += 1
        table.add_row(o.node, o.op, fmt_value(o.off_chip), fmt_value(o.on_chip),
                      fmt_value(o.flops))
    t = a.totals
    table.add_section()
    table.add_row("total", "", fmt_value(t["off_chip_bytes"]), fmt_value(t["on_chip_bytes"]),
                  fmt_value(t["flops"]))
    console.print(table)
    if not show_all and shown < len(a.ops):
        line(f"({len(a.ops) - shown} operators with no cost not shown; --all shows them)")
    line(f"on-chip bytes, allocated on demand: {fmt_value(t['on_chip_bytes_on_demand'])}")
    line(f"operational intensity: {fmt_value(t['operational_intensity'])} FLOP/byte")
    if a.symbols:
        line("symbols:")
        for info in a.symbols.values():
            where = f" ({info.span})" if info.span else ""
            origin = f"introduced by `{info.origin}`{where}" if info.origin else \
                f"declared{where}"
            value = f" = {fmt_value(a.bindings[info.name])}" if info.name in a.bindings else ""
            line(f"  {info.name}{value}: {KINDS[info.kind]}, {origin}: {info.reason}")
    if roof is not None and hw is not None:
        line(f"roofline ({hw.name}): memory {fmt_value(roof.memory_cycles)} cycles "
                      f"({fmt_value(sympy.nsimplify(hw.peak_bw))} B/cycle), compute "
                      f"{fmt_value(roof.compute_cycles)} cycles "
                      f"({a.allocated_compute:,} FLOP/cycle allocated); "
                      + (f"{roof.bound}-bound" if roof.bound != "unknown" else
                         "bound depends on the symbols"))
    summary = (f"summary: off-chip {_human(t['off_chip_bytes'], 'B')}, on-chip "
               f"{_human(t['on_chip_bytes'], 'B')}, FLOPs {_human(t['flops'], '')}".rstrip())
    if roof is not None and roof.bound != "unknown":
        summary += f", >= {fmt_value(sympy.ceiling(roof.cycles))} cycles ({roof.bound}-bound)"
    free = a.free_symbols()
    if free:
        summary += f"; symbolic in {', '.join(free)}"
    line(summary)


def to_json(a: Analysis, hw: HardwareConfig | None = None, roof: Roofline | None = None
            ) -> dict:
    out = {
        "program": a.program,
        "onchip_model": a.mode,
        "params": dict(sorted(a.params.items())),
        "bindings": {k: json_value(v) for k, v in sorted(a.bindings.items())},
        "ops": [{
            "name": o.node, "op": o.op,
            "location": {"file": o.span.file, "line": o.span.line, "column": o.span.col},
            "off_chip_bytes": json_value(o.off_chip), "on_chip_bytes": json_value(o.on_chip),
            "on_chip_bytes_on_demand": json_value(o.on_chip_on_demand),
            "flops": json_value(o.flops), "compute_bw": o.compute_bw,
        } for o in a.ops],
        "totals": {k: json_value(v) for k, v in a.totals.items()},
        "symbols": {info.name: {"kind": info.kind, "origin": info.origin,
                                "reason": info.reason,
                                "location": None if info.span is None else {
                                    "file": info.span.file, "line": info.span.line,
                                    "column": info.span.col}}
                    for info in a.symbols.values()},
    }
    if roof is not None and hw is not None:
        out["roofline"] = {"hw": hw.name, "memory_cycles": json_value(roof.memory_cycles),
                           "compute_cycles": json_value(roof.compute_cycles),
                           "allocated_compute": a.allocated_compute, "bound": roof.bound,
                           "offchip_bw": hw.peak_bw}
    return out
