"""Operators that move sub-tiles without computing on them. A logical tile is `down` x
`across` sub-tiles, the two innermost dims of its stream, so:

- an operator that moves elements by dims (Partition, Reassemble, Parallelize, EagerMerge,
  Reshape, Flatten, Promote, Broadcast, Sink; record field `inner_dims`) takes them with
  its dim attributes shifted by two: a chunk, a merged or a routed element keeps its
  sub-tiles together; outputs with one element per chunk (EagerMerge's selector, record
  field `chunk_outputs`) are unchanged;
- Zip of two streams split alike pairs their sub-tiles (`Zipped`);
- an operator that emits each element several times (Repeat, Expand; record field
  `repeats`) must repeat a logical tile's sub-tiles as one group: they are buffered
  (Bufferize, rank 2), the buffer references repeated by the operator itself and read back
  (Streamify), as the appendix's figure repeats its operands. An Expand's reference is
  read only for its shape: a sub-tiled one is replaced by a stream of its logical shape
  made on the way (`Sub.logical`) when there is one, else packed back.
"""

from __future__ import annotations

import sympy

from stepc.ops import OPS
from stepc.rewrite import memory
from stepc.rewrite.products import BUFFERIZE, STREAMIFY, source, static_subs
from stepc.rewrite.subtiles import SPLIT, Sub, Zipped, origin
from stepc.rewrite.walk import copy, plain_attrs
from stepc.types import Tile, Tuple


def pass_through(rw, node, ins):
    """`node` on sub-tiles, its dim attributes shifted; None when it cannot take them."""
    spec = OPS[node.op]
    subs = [v for v in ins if isinstance(v, SPLIT)]
    first = subs[0]
    if any((v.down, v.across) != (first.down, first.across) for v in subs):
        rw.note(node, "kept", "its inputs are split into sub-tiles differently: packed back")
        return None
    for port, out_name in enumerate(node.outputs):
        t = rw.out_type(node, port)
        if not isinstance(t.elem, (Tile, Tuple)) and out_name not in spec.chunk_outputs \
                and (node.name, port) in rw.read:
            return None  # a side output (a padding mask) would change shape
    attrs = plain_attrs(node)
    for key in spec.inner_dims:
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
