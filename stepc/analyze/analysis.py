"""Symbolic cost analysis: off-chip traffic, on-chip memory and FLOPs per operator and in total.

Each operator's formulas live in its `OPS` record; this module sums them over the typed
graph, keeps them symbolic in the program's dynamic dims, binds symbols (by hand or from
a trace), and computes the roofline lower bound for a hardware configuration.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from math import prod
from typing import TYPE_CHECKING

import sympy

from stepc.analyze import exact
from stepc.canon import memo_renamed, symbols_in
from stepc.hw import HardwareConfig
from stepc.ops import FUNCTIONS, OPS
from stepc.ops.base import CostCtx
from stepc.source import Span
from stepc.typecheck.checker import TypedProgram
from stepc.types import Select, SymbolInfo, Tile, natural_key

if TYPE_CHECKING:
    import numpy as np


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
                      o.compute_bw) for o in self.ops]
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
        ops.append(OpCost(node.name, node.op, node.span, sympy.sympify(spec.off_chip(ctx)),
                          on_chip, activity, flops, bw))
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


# ---------------------------------------------------------------- trace bindings
def _selector_matrix(name: str, declared, arr: np.ndarray) -> np.ndarray:
    """A trace for a selector stream as a [elements, n] boolean matrix."""
    import numpy as np

    from stepc.traces import TraceError, check_ids
    n = declared.elem.n
    dims = len(declared.shape)
    check_ids(arr, n, f"trace for `{name}`")
    if arr.ndim == dims + 1:  # one multi-hot selector per row of ids
        rows = arr.reshape(-1, arr.shape[-1])
        out = np.zeros((rows.shape[0], n), dtype=bool)
        out[np.repeat(np.arange(rows.shape[0]), rows.shape[1]), rows.ravel()] = True
        return out
    if arr.ndim == dims:  # one one-hot selector per id
        flat = arr.ravel()
        out = np.zeros((flat.size, n), dtype=bool)
        out[np.arange(flat.size), flat] = True
        return out
    raise TraceError(f"trace for `{name}` has shape {list(arr.shape)}, which does not fit "
                     f"{declared}")


def _bind_dims(bindings: dict, declared, shape: tuple[int, ...], name: str) -> None:
    from stepc.traces import TraceError
    if len(shape) < len(declared.shape):
        raise TraceError(f"trace for `{name}` has shape {list(shape)}; {declared} needs "
                         f"{len(declared.shape)} dims")
    for d, actual in zip(declared.shape, shape, strict=False):
        if d.is_Symbol:
            bindings.setdefault(d.name, sympy.Integer(actual))
        elif d.is_Integer and int(d) != actual:
            raise TraceError(f"trace for `{name}` has {actual} where {declared} expects "
                             f"{int(d)}")


def _bind_external(node, declared, arr: np.ndarray, name: str, bindings: dict,
                   selectors: dict) -> None:
    """The dims one traced external stream fixes (and its selectors, for a selector trace)."""
    from stepc.traces import TraceError
    if isinstance(declared.elem, Select):
        mat = _selector_matrix(name, declared, arr)
        dims = arr.shape if arr.ndim == len(declared.shape) else arr.shape[:-1]
        _bind_dims(bindings, declared, dims, name)
        selectors[node.name] = mat
    elif isinstance(declared.elem, Tile):
        _bind_dims(bindings, declared, arr.shape, name)
    else:
        raise TraceError(f"`{name}` has type {declared}; traces can drive selector "
                         "and integer tile streams")


def trace_bindings(typed: TypedProgram, traces: dict[str, np.ndarray]) -> dict[str, sympy.Expr]:
    """Values of the dynamic dims that external-stream traces determine.

    Binds the declared dims of each traced external stream, the per-output counts of every
    Partition driven by a traced selector (the per-expert token counts of a MoE), and the
    group size of every Reassemble driven by one (its mean, so totals stay exact).
    """
    from stepc.traces import TraceError
    prog = typed.program
    externals: dict[str, list] = {}
    for n in prog.nodes.values():
        if n.op == "External":
            externals.setdefault(n.attrs["name"], []).append(n)
    for name in traces:
        if name not in externals:
            near = difflib.get_close_matches(name, list(externals), n=1)
            hint = f" (did you mean `{near[0]}`?)" if near else ""
            raise TraceError(f"--trace {name}: the program has no external stream named "
                             f"`{name}`{hint}")
    traces = {**declared_files(typed, set(traces)), **traces}
    bindings: dict[str, sympy.Expr] = {}
    selectors: dict[str, np.ndarray] = {}
    for name, arr in traces.items():
        for node in externals[name]:
            try:
                _bind_external(node, typed.types[(node.name, 0)], arr, name, bindings,
                               selectors)
            except TraceError as e:
                e.span = e.span or node.span
                raise
    tiles = {node.name: traces[name] for name, nodes in externals.items() if name in traces
             for node in nodes if isinstance(typed.types[(node.name, 0)].elem, Tile)}
    if tiles:
        _bind_int_streams(typed, tiles, bindings)
    _bind_selected(typed, selectors, bindings)
    return bindings


def declared_files(typed: TypedProgram, traced: set[str]) -> dict[str, np.ndarray]:
    """The data of the external streams that declare a `file=` and no trace replaces."""
    from stepc.traces import TraceError, external_file
    out = {}
    for node in typed.program.nodes.values():
        name = node.attrs.get("name") if node.op == "External" else None
        if name is None or name in traced or name in out:
            continue
        st = typed.types[(node.name, 0)]
        try:
            arr = external_file(node.attrs.get("gen", {}), getattr(st.elem, "n", None),
                                len(st.shape))
        except TraceError as e:
            e.span = e.span or node.span
            raise
        if arr is not None:
            out[name] = arr
    return out


def _bind_selected(typed: TypedProgram, selectors: dict, bindings: dict) -> None:
    """The per-output counts of every Partition and the group size of every Reassemble
    driven by one of `selectors` (external node -> its [elements, n] selection matrix)."""
    prog = typed.program
    for node in prog.nodes.values():
        if node.op not in ("Partition", "Reassemble"):
            continue
        sel_edge = next((e for e in prog.in_edges(node.name)
                         if node.inputs[e.slot][0] == "sel"), None)
        if sel_edge is None:
            continue
        src = _source(prog, sel_edge.src)
        if src not in selectors or (node.name, 0) not in typed.types:
            continue
        mat = selectors[src]
        if node.op == "Partition":
            counts = mat.sum(axis=0)
            for i in range(len(node.outputs)):
                d = typed.types[(node.name, i)].shape[0]
                if d.is_Symbol:
                    bindings.setdefault(d.name, sympy.Integer(int(counts[i])))
        else:
            out = typed.types[(node.name, 0)]
            d = out.shape[typed.types[(src, 0)].rank + 1]
            if d.is_Symbol and mat.shape[0]:
                bindings.setdefault(d.name, sympy.Rational(int(mat.sum()), mat.shape[0]))


def _bind_int_streams(typed: TypedProgram, traced: dict[str, np.ndarray],
                      bindings: dict) -> None:
    """The ragged dims that traced integer streams (KV lengths) decide: their values are
    followed through integer Maps (the library's `ints` definitions), Zip, Broadcast,
    Reshape, Flatten, Repeat and Parallelize to each FlatMap that expands a length into a stream
    (cache_read_addr, filter_last_tile), whose ragged dim is bound to the mean length (so
    the stream's element count, a sum over its elements, stays exact)."""
    import numpy as np
    prog = typed.program
    vals: dict[tuple[str, int], object] = {}
    for name, node in prog.nodes.items():
        if name in traced:
            vals[(name, 0)] = traced[name]
            continue
        edges = sorted(prog.in_edges(name), key=lambda e: e.slot)
        ins = [None if e.feedback else vals.get((e.src, e.port)) for e in edges]
        if not ins or (node.op != "Zip" and any(v is None for v in ins)):
            continue
        a = node.attrs
        try:
            if node.op == "Broadcast":
                for i in range(len(node.outputs)):
                    vals[(name, i)] = ins[0]
            elif node.op == "Zip":
                vals[(name, 0)] = tuple(ins)
            elif node.op == "Map" and FUNCTIONS[a["fn"].name].ints is not None:
                args = list(ins[0]) if len(ins) == 1 and isinstance(ins[0], tuple) else ins
                if all(isinstance(x, np.ndarray) for x in args):
                    vals[(name, 0)] = FUNCTIONS[a["fn"].name].ints(args, a["fn"])
            elif node.op == "Reshape" and isinstance(ins[0], np.ndarray) and \
                    (a.get("rank") or 0) == 0:
                arr, k = ins[0], a["chunk"]
                pad = -arr.shape[-1] % k
                if pad and a.get("pad") is None:
                    continue
                arr = np.concatenate([arr, np.zeros(arr.shape[:-1] + (pad,), arr.dtype)], -1)
                vals[(name, 0)] = arr.reshape(arr.shape[:-1] + (-1, k))
            elif node.op == "Flatten" and isinstance(ins[0], np.ndarray):
                arr, lo, hi = ins[0], a["min"], a["max"]
                n = arr.ndim
                vals[(name, 0)] = arr.reshape(arr.shape[:n - 1 - hi] + (-1,) + arr.shape[n - lo:])
            elif node.op == "Repeat" and isinstance(ins[0], np.ndarray):
                vals[(name, 0)] = np.repeat(ins[0][..., None], a["count"], axis=-1)
            elif node.op == "Parallelize" and isinstance(ins[0], np.ndarray):
                arr = ins[0]
                p = arr.ndim - 1 if a.get("rank") is None else a["rank"]
                chunks = arr.reshape((-1,) + arr.shape[arr.ndim - p:])
                for i in range(len(node.outputs)):
                    vals[(name, i)] = chunks[i::len(node.outputs)]
            elif node.op == "FlatMap" and a["fn"].name in ("cache_read_addr",
                                                            "filter_last_tile"):
                lengths = ins[0][1] if isinstance(ins[0], tuple) else ins[0]
                out = typed.types.get((name, 0))
                if isinstance(lengths, np.ndarray) and lengths.size and out is not None \
                        and out.shape[-1].is_Symbol:
                    bindings.setdefault(out.shape[-1].name, sympy.Rational(
                        int(np.maximum(lengths, 0).sum()), lengths.size))
        except (ValueError, KeyError, TypeError, IndexError, AttributeError,
                ZeroDivisionError):
            continue  # a shape these values do not fit: leave the dims symbolic


def trace_decidable(typed: TypedProgram, free: set[str]) -> dict[str, list[str]]:
    """For each external stream, the symbols of `free` that a trace of it would bind (found
    by binding a stand-in trace of the declared shape)."""
    out: dict[str, list[str]] = {}
    externals: dict[str, list] = {}
    for n in typed.program.nodes.values():
        if n.op == "External" and (n.name, 0) in typed.types:
            externals.setdefault(n.attrs["name"], []).append(n)
    for name, nodes in sorted(externals.items()):
        types = [typed.types[(n.name, 0)] for n in nodes]
        # one trace feeds every stream of this name: try each declared shape
        for shape in sorted({tuple(st.shape) for st in types}, key=len, reverse=True):
            if any(not d.is_Integer for d in shape):
                continue
            shape = tuple(int(d) for d in shape)
            bound = _selector_stand_in(typed, nodes, shape)
            if bound is None:
                bound = _stand_in(typed, name, types, shape)
            if bound is None:
                continue
            hit = sorted(free & bound, key=natural_key)
            if hit:
                out[name] = hit
            break
    return out


def _stand_in(typed: TypedProgram, name: str, types: list, shape: tuple[int, ...]
              ) -> set[str] | None:
    """The symbols `trace_bindings` binds from a trace of `shape` for the external stream
    `name` (zeros for a selector, ones for integers); None when such a trace does not fit."""
    import numpy as np

    from stepc.traces import TraceError
    fill = np.zeros if isinstance(types[0].elem, Select) else np.ones
    try:
        return set(trace_bindings(typed, {name: fill(shape, dtype=np.int64)}))
    except TraceError:
        return None


class _ZeroSelection:
    """An all-zero [rows, n] selection matrix: as much of one as `_bind_selected` reads."""

    def __init__(self, rows: int, n: int):
        self.shape = (rows, n)

    def sum(self, axis: int | None = None):
        return [0] * self.shape[1] if axis == 0 else 0


def _selector_stand_in(typed: TypedProgram, nodes: list, shape: tuple[int, ...]
                       ) -> set[str] | None:
    """`_stand_in` for external streams that all carry selectors, without building the
    arrays (numpy is not loaded for a symbolic report); None when it cannot say (other
    element types, empty traces, a trace that does not fit: `_stand_in` decides)."""
    if not shape or 0 in shape:
        return None
    bindings: dict[str, sympy.Expr] = {}
    selectors: dict[str, _ZeroSelection] = {}
    for node in nodes:
        declared = typed.types[(node.name, 0)]
        if not isinstance(declared.elem, Select) or declared.elem.n <= 0:
            return None
        if len(shape) == len(declared.shape) + 1:  # a multi-hot selector per row of ids
            dims = shape[:-1]
        elif len(shape) == len(declared.shape):  # a one-hot selector per id
            dims = shape
        else:
            return None
        for d, actual in zip(declared.shape, dims, strict=True):
            if d.is_Symbol:
                bindings.setdefault(d.name, sympy.Integer(actual))
            elif d.is_Integer and int(d) != actual:
                return None
        selectors[node.name] = _ZeroSelection(prod(dims), declared.elem.n)
    _bind_selected(typed, selectors, bindings)
    return set(bindings)


def _source(prog, node: str) -> str:
    n = prog.nodes[node]
    while n.op == "Broadcast" and n.implicit:
        n = prog.nodes[prog.in_edges(n.name)[0].src]
    return n.name


# ---------------------------------------------------------------- roofline
@dataclass(frozen=True)
class Roofline:
    memory_cycles: sympy.Expr
    compute_cycles: sympy.Expr
    bound: str  # "memory" | "compute" | "unknown"

    @property
    def cycles(self) -> sympy.Expr:
        return sympy.Max(self.memory_cycles, self.compute_cycles)


def roofline(a: Analysis, hw: HardwareConfig) -> Roofline:
    """Lower bound on cycles: traffic / off-chip bandwidth vs FLOPs / allocated compute."""
    t = a.totals
    mem = t["off_chip_bytes"] / sympy.nsimplify(hw.peak_bw)
    alloc = a.allocated_compute
    comp = t["flops"] / alloc if alloc else sympy.Integer(0)
    if mem.free_symbols or comp.free_symbols:
        bound = "unknown"
    else:
        bound = "memory" if mem >= comp else "compute"
    return Roofline(sympy.nsimplify(mem), sympy.nsimplify(comp), bound)
