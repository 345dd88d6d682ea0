"""Symbolic cost analysis: off-chip traffic, on-chip memory and FLOPs per operator and in total.

Each operator's formulas live in its `OPS` record; this module sums them over the typed
graph, keeps them symbolic in the program's dynamic dims, binds symbols (by hand, or to
the values a trace decides: `stepc.analyze.bindings`), and computes the roofline lower
bound for a hardware configuration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property

import sympy

from stepc.analyze import exact
from stepc.analyze.access import Access, AccessSource
from stepc.canon import memo_renamed, symbols_in
from stepc.hw import HardwareConfig
from stepc.ops import OPS
from stepc.ops.base import CostCtx
from stepc.source import Span
from stepc.typecheck.checker import TypedProgram
from stepc.types import SymbolInfo, natural_key


@dataclass(frozen=True)
class OpCost:
    """The cost formulas of one operator instance."""

    node: str
    op: str
    span: Span
    off_chip: sympy.Expr
    on_chip: sympy.Expr
    activity: sympy.Expr | None  # elements of the operator's principal stream
    flops: sympy.Expr
    compute_bw: int | None  # FLOPs/cycle allocated, for higher-order operators
    source: AccessSource | None = field(default=None, compare=False, repr=False)

    @cached_property
    def access(self) -> Access | None:
        """Its on-chip bytes (`stepc.analyze.access`), computed when first asked."""
        return self.source.access() if self.source is not None else None

    @cached_property
    def nonempty(self) -> sympy.Basic:
        """The condition "the operator's stream has elements" (computed once: both the
        symbols of the costs and the on-demand total ask for it)."""
        return _nonempty(self.activity)

    @cached_property
    def on_chip_on_demand(self) -> sympy.Expr:
        """On-chip bytes charged only when the operator's stream is non-empty."""
        if self.on_chip == 0:  # what `_on_demand` returns, without renaming the activity
            return self.on_chip
        return _on_demand(self.on_chip, self.activity)


@dataclass
class Analysis:
    """Per-operator costs and totals of one program under one on-chip accounting mode."""

    program: str
    params: dict[str, int]
    mode: str
    ops: list[OpCost]
    symbols: dict[str, SymbolInfo]
    bindings: dict[str, sympy.Expr] = field(default_factory=dict)

    def total(self, attr: str) -> sympy.Expr:
        if attr == "on_chip_on_demand":
            return self.on_demand_total()
        return _exact(add_all([getattr(o, attr) for o in self.ops]))

    def on_demand_total(self) -> sympy.Expr:
        """On-demand on-chip bytes, one term per distinct "stream is non-empty" condition."""
        always: list[sympy.Expr] = []
        groups: dict[sympy.Basic, list[sympy.Expr]] = {}
        for o in self.ops:
            if o.on_chip == 0:
                continue
            cond = o.nonempty
            if cond is sympy.true:
                always.append(o.on_chip)
            elif cond is not sympy.false:
                groups.setdefault(cond, []).append(o.on_chip)
        terms = [_charged_when(add_all(costs), cond)
                 for cond, costs in sorted(groups.items(), key=lambda kv: sympy.sstr(kv[0]))]
        return sympy.Add(add_all(always), *terms)

    @cached_property
    def totals(self) -> dict[str, sympy.Expr]:
        traffic, flops = self.total("off_chip"), self.total("flops")
        return {
            "off_chip_bytes": traffic,
            "on_chip_bytes": self.total("on_chip"),
            "on_chip_bytes_on_demand": self.total("on_chip_on_demand"),
            "flops": flops,
            "operational_intensity": _ratio(flops, traffic),
        }

    @property
    def allocated_compute(self) -> int:
        return sum(o.compute_bw or 0 for o in self.ops)

    def free_symbols(self) -> list[str]:
        """Symbols the costs still depend on (after bindings)."""
        names: set[str] = set()
        for e in self.totals.values():
            names |= {s.name for s in sympy.sympify(e).free_symbols}
        return sorted(names, key=natural_key)

    def bind(self, values: dict[str, sympy.Expr]) -> Analysis:
        """Substitute symbols by values (unknown names are ignored by the caller's check)."""
        subs = {sympy.Symbol(k, integer=True, nonnegative=True): sympy.sympify(v)
                for k, v in values.items()}
        numbers = {s: x for s, v in subs.items() if (x := exact.number(v)) is not None}

        def ev(e):
            if not subs:
                return e
            e = sympy.sympify(e)
            x = exact.value(e, numbers)  # None unless every symbol is bound
            if x is not None:
                return exact.as_sympy(x)
            return _settle(e.xreplace(subs))
        ops = [OpCost(o.node, o.op, o.span, ev(o.off_chip), ev(o.on_chip),
                      None if o.activity is None else ev(o.activity), ev(o.flops),
                      o.compute_bw, None if o.source is None else o.source.then(ev))
               for o in self.ops]
        return Analysis(self.program, self.params, self.mode, ops, self.symbols,
                        {**self.bindings, **values})


def add_all(terms: list) -> sympy.Expr:
    """`sympy.Add(*terms)`, added in Python integers and fractions when every term is a
    rational (a bound program: thousands of numbers)."""
    values = [exact.number(t) if isinstance(t, sympy.Basic) else None for t in terms]
    if all(isinstance(v, int) for v in values):
        return sympy.Integer(sum(values))
    if all(v is not None for v in values):
        return exact.as_sympy(sum(values, Fraction(0)))
    return sympy.Add(*terms)


def _ratio(flops, traffic) -> sympy.Expr:
    """FLOPs per byte; simplified only when it is a number (large symbolic ratios are
    left as they are: simplifying them can take minutes)."""
    if traffic == 0:
        return sympy.nan
    r = sympy.sympify(flops) / traffic
    return sympy.nsimplify(r) if r.is_number else r


def _exact(e: sympy.Expr) -> sympy.Expr:
    """`sympy.nsimplify(e)`, skipped where it would return `e` unchanged (a rational, or a
    symbolic expression without floats)."""
    if isinstance(e, sympy.Rational) or (e.free_symbols and not e.has(sympy.Float)):
        return e
    return sympy.nsimplify(e)


def _settle(e: sympy.Expr) -> sympy.Expr:
    """Evaluate ceilings and piecewise terms once all their symbols are bound."""
    if e.free_symbols or isinstance(e, sympy.Rational):
        return e
    return sympy.nsimplify(sympy.simplify(e))


def _nonempty_of(activity: sympy.Expr | None) -> sympy.Basic:
    """The condition "this stream has elements", built structurally (linear in the size of
    the expression): a sum of nonnegative counts is positive iff a term is, a product iff
    every factor is, ceil(D/k) iff D is, Promote's (1 if D > 0 else 0) iff D > 0."""
    if activity is None:
        return sympy.true
    e = sympy.sympify(activity)
    if e.is_number:
        return sympy.true if e > 0 else sympy.false
    if isinstance(e, sympy.Add):
        conds = [_nonempty_of(t) for t in e.args]
        if any(c is sympy.true for c in conds):
            return sympy.true
        return sympy.Or(*sorted(set(conds), key=sympy.sstr))
    if isinstance(e, sympy.Mul):
        conds = [_nonempty_of(f) for f in e.args]
        if any(c is sympy.false for c in conds):
            return sympy.false
        return sympy.And(*sorted({c for c in conds if c is not sympy.true}, key=sympy.sstr))
    if isinstance(e, sympy.ceiling):
        return _nonempty_of(sympy.numer(sympy.together(e.args[0])))
    if isinstance(e, sympy.Piecewise):
        (value, cond), *_ = e.args
        return cond if value != 0 else sympy.false
    return sympy.StrictGreaterThan(e, 0)


_nonempty = memo_renamed(_nonempty_of)


@memo_renamed
def _charged_when(cost: sympy.Expr, cond: sympy.Basic) -> sympy.Expr:
    """`cost` if `cond` else 0, built once per shape (its evaluation asks sympy's
    assumptions)."""
    return sympy.Piecewise((cost, cond), (0, True))


@memo_renamed
def _on_demand(cost: sympy.Expr, activity: sympy.Expr | None) -> sympy.Expr:
    """Charge `cost` only when the operator's stream is non-empty."""
    cond = _nonempty_of(activity)
    if cost == 0 or cond is sympy.true:
        return cost
    if cond is sympy.false:
        return sympy.Integer(0)
    return sympy.Piecewise((cost, cond), (0, True))


def analyze(typed: TypedProgram, mode: str = "artifact",
            hw: HardwareConfig | None = None) -> Analysis:
    """Cost formulas of every operator of a checked program."""
    ops: list[OpCost] = []
    default_bw = hw.fabric.compute_bw if hw is not None else None
    for node, inputs in typed.typed_nodes_inputs():
        spec = OPS[node.op]
        outputs = [typed.types[(node.name, p)] for p in range(len(node.outputs))]
        ctx = CostCtx(node.name, inputs, outputs, node.attrs)
        on_chip = sympy.sympify(spec.on_chip(ctx, mode))
        principal = ctx.first_input() or (outputs[0] if outputs else None)
        activity = principal.card if principal is not None else None
        flops = sympy.sympify(spec.flops(ctx))
        bw = None
        if spec.family == "higher_order":  # compute allocated to operators doing arithmetic
            bw = node.attrs.get("compute_bw")
            if bw is None and flops != 0:
                bw = default_bw
        off_chip = sympy.sympify(spec.off_chip(ctx))
        ops.append(OpCost(node.name, node.op, node.span, off_chip, on_chip, activity, flops,
                          bw, AccessSource(spec, ctx, off_chip, on_chip)))
    used = {s.name for s in symbols_in(cost_formulas(ops))}
    symbols = {n: typed.symbols.infos[n] for n in sorted(used, key=natural_key)
               if n in typed.symbols.infos}
    return Analysis(typed.program.name, dict(typed.program.params), mode, ops, symbols)


def cost_formulas(ops: list[OpCost]) -> list[sympy.Basic]:
    """Formulas that mention every symbol of the operators' costs: off-chip, on-chip and FLOPs,
    and the "stream is non-empty" condition that the on-demand on-chip bytes add (cheaper
    than building each operator's on-demand piecewise cost)."""
    out: list[sympy.Basic] = []
    for o in ops:
        out += (o.off_chip, o.on_chip, o.flops)
        if o.on_chip != 0:
            cond = o.nonempty
            if cond is not sympy.true and cond is not sympy.false:
                out.append(cond)
    return out


# ---------------------------------------------------------------- roofline
@dataclass(frozen=True)
class Roofline:
    memory_cycles: sympy.Expr
    compute_cycles: sympy.Expr
    bound: str  # "memory" | "compute" | "unknown"

    @property
    def cycles(self) -> sympy.Expr:
        return sympy.Max(self.memory_cycles, self.compute_cycles)


def roofline_terms(off_chip, flops, peak_bw: float, compute_bw) -> tuple:
    """The roofline's two lower bounds on cycles: moving `off_chip` bytes at the peak
    off-chip bandwidth, and computing `flops` at `compute_bw` FLOPs/cycle (0 without
    one)."""
    mem = off_chip / sympy.nsimplify(peak_bw)
    return mem, (flops / compute_bw if compute_bw else sympy.Integer(0))


def roofline(a: Analysis, hw: HardwareConfig) -> Roofline:
    """Lower bound on cycles: traffic / off-chip bandwidth vs FLOPs / allocated compute."""
    t = a.totals
    mem, comp = roofline_terms(t["off_chip_bytes"], t["flops"], hw.peak_bw,
                               a.allocated_compute)
    if mem.free_symbols or comp.free_symbols:
        bound = "unknown"
    else:
        bound = "memory" if mem >= comp else "compute"
    return Roofline(sympy.nsimplify(mem), sympy.nsimplify(comp), bound)
