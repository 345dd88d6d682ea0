"""`downtile`: hierarchical tiling (the paper's appendix). Every stream of logical tiles
larger than the fabric's physical tile becomes a stream of physical sub-tiles, its shape
the logical shape followed by [sub-tiles down, sub-tiles across]; each operator is rebuilt
to work on them:

- an off-chip load reads the sub-tiles directly (its tile grid and view rescaled), or,
  when loads keep their logical tiles, operators split them on chip (subtiles.unpack);
- an element-wise Map applies its function to each sub-tile (broadcast operands repeated
  to meet them: passing.broadcasting);
- a matrix product (Map or Accum) becomes the appendix's subgraph (products.py), or a
  variant for a left operand with dynamic rows or a reduction over ragged dims;
- an operator that only moves or repeats elements (Partition, Reshape, Repeat, ...) passes
  the sub-tile dims through (passing.py);
- a store writes the sub-tiles when they arrive in the tensor's row-major order.

Anything else reads logical tiles: the sub-tiles are packed back first (subtiles.pack). A
tile dim that is dynamic, or not above the physical tile, is kept whole, and so are the
rows of a tile that may carry a valid-row count (padding). Each change records the FLOPs
and on-chip bytes it adds by the rules (memory.py), which verify.py checks.
"""

from __future__ import annotations

from typing import Any

import sympy

from stepc.ops import OPS
from stepc.ops.base import LOAD, STORE
from stepc.ops.functions import CONTRACTION, ELEMENTWISE, FUNCTIONS, GROUP
from stepc.ops.offchip import affine_view, tiled_shape
from stepc.rewrite import memory
from stepc.rewrite.draft import Change
from stepc.rewrite.passing import (
    INNER_DIMS,
    REPEATS,
    broadcasting,
    pass_through,
    repeat,
    unzip,
)
from stepc.rewrite.products import contraction, dynamic_rows
from stepc.rewrite.subtiles import (
    SPLIT,
    Sub,
    origin,
    pack,
    rescale,
    size_text,
    split_dim,
    unpack,
)
from stepc.rewrite.walk import Rewrite, copy, dependency_order, plain_attrs
from stepc.types import Tile


class Downtile(Rewrite):
    name = "downtile"
    summary = "split logical tiles into the fabric's physical tiles (hierarchical tiling)"

    def __init__(self, typed, draft, tile: tuple[int, int], split_memory: bool = True):
        super().__init__(typed, draft)
        self.tile = tile
        self.split_memory = split_memory
        self.read = {(e.src, e.port) for e in typed.program.edges}
        self.packed: dict[str, str] = {}
        self.unpacked: dict[str, Sub] = {}
        self.padded = self._padded()
        self.wanted = self._wanted()

    def _padded(self) -> set[tuple[str, int]]:
        """Streams whose tiles may carry a valid-row count: padding made by a `pad=`
        attribute or a count set by a metadata function, and the tiles computed from such
        tiles (not the fresh tiles an off-chip load reads, nor selectors or addresses)."""
        prog = self.typed.program
        out: set[tuple[str, int]] = set()
        for name in dependency_order(prog):
            node, spec = prog.nodes[name], OPS[prog.nodes[name].op]
            fn = FUNCTIONS.get(getattr(node.attrs.get("fn"), "name", ""))
            loads = spec.memory is not None and spec.memory.direction == LOAD and \
                spec.memory.off_chip
            fed = any((e.src, e.port) in out for e in prog.in_edges(name))
            if node.attrs.get("pad") is not None or (fn is not None and fn.fixed_cycles) or \
                    (fed and not loads):
                out.update((name, p) for p in range(len(node.outputs))
                           if _holds_tiles(self.typed.types[(name, p)].elem))
        return out

    def _wanted(self) -> set[tuple[str, int]]:
        """The streams worth splitting: those that can arrive as sub-tiles (from a split
        load, through operators that pass them or compute on them) and reach an operator
        that computes on sub-tiles or a store; a load that only feeds operators needing
        logical tiles keeps its tiles rather than splitting them to pack them back."""
        prog = self.typed.program
        order = dependency_order(prog)
        can: set[tuple[str, int]] = set()  # may arrive as sub-tiles
        real: set[tuple[str, int]] = set()  # ... of tiles larger than the physical tile
        for name in order:
            node, spec = prog.nodes[name], OPS[prog.nodes[name].op]
            ins = [(e.src, e.port) for e in prog.in_edges(name)]
            tiles = [k for k in ins if isinstance(self.typed.types[k].elem, Tile)]
            outs = [(name, p) for p in range(len(node.outputs))]
            if spec.memory is not None and spec.memory.direction == LOAD and \
                    spec.memory.off_chip and _affine_load(node):
                ok = self.split(self.out_type(node).elem) is not None
                if self.splits(self.out_type(node).elem):
                    real.update(outs)
            elif spec.fan_out or node.op in INNER_DIMS or node.op in REPEATS:
                ok = any(k in can for k in tiles)
            else:
                ok = self.feasible(node)
            if ok:
                can.update(outs)
                if any(k in real or self.splits(self.typed.types[k].elem) for k in tiles):
                    real.update(outs)
        wanted: set[tuple[str, int]] = set()
        for name in reversed(order):
            node, spec = prog.nodes[name], OPS[prog.nodes[name].op]
            outs = [(name, p) for p in range(len(node.outputs))]
            ins = [(e.src, e.port) for e in prog.in_edges(name)]
            if spec.memory is not None and spec.memory.direction == STORE:
                want = True
            elif spec.fan_out or node.op in INNER_DIMS or node.op in REPEATS:
                want = any(k in wanted for k in outs)
            else:
                tiles = [k for k in ins if isinstance(self.typed.types[k].elem, Tile)]
                want = self.feasible(node) and (any(k in real for k in tiles)
                                                or self.worth(node))
            if want:
                wanted.update(k for k in ins if k in can)
        return wanted

    # ---------------------------------------------------------------- values
    def plain(self, value: Any) -> str:
        """The logical stream of `value`: sub-tiles packed back into logical tiles."""
        if not isinstance(value, SPLIT):
            return value
        if value.ref not in self.packed:
            if isinstance(value, Sub):
                self.packed[value.ref] = pack(self.draft, value)
                self.draft.changes.append(Change(
                    value.ref, "sub-tiles", "converted", f"packed back into {value.tile} "
                    "for an operator that reads logical tiles", [self.packed[value.ref]],
                    on_chip_delta=memory.packed(value.tile, value.down, value.across)))
            else:
                self.packed[value.ref] = unzip(self, value)
        return self.packed[value.ref]

    def ref(self, value: Any) -> str:
        return value.ref if isinstance(value, SPLIT) else value

    def inner_dims(self, value: Any) -> list[int]:
        return [value.down, value.across] if isinstance(value, SPLIT) else []

    def split(self, tile: Tile, padded: bool = False) -> tuple[int, int] | None:
        """Sub-tiles (down, across) of a tile; (1, 1) when it fits, None when it cannot be
        split. A `padded` tile (one that may carry a valid-row count) keeps its rows whole:
        the count applies to rows, so column sub-tiles each keep it."""
        down = 1 if padded else split_dim(tile.rows, self.tile[0])
        across = split_dim(tile.cols, self.tile[1])
        if down is None or across is None:
            return None
        return down, across

    def splits(self, tile) -> bool:
        """A tile larger than the physical tile, which can be split."""
        parts = self.split(tile) if isinstance(tile, Tile) else None
        return parts is not None and parts != (1, 1)

    def out_type(self, node, port: int = 0):
        return self.typed.types[(node.name, port)]

    def note(self, node, action: str, detail: str, added: list[str] | None = None,
             flops: Any = 0, on_chip: Any = 0) -> None:
        self.draft.changes.append(Change(node.name, node.op, action, detail, added or [],
                                         flops, on_chip))

    # ---------------------------------------------------------------- dispatch
    def visit(self, node, ins: list[Any]):
        spec = OPS[node.op]
        if spec.memory is not None and spec.memory.off_chip:
            if spec.memory.direction == LOAD:
                return self.load(node, ins)
            if spec.memory.direction == STORE:
                return self.store(node, ins)
        if spec.fn_use is not None:
            return self.compute(node, ins)
        if node.op in REPEATS and ins and isinstance(ins[0], Sub):
            out = repeat(self, node, ins)
            if out is not None:
                return out
        if node.op in INNER_DIMS and any(isinstance(v, SPLIT) for v in ins):
            return pass_through(self, node, ins)
        if any(isinstance(v, SPLIT) for v in ins):
            self.note(node, "kept", "reads logical tiles: its inputs are packed back")
        return None

    # ---------------------------------------------------------------- memory
    def load(self, node, ins):
        if not _affine_load(node):
            return None
        tile = self.out_type(node).elem
        parts = self.split(tile)
        if parts is None or (node.name, 0) not in self.wanted and not self.splits(tile):
            return None
        if (node.name, 0) not in self.wanted:
            self.note(node, "kept", "no operator it feeds computes on sub-tiles")
            return None
        if not self.split_memory:
            refs = [self.plain(v) for v in ins]
            out = copy(self, node, refs, self.read)
            sub = unpack(self.draft, out[0], tile, parts, origin(node))
            self.note(node, "rewritten", f"keeps its {size_text(tile)} tiles; they are split into "
                                         f"{parts[0]} x {parts[1]} sub-tiles on chip",
                      [out[0], sub.ref], on_chip=memory.unpacked(tile, *parts))
            return [sub]
        down, across = parts
        t = node.attrs["tensor"]
        tiled = tiled_shape(t, node.attrs["tile"])
        stride, shape = affine_view(tiled, node.attrs.get("stride"), node.attrs.get("shape"),
                                    "tiles")
        sub = [int(tile.rows) // down, int(tile.cols) // across]
        fine = tiled_shape(t, sub)
        new_stride = rescale(stride, shape, tiled, fine, (down, across))
        if new_stride is None:
            self.note(node, "kept", "its view is not a product of row and column steps")
            return None
        attrs = plain_attrs(node)
        attrs.update(tile=sub, stride=new_stride + [fine[-1], 1], shape=list(shape) +
                     [down, across])
        refs = [self.plain(v) for v in ins]
        out = copy(self, node, refs, self.read, attrs,
                   note=f"{origin(node)}: each {size_text(tile)} tile read as {down} x {across} "
                        f"tiles of {sub[0]} x {sub[1]}")
        self.note(node, "rewritten", f"reads {down} x {across} sub-tiles of {sub[0]} x "
                                     f"{sub[1]} per {tile}", [out[0]],
                  on_chip=memory.split_memory(tile, down, across))
        return [Sub(out[0], tile, down, across)]

    def store(self, node, ins):
        if not ins or not isinstance(ins[0], Sub) or "tensor" not in node.attrs:
            return None
        v: Sub = ins[0]
        if not self.split_memory:
            self.note(node, "kept", "stores keep their logical tiles: its sub-tiles are "
                                    "packed back")
            return None
        t = node.attrs["tensor"]
        grid = tiled_shape(t, [int(v.tile.rows), int(v.tile.cols)])
        if v.down > 1 and grid[-1] > 1:
            self.note(node, "kept", "its sub-tiles would not arrive in the tensor's row-major "
                                    "order: they are packed back")
            return None
        copy(self, node, [v.ref] + [self.plain(x) for x in ins[1:]], self.read,
             note=f"{origin(node)}: writes the sub-tiles in row-major order")
        self.note(node, "rewritten", f"writes {v.down} x {v.across} sub-tiles per {v.tile}",
                  on_chip=memory.split_memory(v.tile, v.down, v.across))
        return []

    # ---------------------------------------------------------------- compute
    def compute(self, node, ins):
        fn = node.attrs.get("fn")
        fspec = FUNCTIONS.get(getattr(fn, "name", ""))
        spec = OPS[node.op]
        edges = self.typed.program.in_edges(node.name)
        if fspec is not None and fspec.split == ELEMENTWISE and spec.fn_use == "map" \
                and self.worth(node) and self._broadcasts(node):
            out = broadcasting(self, node, ins)
            if out is not None:
                return out
        if self.feasible(node) and self.worth(node) and self.dynamic_rows(node):
            b = ins[1] if isinstance(ins[1], Sub) else self.on_chip(ins[1], edges[1])
            return dynamic_rows(self, node, ins[0], b, fn)
        if self.feasible(node) and self.worth(node) \
                and not all(isinstance(v, Sub) for v in ins):
            whole = self.whole_dims(node)
            ins = [v if isinstance(v, Sub) else self.on_chip(v, e, keep) for v, e, keep in
                   zip(ins, edges, whole, strict=True)]
        if fspec is None or not ins or not all(isinstance(v, Sub) for v in ins):
            if any(isinstance(v, Sub) for v in ins) and fspec is not None and fspec.split:
                self.note(node, "kept", f"{self.why_not(node)}; its inputs are packed back")
            elif any(isinstance(v, Sub) for v in ins):
                self.note(node, "kept", "reads logical tiles: its inputs are packed back")
            elif fspec is not None and fspec.split in (ELEMENTWISE, CONTRACTION) \
                    and self._would_split(node):
                self.note(node, "kept", self.why_not(node))
            return None
        if fspec.split == ELEMENTWISE and spec.fn_use == "map":
            return self.elementwise(node, ins)
        if fspec.split == CONTRACTION and len(ins) == 2:
            return contraction(self, node, ins, fn)
        if fspec.split == GROUP and node.attrs.get("rank") is not None:
            attrs = {**plain_attrs(node), "rank": node.attrs["rank"] + 2}
            out = copy(self, node, [v.ref for v in ins], self.read, attrs,
                       note=f"{origin(node)}: each group with its sub-tiles")
            self.note(node, "rewritten", "its groups take the sub-tile dims too", out)
            return out
        if fspec.split == ELEMENTWISE:
            self.note(node, "kept", f"{self.why_not(node)}; its inputs are packed back")
        else:
            self.note(node, "kept", f"`{fn.name}` in {node.op} does not split into sub-tiles")
        return None

    def feasible(self, node) -> bool:
        """A compute operator that can work on sub-tiles: an element-wise Map whose inputs
        have one tile shape, or a product whose right operand has static tiles (the left
        one too, or a dynamic row count in a Map); every input's tile splits."""
        fn = node.attrs.get("fn")
        fspec = FUNCTIONS.get(getattr(fn, "name", "")) if OPS[node.op].fn_use else None
        if fspec is None or not fspec.split:
            return False
        streams = [self.typed.types[(e.src, e.port)]
                   for e in self.typed.program.in_edges(node.name)]
        tiles = [st.elem for st in streams]
        if not tiles or not all(isinstance(t, Tile) and self.split(t) for t in tiles):
            return False
        if fspec.split == ELEMENTWISE:
            return OPS[node.op].fn_use == "map" and \
                len({(str(t.rows), str(t.cols)) for t in tiles}) == 1
        if len(tiles) != 2 or not _static_tile(tiles[1]):
            return False
        return _static_tile(tiles[0]) or self.dynamic_rows(node)

    def dynamic_rows(self, node) -> bool:
        """A product (a Map) whose left operand has a dynamic row count and static columns."""
        fspec = FUNCTIONS.get(getattr(node.attrs.get("fn"), "name", ""))
        edges = self.typed.program.in_edges(node.name)
        if fspec is None or fspec.split != CONTRACTION or len(edges) != 2:
            return False
        a = self.typed.types[(edges[0].src, edges[0].port)].elem
        return OPS[node.op].fn_use == "map" and isinstance(a, Tile) and \
            not sympy.sympify(a.rows).is_Integer and sympy.sympify(a.cols).is_Integer

    def whole_dims(self, node) -> list[tuple[bool, bool]]:
        """Per input, whether its rows and its columns stay whole when split on chip: a
        product reducing a dynamic dim keeps its output's rows and columns whole (each
        output tile is then one sum over the reduced dims and the inner sub-tiles, read in
        stream order; re-reading the operands per output sub-tile would need a view of a
        dynamically sized buffer)."""
        edges = self.typed.program.in_edges(node.name)
        fn = node.attrs.get("fn")
        fspec = FUNCTIONS.get(getattr(fn, "name", ""))
        if fspec is None or fspec.split != CONTRACTION or OPS[node.op].fn_use == "map" \
                or len(edges) != 2:
            return [(False, False)] * len(edges)
        st = self.typed.types[(edges[0].src, edges[0].port)]
        if all(sympy.sympify(d).is_Integer for d in st.shape[len(st.shape) - node.attrs["rank"]:]):
            return [(False, False)] * 2
        transpose = bool(fn.get("transpose", False))
        return [(True, False), (True, False) if transpose else (False, True)]

    def why_not(self, node) -> str:
        """Why an operator whose tiles exceed the physical tile keeps them."""
        edges = self.typed.program.in_edges(node.name)
        streams = [self.typed.types[(e.src, e.port)] for e in edges]
        fspec = FUNCTIONS.get(getattr(node.attrs.get("fn"), "name", ""))
        if fspec is not None and fspec.split == ELEMENTWISE and OPS[node.op].fn_use != "map":
            return "an element-wise reduction: each output sub-tile sums one sub-tile of " \
                   "every reduced element, and those arrive interleaved with the others " \
                   "(regrouping them needs a buffer view over the reduced dims; downtile " \
                   "does not regroup them)"
        if not all(_static_tile(st.elem) for st in streams if isinstance(st.elem, Tile)):
            return "a product whose right operand, or a reduction whose left operand, has " \
                   "dynamically sized tiles: re-reading them per output sub-tile needs a " \
                   "buffer, and Bufferize takes only static tiles"
        return "its inputs' tiles differ and do not broadcast by columns or scalars, or " \
               "cannot be split"

    def worth(self, node) -> bool:
        """Some tile of the operator's inputs or outputs exceeds the physical tile."""
        streams = [(e.src, e.port) for e in self.typed.program.in_edges(node.name)]
        streams += [(node.name, p) for p in range(len(node.outputs))]
        return any(self.splits(self.typed.types[k].elem) for k in streams)

    def on_chip(self, ref: str, edge, keep: tuple[bool, bool] = (False, False)) -> Sub:
        """The logical stream `ref` (of `edge`) split into sub-tiles on chip, once; `keep`:
        whether its rows, its columns are kept whole."""
        if ref not in self.unpacked:
            tile = self.typed.types[(edge.src, edge.port)].elem
            src = self.typed.program.nodes[edge.src]
            down, across = self.split(tile, (edge.src, edge.port) in self.padded)
            parts = (1 if keep[0] else down, 1 if keep[1] else across)
            sub = self.unpacked[ref] = unpack(self.draft, ref, tile, parts, origin(src))
            self.draft.changes.append(Change(
                ref, "logical tiles", "converted", f"split into {parts[0]} x {parts[1]} "
                "sub-tiles on chip for an operator that computes on sub-tiles", [sub.ref],
                on_chip_delta=memory.unpacked(tile, *parts)))
        return self.unpacked[ref]

    def _would_split(self, node) -> bool:
        return any(self.splits(self.typed.types[(e.src, e.port)].elem)
                   for e in self.typed.program.in_edges(node.name))

    def _broadcasts(self, node) -> bool:
        tiles = {(str(t.rows), str(t.cols)) for t in (
            self.typed.types[(e.src, e.port)].elem for e in self.typed.program.in_edges(node.name))
            if isinstance(t, Tile)}
        return len(tiles) > 1

    def elementwise(self, node, ins: list[Sub]):
        first = ins[0]
        if any((v.tile.rows, v.tile.cols, v.down, v.across) !=
               (first.tile.rows, first.tile.cols, first.down, first.across) for v in ins):
            self.note(node, "kept", "its inputs' tiles differ (broadcasting): packed back")
            return None
        out_tile = self.out_type(node).elem
        out = copy(self, node, [v.ref for v in ins], self.read,
                   note=f"{origin(node)}: on each {_dims(first)} sub-tile")
        self.note(node, "rewritten", f"applies `{node.attrs['fn']}` to each sub-tile", out)
        return [Sub(out[0], out_tile, first.down, first.across)]


def _dims(v: Sub) -> str:
    return f"{v.rows} x {v.cols}"


def _affine_load(node) -> bool:
    """A load that reads a tensor through a tile view (stride and shape), not by addresses."""
    spec = OPS[node.op]
    return "tensor" in node.attrs and node.attrs.get("tile") is not None and \
        spec.param("stride") is not None and spec.param("shape") is not None


def _static_tile(t: Tile) -> bool:
    return sympy.sympify(t.rows).is_Integer and sympy.sympify(t.cols).is_Integer


def _holds_tiles(elem) -> bool:
    """An element that is or holds tiles (a tile, a buffer of tiles, a tuple with a tile)."""
    if isinstance(elem, Tile):
        return True
    parts = getattr(elem, "elems", None) or [getattr(elem, "tile", None)]
    return any(isinstance(p, Tile) for p in parts)
