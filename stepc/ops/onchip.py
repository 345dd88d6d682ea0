"""On-chip memory operators: streams <-> on-chip buffers (paper 3.2.2)."""

from __future__ import annotations

from stepc.codes import (
    AFFINE_DYNAMIC_BUFFER,
    BAD_ARGUMENT,
    CONFLICTING_ARGUMENTS,
    RAGGED_BUFFERED_DIM,
    RANK_MISMATCH,
    RANK_OUT_OF_RANGE,
    WRONG_ELEMENT_KIND,
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
    require_tile,
    stream,
)
from stepc.ops.offchip import affine_view
from stepc.types import Buffer, StreamType, elem_kind, fmt_dim, fmt_shape


def _bufferize(ctx: InferCtx):
    st: StreamType = ctx.inputs["in"]
    tile = require_tile(ctx, "in", static=True)
    b = ctx.attrs["rank"]
    if not 1 <= b <= st.rank:
        raise OpError(RANK_OUT_OF_RANGE, f"Bufferize rank must be between 1 and the input's rank "
                               f"{st.rank} (input {fmt_shape(st.shape)}), found {b}", "rank")
    buf_shape = st.shape[len(st.shape) - b:]
    for d in buf_shape[1:]:
        if ctx.symbols.is_ragged(d):
            raise OpError(RAGGED_BUFFERED_DIM,
                          f"Bufferize cannot buffer ragged inner dim {fmt_dim(d)} of "
                                   f"{fmt_shape(st.shape)}: only the outermost buffered dim "
                                   "may be ragged", "in")
    return [stream(Buffer(tile, buf_shape), st.shape[: len(st.shape) - b])]


def _streamify(ctx: InferCtx):
    st: StreamType = ctx.inputs["in"]
    if not isinstance(st.elem, Buffer):
        raise OpError(WRONG_ELEMENT_KIND,
                      f"Streamify expects a stream of buffers (from Bufferize), found "
                               f"a stream of {elem_kind(st.elem)}s ({st.elem})", "in")
    buf: Buffer = st.elem
    part = buf.shape
    if ctx.attrs["stride"] is not None or ctx.attrs["shape"] is not None:
        if not all(d.is_Integer for d in buf.shape):
            raise OpError(AFFINE_DYNAMIC_BUFFER,
                          f"an affine Streamify (stride/shape) needs a static buffer, "
                                   f"found {buf}", "shape")
        _, shape = affine_view(tuple(int(d) for d in buf.shape), ctx.attrs["stride"],
                               ctx.attrs["shape"], "buffer tiles")
        part = tuple(shape)
    ref: StreamType | None = ctx.inputs.get("ref")
    repeat = ctx.attrs["repeat"]
    if ref is not None:
        if repeat is not None:
            raise OpError(CONFLICTING_ARGUMENTS,
                          "Streamify takes either `ref` or `repeat`, not both", "repeat")
        if ref.rank < st.rank:
            raise OpError(RANK_MISMATCH, f"Streamify needs `ref` of rank >= {st.rank} (the buffer "
                                   f"stream's rank), found rank {ref.rank}", "ref")
        for i, d in enumerate(st.shape):  # outer dims first; dim k counts from the innermost
            ctx.require_equal(d, ref.shape[i], f"`ref` dim {len(ref.shape) - 1 - i} must match "
                              f"dim {len(st.shape) - 1 - i} of the buffer stream "
                              f"{fmt_shape(st.shape)}", "ref")
        return [stream(buf.tile, ref.shape + tuple(part))]
    repeat = repeat or []
    if any(r <= 0 for r in repeat):
        raise OpError(BAD_ARGUMENT, f"`repeat` entries must be positive, found {repeat}", "repeat")
    return [stream(buf.tile, st.shape + tuple(repeat) + tuple(part))]


ONCHIP_OPS = [
    OpSpec(
        "Bufferize", "onchip",
        "Bufferize<S,a,b>(in: Strm<S,a>, rank=b) -> Strm<Buffer<S,b>, a-b>",
        "Stores the innermost `rank` dims of the input in an on-chip buffer and emits one "
        "buffer reference per rank-b sub-tensor: [D_a..D_b, D_b-1..D_0] -> [D_a..D_b] of "
        "Buffer[D_b-1..D_0]. Inner buffered dims may be dynamic-regular; only the outermost "
        "buffered dim may be ragged.",
        (Param("in", STREAM, doc="tiles to buffer"),
         Param("rank", "int", doc="number of inner dims stored per buffer (1..rank of in)")),
        _bufferize,
        on_chip=lambda c, mode: (c.outputs[0].elem.tile.bytes
                                 + 2 * c.outputs[0].elem.bytes),
        memory=Memory(STORE, off_chip=False),
    ),
    OpSpec(
        "Streamify", "onchip",
        "Streamify<S,R,a,b,c>(in: Strm<Buffer<S,a>,b>, ref?: Strm<R,b+c>, repeat?, stride?, "
        "shape?) -> Strm<S, |shape|+b+c>",
        "Reads buffers back into a stream. With a reference stream whose outer b+1 dims equal "
        "the buffer stream's shape, each buffer is streamed once per reference element: "
        "output = ref shape ++ buffer shape. Without `ref`, each buffer is streamed "
        "prod(`repeat`) times (default once): output = in shape ++ repeat ++ buffer shape. "
        "For a static buffer, `stride`/`shape` select an affine view of its tiles.",
        (Param("in", STREAM, doc="buffer references"),
         Param("ref", STREAM, None, "reference stream: one read per element"),
         Param("repeat", "ints", None, "static repeat counts (no ref)"),
         Param("stride", "ints", None, "affine view strides, in tiles"),
         Param("shape", "ints", None, "affine view shape, in tiles")),
        _streamify,
        on_chip=lambda c, mode: 0 if mode == "paper" else (
            c.inputs["in"].elem.bytes + c.inputs["in"].elem.tile.bytes),
        memory=Memory(LOAD, off_chip=False),
    ),
]
