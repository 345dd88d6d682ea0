"""Off-chip memory operators: stream tiled tensors between HBM and the fabric (paper 3.2.1)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from stepc.codes import (
    BAD_ARGUMENT,
    DTYPE_MISMATCH,
    MISSING_ARGUMENT,
    STORE_NOT_FILLED,
    TILE_DOES_NOT_FIT,
    VIEW_LENGTHS_DIFFER,
    VIEW_OUT_OF_BOUNDS,
    WRONG_OPERAND_TYPE,
)
from stepc.ops.base import (
    LOAD,
    STORE,
    STREAM,
    InferCtx,
    Memory,
    OpError,
    OpSpec,
    Param,
    TensorRef,
    require_tile,
    stream,
)
from stepc.sympy_lazy import dim
from stepc.types import INT_DTYPES, Scalar, StreamType, Tile, fmt_dim, fmt_shape

if TYPE_CHECKING:
    pass


def tiled_shape(t: TensorRef, tile: list[int], arg: str = "tile") -> tuple[int, ...]:
    """The tensor's shape in tiles; the tile must divide the two innermost dims."""
    if len(t.shape) < 2:
        raise OpError(TILE_DOES_NOT_FIT,
                      f"tensor `{t}` has shape {list(t.shape)}; off-chip operators "
                               "need at least 2 dims (declare a vector as [1, N])", "tensor")
    if len(tile) != 2 or any(x <= 0 for x in tile):
        raise OpError(BAD_ARGUMENT, f"`{arg}` expects two positive integers [rows, cols], "
                               f"found {tile}", arg)
    rows, cols = t.shape[-2:]
    if rows % tile[0] or cols % tile[1]:
        raise OpError(TILE_DOES_NOT_FIT, f"tile {list(tile)} does not divide tensor `{t}` of shape "
                               f"{list(t.shape)}", arg)
    return tuple(t.shape[:-2]) + (rows // tile[0], cols // tile[1])


def affine_view(tiled: tuple[int, ...], stride, shape, what: str) -> tuple[list[int], list[int]]:
    """Validate (and default) an affine tile view; returns (stride, shape)."""
    if shape is None and stride is not None:
        raise OpError(MISSING_ARGUMENT,
                      f"`stride` needs `shape` (the view's shape in {what})", "stride")
    if shape is None:
        shape = list(tiled)
    if stride is None:
        stride = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    if len(stride) != len(shape):
        raise OpError(VIEW_LENGTHS_DIFFER, f"`stride` has {len(stride)} entries but `shape` has "
                               f"{len(shape)}", "stride")
    if any(s <= 0 for s in shape):
        raise OpError(BAD_ARGUMENT,
                      f"`shape` entries must be positive, found {list(shape)}", "shape")
    if any(s < 0 for s in stride):
        raise OpError(BAD_ARGUMENT,
                      f"`stride` entries must be >= 0, found {list(stride)}", "stride")
    last = sum((n - 1) * s for n, s in zip(shape, stride))
    total = math.prod(tiled)
    if last >= total:
        raise OpError(VIEW_OUT_OF_BOUNDS,
                      f"the view (stride {list(stride)}, shape {list(shape)}) reads "
                               f"tile {last}, but there are only {total} tiles "
                               f"({' x '.join(map(str, tiled))})", "shape")
    return list(stride), list(shape)


def _load(ctx: InferCtx):
    t: TensorRef = ctx.attrs["tensor"]
    tiled = tiled_shape(t, ctx.attrs["tile"])
    stride, shape = affine_view(tiled, ctx.attrs["stride"], ctx.attrs["shape"], "tiles")
    tile = Tile(t.dtype, dim(ctx.attrs["tile"][0]), dim(ctx.attrs["tile"][1]))
    ref: StreamType | None = ctx.inputs.get("ref")
    return [stream(tile, (ref.shape if ref is not None else ()) + tuple(shape))]


def _check_tile_dtype(ctx: InferCtx, tile: Tile, t: TensorRef, arg: str) -> None:
    if tile.dtype != t.dtype:
        raise OpError(DTYPE_MISMATCH, f"{ctx.op} writes {tile.dtype} tiles into tensor `{t}` of "
                               f"type {t.dtype}", arg)


def _store(ctx: InferCtx):
    st: StreamType = ctx.inputs["in"]
    tile = require_tile(ctx, "in", static=True)
    t: TensorRef = ctx.attrs["tensor"]
    _check_tile_dtype(ctx, tile, t, "in")
    tiled = tiled_shape(t, [int(tile.rows), int(tile.cols)], "in")
    tiles = math.prod(tiled)
    ctx.require_equal(tiles, st.card,
                      f"tiles written by {ctx.op} must fill tensor `{t}` {list(t.shape)} "
                      f"({fmt_dim(tiles)} tiles of {tile})", "in", code=STORE_NOT_FILLED)
    return []


def _int_addr(ctx: InferCtx, name: str) -> StreamType:
    st: StreamType = ctx.inputs[name]
    e = st.elem
    if not (isinstance(e, Tile) and e.dtype in INT_DTYPES and e.rows == 1 and e.cols == 1):
        raise OpError(WRONG_OPERAND_TYPE,
                      f"{ctx.op} expects `{name}` to be a stream of [1, 1] integer "
                               f"tiles (tile addresses), found {e}", name)
    return st


def _random_load(ctx: InferCtx):
    addr = _int_addr(ctx, "raddr")
    t: TensorRef = ctx.attrs["tensor"]
    tiled_shape(t, ctx.attrs["tile"])
    tile = Tile(t.dtype, dim(ctx.attrs["tile"][0]), dim(ctx.attrs["tile"][1]))
    return [stream(tile, addr.shape)]


def _random_store(ctx: InferCtx):
    addr = _int_addr(ctx, "waddr")
    data: StreamType = ctx.inputs["wdata"]
    tile = require_tile(ctx, "wdata", static=True)
    t: TensorRef = ctx.attrs["tensor"]
    _check_tile_dtype(ctx, tile, t, "wdata")
    tiled_shape(t, [int(tile.rows), int(tile.cols)], "wdata")
    ctx.require_equal(addr.card, data.card, f"{ctx.op} pairs addresses with data tiles: "
                      f"`waddr` {fmt_shape(addr.shape)} and `wdata` {fmt_shape(data.shape)} "
                      "must have equally many elements", "wdata")
    return [stream(Scalar("bool"), addr.shape)]


def _tile_buffers(tile_bytes, artifact_factor=lambda c: 1):
    """On-chip cost of an off-chip operator: the paper double-buffers its tile (2 tiles);
    the artifact's accounting counts one tile (times the write buffer depth for stores)."""
    def on_chip(c, mode):
        return 2 * tile_bytes(c) if mode == "paper" else artifact_factor(c) * tile_bytes(c)
    return on_chip


_TILE = Param("tile", "ints", doc="tile shape [rows, cols] in elements")
_PAR = Param("par_dispatch", "int", None, "HBM requests issued per cycle", hw="hbm.par_dispatch",
             minimum=1)

OFFCHIP_OPS = [
    OpSpec(
        "LinearOffChipLoad", "offchip",
        "LinearOffChipLoad<S,R,b>(tensor, ref?: Strm<R,b>, tile, stride, shape) -> "
        "Strm<S, |shape|+b> (without ref: Strm<S, |shape|-1>)",
        "Loads tensor `tensor` in tiles of `tile` elements through an affine view: `shape` and "
        "`stride` are given in tiles (defaults: the whole tiled tensor, row-major). Without "
        "`ref` the output shape is `shape`. With a reference stream of shape [D_b..D_0] the "
        "view is read once per reference element and the output shape is "
        "[D_b..D_0] ++ `shape` (the paper's LinearOffChipLoadRef). A view that would read "
        "outside the tensor is an error.",
        (Param("tensor", "tensor", doc="the off-chip tensor (or a slice `W[i]`)"),
         Param("ref", STREAM, None, "reference stream: one view per element"),
         _TILE,
         Param("stride", "ints", None, "view strides, in tiles"),
         Param("shape", "ints", None, "view shape, in tiles"),
         _PAR),
        _load,
        off_chip=lambda c: c.outputs[0].card * c.outputs[0].elem.bytes,
        on_chip=_tile_buffers(lambda c: c.outputs[0].elem.bytes),
        memory=Memory(LOAD, off_chip=True),
    ),
    OpSpec(
        "LinearOffChipStore", "offchip",
        "LinearOffChipStore<S,a>(in: Strm<S,a>, tensor)",
        "Writes the input's tiles linearly (row-major tile order) into `tensor`. The tiles "
        "must have the tensor's element type, divide its shape and fill it exactly. No output "
        "stream.",
        (Param("in", STREAM, doc="tiles to store"),
         Param("tensor", "tensor", doc="destination tensor (or a slice)"),
         _PAR),
        _store,
        off_chip=lambda c: c.inputs["in"].card * c.inputs["in"].elem.bytes,
        on_chip=_tile_buffers(lambda c: c.inputs["in"].elem.bytes),
        outputs=lambda attrs: [],
        memory=Memory(STORE, off_chip=True),
    ),
    OpSpec(
        "RandomOffChipLoad", "offchip",
        "RandomOffChipLoad<I,S,a>(raddr: Strm<I,a>, tensor, tile) -> Strm<S,a>",
        "For each [1,1] integer address tile of `raddr`, loads tile number `addr` (row-major "
        "tile numbering) of `tensor`. The output has the address stream's shape.",
        (Param("raddr", STREAM, doc="tile indices ([1,1] integer tiles)"),
         Param("tensor", "tensor", doc="the off-chip tensor"),
         _TILE, _PAR),
        _random_load,
        off_chip=lambda c: c.outputs[0].card * c.outputs[0].elem.bytes,
        on_chip=_tile_buffers(lambda c: c.outputs[0].elem.bytes),
        memory=Memory(LOAD, off_chip=True),
    ),
    OpSpec(
        "RandomOffChipStore", "offchip",
        "RandomOffChipStore<I,S,a,b>(waddr: Strm<I,a>, wdata: Strm<S,b>, tensor) -> "
        "Strm<bool,a>",
        "Writes each tile of `wdata` at the tile index given by the matching element of "
        "`waddr`; both streams must carry equally many elements. Emits one bool "
        "acknowledgement per write, shaped like `waddr`.",
        (Param("waddr", STREAM, doc="tile indices ([1,1] integer tiles)"),
         Param("wdata", STREAM, doc="tiles to write"),
         Param("tensor", "tensor", doc="destination tensor"),
         Param("buffer_depth", "int", 1, "write buffer depth (tiles)", minimum=1),
         _PAR),
        _random_store,
        off_chip=lambda c: c.inputs["waddr"].card * c.inputs["wdata"].elem.bytes,
        on_chip=_tile_buffers(lambda c: c.inputs["wdata"].elem.bytes,
                              artifact_factor=lambda c: c.attrs["buffer_depth"]),
        outputs=lambda attrs: ["ack"],
        memory=Memory(STORE, off_chip=True),
    ),
]
