"""Matrix products on sub-tiles: the appendix's hierarchical-tiling subgraph. Each operand
is buffered (Bufferize), re-read once per output sub-tile (Repeat and Streamify, or an
affine Streamify view when reduced dims must move inside each output sub-tile), multiplied
sub-tile by sub-tile (Map), and the partial products are summed (Accum)."""

from __future__ import annotations

import math

import sympy

from stepc.ops import OPS
from stepc.ops.functions import PARTIAL_SUM
from stepc.rewrite import memory
from stepc.rewrite.subtiles import (
    ACCUM,
    RESHAPE,
    Sub,
    fn_value,
    origin,
    split_dim,
    unpack,
    weights,
)
from stepc.rewrite.walk import plain_attrs

# the operators hierarchical tiling builds (the appendix's figure), by their records
BUFFERIZE, REPEAT, STREAMIFY, MAP = "Bufferize", "Repeat", "Streamify", "Map"
FLATTEN = "Flatten"
COMPUTE_ATTRS = ("compute_bw", "dtype", "depth")  # carried from a product to its parts


def contraction(rw, node, ins: list[Sub], fn):
    """A matrix product (a Map, or an Accum reducing static dims) of two sub-tiled operands
    as the appendix's subgraph; the values of its outputs, or None when it cannot be."""
    a, b = ins
    transpose = bool(fn.get("transpose", False))
    am, ak = a.down, a.across
    bk, bn = (b.across, b.down) if transpose else (b.down, b.across)
    b_k_rows = b.cols if transpose else b.rows
    if ak != bk or sympy.simplify(a.cols - b_k_rows) != 0 or not static_subs(a, b):
        rw.note(node, "kept", "its operands' sub-tiles do not line up along the inner "
                                "dim: packed back")
        return None
    spec = OPS[node.op]
    a_type = rw.typed.types[source(rw.typed.program, node.name, 0)]
    reduced = [] if spec.fn_use == "map" else list(a_type.shape[len(a_type.shape)
                                                                - node.attrs["rank"]:])
    if node.attrs.get("init") is not None:
        rw.note(node, "kept", "it starts from its own initialiser: packed back")
        return None
    if any(not sympy.sympify(d).is_Integer for d in reduced):
        if am != 1 or bn != 1:
            rw.note(node, "kept", "it reduces a dynamic dim and its output sub-tiles would "
                                  "re-read the operands, which needs a view of a "
                                  "dynamically sized buffer: packed back")
            return None
        return _in_stream_order(rw, node, a, b, fn, len(reduced), a_type)
    reduced = [int(d) for d in reduced]
    draft, name = rw.draft, node.name
    says = origin(node)
    added: list[str] = []
    streamed = all(d == 1 for d in reduced)  # nothing to reorder: the figure's way
    if streamed:  # the appendix's figure: Bufferize -> Repeat -> Streamify
        buf_a = draft.emit(BUFFERIZE, [a.ref], {"rank": 1}, f"{says}: left operand, "
                           "one sub-tile row buffered", base=f"{name}_abuf")[0]
        rep_a = draft.emit(REPEAT, [buf_a], {"count": bn}, f"{says}: once per output "
                           "sub-tile column", base=f"{name}_arep")[0]
        str_a = draft.emit(STREAMIFY, [rep_a, None], {}, f"{says}: left operand streamed",
                           base=f"{name}_a")[0]
        buf_b = draft.emit(BUFFERIZE, [b.ref], {"rank": 2}, f"{says}: right operand "
                           "buffered", base=f"{name}_bbuf")[0]
        rep_b = draft.emit(REPEAT, [buf_b], {"count": am}, f"{says}: once per output "
                           "sub-tile row", base=f"{name}_brep")[0]
        view = {} if transpose else {"stride": [1, bn], "shape": [bn, bk]}
        str_b = draft.emit(STREAMIFY, [rep_b, None], view, f"{says}: right operand "
                           "streamed" + ("" if transpose else ", column by column"),
                           base=f"{name}_b")[0]
        added += [buf_a, rep_a, str_a, buf_b, rep_b, str_b]
    else:  # the reduced dims move inside the output sub-tiles: affine views
        rank = len(reduced) + 2
        buf_a = draft.emit(BUFFERIZE, [a.ref], {"rank": rank}, f"{says}: left operand "
                           "buffered over the reduced dims", base=f"{name}_abuf")[0]
        w_a = weights(reduced + [am, ak])
        str_a = draft.emit(STREAMIFY, [buf_a, None], {
            "stride": [w_a[-2], 0] + w_a[:-2] + [1],
            "shape": [am, bn] + reduced + [ak]}, f"{says}: left operand, reduced dims "
            "inside each output sub-tile", base=f"{name}_a")[0]
        buf_b = draft.emit(BUFFERIZE, [b.ref], {"rank": rank}, f"{says}: right operand "
                           "buffered over the reduced dims", base=f"{name}_bbuf")[0]
        grid = [bn, bk] if transpose else [bk, bn]
        w_b = weights(reduced + grid)
        step_n, step_k = (w_b[-2], 1) if transpose else (1, w_b[-2])
        str_b = draft.emit(STREAMIFY, [buf_b, None], {
            "stride": [0, step_n] + w_b[:-2] + [step_k],
            "shape": [am, bn] + reduced + [bk]}, f"{says}: right operand, reduced dims "
            "inside each output sub-tile", base=f"{name}_b")[0]
        added += [buf_a, str_a, buf_b, str_b]
    carried = {k: v for k, v in plain_attrs(node).items() if k in COMPUTE_ATTRS}
    prod = draft.emit(MAP, [[str_a, str_b]], {"fn": fn, **carried},
                      f"{says}: sub-tile products", base=f"{name}_part")[0]
    acc_attrs = {"fn": fn_value(PARTIAL_SUM), "rank": 1 if streamed else len(reduced) + 1,
                 **carried}
    if node.attrs.get("write_back"):
        acc_attrs["write_back"] = True
    last = f"{name}_sum" if streamed and reduced else name
    acc = draft.emit(ACCUM, [[prod]], acc_attrs, f"{says}: sums the partial products",
                     base=last)[0]
    added += [prod, acc]
    if streamed and reduced:  # the reduced size-1 dims go with the sub-tile rows
        acc = draft.emit(FLATTEN, [acc], {"min": 1, "max": 1 + len(reduced)},
                         f"{says}: drops the reduced dims of size 1", base=name)[0]
        added.append(acc)
    out = rw.out_type(node)
    m_n = sympy.sympify(out.elem.rows) * sympy.sympify(out.elem.cols)
    flops = out.card * m_n * bk * math.prod(reduced)
    a_parts, b_parts = (am, ak), (b.down, b.across)
    if streamed:
        held = memory.figure_product(a.tile, a_parts, b.tile, b_parts, out.elem, (am, bn),
                                     spec.fn_use != "map")
    else:
        held = memory.affine_product(a.tile, a_parts, b.tile, b_parts, out.elem, (am, bn),
                                     math.prod(reduced))
    rw.note(node, "rewritten", f"{am} x {bn} output sub-tiles, each the sum of "
                                 f"{bk * math.prod(reduced)} sub-tile products", added,
              flops, held)
    return [Sub(acc, out.elem, am, bn)]


def static_subs(*subs: Sub) -> bool:
    return all(sympy.sympify(s.tile.rows).is_Integer and sympy.sympify(s.tile.cols).is_Integer
               for s in subs)


def source(prog, node: str, slot: int) -> tuple[str, int]:
    """The stream feeding input `slot` of `node`."""
    e = prog.in_edges(node)[slot]
    return (e.src, e.port)


def _in_stream_order(rw, node, a: Sub, b: Sub, fn, reduced: int, a_type):
    """A reduction over dynamic dims whose output tile is kept whole (one sub-tile): the
    operands' inner sub-tiles already arrive in the order of the sum, so the products are
    taken as they come and one Accum sums over the reduced dims and the inner sub-tiles;
    its output is the logical stream."""
    draft, says, name = rw.draft, origin(node), node.name
    flat_a = draft.emit(FLATTEN, [a.ref], {"min": 0, "max": 1}, f"{says}: left operand, "
                        "its inner sub-tiles in one dim", base=f"{name}_a")[0]
    flat_b = draft.emit(FLATTEN, [b.ref], {"min": 0, "max": 1}, f"{says}: right operand, "
                        "its inner sub-tiles in one dim", base=f"{name}_b")[0]
    carried = {k: v for k, v in plain_attrs(node).items() if k in COMPUTE_ATTRS}
    prod = draft.emit(MAP, [[flat_a, flat_b]], {"fn": fn, **carried},
                      f"{says}: sub-tile products", base=f"{name}_part")[0]
    acc_attrs = {"fn": fn_value(PARTIAL_SUM), "rank": reduced + 1, **carried}
    if node.attrs.get("write_back"):
        acc_attrs["write_back"] = True
    acc = draft.emit(ACCUM, [[prod]], acc_attrs, f"{says}: sums the partial products over "
                     "the reduced dims", base=name)[0]
    tile = rw.out_type(node).elem
    flops = a_type.card * a.across * sympy.sympify(tile.rows) * sympy.sympify(tile.cols)
    rw.note(node, "rewritten", f"its output tile whole, the sum over the reduced dims of "
                               f"{a.across} sub-tile products each", [flat_a, flat_b, prod, acc],
            flops)
    return [acc]


def dynamic_rows(rw, node, a, b: Sub, fn):
    """A product (Map) whose left operand has a dynamic row count: Bufferize cannot hold
    its sub-tiles, so the logical tile is repeated once per output sub-tile column (Repeat
    holds it, as any repeat does) and split by columns after the repeat; the right
    operand is buffered and read column by column; the partial products of each output
    sub-tile are summed."""
    a_tile = rw.typed.types[source(rw.typed.program, node.name, 0)].elem
    transpose = bool(fn.get("transpose", False))
    bk, bn = (b.across, b.down) if transpose else (b.down, b.across)
    b_k_rows = b.cols if transpose else b.rows
    ak = split_dim(a_tile.cols, rw.tile[1])
    if ak != bk or sympy.simplify(sympy.sympify(a_tile.cols) / bk - b_k_rows) != 0 \
            or not static_subs(b):
        rw.note(node, "kept", "its operands' sub-tiles do not line up along the inner dim: "
                              "packed back")
        return None
    a_ref = a.logical if isinstance(a, Sub) and a.logical else rw.plain(a)
    draft, says, name = rw.draft, origin(node), node.name
    rep = draft.emit(REPEAT, [a_ref], {"count": bn}, f"{says}: left operand (dynamic rows), "
                     "once per output sub-tile column", base=f"{name}_arep")[0]
    sub = unpack(draft, rep, a_tile, (1, ak), says)
    str_a = draft.emit(FLATTEN, [sub.ref], {"min": 0, "max": 1}, f"{says}: left operand, "
                       "its column sub-tiles", base=f"{name}_a")[0]
    buf_b = draft.emit(BUFFERIZE, [b.ref], {"rank": 2}, f"{says}: right operand buffered",
                       base=f"{name}_bbuf")[0]
    view = {} if transpose else {"stride": [1, bn], "shape": [bn, bk]}
    str_b = draft.emit(STREAMIFY, [buf_b, None], view, f"{says}: right operand streamed"
                       + ("" if transpose else ", column by column"), base=f"{name}_b")[0]
    carried = {k: v for k, v in plain_attrs(node).items() if k in COMPUTE_ATTRS}
    prod = draft.emit(MAP, [[str_a, str_b]], {"fn": fn, **carried},
                      f"{says}: sub-tile products", base=f"{name}_part")[0]
    acc = draft.emit(ACCUM, [[prod]], {"fn": fn_value(PARTIAL_SUM), "rank": 1, **carried},
                     f"{says}: sums the partial products", base=f"{name}_sum")[0]
    out = draft.emit(RESHAPE, [acc], {"chunk": bn}, f"{says}: 1 x {bn} output sub-tiles",
                     base=name)[0]
    tile = rw.out_type(node).elem
    flops = rw.out_type(node).card * sympy.sympify(tile.rows) * sympy.sympify(tile.cols) * bk
    rw.note(node, "rewritten", f"1 x {bn} output sub-tiles (rows kept whole: dynamic), each "
                               f"the sum of {bk} sub-tile products",
            [rep, sub.ref, str_a, buf_b, str_b, prod, acc, out], flops,
            memory.dynamic_rows_product(a_tile, ak, b.tile, (b.down, b.across), tile, (1, bn)))
    return [Sub(out, tile, 1, bn)]
