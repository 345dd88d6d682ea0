"""What each library function does to tiles at run time, keyed by the same names as
`stepc.ops.functions.FUNCTIONS` (a test keeps the two complete).

Every function computes its result's shape, element type and valid-row count in both
modes; values (numpy arrays) only in functional mode, where a tile's `data` is set. bf16
values are computed in float32.
"""

from __future__ import annotations

import numpy as np

from stepc.ops.functions import FUNCTIONS
from stepc.sim.kernel import SimError
from stepc.sim.tokens import NP_DTYPES, TileVal, int_tile


def _arr(t: TileVal) -> np.ndarray:
    return t.data


def _out(rows: int, cols: int, dtype: str, valid: int, data, functional: bool) -> TileVal:
    if functional and data is not None:
        data = np.asarray(data, dtype=NP_DTYPES[dtype]).reshape(rows, cols)
    return TileVal(rows, cols, dtype, valid, False, data if functional else None)


def _func(ts) -> bool:
    """Whether every argument is a tile holding values (a loop: no generator per call)."""
    for t in ts:
        if not isinstance(t, TileVal) or t.data is None:
            return False
    return True


# ------------------------------------------------------------------ map functions
def _matmul(args, fn, dtype):
    a, b = args
    tr = bool(fn.get("transpose", False)) if fn.kwargs else False
    n = b.rows if tr else b.cols
    if not _func(args):
        return TileVal(a.rows, n, dtype, a.valid, False, None)  # _out without values
    data = _arr(a).astype(np.float32) @ (_arr(b).astype(np.float32).T if tr
                                       else _arr(b).astype(np.float32))
    return _out(a.rows, n, dtype, a.valid, data, True)


def _binary(op):
    def f(args, fn, dtype):
        a, b = args
        rows = b.rows if a.rows == 1 else a.rows
        cols = b.cols if a.cols == 1 else a.cols
        data = op(_arr(a).astype(np.float32), _arr(b).astype(np.float32)) if _func(args) \
            else None
        return _out(rows, cols, dtype, a.valid if a.rows == rows else b.valid, data,
                    data is not None)
    return f


def _unary(op):
    def f(args, fn, dtype):
        (a,) = args
        data = op(_arr(a).astype(np.float32)) if _func(args) else None
        return _out(a.rows, a.cols, dtype, a.valid, data, data is not None)
    return f


def _rowwise(op):
    def f(args, fn, dtype):
        (a,) = args
        data = op(_arr(a).astype(np.float32), axis=1, keepdims=True) if _func(args) else None
        return _out(a.rows, 1, dtype, a.valid, data, data is not None)
    return f


def _silu(x):
    with np.errstate(over="ignore"):  # exp(-x) overflows to inf for very negative x: 0
        return x / (1.0 + np.exp(-x))


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _set_offset(args, fn, dtype):
    t, off = args
    n = off.scalar() if off.data is not None else t.valid
    return TileVal(t.rows, t.cols, t.dtype, n, False, t.data)


def _row_append(args, fn, dtype):
    t, new = args
    data = None
    if _func(args):
        data = _arr(t).copy()
        k = min(new.rows, t.rows - t.valid)
        data[t.valid:t.valid + k] = _arr(new)[:k]
    return TileVal(t.rows, t.cols, t.dtype, min(t.rows, t.valid + new.rows), False, data)


def _integer(name: str, dtype: str | None = None):
    """A function on [1,1] integer tiles, by the library's integer definition (`ints`)."""
    ints = FUNCTIONS[name].ints

    def f(args, fn, dtype_):
        out = dtype or args[0].dtype
        for a in args:
            if a.data is None:
                return TileVal(1, 1, out)
        value = ints([a.scalar() for a in args], fn)
        low, high = INT_RANGES[out]
        if not low <= value <= high:
            raise SimError(f"`{name}` gives {value:,}, which does not fit the element type "
                           f"{out} ({low:,}..{high:,})")
        return int_tile(value, out)
    return f


def int_range(dtype: str) -> tuple[float, float]:
    """The values an element type holds: an integer type's range, bool 0..1, floats any."""
    np_type = np.dtype(NP_DTYPES[dtype])
    if np_type.kind == "b":
        return 0, 1
    if np_type.kind in "iu":
        info = np.iinfo(np_type)
        return int(info.min), int(info.max)
    return -np.inf, np.inf


INT_RANGES = {dtype: int_range(dtype) for dtype in NP_DTYPES}  # looked up per element


def _gelu(args, fn, dtype):
    (a,) = args
    data = None
    if _func(args):
        x = _arr(a).astype(np.float64)
        if fn.get("approximate", "none") == "tanh":
            data = 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))
        else:
            data = 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))
    return _out(a.rows, a.cols, dtype, a.valid, data, data is not None)


def _erf(x: np.ndarray) -> np.ndarray:
    """erf to within 1.5e-7 (Abramowitz and Stegun 7.1.26), below float32's resolution."""
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    y = 1.0 - t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (
        -1.453152027 + t * 1.061405429)))) * np.exp(-x * x)
    return np.sign(x) * y


def _rms_inv(args, fn, dtype):
    (a,) = args
    data = None
    if _func(args):
        eps = float(fn.get("eps", "1e-6"))
        x = _arr(a).astype(np.float32)
        data = 1.0 / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + eps)
    return _out(a.rows, 1, dtype, a.valid, data, data is not None)


def _affine(args, fn, dtype):
    (a,) = args
    data = None
    if _func(args):
        data = _arr(a).astype(np.float32) * np.float32(fn.get("scale", "1")) \
            + np.float32(fn.get("shift", "0"))
    return _out(a.rows, a.cols, dtype, a.valid, data, data is not None)


def _pow(args, fn, dtype):
    (a,) = args
    data = None
    if _func(args):
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            data = np.power(_arr(a).astype(np.float32), np.float32(fn.get("exponent", "2")))
    return _out(a.rows, a.cols, dtype, a.valid, data, data is not None)


MAP = {
    "matmul": _matmul,
    "add": _binary(np.add), "sub": _binary(np.subtract), "mul": _binary(np.multiply),
    "div": _binary(np.divide), "max": _binary(np.maximum),
    "silu": _unary(_silu), "exp": _unary(np.exp), "relu": _unary(lambda x: np.maximum(x, 0)),
    "sigmoid": _unary(_sigmoid), "tanh": _unary(np.tanh),
    "rsqrt": _unary(lambda x: 1.0 / np.sqrt(x)),
    "gelu": _gelu, "rms_inv": _rms_inv,
    "row_sum": _rowwise(np.sum), "row_max": _rowwise(np.max),
    "row_mean": _rowwise(np.mean), "affine": _affine, "pow": _pow,
    "cast": _unary(lambda x: x),
    "set_offset": _set_offset, "row_append": _row_append,
    "cache_write_addr": _integer("cache_write_addr", "u64"),
    "ceildiv_int": _integer("ceildiv_int"), "mod_int": _integer("mod_int"),
}


# ------------------------------------------------------------------ accumulators
INIT_VALUES = {"zero": 0.0, "one": 1.0, "neg_inf": -np.inf}


def _same_shape(first, fn):
    return first[0].rows, first[0].cols


def _matmul_shape(first, fn):
    a, b = first
    return a.rows, b.rows if fn.get("transpose", False) else b.cols


def _grows(first, fn):
    return None  # no accumulator before the first element: it grows from it


def _matmul_update(acc, args, fn, dtype, functional):
    if not _func(args):  # no values: the product would only give its valid rows, a's
        acc.valid = args[0].valid
        return acc
    prod = _matmul(args, fn, dtype)
    if functional and acc.data is not None and prod.data is not None:
        acc.data = acc.data + prod.data
    acc.valid = prod.valid
    return acc


def _elementwise_update(op):
    def update(acc, args, fn, dtype, functional):
        (x,) = args
        if functional and acc.data is not None and x.data is not None:
            acc.data = op(acc.data, x.data.astype(np.float32))
        acc.valid = x.valid
        return acc
    return update


def _pack_update(rows: bool):
    """Concatenate the reduced tiles: rows stack (valid rows add up), or columns do."""
    def update(acc, args, fn, dtype, functional):
        (x,) = args
        if acc is None:
            return TileVal(x.rows, x.cols, dtype, x.valid, x.in_mu,
                           None if x.data is None else x.data.astype(NP_DTYPES[dtype]))
        data = None
        if acc.data is not None and x.data is not None:
            data = np.concatenate([acc.data, x.data.astype(acc.data.dtype)],
                                  axis=0 if rows else 1)
        return TileVal(acc.rows + x.rows if rows else acc.rows,
                       acc.cols if rows else acc.cols + x.cols, dtype,
                       acc.valid + x.valid if rows else acc.valid, acc.in_mu, data)
    return update


def _signal_update(acc, args, fn, dtype, functional):
    return int_tile(1)


# each accumulating function: (the accumulator's shape from the first element, its update)
ACCUMULATE = {
    "matmul": (_matmul_shape, _matmul_update),
    "add": (_same_shape, _elementwise_update(np.add)),
    "mul": (_same_shape, _elementwise_update(np.multiply)),
    "max": (_same_shape, _elementwise_update(np.maximum)),
    "retile_row": (_grows, _pack_update(rows=True)),
    "retile_col": (_grows, _pack_update(rows=False)),
    "signal_req_all_read": (_grows, _signal_update),
}


def accum_init(name: str, first: list, fn, init: str | None, dtype: str, functional: bool):
    """The accumulator before the first element of a group (shape from the first element;
    filled with the `init=` given, else the function's own initialiser)."""
    shape = ACCUMULATE[name][0](first, fn)
    if shape is None:
        return None
    rows, cols = shape
    fill = INIT_VALUES.get(init or FUNCTIONS[name].init, 0.0)
    data = np.full((rows, cols), fill, dtype=np.float32) if functional else None
    return TileVal(rows, cols, dtype, rows, False, data)


# ------------------------------------------------------------------ flatmap functions
# Each returns its pieces `(payload, stop)` as an iterable; the address generators yield
# them one at a time, so a huge inner stream is walked (and stopped by --max-cycles) rather
# than built at once.
def _retile_streamify(x: TileVal, fn, functional: bool):
    split = fn.get("split", "row")
    if split == "row":
        n = x.valid if fn.get("filter", False) else x.rows
        pieces = [TileVal(1, x.cols, x.dtype, 1, x.in_mu,
                          None if x.data is None else x.data[i:i + 1]) for i in range(n)]
    else:
        pieces = [TileVal(x.rows, 1, x.dtype, x.valid, x.in_mu,
                          None if x.data is None else x.data[:, i:i + 1]) for i in range(x.cols)]
    return [(p, 0) for p in pieces]


# The address generators' inner streams are [1, n] (or [1, n, 1]): each element's stop is 0
# (1: its size-1 innermost dim closes at every element) and the last one's closes the
# whole rank-b stream, b = 1 (2): iter_stops of that shape with its last stop given, as a
# loop rather than an index walk.
def _expert_addr(sel, fn, functional: bool):
    if len(sel) != 1:
        raise SimError(f"expert_addr needs a one-hot selector, found {list(sel)}")
    n, base = fn.get("tiles"), fn.get("base", 0) or 0
    first = base + sel[0] * n
    for i in range(n - 1):
        yield int_tile(first + i), 1
    if n > 0:
        yield int_tile(first + n - 1), 2


def _cache_read_addr(pair, fn, functional: bool):
    idx, length = pair
    first, n = idx.scalar() * fn.get("row_offset"), length.scalar()
    for k in range(n - 1):
        yield int_tile(first + k), 0
    if n > 0:
        yield int_tile(first + n - 1), 1


def _filter_last_tile(length, fn, functional: bool):
    n = length.scalar()
    for _ in range(n - 1):
        yield (1,), 0
    if n > 0:
        yield (0,), 1


FLATMAP = {
    "retile_streamify": _retile_streamify,
    "expert_addr": _expert_addr,
    "cache_read_addr": _cache_read_addr,
    "filter_last_tile": _filter_last_tile,
}

