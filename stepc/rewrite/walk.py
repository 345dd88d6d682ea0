"""The walk every rewrite shares: the checked program's operators in dependency order, each
handed to the rewrite with its inputs, and copied unchanged when the rewrite leaves it."""

from __future__ import annotations

import re
from typing import Any

from stepc.ops import OPS
from stepc.ops.base import STREAMS, VARSTREAMS, fmt_attr
from stepc.rewrite.draft import Draft, Stmt
from stepc.types import fmt_dim


class Rewrite:
    """A program rewrite. `visit` returns the new program's values for a node's outputs,
    or None to copy the node; a value is anything the rewrite likes, as long as
    `plain(value)` gives a reference to the stream the original program had there."""

    name = ""
    summary = ""

    def __init__(self, typed, draft: Draft):
        self.typed, self.draft = typed, draft

    def visit(self, node, ins: list[Any]) -> list[Any] | None:
        return None

    def plain(self, value: Any) -> str:
        return value

    def ref(self, value: Any) -> str:
        """The name of the new program's stream holding `value`."""
        return value

    def inner_dims(self, value: Any) -> list[int]:
        """The inner dims the rewrite appended to the stream of `value`."""
        return []


def walk(rw: Rewrite) -> None:
    """Run `rw` over its program, filling its draft. A fed-back stream is declared first
    (`stream NAME : TYPE`) and bound by its producer, which is copied as it is."""
    prog = rw.typed.program
    values: dict[tuple[str, int], Any] = {}
    read = {(e.src, e.port) for e in prog.edges}
    reserved: dict[tuple[str, int], str] = {}
    for e in prog.edges:
        if not e.feedback:
            continue
        key = (e.src, e.port)
        while prog.nodes[key[0]].implicit:  # the stream before stepc's fan-out
            up = prog.in_edges(key[0])[0]
            key = (up.src, up.port)
        if key not in reserved:
            name = rw.draft.fresh(stream_name(prog.nodes[key[0]], key[1]))
            reserved[key] = values[key] = name
            rw.draft.externals.append(f"stream {name} : {_declared(prog, key, e)}")
        values[(e.src, e.port)] = reserved[key]
    fed_back = {src for src, _port in reserved}
    for name in dependency_order(prog):
        node = prog.nodes[name]
        spec = OPS[node.op]
        ins = [values[(e.src, e.port)] for e in prog.in_edges(name)]
        if node.implicit and spec.fan_out:  # stepc inserts fan-out again
            for port in range(len(node.outputs)):
                values.setdefault((name, port), ins[0])
            continue
        if spec.external:
            ref = rw.draft.fresh(stream_name(node, 0))
            gen = "".join(f", {k}={_value(v)}" for k, v in node.attrs.get("gen", {}).items())
            rw.draft.externals.append(f"stream {ref} : {rw.typed.types[(name, 0)]} = "
                                      f"external(\"{node.attrs['name']}\"{gen})")
            values[(name, 0)] = ref
            continue
        outs = None if name in fed_back else rw.visit(node, ins)
        if outs is None:
            outs = copy(rw, node, [rw.plain(v) for v in ins], read, reserved=reserved)
        for port, v in enumerate(outs):
            values[(name, port)] = v
    for a in prog.assumptions:
        rw.draft.assumes.append(assume_text(rw, a, values))


def assume_text(rw: Rewrite, a, values: dict) -> str:
    """An `assume` of the original program about the new program's streams (a stream the
    rewrite gave extra inner dims keeps them in `shape(...)`; `dim(x, k)` shifts by them)."""
    sides = [a.lhs, a.rhs]
    shown = [values.get((t[1].node, t[1].port)) if isinstance(t, tuple) and
             t[0] in ("shape", "dim") else None for t in sides]
    extra = [rw.inner_dims(v) if v is not None else [] for v in shown]
    both_shapes = all(isinstance(t, tuple) and t[0] == "shape" for t in sides)
    if both_shapes and extra[0] != extra[1]:
        shown = [rw.plain(v) for v in shown]
        extra = [[], []]
    out = []
    for i, term in enumerate(sides):
        other = extra[1 - i]
        if isinstance(term, tuple) and term[0] == "shape":
            out.append(f"shape({rw.ref(shown[i])})")
        elif isinstance(term, tuple) and term[0] == "dim":
            out.append(f"dim({rw.ref(shown[i])}, {term[2] + len(extra[i])})")
        elif isinstance(term, tuple) and term[0] == "dims":
            out.append("[" + ", ".join([fmt_dim(d) for d in term[1]] + [str(d) for d in other])
                       + "]")
        else:
            out.append(fmt_dim(term))
    return f"assume {out[0]} {a.op} {out[1]}  # line {a.span.line}"


def _declared(prog, key: tuple[str, int], edge) -> str:
    """The type a fed-back stream was declared with, as written, its integer names
    (params, loop variables) replaced by their values."""
    ann = prog.feedback.get((edge.src, edge.port)) or prog.feedback.get(key)
    span = ann.type.span
    lines = [prog.sources[span.file].line_text(n) for n in range(span.line, span.end_line + 1)]
    if len(lines) == 1:
        text = lines[0][span.col - 1:span.end_col - 1]
    else:
        text = " ".join([lines[0][span.col - 1:]] + lines[1:-1] + [lines[-1][:span.end_col - 1]])
    for name, value in ann.env:
        text = re.sub(rf"\b{re.escape(name)}\b(?!\s*[<(])", str(value), text)
    return text


def _value(v) -> str:
    return fmt_attr(v)


def dependency_order(prog) -> list[str]:
    """Operators producers first, ties in source order."""
    import networkx as nx
    g = nx.DiGraph()
    g.add_nodes_from(prog.nodes)
    g.add_edges_from((e.src, e.dst) for e in prog.edges if not e.feedback)
    return list(nx.lexicographical_topological_sort(g, key=lambda n: prog.order.get(n, 0)))


def stream_name(node, port: int) -> str:
    """The new program's name for an output: the node's name (so the symbols the checker
    names after nodes keep their names), then the port's."""
    return node.name if port == 0 else f"{node.name}.{node.outputs[port]}"


def plain_attrs(node) -> dict[str, Any]:
    """The attributes of `node` worth writing: set, and not the parameter's default."""
    spec = OPS[node.op]
    out = {}
    for key, value in node.attrs.items():
        p = spec.param(key)
        if p is None or p.is_stream or value is None or p.kind == "type":
            continue
        if not p.required and value == p.default:
            continue
        out[key] = value
    return out


def copy(rw: Rewrite, node, refs: list[str], read: set, attrs: dict | None = None,
         note: str | None = None, reserved: dict | None = None) -> list[str]:
    """Write `node` unchanged (its inputs `refs`, one per slot); references to its outputs."""
    draft = rw.draft
    spec = OPS[node.op]
    ins = group_inputs(node, refs)
    attrs = plain_attrs(node) if attrs is None else attrs
    note = f"{node.name} ({node.op})" if note is None else note
    n = len(node.outputs)
    if spec.indexed_outputs:
        name = draft.fresh(node.name)
        draft.stmts.append(Stmt(node.op, ins, attrs, [name], note, array=True))
        return [f"{name}[{i}]" for i in range(n)]
    reserved = reserved or {}
    names = [reserved.get((node.name, p)) or
             (draft.fresh(stream_name(node, p)) if (node.name, p) in read else "")
             for p in range(n)]
    draft.stmts.append(Stmt(node.op, ins, attrs, names, note))
    return names


def group_inputs(node, refs: list[str]) -> list[Any]:
    """A node's input references, one entry per stream parameter: a reference, a list (for
    a list or variadic parameter), or None (an optional input not given)."""
    spec = OPS[node.op]
    by_param: dict[str, list[str]] = {}
    for (pname, _index), ref in zip(node.inputs, refs, strict=True):
        by_param.setdefault(pname, []).append(ref)
    out: list[Any] = []
    for p in spec.stream_params:
        got = by_param.get(p.name)
        if p.kind in (STREAMS, VARSTREAMS):
            out.append(got or [])
        else:
            out.append(got[0] if got else None)
    return out
