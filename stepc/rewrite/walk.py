"""The walk every rewrite shares: the checked program's operators in dependency order, each
handed to the rewrite with its inputs, and copied unchanged when the rewrite leaves it."""

from __future__ import annotations

from typing import Any

from stepc.ops import OPS
from stepc.ops.base import STREAMS, VARSTREAMS, fmt_attr
from stepc.rewrite.draft import Draft, RewriteError, Stmt


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


def walk(rw: Rewrite) -> None:
    """Run `rw` over its program, filling its draft."""
    prog = rw.typed.program
    if any(e.feedback for e in prog.edges):
        raise RewriteError("programs with feedback streams (declared `stream` names bound "
                           "later) cannot be rewritten yet", "program")
    values: dict[tuple[str, int], Any] = {}
    read = {(e.src, e.port) for e in prog.edges}
    for name in dependency_order(prog):
        node = prog.nodes[name]
        spec = OPS[node.op]
        ins = [values[(e.src, e.port)] for e in prog.in_edges(name)]
        if node.implicit and spec.fan_out:  # stepc inserts fan-out again
            for port in range(len(node.outputs)):
                values[(name, port)] = ins[0]
            continue
        if spec.external:
            ref = rw.draft.fresh(node.port_label(0))
            t = rw.typed.types[(name, 0)]
            kwargs = "".join(f", {k}={_value(v)}" for k, v in node.attrs.items()
                             if k not in ("name", "type", "depth") and v is not None)
            rw.draft.externals.append(f"stream {ref} : {t} = external(\"{node.attrs['name']}\""
                                      f"{kwargs})")
            values[(name, 0)] = ref
            continue
        outs = rw.visit(node, ins)
        if outs is None:
            outs = copy(rw, node, [rw.plain(v) for v in ins], read)
        for port, v in enumerate(outs):
            values[(name, port)] = v


def _value(v) -> str:
    return fmt_attr(v)


def dependency_order(prog) -> list[str]:
    """Operators producers first, ties in source order."""
    import networkx as nx
    g = nx.DiGraph()
    g.add_nodes_from(prog.nodes)
    g.add_edges_from((e.src, e.dst) for e in prog.edges if not e.feedback)
    return list(nx.lexicographical_topological_sort(g, key=lambda n: prog.order.get(n, 0)))


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
         note: str | None = None) -> list[str]:
    """Write `node` unchanged (its inputs `refs`, one per slot); references to its outputs."""
    draft = rw.draft
    spec = OPS[node.op]
    ins = group_inputs(node, refs)
    attrs = plain_attrs(node) if attrs is None else attrs
    note = f"{node.name}" if note is None else note
    n = len(node.outputs)
    if spec.indexed_outputs:
        name = draft.fresh(node.name)
        draft.stmts.append(Stmt(node.op, ins, attrs, [name], note, array=True))
        return [f"{name}[{i}]" for i in range(n)]
    names = [draft.fresh(node.port_label(p)) if (node.name, p) in read else ""
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
