"""The function library of the higher-order operators (Map, Accum, Scan, FlatMap).

Each `FnSpec` states where it may be used, how many stream elements it takes per use,
its tile-shape rule and its FLOP formula (per input element), or a fixed cycle count for
metadata functions that bypass the compute roofline. FLOP rules follow the reference
simulator: matmul 2*M*K*N, elementwise 1 per output element, silu 8, exp 4, row-wise
reductions 1 per input element, retiling 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stepc.codes import (
    BAD_ARGUMENT,
    BAD_FUNCTION_ATTRIBUTE,
    MATMUL_INNER_MISMATCH,
    MISSING_ARGUMENT,
    NOT_ELEMENTWISE,
    UNKNOWN_PARAMETER,
    WRONG_OPERAND_TYPE,
)
from stepc.ops.base import FnValue, OpError, Param
from stepc.sympy_lazy import dim
from stepc.types import (
    INT_DTYPES,
    Dim,
    ElemType,
    Scalar,
    Select,
    SymbolTable,
    Tile,
    Tuple,
    elem_kind,
    equal,
    fmt_dim,
)

if TYPE_CHECKING:
    import sympy

FN_REQUIRED = object()  # default marking a function attribute that must be given
ELEMENTWISE, CONTRACTION, GROUP = "elementwise", "contraction", "group"  # FnSpec.split
PARTIAL_SUM = "add"  # the function that sums a contraction's partial products


@dataclass
class FnCtx:
    """What a function rule may use: fresh symbols for the dims it introduces."""

    fresh: Callable[[str, str, str], sympy.Symbol]
    absorb: Callable[[Dim, str, str], Dim]
    symbols: SymbolTable | None = None


@dataclass(frozen=True)
class FnSpec:
    """One function: uses and arity, attributes, tile rule, FLOPs, documentation."""

    name: str
    arity: dict  # use ("map" | "accum" | "scan" | "flatmap") -> number of element inputs
    doc: str
    flops: Callable[[list, FnValue], Dim]
    apply: Callable | None = None  # map: (elems, fn, ctx) -> ElemType
    accum: Callable | None = None  # accum/scan: (elems, n_reduced, fn, ctx) -> ElemType
    inner: Callable | None = None  # flatmap: (elem, fn, ctx) -> (inner shape, ElemType)
    attrs: tuple[Param, ...] = ()
    fixed_cycles: int | None = None
    ints: Callable | None = None  # map on [1,1] integer tiles: (values, fn) -> value; the
    # values may be ints or numpy integer arrays (elementwise), so the simulator and the
    # trace bindings of `stepc analyze` share one definition
    init: str = "zero"  # default accumulator initialiser for accum/scan
    expands_length: bool = False  # flatmap: each input length L becomes L elements (a
    # trace of the lengths binds the ragged dim)
    example: str = ""
    split: str = ""  # how the function splits over sub-tiles (hierarchical tiling):
    # ELEMENTWISE (each output element reads the same position of each input), CONTRACTION
    # (a matrix product: the sum of the products of its operands' blocks, by PARTIAL_SUM) or
    # GROUP (a reduction reading no contents, only where each group ends: over sub-tiles
    # its group takes the sub-tile dims too)
    uses: tuple = field(init=False, default=())

    def __post_init__(self):
        object.__setattr__(self, "uses", tuple(self.arity))
        if not self.split and self.apply in (_same_apply, _elementwise_apply, _affine_apply,
                                             _pow_apply, _gelu_apply):
            object.__setattr__(self, "split", ELEMENTWISE)


def _tile(e: ElemType, fn: str, which: str = "input") -> Tile:
    if not isinstance(e, Tile):
        raise OpError(WRONG_OPERAND_TYPE,
                      f"`{fn}` expects a tile {which}, found a {elem_kind(e)} ({e})", "fn")
    return e


def _int_tile(e: ElemType, fn: str, which: str) -> Tile:
    t = _tile(e, fn, which)
    if t.dtype not in INT_DTYPES or not (t.rows == 1 and t.cols == 1):
        raise OpError(WRONG_OPERAND_TYPE,
                      f"`{fn}` expects a [1, 1] integer tile as {which}, found {t}", "fn")
    return t


# ------------------------------------------------------------------ rules
def _matmul_apply(elems, fn, ctx):
    a, b = _tile(elems[0], fn.name, "left operand"), _tile(elems[1], fn.name, "right operand")
    transpose = bool(fn.get("transpose", False))
    k_b, n = (b.cols, b.rows) if transpose else (b.rows, b.cols)
    verdict = equal(a.cols, k_b)
    if verdict is False:
        rhs = f"[{fmt_dim(b.rows)}, {fmt_dim(b.cols)}]" + ("^T" if transpose else "")
        raise OpError(MATMUL_INNER_MISMATCH, f"matmul inner dimensions differ: [{fmt_dim(a.rows)}, "
                               f"{fmt_dim(a.cols)}] x {rhs} needs {fmt_dim(a.cols)} == "
                               f"{fmt_dim(k_b)}", "fn")
    return Tile(a.dtype, a.rows, n)


def _matmul_flops(elems, fn):
    a, b = elems[0], elems[1]
    n = b.rows if fn.get("transpose", False) else b.cols
    return 2 * a.rows * a.cols * n


def _broadcast(a: Tile, b: Tile, fn: str) -> Tile:
    out = []
    for da, db, what in ((a.rows, b.rows, "rows"), (a.cols, b.cols, "columns")):
        if equal(da, db) is True or db == 1:
            out.append(da)
        elif da == 1:
            out.append(db)
        elif equal(da, db) is False:
            raise OpError(NOT_ELEMENTWISE,
                          f"`{fn}` cannot broadcast tile {what}: {a} and {b}", "fn")
        else:
            out.append(da)
    return Tile(a.dtype, out[0], out[1])


def _elementwise_apply(elems, fn, ctx):
    return _broadcast(_tile(elems[0], fn.name), _tile(elems[1], fn.name), fn.name)


def _elementwise_flops(elems, fn):
    """One per output element (the checker has verified that the shapes broadcast)."""
    if len(elems) == 1:
        return elems[0].rows * elems[0].cols
    a, b = elems
    return (b.rows if a.rows == 1 else a.rows) * (b.cols if a.cols == 1 else a.cols)


def _same_apply(elems, fn, ctx):
    return _tile(elems[0], fn.name)


def _per_elem(k):
    return lambda elems, fn: k * elems[0].rows * elems[0].cols


def _gelu_apply(elems, fn, ctx):
    if fn.get("approximate", "none") not in ("none", "tanh"):
        raise OpError(BAD_ARGUMENT,
                      "attribute `approximate` of function `gelu` expects \"none\" or "
                               f"\"tanh\", found {fn.get('approximate')!r}", "fn")
    return _tile(elems[0], fn.name)


def _rms_inv_apply(elems, fn, ctx):
    eps = fn.get("eps", "1e-6")
    try:
        ok = float(eps) >= 0
    except ValueError:
        ok = False
    if not ok:
        raise OpError(BAD_ARGUMENT, "attribute `eps` of function `rms_inv` expects a non-negative "
                               f"decimal number as a string, found {eps!r}", "fn")
    return _rowwise_apply(elems, fn, ctx)


def _decimal(fn, name: str, default: str, nonnegative: bool = False) -> float:
    """A numeric attribute given as a decimal string (exact in the source text)."""
    text = fn.get(name, default)
    try:
        value = float(text)
        ok = math.isfinite(value) and (value >= 0 or not nonnegative)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        kind = "a non-negative" if nonnegative else "a finite"
        raise OpError(BAD_ARGUMENT, f"attribute `{name}` of function `{fn.name}` expects {kind} "
                               f"decimal number as a string, found {text!r}", "fn")
    return value


def _affine_apply(elems, fn, ctx):
    _decimal(fn, "scale", "1")
    _decimal(fn, "shift", "0")
    return _tile(elems[0], fn.name)


NONINTEGER_POW_FLOPS = 4  # x ** e = exp(e * log x): a logarithm, a product, an exponential


def _pow_per_elem(fn) -> int:
    """FLOPs of one `x ** exponent`, decided by the exponent's value ("2", "2.0" and "2e0"
    cost the same): square-and-multiply for an integer, one division more for a negative
    one; a text that is not a finite number costs as a non-integer (checking reports it)."""
    try:
        value = float(fn.get("exponent", "2"))
    except (TypeError, ValueError):
        return NONINTEGER_POW_FLOPS
    if not math.isfinite(value) or value != int(value) or abs(value) > 2 ** 53:
        return NONINTEGER_POW_FLOPS
    n = abs(int(value))
    multiplies = 0 if n <= 1 else n.bit_length() - 1 + bin(n).count("1") - 1
    return multiplies + (1 if value < 0 else 0)


def _pow_apply(elems, fn, ctx):
    _decimal(fn, "exponent", "2")
    return _tile(elems[0], fn.name)


def _rowwise_apply(elems, fn, ctx):
    t = _tile(elems[0], fn.name)
    return Tile(t.dtype, t.rows, dim(1))


def _accum_same(elems, n, fn, ctx):
    return _tile(elems[0], fn.name)


def _accum_matmul(elems, n, fn, ctx):
    return _matmul_apply(elems, fn, ctx)


def _retile_row(elems, n, fn, ctx):
    t = _tile(elems[0], fn.name)
    return Tile(t.dtype, ctx.absorb(t.rows * n, "R", "rows packed by retile_row"), t.cols)


def _retile_col(elems, n, fn, ctx):
    t = _tile(elems[0], fn.name)
    return Tile(t.dtype, t.rows, ctx.absorb(t.cols * n, "C", "columns packed by retile_col"))


def _zero(elems, fn):
    return dim(0)


def _set_offset(elems, fn, ctx):
    _int_tile(elems[1], fn.name, "row count")
    return _tile(elems[0], fn.name)


def _row_append(elems, fn, ctx):
    a, b = _tile(elems[0], fn.name, "cache tile"), _tile(elems[1], fn.name, "new rows")
    if equal(a.cols, b.cols) is False:
        raise OpError(NOT_ELEMENTWISE, f"`row_append` needs equal column counts: {a} and {b}", "fn")
    return a


def _cache_write_addr(elems, fn, ctx):
    _int_tile(elems[0], fn.name, "request index")
    _int_tile(elems[1], fn.name, "length")
    return Tile("u64", dim(1), dim(1))


def _int_unary(elems, fn, ctx):
    _int_tile(elems[0], fn.name, "input")
    if not isinstance(fn.get("by"), int) or fn.get("by") <= 0:
        raise OpError(BAD_FUNCTION_ATTRIBUTE, f"`{fn.name}` needs by=N with N > 0", "fn")
    return elems[0]


def _signal(elems, n, fn, ctx):
    return Tile("u64", dim(1), dim(1))


def _retile_streamify(elem, fn, ctx):
    t = _tile(elem, fn.name)
    split = fn.get("split", "row")
    if split not in ("row", "col"):
        raise OpError(BAD_FUNCTION_ATTRIBUTE,
                      f"`retile_streamify` split must be \"row\" or \"col\", "
                               f"found \"{split}\"", "fn")
    count, piece = (t.rows, Tile(t.dtype, dim(1), t.cols)) if split == "row" else \
        (t.cols, Tile(t.dtype, t.rows, dim(1)))
    if fn.get("filter", False):
        count = ctx.fresh("V", "ragged", "valid (non-padding) rows of each tile")
    return (count,), piece


def _expert_addr(elem, fn, ctx):
    if not isinstance(elem, Select):
        raise OpError(WRONG_OPERAND_TYPE,
                      f"`expert_addr` expects a selector stream, found {elem}", "fn")
    n = fn.get("tiles")
    if not isinstance(n, int) or n <= 0:
        raise OpError(BAD_FUNCTION_ATTRIBUTE,
                      "`expert_addr` needs tiles=N (weight tiles per expert, > 0)", "fn")
    return (1, n, 1), Tile("u64", dim(1), dim(1))


def _cache_read_addr(elem, fn, ctx):
    if not (isinstance(elem, Tuple) and len(elem.elems) == 2):
        raise OpError(WRONG_OPERAND_TYPE,
                      "`cache_read_addr` expects Zip(index, length) of [1, 1] integer "
                               f"tiles, found {elem}", "fn")
    _int_tile(elem.elems[0], fn.name, "request index")
    _int_tile(elem.elems[1], fn.name, "length")
    n = ctx.fresh("L", "ragged", "KV tiles of each request (cache_read_addr)")
    return (1, n), Tile("u64", dim(1), dim(1))


def _filter_last_tile(elem, fn, ctx):
    _int_tile(elem, fn.name, "length")
    n = ctx.fresh("L", "ragged", "KV tiles of each request (filter_last_tile)")
    return (1, n), Select(2)


def _flatmap_zero(elems, fn):
    return dim(0)


_ELEMWISE_DOC = ("Elementwise `{op}` of two tiles with broadcasting (each dim equal, or 1 on "
                 "one side).{acc} FLOPs: one per output element.")

FUNCTIONS: dict[str, FnSpec] = {}


def _register(*specs: FnSpec) -> None:
    for s in specs:
        FUNCTIONS[s.name] = s


_register(
    FnSpec("matmul", {"map": 2, "accum": 2}, "Matrix product `[M,K] x [K,N] -> [M,N]` "
           "(`transpose=true`: `[M,K] x [N,K]^T`). Tiles may be dynamically sized (the "
           "paper's DynMatmul). In Accum the products are summed into an `[M,N]` accumulator. "
           "FLOPs: 2*M*K*N.", _matmul_flops, apply=_matmul_apply, accum=_accum_matmul,
           split=CONTRACTION,
           attrs=(Param("transpose", "bool", False, "multiply by the right operand transposed"),),
           example="y = Map(x, w, fn=matmul, compute_bw=1024)"),
    FnSpec("add", {"map": 2, "accum": 1, "scan": 1},
           _ELEMWISE_DOC.format(op="sum", acc=" In Accum/Scan: `acc = acc + x`."),
           _elementwise_flops, apply=_elementwise_apply, accum=_accum_same,
           example="s = Accum(x, fn=add, rank=1)"),
    FnSpec("sub", {"map": 2}, _ELEMWISE_DOC.format(op="difference", acc=""),
           _elementwise_flops, apply=_elementwise_apply, example="d = Map(a, b, fn=sub)"),
    FnSpec("mul", {"map": 2, "accum": 1, "scan": 1},
           _ELEMWISE_DOC.format(op="product", acc=" In Accum/Scan: `acc = acc * x`."),
           _elementwise_flops, apply=_elementwise_apply, accum=_accum_same, init="one",
           example="g = Map(up, act, fn=mul)"),
    FnSpec("div", {"map": 2}, _ELEMWISE_DOC.format(op="quotient", acc=""),
           _elementwise_flops, apply=_elementwise_apply, example="o = Map(num, den, fn=div)"),
    FnSpec("max", {"map": 2, "accum": 1, "scan": 1}, _ELEMWISE_DOC.format(op="maximum",
           acc=" In Accum/Scan: `acc = max(acc, x)`."), _elementwise_flops,
           apply=_elementwise_apply, accum=_accum_same,
           init="neg_inf", example="m = Accum(x, fn=max, rank=1)"),
    FnSpec("silu", {"map": 1}, "SiLU `x * sigmoid(x)` per element. FLOPs: 8 per element.",
           _per_elem(8), apply=_same_apply, example="a = Map(g, fn=silu)"),
    FnSpec("relu", {"map": 1}, "ReLU `max(x, 0)` per element. FLOPs: 1 per element.",
           _per_elem(1), apply=_same_apply, example="a = Map(h, fn=relu)"),
    FnSpec("exp", {"map": 1}, "Exponential per element. FLOPs: 4 per element.",
           _per_elem(4), apply=_same_apply, example="e = Map(s, fn=exp)"),
    FnSpec("sigmoid", {"map": 1}, "Logistic sigmoid per element. FLOPs: 4 per element.",
           _per_elem(4), apply=_same_apply, example="s = Map(x, fn=sigmoid)"),
    FnSpec("tanh", {"map": 1}, "Hyperbolic tangent per element. FLOPs: 4 per element.",
           _per_elem(4), apply=_same_apply, example="t = Map(x, fn=tanh)"),
    FnSpec("rsqrt", {"map": 1}, "Reciprocal square root per element. FLOPs: 4 per element.",
           _per_elem(4), apply=_same_apply, example="r = Map(x, fn=rsqrt)"),
    FnSpec("gelu", {"map": 1}, "GELU per element: `x * Phi(x)` (`approximate=\"tanh\"`: "
           "the tanh approximation, as PyTorch's). FLOPs: 8 per element.", _per_elem(8),
           apply=_gelu_apply,
           attrs=(Param("approximate", "str", "none", "\"none\" (exact, erf) or \"tanh\""),),
           example="a = Map(h, fn=gelu)"),
    FnSpec("rms_inv", {"map": 1}, "Inverse root mean square of each row, RMSNorm's row "
           "reduction: `[R,C] -> [R,1]`, `1 / sqrt(mean(x^2) + eps)`. FLOPs: 2*R*C.",
           _per_elem(2), apply=_rms_inv_apply,
           attrs=(Param("eps", "str", "1e-6", "added to the mean square, a decimal number"),),
           example="r = Map(x, fn=rms_inv(eps=\"1e-6\"))"),
    FnSpec("row_sum", {"map": 1}, "Sum of each row: `[R,C] -> [R,1]`. FLOPs: R*C.",
           _per_elem(1), apply=_rowwise_apply, example="s = Map(e, fn=row_sum)"),
    FnSpec("row_mean", {"map": 1}, "Mean of each row: `[R,C] -> [R,1]`. FLOPs: R*C.",
           _per_elem(1), apply=_rowwise_apply, example="v = Map(sq, fn=row_mean)"),
    FnSpec("affine", {"map": 1}, "`x * scale + shift` per element, with constants (a "
           "PyTorch op with a Python number: `x + 1e-6`, `x / 8`, `-x`). FLOPs: 2 per element.",
           _per_elem(2), apply=_affine_apply,
           attrs=(Param("scale", "str", "1", "multiplier, a decimal number"),
                  Param("shift", "str", "0", "added after scaling, a decimal number")),
           example="v = Map(ms, fn=affine(shift=\"1e-6\"))"),
    FnSpec("pow", {"map": 1}, "`x ** exponent` per element. FLOPs per element, by the "
           "exponent's value: an integer n takes the multiplications of square-and-multiply "
           "(0 for n = 0 or 1, 1 for 2, 2 for 3 or 4, ...) and one division more when n < 0; "
           "any other exponent 4 (a logarithm, a product and an exponential).",
           lambda elems, fn: _pow_per_elem(fn) * elems[0].rows * elems[0].cols,
           apply=_pow_apply,
           attrs=(Param("exponent", "str", "2", "the power, a decimal number"),),
           example="sq = Map(x, fn=pow(exponent=\"2\"))"),
    FnSpec("cast", {"map": 1}, "The tile unchanged: with Map's `dtype=` it converts the "
           "element type (a PyTorch `.to(dtype)`). 0 FLOPs.", _zero, apply=_same_apply,
           example="y = Map(x, fn=cast, dtype=bf16)"),
    FnSpec("row_max", {"map": 1}, "Maximum of each row: `[R,C] -> [R,1]`. FLOPs: R*C.",
           _per_elem(1), apply=_rowwise_apply, example="m = Map(s, fn=row_max)"),
    FnSpec("retile_row", {"accum": 1}, "Concatenates the reduced tiles row-wise: n tiles "
           "`[R,C]` -> one `[n*R, C]` tile (dynamically sized when n is dynamic). 0 FLOPs.",
           _zero, accum=_retile_row, init="empty",
           example="xt = Accum(tiles, fn=retile_row, rank=1)"),
    FnSpec("retile_col", {"accum": 1}, "Concatenates the reduced tiles column-wise: n tiles "
           "`[R,C]` -> one `[R, n*C]` tile. 0 FLOPs.", _zero, accum=_retile_col, init="empty",
           example="yt = Accum(y, fn=retile_col, rank=1)"),
    FnSpec("set_offset", {"map": 2}, "Sets the valid-row count of a tile from a `[1,1]` integer "
           "tile (used to append to a partially filled KV tile). Fixed 1 cycle.", _zero,
           apply=_set_offset, fixed_cycles=1, example="t = Map(last, off, fn=set_offset)"),
    FnSpec("row_append", {"map": 2}, "Writes the rows of the second tile after the valid rows of "
           "the first and advances its valid-row count. Fixed 1 cycle.", _zero,
           apply=_row_append, fixed_cycles=1, example="k2 = Map(t, knew, fn=row_append)"),
    FnSpec("cache_write_addr", {"map": 2}, "The address `idx * row_offset + n` of tile n of "
           "request idx, as a `[1,1]` u64 tile (pass n = tiles - 1 for a request's last KV "
           "tile). Fixed 1 cycle.", _zero,
           apply=_cache_write_addr, fixed_cycles=1,
           ints=lambda v, fn: v[0] * fn.get("row_offset") + v[1],
           attrs=(Param("row_offset", "int", FN_REQUIRED, "tiles per request slot"),),
           example="a = Map(idx, len, fn=cache_write_addr(row_offset=202))"),
    FnSpec("ceildiv_int", {"map": 1}, "Integer arithmetic on a `[1,1]` integer tile: "
           "`ceil((x + plus) / by)`, for example KV-cache tiles from a length "
           "(`by=32, plus=1`). Fixed 1 cycle.", _zero, apply=_int_unary, fixed_cycles=1,
           ints=lambda v, fn: -(-(v[0] + (fn.get("plus") or 0)) // fn.get("by")),
           attrs=(Param("by", "int", FN_REQUIRED, "divisor"),
                  Param("plus", "int", 0, "added before dividing")),
           example="tiles = Map(lens, fn=ceildiv_int(by=32, plus=1))"),
    FnSpec("mod_int", {"map": 1}, "Integer modulo on a `[1,1]` integer tile: "
           "`(x + plus) mod by`, in `0..by-1`; for example the rows of a length's last, "
           "partly filled KV tile (`by=32`). Fixed 1 cycle.", _zero, apply=_int_unary,
           fixed_cycles=1, ints=lambda v, fn: (v[0] + (fn.get("plus") or 0)) % fn.get("by"),
           attrs=(Param("by", "int", FN_REQUIRED, "divisor"),
                  Param("plus", "int", 0, "added before taking the remainder")),
           example="off = Map(lens, fn=mod_int(by=32))"),
    FnSpec("signal_req_all_read", {"accum": 1}, "Emits one `[1,1]` u64 token per reduced group "
           "(a request's KV cache has been read). Fixed 1 cycle.", _zero, accum=_signal,
           fixed_cycles=1, example="done = Accum(k, fn=signal_req_all_read, rank=1)",
           split=GROUP),
    FnSpec("retile_streamify", {"flatmap": 1}, "Splits each `[R,C]` tile into R `[1,C]` rows "
           "(`split=\"col\"`: C `[R,1]` columns); `filter=true` drops padding rows, so the "
           "count becomes a fresh ragged dim. 0 FLOPs.", _flatmap_zero, inner=_retile_streamify,
           attrs=(Param("split", "str", "row", "\"row\" or \"col\""),
                  Param("filter", "bool", False, "drop padding rows")),
           example="rows = FlatMap(acc, fn=retile_streamify(filter=true))"),
    FnSpec("expert_addr", {"flatmap": 1}, "For a one-hot selector of expert e, the addresses "
           "of its `tiles` weight tiles `base + e*tiles + i`, as a `[1, tiles, 1]` stream of "
           "`[1,1]` u64 tiles. 0 FLOPs.", _flatmap_zero, inner=_expert_addr,
           attrs=(Param("tiles", "int", FN_REQUIRED, "weight tiles per expert"),
                  Param("base", "int", 0, "address of expert 0's first tile")),
           example="addr = FlatMap(sel, fn=expert_addr(tiles=16))"),
    FnSpec("cache_read_addr", {"flatmap": 1}, "For each (index, length) pair, the addresses "
           "`idx * row_offset + i` of its KV tiles: a `[1, L]` stream with L ragged. 0 FLOPs.",
           _flatmap_zero, inner=_cache_read_addr, expands_length=True,
           attrs=(Param("row_offset", "int", FN_REQUIRED, "tiles per request slot"),),
           example="ka = FlatMap(Zip(idx, len), fn=cache_read_addr(row_offset=202))"),
    FnSpec("filter_last_tile", {"flatmap": 1}, "For each length L, L-1 selectors `{1}` and a "
           "final `{0}` (routes a request's last KV tile apart). 0 FLOPs.", _flatmap_zero,
           inner=_filter_last_tile, expands_length=True,
           example="last = FlatMap(len, fn=filter_last_tile)"),
)

INITS = {
    "zero": "a tile of zeros of the accumulator's shape",
    "one": "a tile of ones of the accumulator's shape",
    "neg_inf": "a tile of -inf of the accumulator's shape",
    "empty": "an empty `[0, C]` tile that row/column packing grows",
}


def required_attrs(spec: FnSpec) -> list[str]:
    return [p.name for p in spec.attrs if p.default is FN_REQUIRED]


def check_fn_attrs(spec: FnSpec, fn: FnValue) -> None:
    """Validate a function value's keyword attributes against the spec."""
    known = {p.name: p for p in spec.attrs}
    for k, v in fn.kwargs:
        p = known.get(k)
        if p is None:
            hint = f" (it takes {', '.join(known)})" if known else " (it takes no attributes)"
            raise OpError(UNKNOWN_PARAMETER,
                          f"unknown attribute `{k}` of function `{spec.name}`{hint}",
                          "fn")
        ok = {"int": lambda x: isinstance(x, int) and not isinstance(x, bool),
              "bool": lambda x: isinstance(x, bool),
              "str": lambda x: isinstance(x, str)}[p.kind](v)
        if not ok:
            raise OpError(BAD_ARGUMENT, f"attribute `{k}` of function `{spec.name}` expects "
                                   f"{_KIND_WORDS[p.kind]}, found {v!r}", "fn")
    for name in required_attrs(spec):
        if name not in dict(fn.kwargs):
            raise OpError(MISSING_ARGUMENT,
                          f"function `{spec.name}` needs attribute `{name}=`", "fn")


_KIND_WORDS = {"int": "an integer", "bool": "true or false", "str": "a string"}

__all__ = ["FUNCTIONS", "INITS", "FnSpec", "FnCtx", "check_fn_attrs", "Scalar"]
