"""Sources and sinks: external streams, generators that stream a tensor's contents, sinks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepc.codes import BAD_ARGUMENT, DTYPE_MISMATCH, TILE_DOES_NOT_FIT
from stepc.ops.base import STREAM, InferCtx, OpError, OpSpec, Param, TensorRef, stream
from stepc.sympy_lazy import dim
from stepc.types import INT_DTYPES, Select, Tile

if TYPE_CHECKING:
    pass


def _external(ctx: InferCtx):
    return [ctx.attrs["type"]]


def _int_tensor(ctx: InferCtx) -> TensorRef:
    t: TensorRef = ctx.attrs["tensor"]
    if t.dtype not in INT_DTYPES:
        raise OpError(DTYPE_MISMATCH, f"{ctx.op} reads integers; tensor `{t}` has element type "
                               f"{t.dtype}", "tensor")
    if not t.shape:
        raise OpError(TILE_DOES_NOT_FIT, f"{ctx.op} needs a tensor with at least one dim", "tensor")
    return t


def _select_gen(ctx: InferCtx):
    t = _int_tensor(ctx)
    n = ctx.attrs["n"]
    if n < 1:
        raise OpError(BAD_ARGUMENT, f"`n` must be >= 1, found {n}", "n")
    shape = t.shape if ctx.attrs["onehot"] else t.shape[:-1]
    if not shape:
        raise OpError(TILE_DOES_NOT_FIT,
                      f"SelectGen needs a [.., k] tensor of ids, found {list(t.shape)}",
                      "tensor")
    return [stream(Select(n), shape)]


def _metadata_gen(ctx: InferCtx):
    t = _int_tensor(ctx)
    return [stream(Tile(t.dtype, dim(1), dim(1)), t.shape)]


def _sink(ctx: InferCtx):
    return []


SOURCE_OPS = [
    OpSpec(
        "External", "source",
        "External<T,a>(name) -> Strm<T,a>",
        "A stream supplied from outside the program (a trace, or a seeded generator by "
        "default). Written as a declaration: `stream route : TYPE = external(\"routing\")`; "
        "its declared type is its type.",
        (Param("name", "str", doc="the name a trace binds to"),
         Param("type", "type", doc="the declared stream type")),
        _external,
        external=True,
    ),
    OpSpec(
        "SelectGen", "source",
        "SelectGen(tensor: int[.., k], n) -> Strm<MultiHot<n>, ..>",
        "Streams selectors from a tensor of ids [.., k]: one multi-hot selector per row "
        "(shape = tensor shape without its last dim), or with `onehot=true` one one-hot "
        "selector per id (shape = tensor shape).",
        (Param("tensor", "tensor", doc="integer tensor of ids"),
         Param("n", "int", doc="number of targets"),
         Param("onehot", "bool", False, "one selector per id instead of per row")),
        _select_gen,
    ),
    OpSpec(
        "MetadataGen", "source",
        "MetadataGen(tensor: int[..]) -> Strm<Tile<int,[1,1]>, ..>",
        "Streams the integers of a tensor as [1,1] tiles (request indices, lengths, offsets), "
        "one element per tensor entry.",
        (Param("tensor", "tensor", doc="integer tensor"),),
        _metadata_gen,
    ),
    OpSpec(
        "Sink", "sink",
        "Sink<R,a>(in: Strm<R,a>)",
        "Consumes and discards a stream (one element per cycle).",
        (Param("in", STREAM, doc="stream to discard"),),
        _sink,
        outputs=lambda attrs: [],
    ),
]
