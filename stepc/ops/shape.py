"""Shape operators: change a stream's logical structure (its stop tokens), not its data."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepc.canon import memo_renamed
from stepc.codes import (
    BAD_ARGUMENT,
    CONFLICTING_ARGUMENTS,
    EXPAND_NOT_SIZE_ONE,
    FLATTEN_RANGE,
    MISSING_ARGUMENT,
    RANK_MISMATCH,
    RESHAPE_CHUNK,
    RESHAPE_NON_STATIC,
    RESHAPE_PADDING,
    WRONG_ELEMENT_KIND,
)
from stepc.ops.base import STREAM, InferCtx, OpError, OpSpec, Param, TraceStep, stream
from stepc.sympy_lazy import dim, product
from stepc.types import Buffer, Scalar, StreamType, Tuple, ceil_div, divides, fmt_dim, fmt_shape

if TYPE_CHECKING:
    import sympy
else:
    from stepc.sympy_lazy import sympy


def _flatten(ctx: InferCtx):
    st: StreamType = ctx.inputs["in"]
    lo, hi = ctx.attrs["min"], ctx.attrs["max"]
    if lo == hi and 0 <= lo <= st.rank:
        return [st]  # merging one dim changes nothing
    if not 0 <= lo < hi <= st.rank:
        raise OpError(FLATTEN_RANGE, f"Flatten needs 0 <= min <= max <= {st.rank} (the input's "
                               f"rank, input {fmt_shape(st.shape)}), found min={lo} max={hi}",
                      "max" if hi > st.rank else "min")
    n = len(st.shape)
    merged = ctx.absorb(product(st.shape[n - 1 - hi: n - lo]), "f",
                        "dims merged by Flatten")
    return [stream(st.elem, st.shape[: n - 1 - hi] + (merged,) + st.shape[n - lo:])]


def _reshape(ctx: InferCtx):
    st: StreamType = ctx.inputs["in"]
    if isinstance(st.elem, Buffer):
        raise OpError(WRONG_ELEMENT_KIND,
                      "Reshape cannot be applied to a stream of buffers (of all shape "
                               "operators, only Reshape is excluded between Bufferize and "
                               "Streamify)", "in")
    s, b = ctx.attrs["chunk"], ctx.attrs["rank"]
    from stepc.ops.higher_order import check_init
    check_init(ctx, "pad")
    if s < 1:
        raise OpError(BAD_ARGUMENT, f"`chunk` must be >= 1, found {s}", "chunk")
    if not 0 <= b <= st.rank:
        raise OpError(RANK_MISMATCH, f"Reshape rank must be between 0 and the input's rank "
                               f"{st.rank}, found {b}", "rank")
    i = len(st.shape) - 1 - b
    d = st.shape[i]
    if b > 0:
        if not d.is_Integer:
            raise OpError(RESHAPE_NON_STATIC, f"Reshape at rank {b} splits dim {fmt_dim(d)} of "
                                   f"{fmt_shape(st.shape)}, which must be static", "rank")
        if int(d) % s:
            raise OpError(RESHAPE_CHUNK, f"Reshape at rank {b}: the dim of size {int(d)} in "
                                   f"{fmt_shape(st.shape)} is not divisible by chunk {s}",
                          "chunk")
    elif s != 1 and divides(s, d) is not True and ctx.attrs["pad"] is None:
        partial = "leaves" if d.is_Integer else "may leave"
        raise OpError(RESHAPE_PADDING,
                      f"Reshape of the innermost dim {fmt_dim(d)} into chunks of {s} "
                               f"{partial} a partial last chunk: give `pad=zero` to pad it",
                      "chunk")
    outer = ctx.absorb(ceil_div(d, s), "c", "chunks made by Reshape")
    shape = st.shape[:i] + (outer, dim(s)) + st.shape[i + 1:]
    return [stream(st.elem, shape), stream(Scalar("bool"), shape)]


@memo_renamed
def _nonempty(outer):
    """1 if a stream with outer dim `outer` has an element, else 0 (the relation decided
    once per formula, not once per expert's copy of it)."""
    return sympy.Piecewise((1, sympy.StrictGreaterThan(outer, 0)), (0, True))


def _promote(ctx: InferCtx):
    st: StreamType = ctx.inputs["in"]
    p = ctx.attrs["rank"]
    if p is None or p == st.rank + 1:
        outer = st.shape[0]
        new = dim(1 if outer > 0 else 0) if outer.is_Integer else _nonempty(outer)
        return [stream(st.elem, (ctx.absorb(new, "p", "outer dim of Promote"),) + st.shape)]
    if not 0 <= p <= st.rank + 1:
        raise OpError(RANK_MISMATCH, f"Promote rank must be between 0 and {st.rank + 1}, found {p}",
                      "rank")
    i = len(st.shape) - p
    return [stream(st.elem, st.shape[:i] + (dim(1),) + st.shape[i:])]


def _expand(ctx: InferCtx):
    st: StreamType = ctx.inputs["in"]
    ref: StreamType | None = ctx.inputs.get("ref")
    sizes = ctx.attrs["sizes"]
    if ref is not None and sizes is not None:
        raise OpError(CONFLICTING_ARGUMENTS,
                      "Expand takes either `ref` or `sizes`, not both", "sizes")
    if ref is None and sizes is None:
        raise OpError(MISSING_ARGUMENT, "Expand needs a reference stream `ref=` or static `sizes=`",
                      None)
    k = len(sizes) if sizes is not None else ctx.attrs["rank"] + 1
    if st.rank == 0:  # a single value, repeated for every reference element
        ctx.require_equal(1, st.shape[0], "Expand of a rank-0 stream needs exactly one "
                          "element", "in")
        return [stream(st.elem, tuple(sizes) if sizes is not None else ref.shape)]
    if k < 1 or k > len(st.shape) - 1:
        raise OpError(RANK_MISMATCH, f"Expand repeats {k} inner dim(s), but the input "
                               f"{fmt_shape(st.shape)} has rank {st.rank}",
                      "sizes" if sizes is not None else "rank")
    tail = st.shape[len(st.shape) - k:]
    if any(d != 1 for d in tail):
        what = "innermost dim" if k == 1 else f"{k} innermost dims"
        raise OpError(EXPAND_NOT_SIZE_ONE, f"Expand needs the input's {what} to be 1, found "
                               f"{fmt_shape(st.shape)}", "in")
    if sizes is not None:
        if any(x < 1 for x in sizes):
            raise OpError(BAD_ARGUMENT, f"`sizes` entries must be positive, found {sizes}", "sizes")
        return [stream(st.elem, st.shape[: len(st.shape) - k] + tuple(sizes))]
    if ref.rank != st.rank:
        raise OpError(RANK_MISMATCH, f"Expand needs `ref` of the input's rank {st.rank} "
                               f"{fmt_shape(st.shape)}, found rank {ref.rank} "
                               f"{fmt_shape(ref.shape)}", "ref")
    for a, b in zip(st.shape[: len(st.shape) - k], ref.shape, strict=False):
        ctx.require_equal(a, b, f"Expand: `ref` outer dims must match the input "
                          f"{fmt_shape(st.shape)}", "ref")
    return [stream(st.elem, ref.shape)]


def _repeat(ctx: InferCtx):
    st: StreamType = ctx.inputs["in"]
    r = ctx.attrs["count"]
    if r < 1:
        raise OpError(BAD_ARGUMENT, f"`count` must be >= 1, found {r}", "count")
    return [stream(st.elem, st.shape + (dim(r),))]


def _zip(ctx: InferCtx):
    a: StreamType = ctx.inputs["a"]
    b: StreamType = ctx.inputs["b"]
    ctx.require_shapes_equal(a, b, "Zip needs streams of equal shape", "b")
    return [stream(Tuple((a.elem, b.elem)), a.shape)]


# ---- trace bindings: traced integer values (KV lengths) carried through the reshaping
def _flatten_values(t: TraceStep) -> None:
    import numpy as np
    arr, lo, hi = t.ins[0], t.attrs["min"], t.attrs["max"]
    if isinstance(arr, np.ndarray):
        n = arr.ndim
        t.values[0] = arr.reshape(arr.shape[:n - 1 - hi] + (-1,) + arr.shape[n - lo:])


def _reshape_values(t: TraceStep) -> None:
    import numpy as np
    arr, a = t.ins[0], t.attrs
    if not isinstance(arr, np.ndarray) or (a.get("rank") or 0) != 0:
        return
    k = a["chunk"]
    pad = -arr.shape[-1] % k
    if pad and a.get("pad") is None:
        return
    arr = np.concatenate([arr, np.zeros(arr.shape[:-1] + (pad,), arr.dtype)], -1)
    t.values[0] = arr.reshape(arr.shape[:-1] + (-1, k))


def _repeat_values(t: TraceStep) -> None:
    import numpy as np
    if isinstance(t.ins[0], np.ndarray):
        t.values[0] = np.repeat(t.ins[0][..., None], t.attrs["count"], axis=-1)


def _zip_values(t: TraceStep) -> None:
    t.values[0] = tuple(t.ins)


SHAPE_OPS = [
    OpSpec(
        "Flatten", "shape",
        "Flatten<R,a,min,max>(in: Strm<R,a>) -> Strm<R,a-(max-min)>",
        "Merges dims D_max..D_min (rank indices, counted from the innermost D_0) into one dim "
        "of size prod(D_min..D_max), for 0 <= min <= max <= the input's rank (min == max "
        "leaves the stream as it is); a product involving a ragged dim becomes a fresh ragged "
        "dim (the absorbing rule).",
        (Param("in", STREAM, doc="data stream"),
         Param("min", "int", doc="innermost merged dim (rank index)"),
         Param("max", "int", doc="outermost merged dim (rank index)"),
         Param("dim", "str", None, "name for a fresh ragged dim")),
        _flatten,
        trace_values=_flatten_values,
    ),
    OpSpec(
        "Reshape", "shape",
        "Reshape<A,a,b>(in: Strm<A,a>, chunk=S, rank=b, pad?) -> Strm<A,a+1>, Strm<bool,a+1>",
        "Splits dim D_b into chunks of S: [.., D_b, ..] -> [.., ceil(D_b/S), S, ..]. Above the "
        "innermost dim, D_b must be static and divisible by S. The innermost dim may be "
        "anything; a possibly partial last chunk needs `pad=zero` (padding tiles). The second "
        "output marks which elements are padding.",
        (Param("in", STREAM, doc="data stream (not buffers)"),
         Param("chunk", "int", doc="chunk size S"),
         Param("rank", "int", 0, "rank index of the split dim"),
         Param("pad", "init", None, "padding value for a partial last chunk"),
         Param("dim", "str", None, "name for a fresh ragged dim")),
        _reshape,
        outputs=lambda attrs: ["data", "pad"],
        trace_values=_reshape_values,
    ),
    OpSpec(
        "Promote", "shape",
        "Promote<R,a>(in: Strm<R,a>) -> Strm<R,a+1>",
        "Adds a new outermost dim (1 if D_a > 0 else 0), so an empty stream stays empty. "
        "`rank=p` instead inserts a size-1 dim at rank index p.",
        (Param("in", STREAM, doc="data stream"),
         Param("rank", "int", None, "rank index of the new dim (default: outermost)")),
        _promote,
    ),
    OpSpec(
        "Expand", "shape",
        "Expand<R',R,a>(in: Strm<R',a>, ref: Strm<R,a>, rank=b) -> Strm<R',a>",
        "Repeats each element to fill the reference stream: the input's innermost b+1 dims "
        "must be 1 and its outer dims equal the reference's; the output has the reference's "
        "shape. The static variant `sizes=[..]` replaces the trailing size-1 dims by static "
        "sizes (the rank is kept).",
        (Param("in", STREAM, doc="data stream"),
         Param("ref", STREAM, None, "reference stream"),
         Param("rank", "int", 0, "rank index b of the outermost repeated dim"),
         Param("sizes", "ints", None, "static sizes (no ref)")),
        _expand,
        on_chip=lambda c, mode: c.outputs[0].elem.bytes,
    ),
    OpSpec(
        "Repeat", "shape",
        "Repeat<R,a>(in: Strm<R,a>, count=R) -> Strm<R,a+1>",
        "Emits every element `count` times, appending a new innermost dim of static size "
        "`count` (the appendix's hierarchical-tiling figure).",
        (Param("in", STREAM, doc="data stream"),
         Param("count", "int", doc="number of copies")),
        _repeat,
        on_chip=lambda c, mode: c.outputs[0].elem.bytes,
        trace_values=_repeat_values,
    ),
    OpSpec(
        "Zip", "shape",
        "Zip<R,R',a>(a: Strm<R,a>, b: Strm<R',a>) -> Strm<(R,R'),a>",
        "Pairs two streams of equal shape element by element into a stream of tuples.",
        (Param("a", STREAM, doc="first stream"), Param("b", STREAM, doc="second stream")),
        _zip,
        trace_values=_zip_values,
    ),
]
