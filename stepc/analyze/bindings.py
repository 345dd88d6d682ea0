"""Trace bindings: the values of a program's dynamic dims that traces of its external
streams decide (the dims a trace's shape fixes, the per-output counts a traced selector
routes, the mean KV length a traced integer stream carries), and which symbols a trace of
each external stream would bind.

What each operator contributes is its record's role (`external`, `trace_selected`,
`trace_values` in `stepc.ops`).
"""

from __future__ import annotations

import difflib
from math import prod
from typing import TYPE_CHECKING

import sympy

from stepc.ops import OPS
from stepc.ops.base import TraceStep
from stepc.spelling import given
from stepc.typecheck.checker import TypedProgram
from stepc.types import Select, Tile, natural_key

if TYPE_CHECKING:
    import numpy as np


def _selector_matrix(rows: np.ndarray, n: int) -> np.ndarray:
    """Rows of selector ids as a [elements, n] boolean matrix."""
    import numpy as np
    out = np.zeros((rows.shape[0], n), dtype=bool)
    out[np.repeat(np.arange(rows.shape[0]), rows.shape[1]), rows.ravel()] = True
    return out


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
    from stepc.traces import TraceError, selector_ids
    if isinstance(declared.elem, Select):
        rows, dims = selector_ids(arr, declared.elem.n, len(declared.shape), name, declared)
        _bind_dims(bindings, declared, dims, name)
        selectors[node.name] = _selector_matrix(rows, declared.elem.n)
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
        if OPS[n.op].external:
            externals.setdefault(n.attrs["name"], []).append(n)
    for name in traces:
        if name not in externals:
            near = difflib.get_close_matches(name, list(externals), n=1)
            hint = f" (did you mean `{near[0]}`?)" if near else ""
            raise TraceError(f"{given('traces', name)}: the program has no external stream named "
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
        name = node.attrs.get("name") if OPS[node.op].external else None
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
    """The dims of every operator with a `trace_selected` role (Partition's per-output
    counts, Reassemble's group size) driven by one of `selectors` (external node -> its
    [elements, n] selection matrix)."""
    prog = typed.program
    for node in prog.nodes.values():
        selected = OPS[node.op].trace_selected
        if selected is None:
            continue
        sel_edge = next((e for e in prog.in_edges(node.name)
                         if node.inputs[e.slot][0] == "sel"), None)
        if sel_edge is None:
            continue
        src = _source(prog, sel_edge.src)
        if src not in selectors or (node.name, 0) not in typed.types:
            continue
        outputs = [typed.types[(node.name, i)] for i in range(len(node.outputs))]
        for d, value in selected(outputs, typed.types[(src, 0)].rank, selectors[src]):
            if d.is_Symbol:
                bindings.setdefault(d.name, value)


def _bind_int_streams(typed: TypedProgram, traced: dict[str, np.ndarray],
                      bindings: dict) -> None:
    """The ragged dims that traced integer streams (KV lengths) decide: their values are
    carried through the operators with a `trace_values` role (integer Maps, Zip, Broadcast,
    Reshape, Flatten, Repeat, Parallelize) to each FlatMap that expands a length into a
    stream, whose ragged dim is bound to the mean length (so the stream's element count, a
    sum over its elements, stays exact)."""
    prog = typed.program
    vals: dict[tuple[str, int], object] = {}
    for name, node in prog.nodes.items():
        if name in traced:
            vals[(name, 0)] = traced[name]
            continue
        carry = OPS[node.op].trace_values
        edges = sorted(prog.in_edges(name), key=lambda e: e.slot)
        ins = [None if e.feedback else vals.get((e.src, e.port)) for e in edges]
        if carry is None or not ins:
            continue
        step = TraceStep(node.attrs, ins,
                         [typed.types.get((name, p)) for p in range(len(node.outputs))])
        try:
            carry(step)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError,
                ZeroDivisionError):
            continue  # a shape these values do not fit: leave the dims symbolic
        vals.update({(name, port): v for port, v in step.values.items()})
        for dim, value in step.bindings.items():
            bindings.setdefault(dim, value)


def trace_decidable(typed: TypedProgram, free: set[str]) -> dict[str, list[str]]:
    """For each external stream, the symbols of `free` that a trace of it would bind (found
    by binding a stand-in trace of the declared shape)."""
    out: dict[str, list[str]] = {}
    externals: dict[str, list] = {}
    for n in typed.program.nodes.values():
        if OPS[n.op].external and (n.name, 0) in typed.types:
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

    from stepc.traces import MAX_EXTERNAL_ELEMENTS, TraceError
    if prod(shape) > MAX_EXTERNAL_ELEMENTS:
        return None  # no run holds a trace that long, and building one would not fit
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
    while n.implicit:  # a fan-out Broadcast stepc inserted
        n = prog.nodes[prog.in_edges(n.name)[0].src]
    return n.name
