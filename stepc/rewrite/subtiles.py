"""Sub-tiles: a stream of logical tiles as a stream of physical sub-tiles (`Sub`), and the
operators that convert between the two on chip (`unpack` splits, `pack` packs back), with
the arithmetic of tile grids and buffer views that hierarchical tiling needs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import sympy

from stepc.ops.base import FnValue
from stepc.rewrite.draft import Draft, RewriteError
from stepc.types import Tile

# the operators and functions that split and pack tiles on chip, by their records' names
ACCUM, FLATMAP, RESHAPE, PROMOTE = "Accum", "FlatMap", "Reshape", "Promote"
UNPACK = "retile_streamify"  # a tile into its rows (or columns)
PACK_COLS, PACK_ROWS = "retile_col", "retile_row"  # sub-tiles back into a logical tile


@dataclass(frozen=True)
class Sub:
    """A stream of physical sub-tiles standing for a stream of logical tiles: `ref` has the
    logical stream's shape followed by [down, across]; each logical `tile` is `down` x
    `across` sub-tiles of `rows` x `cols`. `logical`: a stream of the logical shape made on
    the way (the logical tiles before an on-chip split, a repeat's buffer references), for
    operators that read only a reference's shape."""

    ref: str
    tile: Tile
    down: int
    across: int
    logical: str | None = None

    @property
    def rows(self):
        return sympy.sympify(self.tile.rows) / self.down

    @property
    def cols(self):
        return sympy.sympify(self.tile.cols) / self.across


@dataclass(frozen=True)
class Zipped:
    """A Zip of sub-tiled streams split alike: `ref` has their shape and holds pairs of
    sub-tiles; `node` is the original Zip and `parts` the values of its inputs (zipped
    again, logical, when a consumer needs logical tiles)."""

    ref: str
    node: Any
    parts: tuple
    down: int
    across: int


SPLIT = (Sub, Zipped)  # the values whose streams carry the two sub-tile dims


def split_dim(d, p: int) -> int | None:
    """Sub-tiles along a tile dim of `d` for physical size `p`: d/p when d is static, above p
    and a multiple of it; 1 when d is dynamic or fits; None when it cannot be split."""
    d = sympy.sympify(d)
    if not d.is_Integer or int(d) <= p:
        return 1
    return int(d) // p if int(d) % p == 0 else None


def unpack(draft: Draft, ref: str, tile: Tile, parts: tuple[int, int], says: str) -> Sub:
    """A stream of logical tiles split into sub-tiles by operators: each tile given a dim
    of its own (Promote), its rows (FlatMap into rows, Reshape, Accum with retile_row),
    then its columns (the same by columns), then Reshape (or Promote) into its [down,
    across] dims. No dim of the stream itself is reshaped, so a ragged one is fine."""
    down, across = parts
    rows = int(tile.rows) // down if down > 1 else tile.rows
    cols = int(tile.cols) // across if across > 1 else tile.cols
    emit, says, base = draft.emit, f"{says}: split on chip", ref
    ref = emit(PROMOTE, [ref], {"rank": 0}, f"{says}: one dim per logical tile",
               base=f"{base}_each")[0]
    if down > 1:
        ref = emit(FLATMAP, [[ref]], {"fn": fn_value(UNPACK)}, f"{says}, into rows",
                   base=f"{base}_rows")[0]
        ref = emit(RESHAPE, [ref], {"chunk": rows}, f"{says}, {rows} rows at a time",
                   base=f"{base}_rowgroups")[0]
        ref = emit(ACCUM, [[ref]], {"fn": fn_value(PACK_ROWS), "rank": 1},
                   f"{says}, into {rows}-row tiles", base=f"{base}_rowtiles")[0]
    if across > 1:
        ref = emit(FLATMAP, [[ref]], {"fn": fn_value(UNPACK, split="col")},
                   f"{says}, into columns", base=f"{base}_cols")[0]
        ref = emit(RESHAPE, [ref], {"chunk": cols}, f"{says}, {cols} columns at a time",
                   base=f"{base}_colgroups")[0]
        ref = emit(ACCUM, [[ref]], {"fn": fn_value(PACK_COLS), "rank": 1},
                   f"{says}, into {rows} x {cols} tiles", base=f"{base}_tiles")[0]
        ref = emit(RESHAPE, [ref], {"chunk": across}, f"{says}: {down} x {across}",
                   base=f"{base}_sub")[0]
    else:
        ref = emit(PROMOTE, [ref], {"rank": 0}, f"{says}: {down} x 1",
                   base=f"{base}_sub")[0]
    return Sub(ref, tile, down, across, logical=base)


def pack(draft: Draft, value: Sub) -> str:
    """The logical tiles of `value`: its sub-tiles packed back by columns (Accum with
    retile_col), then by rows (retile_row)."""
    note = f"{value.ref}: sub-tiles packed back into {size_text(value.tile)} tiles"
    ref = value.ref
    if value.across > 1 or value.down == 1:
        ref = draft.emit(ACCUM, [[ref]], {"fn": fn_value(PACK_COLS), "rank": 1}, note,
                         base=f"{value.ref}_cols")[0]
    return draft.emit(ACCUM, [[ref]], {"fn": fn_value(PACK_ROWS), "rank": 1}, note,
                      base=f"{value.ref}_whole")[0]


def origin(node) -> str:
    """How a comment names an operator of the original program."""
    return f"{node.name} ({node.op})"


def fn_value(name: str, **kwargs):
    return FnValue(name, tuple(kwargs.items()), None)


def size_text(tile: Tile) -> str:
    return f"{tile.rows} x {tile.cols}"


def weights(shape: list[int]) -> list[int]:
    """Row-major strides of a buffer of `shape` tiles."""
    return [math.prod(shape[i + 1:]) for i in range(len(shape))]


def rescale(stride, shape, tiled, fine, parts) -> list[int] | None:
    """The strides of a tile view over the finer grid `fine`, or None when a stride is not
    a whole number of steps along each grid dim (a view that wraps across rows)."""
    coarse_w = weights(list(tiled))
    fine_w = weights(list(fine))
    scale = [1] * (len(tiled) - 2) + list(parts)
    digits = []
    for s in stride:
        ds = []
        for w in coarse_w:
            ds.append(s // w)
            s %= w
        digits.append(ds)
    for j, size in enumerate(tiled):  # no carry: every index stays within its dim
        if sum((n - 1) * d[j] for n, d in zip(shape, digits, strict=True)) >= size:
            return None
    return [sum(d[j] * scale[j] * fine_w[j] for j in range(len(tiled))) for d in digits]


def tile_of(text: str) -> tuple[int, int]:
    """`16x16` (or `16`) as (rows, cols)."""
    parts = text.lower().replace("*", "x").split("x")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        raise RewriteError(f"--tile expects ROWSxCOLS such as 16x16, found {text!r}") from None
    if len(dims) == 1:
        dims = dims * 2
    if len(dims) != 2 or min(dims) <= 0:
        raise RewriteError(f"--tile expects two positive sizes ROWSxCOLS, found {text!r}")
    return dims


