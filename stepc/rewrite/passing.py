"""Operators that move sub-tiles without computing on them, and the broadcast operands of
element-wise maps. A logical tile is `down` x `across` sub-tiles, the two innermost dims of
its stream, so:

- an operator that moves elements by dims (Partition, Reassemble, Parallelize, EagerMerge,
  Reshape, Flatten, Promote, Broadcast, Sink; the table `INNER_DIMS`) takes them with
  its dim attributes shifted by two: a chunk, a merged or a routed element keeps its
  sub-tiles together; outputs with one element per chunk (EagerMerge's selector,
  `CHUNK_OUTPUTS`) are unchanged;
- Zip of two streams split alike pairs their sub-tiles (`Zipped`);
- an operator that emits each element several times (Repeat, Expand; `REPEATS`) must
  repeat a logical tile's sub-tiles as one group: they are buffered
  (Bufferize, rank 2), the buffer references repeated by the operator itself and read back
  (Streamify), as the appendix's figure repeats its operands. An Expand's reference is
  read only for its shape: a sub-tiled one is replaced by a stream of its logical shape
  made on the way (`Sub.logical`) when there is one, else packed back;
- an element-wise Map's [R, 1] column or [1, 1] scalar operand is repeated so that a piece
  of it meets every sub-tile it applies to.
"""

from __future__ import annotations

import sympy

from stepc.ops import OPS
from stepc.rewrite import memory
from stepc.rewrite.products import (
    BUFFERIZE,
    FLATTEN,
    REPEAT,
    STREAMIFY,
    source,
    static_subs,
)
from stepc.rewrite.subtiles import RESHAPE, SPLIT, Sub, Zipped, origin
from stepc.rewrite.walk import copy, plain_attrs
from stepc.types import Tile, Tuple

# Operators that move elements without reading them, so their inputs may carry extra
# innermost dims (sub-tiles) that they pass through -> their attributes that are dim indices
# counted from the innermost, shifted by those dims.
INNER_DIMS = {
    "Partition": ("rank",), "Reassemble": ("rank",), "EagerMerge": ("rank",),
    "Parallelize": ("rank",), "Broadcast": (), "Flatten": ("min", "max"), "Reshape": ("rank",),
    "Promote": ("rank",), "Zip": (), "Sink": (),
}
# Operator -> its outputs with one element per chunk (a selector), which extra inner dims on
# its inputs leave as they are.
CHUNK_OUTPUTS = {"EagerMerge": ("sel",)}
# Operators that emit each element (or each group of inner dims) several times, holding it
# meanwhile: a logical tile's sub-tiles are held and re-read as one group.
REPEATS = {"Expand", "Repeat"}


def pass_through(rw, node, ins):
    """`node` on sub-tiles, its dim attributes shifted; None when it cannot take them."""
    subs = [v for v in ins if isinstance(v, SPLIT)]
    first = subs[0]
    if any((v.down, v.across) != (first.down, first.across) for v in subs):
        rw.note(node, "kept", "its inputs are split into sub-tiles differently: packed back")
        return None
    for port, out_name in enumerate(node.outputs):
        t = rw.out_type(node, port)
        if not isinstance(t.elem, (Tile, Tuple)) \
                and out_name not in CHUNK_OUTPUTS.get(node.op, ()) \
                and (node.name, port) in rw.read:
            return None  # a side output (a padding mask) would change shape
    attrs = plain_attrs(node)
    for key in INNER_DIMS[node.op]:
        if node.attrs.get(key) is not None:
            attrs[key] = node.attrs[key] + 2
    if _reshapes_dynamic(rw.typed, node):
        return None
    if any(not isinstance(v, SPLIT) and _is_tile_stream(rw.typed, e)
           for v, e in zip(ins, rw.typed.program.in_edges(node.name), strict=True)):
        return None  # logical tiles beside sub-tiles: the dims would not line up
    refs = [v.ref if isinstance(v, SPLIT) else v for v in ins]
    outs = copy(rw, node, refs, rw.read, attrs,
                note=f"{origin(node)}: passes {first.down} x {first.across} sub-tiles through")
    rw.note(node, "rewritten", "passes the sub-tile dims through", outs[:1])
    result = []
    for port, ref in enumerate(outs):
        elem = rw.out_type(node, port).elem
        if isinstance(elem, Tile):
            result.append(Sub(ref, elem, first.down, first.across))
        elif isinstance(elem, Tuple):
            result.append(Zipped(ref, node, tuple(ins), first.down, first.across))
        else:
            result.append(ref)
    return result


def repeat(rw, node, ins):
    """`node` (Repeat, Expand) on a sub-tiled input: each logical tile's sub-tiles buffered,
    the buffer references repeated, the sub-tiles read back. None when they cannot be
    buffered (dynamically sized sub-tiles)."""
    v = ins[0]
    if not isinstance(v, Sub) or not static_subs(v):
        return None
    says, name = origin(node), node.name
    held = rw.draft.emit(BUFFERIZE, [v.ref], {"rank": 2}, f"{says}: the {v.down} x {v.across} "
                         "sub-tiles of each logical tile held", base=f"{name}_held")[0]
    refs = [x.logical if isinstance(x, Sub) and x.logical else rw.plain(x) for x in ins[1:]]
    rep = copy(rw, node, [held] + refs, rw.read,
               note=f"{says}: repeats the held sub-tiles")
    out = rw.draft.emit(STREAMIFY, [rep[0], None], {}, f"{says}: the repeated sub-tiles",
                        base=f"{name}_sub")[0]
    rw.note(node, "rewritten", f"repeats each logical tile's {v.down} x {v.across} sub-tiles "
                               "as a group", [held, rep[0], out],
            on_chip=memory.repeated(v.tile, v.down, v.across))
    return [Sub(out, v.tile, v.down, v.across, logical=rep[0])]


def broadcasting(rw, node, ins):
    """An element-wise Map whose smaller operands broadcast over a full-size one: an
    [R, 1] column split by rows and each piece repeated across the sub-tile columns, a
    [1, 1] scalar repeated once per sub-tile, so each meets every sub-tile it applies to.
    None when it cannot be (a [1, C] row over several sub-tile rows, splits that differ)."""
    out_tile = rw.out_type(node).elem
    edges = rw.typed.program.in_edges(node.name)
    types = [rw.typed.types[(e.src, e.port)].elem for e in edges]
    same = [_same_tile(t, out_tile) for t in types]
    subs = [v for v, full in zip(ins, same, strict=True) if full and isinstance(v, Sub)]
    if subs:
        down, across = subs[0].down, subs[0].across
    else:
        padded = any((e.src, e.port) in rw.padded for e, full in zip(edges, same, strict=True)
                     if full)
        parts = rw.split(out_tile, padded)
        if parts is None:
            return None
        down, across = parts
    draft, says, refs, held, added = rw.draft, origin(node), [], sympy.Integer(0), []
    for v, e, t, full in zip(ins, edges, types, same, strict=True):
        if full:
            sub = v if isinstance(v, Sub) else rw.on_chip(v, e, (down == 1, across == 1))
            if (sub.down, sub.across) != (down, across):
                return None
            refs.append(sub.ref)
        elif t.cols == 1 and (t.rows == 1 or t.rows == out_tile.rows):
            pieces = 1 if t.rows == 1 else down
            src = rw.plain(v)
            if pieces > 1:
                sub = rw.on_chip(src, e, (False, True))
                if sub.down != down:
                    return None
                src = sub.ref
            rep = draft.emit(REPEAT, [src], {"count": down * across // pieces},
                             f"{says}: the broadcast operand once per sub-tile",
                             base=f"{node.name}_bcast")[0]
            shaped = draft.emit(RESHAPE, [rep], {"chunk": across, "rank": 0}, f"{says}: "
                                f"{down} x {across}", base=f"{node.name}_bsub")[0] \
                if pieces == 1 else draft.emit(FLATTEN, [rep], {"min": 0, "max": 1},
                                               f"{says}: {down} x {across}",
                                               base=f"{node.name}_bsub")[0]
            held += memory.broadcast(t, pieces)
            added += [rep, shaped]
            refs.append(shaped)
        else:
            return None
    out = copy(rw, node, refs, rw.read, note=f"{says}: on each sub-tile, the smaller operands "
                                              "repeated to meet them")
    rw.note(node, "rewritten", f"applies `{node.attrs['fn']}` to each of {down} x {across} "
                               "sub-tiles, its broadcast operands repeated", added + out,
            on_chip=held)
    return [Sub(out[0], out_tile, down, across)]


def _same_tile(t, other: Tile) -> bool:
    return isinstance(t, Tile) and sympy.simplify(t.rows - other.rows) == 0 and \
        sympy.simplify(t.cols - other.cols) == 0


def unzip(rw, value: Zipped) -> str:
    """The logical stream of a zip of sub-tiled streams: their logical streams zipped."""
    return copy(rw, value.node, [rw.plain(p) for p in value.parts], rw.read)[0]


def _is_tile_stream(typed, edge) -> bool:
    return isinstance(typed.types[(edge.src, edge.port)].elem, Tile)


def _reshapes_dynamic(typed, node) -> bool:
    """A Reshape-like split of a dim that is not static: the innermost-dim rules would no
    longer apply once the sub-tile dims follow it."""
    spec = OPS[node.op]
    if "chunk" not in {p.name for p in spec.params}:
        return False
    t = typed.types[source(typed.program, node.name, 0)]
    rank = node.attrs.get("rank") or 0
    dim = sympy.sympify(t.shape[len(t.shape) - 1 - rank])
    return not dim.is_Integer or int(dim) % node.attrs["chunk"] != 0
