"""Higher-order operators: Map, Accum, Scan and FlatMap apply library functions (paper 3.2.4)."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from stepc.codes import (
    FUNCTION_NOT_USABLE,
    MISSING_ARGUMENT,
    RANK_OUT_OF_RANGE,
    UNKNOWN_FUNCTION,
    UNKNOWN_PARAMETER,
)
from stepc.ops.base import (
    VARSTREAMS,
    FnValue,
    InferCtx,
    OpError,
    OpSpec,
    Param,
    TraceStep,
    stream,
)
from stepc.ops.functions import FUNCTIONS, INITS, FnCtx, FnSpec, check_fn_attrs
from stepc.sympy_lazy import dim, product
from stepc.types import DTYPE_BYTES, StreamType, Tile, Tuple, fmt_shape

if TYPE_CHECKING:
    import sympy
else:
    from stepc.sympy_lazy import sympy


def lookup_fn(ctx: InferCtx, use: str) -> FnSpec:
    fn: FnValue = ctx.attrs["fn"]
    spec = FUNCTIONS.get(fn.name)
    if spec is None:
        near = difflib.get_close_matches(fn.name, list(FUNCTIONS), n=1)
        hint = f" (did you mean `{near[0]}`?)" if near else ""
        raise OpError(UNKNOWN_FUNCTION, f"unknown function `{fn.name}`{hint}", "fn")
    if use not in spec.arity:
        users = ", ".join(u.capitalize() if u != "flatmap" else "FlatMap" for u in spec.uses)
        raise OpError(FUNCTION_NOT_USABLE, f"function `{fn.name}` cannot be used in {ctx.op} "
                               f"(it is for {users})", "fn")
    check_fn_attrs(spec, fn)
    return spec


def fn_ctx(ctx: InferCtx) -> FnCtx:
    return FnCtx(ctx.fresh, ctx.absorb, ctx.symbols)


def _elements(ctx: InferCtx, spec: FnSpec, use: str) -> tuple[StreamType, list]:
    """Check arity and lockstep shapes; return the leading stream and per-element types."""
    ins: list[StreamType] = ctx.inputs["ins"]
    if not ins:
        raise OpError(MISSING_ARGUMENT, f"{ctx.op} needs at least one input stream", "ins")
    first = ins[0]
    for i, st in enumerate(ins[1:], start=1):
        ctx.require_shapes_equal(first, st, f"{ctx.op} consumes its inputs in lockstep; "
                                 f"input {i} must have input 0's shape", "ins", i)
    elems = [st.elem for st in ins]
    if len(elems) == 1 and isinstance(elems[0], Tuple) and spec.arity[use] > 1:
        elems = list(elems[0].elems)  # Map over Zip
    want = spec.arity[use]
    if len(elems) != want:
        raise OpError(FUNCTION_NOT_USABLE,
                      f"`{spec.name}` takes {want} input{'s' if want != 1 else ''} "
                               f"in {ctx.op}, found {len(elems)}", "fn")
    return first, elems


def _retype(ctx: InferCtx, e):
    dtype = ctx.attrs.get("dtype")
    if dtype is not None and isinstance(e, Tile):
        return Tile(dtype, e.rows, e.cols)
    return e


def check_init(ctx: InferCtx, param: str = "init") -> None:
    """An initialiser (init=, pad=) must name one of INITS and takes no attributes."""
    init = ctx.attrs.get(param)
    if init is None:
        return
    if init.name not in INITS:
        near = difflib.get_close_matches(init.name, list(INITS), n=1)
        hint = f" (did you mean `{near[0]}`?)" if near else ""
        raise OpError(UNKNOWN_FUNCTION, f"unknown initialiser `{init.name}`{hint}", param)
    if init.kwargs:
        raise OpError(UNKNOWN_PARAMETER, f"initialiser `{init.name}` takes no attributes, found "
                               f"`{init.kwargs[0][0]}`", param)


def _reduce_rank(ctx: InferCtx, st: StreamType) -> int:
    b = ctx.attrs["rank"]
    if not 1 <= b <= st.rank:
        raise OpError(RANK_OUT_OF_RANGE, f"{ctx.op} rank must be between 1 and the input's rank "
                               f"{st.rank} (input {fmt_shape(st.shape)}), found {b}", "rank")
    return b


def _map(ctx: InferCtx):
    spec = lookup_fn(ctx, "map")
    first, elems = _elements(ctx, spec, "map")
    return [stream(_retype(ctx, spec.apply(elems, ctx.attrs["fn"], fn_ctx(ctx))), first.shape)]


def _accum(ctx: InferCtx):
    spec = lookup_fn(ctx, "accum")
    first, elems = _elements(ctx, spec, "accum")
    check_init(ctx)
    b = _reduce_rank(ctx, first)
    n = product(first.shape[len(first.shape) - b:])
    acc = spec.accum(elems, n, ctx.attrs["fn"], fn_ctx(ctx))
    return [stream(_retype(ctx, acc), first.shape[: len(first.shape) - b])]


def _scan(ctx: InferCtx):
    spec = lookup_fn(ctx, "scan")
    first, elems = _elements(ctx, spec, "scan")
    check_init(ctx)
    _reduce_rank(ctx, first)
    acc = spec.accum(elems, dim(1), ctx.attrs["fn"], fn_ctx(ctx))
    return [stream(_retype(ctx, acc), first.shape)]


def _flatmap(ctx: InferCtx):
    spec = lookup_fn(ctx, "flatmap")
    first, elems = _elements(ctx, spec, "flatmap")
    inner, elem = spec.inner(elems[0], ctx.attrs["fn"], fn_ctx(ctx))
    inner = tuple(dim(d) for d in inner)
    merged = ctx.absorb(first.shape[-1] * inner[0], "n", "elements produced by FlatMap")
    return [stream(_retype(ctx, elem), first.shape[:-1] + (merged,) + inner[1:])]


def _elems(c) -> list:
    ins = c.inputs["ins"]
    elems = [st.elem for st in ins]
    if len(elems) == 1 and isinstance(elems[0], Tuple):
        elems = list(elems[0].elems)
    return elems


def _fn_flops(c) -> sympy.Expr:
    """FLOPs of a higher-order operator: the function's FLOPs per element x elements."""
    spec = FUNCTIONS[c.attrs["fn"].name]
    return spec.flops(_elems(c), c.attrs["fn"]) * c.inputs["ins"][0].card


def _matmul_buffer(c) -> sympy.Expr:
    """The paper's matmul buffer: 16 x in_tile_col (as printed: an element count) + weight tile."""
    a, w = _elems(c)[:2]
    return 16 * a.cols + w.bytes


def _map_onchip(c, mode):
    if mode == "paper" and c.attrs["fn"].name == "matmul":
        return _matmul_buffer(c)
    return 0


def _accum_onchip(c, mode):
    out = c.outputs[0].elem.bytes
    if mode == "paper" and c.attrs["fn"].name == "matmul":
        return _matmul_buffer(c) + out
    return out


_INS = Param("ins", VARSTREAMS, doc="input stream(s), consumed in lockstep")
_FN = Param("fn", "fn", doc="function from the library (see Functions)")
_BW = Param("compute_bw", "int", None, "FLOPs per cycle allocated to this operator",
            hw="fabric.compute_bw", minimum=1)
_WB = Param("write_back", "bool", False, "output is written to an on-chip memory unit")
_DTYPE = Param("dtype", "dtype", None, "element type of the output tiles (e.g. f32 accumulators)")
_INIT = Param("init", "init", None, "accumulator initialiser (default: the function's)")
_DIM = Param("dim", "str", None, "name for the dims this operator introduces")

# ---- trace bindings: traced integer values (KV lengths) through the library's functions
def _map_values(t: TraceStep) -> None:
    """A function with an integer definition (`FnSpec.ints`) applied to traced values."""
    import numpy as np
    fn = t.attrs["fn"]
    ints = FUNCTIONS[fn.name].ints
    if ints is None:
        return
    args = list(t.ins[0]) if len(t.ins) == 1 and isinstance(t.ins[0], tuple) else t.ins
    if all(isinstance(x, np.ndarray) for x in args):
        t.values[0] = ints(args, fn)


def _flatmap_values(t: TraceStep) -> None:
    """A function that expands each length into a stream of that many elements: its ragged
    dim is bound to the mean length (so the stream's element count stays exact)."""
    import numpy as np
    if not FUNCTIONS[t.attrs["fn"].name].expands_length:
        return
    lengths = t.ins[0][1] if isinstance(t.ins[0], tuple) else t.ins[0]
    out = t.outputs[0] if t.outputs else None
    if isinstance(lengths, np.ndarray) and lengths.size and out is not None \
            and out.shape[-1].is_Symbol:
        t.bindings[out.shape[-1].name] = sympy.Rational(
            int(np.maximum(lengths, 0).sum()), lengths.size)


HIGHER_ORDER_OPS = [
    OpSpec(
        "Map", "higher_order",
        "Map<A,B,a>(ins: Strm<A,a>..., fn: Fn(A...) -> B) -> Strm<B,a>",
        "Applies `fn` to each element (to each tuple of elements, for several inputs or a "
        "Zip) without changing the stream's shape. Multiple inputs are consumed in lockstep "
        "and must have equal shapes.",
        (_INS, _FN, _BW, _WB, _DTYPE, _DIM),
        _map,
        on_chip=_map_onchip,
        flops=_fn_flops,
        fn_use="map",
        trace_values=_map_values,
    ),
    OpSpec(
        "Accum", "higher_order",
        "Accum<A,R,a,b>(ins: Strm<A,a>..., fn: Fn(A,R) -> R, init: Fn() -> R, rank=b) -> "
        "Strm<R,a-b>",
        "Reduces the innermost `rank` dims: [D_a..D_b, D_b-1..D_0] -> [D_a..D_b]. The "
        "accumulator starts from `init` and is updated with `fn` on every element; it may be "
        "larger than the input tile (retile_row packs n tiles into one, dynamically sized when "
        "n is dynamic). With `fn=matmul` and two inputs it is the paper's Accum with matrix "
        "multiplication.",
        (_INS, _FN, Param("rank", "int", doc="number of reduced inner dims (>= 1)"), _INIT,
         _BW, _WB, _DTYPE, _DIM),
        _accum,
        on_chip=_accum_onchip,
        flops=_fn_flops,
        fn_use="accum",
    ),
    OpSpec(
        "Scan", "higher_order",
        "Scan<A,B,a,b>(ins: Strm<A,a>, fn: Fn(A,B) -> B, init: Fn() -> B, rank=b) -> Strm<B,a>",
        "Like Accum, but emits the accumulator after every element; the accumulator resets "
        "after each stop of level >= `rank`. The output has the input's shape.",
        (_INS, _FN, Param("rank", "int", doc="reset level (>= 1)"), _INIT, _BW, _WB, _DTYPE),
        _scan,
        on_chip=lambda c, mode: c.outputs[0].elem.bytes,
        flops=_fn_flops,
        fn_use="scan",
    ),
    OpSpec(
        "FlatMap", "higher_order",
        "FlatMap<A,B,a,b>(in: Strm<A,a>, fn: Fn(A) -> Strm<B,b>) -> Strm<B,a+b>",
        "Expands every element into a rank-b stream produced by `fn` and concatenates them: "
        "[D_a..D_1, D_0] -> [D_a..D_1, D_0 * D'_b, D'_b-1..D'_0]; the merged dim is a fresh "
        "ragged symbol when the inner streams differ in length.",
        (_INS, _FN, _BW, _DTYPE, _DIM),
        _flatmap,
        flops=_fn_flops,
        fn_use="flatmap",
        trace_values=_flatmap_values,
    ),
]

__all__ = ["HIGHER_ORDER_OPS", "DTYPE_BYTES"]
