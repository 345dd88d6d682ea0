"""The on-chip memory rule of hierarchical tiling: how many bytes each rewrite step adds to
the analysis' on-chip total (its default, single-buffered accounting: a load or store holds
one tile, an Accum its accumulator, a Repeat or Expand the element it repeats, a Bufferize
its buffer twice and the tile it is filling, a Streamify the buffer it reads and the tile
it emits; Map, FlatMap and the operators that only move elements hold nothing).

For a logical tile of T bytes split into n = down x across sub-tiles of t = T / n bytes:

- a split load or store holds a sub-tile instead of a tile: t - T;
- a repeat of sub-tiles holds them in a Bufferize (t + 2T), repeats the buffer reference
  (T) and reads it back (T + t), instead of holding the tile (T): 3T + 2t;
- a product the figure's way buffers one sub-tile row of its left operand (ak sub-tiles:
  Bufferize t_a + 2 ak t_a, Repeat ak t_a, Streamify ak t_a + t_a) and the whole right
  tile (t_b + 2 T_b, T_b, T_b + t_b), and keeps one output sub-tile of partial sums (t_o)
  instead of the logical accumulator (T_o, an Accum's only);
- a product over static reduced dims (d of them in all) buffers both operands over them:
  t + 2 d T and d T + t for each, plus t_o - T_o;
- a reduction in stream order keeps one accumulator, the logical output tile: 0;
- a product whose left operand has dynamic rows repeats that operand (T_a), splits the
  repeats on chip, buffers the right tile (t_b + 2 T_b, T_b + t_b) and keeps t_o;
- a broadcast operand of an element-wise map (an [R, 1] column split into `pieces` row
  pieces, or a [1, 1] scalar) is repeated per sub-tile; the Repeat holds a piece: T / pieces;
- splitting on chip packs rows (T / down, when down > 1) and columns (t, when across > 1);
- packing back packs columns (T / down, when across > 1 or down = 1) and rows (T).
"""

from __future__ import annotations

import sympy

from stepc.types import Tile


def tile_bytes(tile: Tile) -> sympy.Expr:
    return sympy.sympify(tile.bytes)


def split_memory(tile: Tile, down: int, across: int) -> sympy.Expr:
    big = tile_bytes(tile)
    return big / (down * across) - big


def repeated(tile: Tile, down: int, across: int) -> sympy.Expr:
    big = tile_bytes(tile)
    return 3 * big + 2 * big / (down * across)


def figure_product(a: Tile, a_parts, b: Tile, b_parts, out: Tile, out_parts,
                   accumulates: bool) -> sympy.Expr:
    t_a = tile_bytes(a) / (a_parts[0] * a_parts[1])
    big_b = tile_bytes(b)
    t_b = big_b / (b_parts[0] * b_parts[1])
    row_a = a_parts[1] * t_a
    return 2 * t_a + 4 * row_a + 2 * t_b + 4 * big_b + _partial_sums(out, out_parts,
                                                                   accumulates)


def affine_product(a: Tile, a_parts, b: Tile, b_parts, out: Tile, out_parts,
                   reduced: int) -> sympy.Expr:
    held = sympy.Integer(0)
    for tile, (down, across) in ((a, a_parts), (b, b_parts)):
        big = tile_bytes(tile)
        held += 2 * big / (down * across) + 3 * reduced * big
    return held + _partial_sums(out, out_parts, True)


def dynamic_rows_product(a: Tile, ak: int, b: Tile, b_parts, out: Tile,
                         out_parts) -> sympy.Expr:
    big_b = tile_bytes(b)
    t_b = big_b / (b_parts[0] * b_parts[1])
    return tile_bytes(a) + unpacked(a, 1, ak) + 2 * t_b + 3 * big_b + \
        tile_bytes(out) / (out_parts[0] * out_parts[1])


def broadcast(tile: Tile, pieces: int) -> sympy.Expr:
    return tile_bytes(tile) / pieces


def unpacked(tile: Tile, down: int, across: int) -> sympy.Expr:
    big = tile_bytes(tile)
    return (big / down if down > 1 else 0) + (big / (down * across) if across > 1 else 0)


def packed(tile: Tile, down: int, across: int) -> sympy.Expr:
    big = tile_bytes(tile)
    return (big / down if across > 1 or down == 1 else 0) + big


def _partial_sums(out: Tile, parts, accumulates: bool) -> sympy.Expr:
    big = tile_bytes(out)
    return big / (parts[0] * parts[1]) - (big if accumulates else 0)
