"""The data a run holds: tensor contents, the elements of external streams (from traces or
seeded generators), and the limits a run is checked against before it starts."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import sympy

from stepc.graph.declarations import MAX_KV_LENGTH
from stepc.ops import OPS
from stepc.sim.kernel import SimError
from stepc.sim.tensor_files import load_tensor_file
from stepc.sim.tokens import NP_DTYPES, TileVal, int_tile, stops_for_shape
from stepc.spelling import given
from stepc.traces import (
    MAX_EXTERNAL_ELEMENTS,
    TraceError,
    selector_ids,
    synthetic_kv_lengths,
    synthetic_routing,
)
from stepc.typecheck.checker import TypedProgram
from stepc.types import DTYPE_BYTES, Buffer, Select, StreamType, Tile

# What one run can hold; checked before the run starts (`check_limits`).
MAX_VALUE_BYTES = 4 * 2**30  # tensor values a run materialises
MAX_TILE_ELEMENTS = 2**24  # elements of one tile or buffer (64 MiB of f32)


# ---------------------------------------------------------------- data
def tensor_values(t, functional: bool) -> np.ndarray:
    """The contents of an off-chip tensor from its declared source."""
    src = t.source
    dtype = NP_DTYPES[t.dtype]
    if src is None:
        return np.zeros(t.shape, dtype=dtype)
    name, kw = src.name, dict(src.kwargs)
    if name == "zeros":
        return np.zeros(t.shape, dtype=dtype)
    if name == "ones":
        return np.ones(t.shape, dtype=dtype)
    if name == "arange":
        return np.arange(math.prod(t.shape)).reshape(t.shape).astype(dtype)
    if name == "file":
        return load_tensor_file(t, kw["path"], src.span).astype(dtype)
    rng = np.random.default_rng(kw.get("seed", 0))
    if t.dtype in ("i32", "u32", "u64"):
        return rng.integers(0, kw.get("high", 2**15), size=t.shape).astype(dtype)
    if t.dtype == "bool":
        return rng.integers(0, 2, size=t.shape).astype(dtype)
    return rng.standard_normal(t.shape).astype(dtype)


def initial_value(t, values: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """The contents a tensor starts a run with: `values[name]` when given, else its source's."""
    loaded = (values or {}).get(t.name)
    if loaded is None:
        return tensor_values(t, True)
    if np.size(loaded) != math.prod(t.shape):
        raise SimError(f"tensor `{t.name}` is declared {list(t.shape)} but its value "
                       f"holds {list(np.shape(loaded))}")
    return np.reshape(loaded, t.shape).astype(NP_DTYPES[t.dtype])


def external_elements(name: str, st: StreamType, arr: np.ndarray | None, gen: dict,
                      seed: int) -> tuple[list, dict[str, int], np.ndarray]:
    """The elements of an external stream, the dims the data fixes, and the data (the
    trace, or the generated data without one)."""
    dims: dict[str, int] = {}
    values: list[tuple[int, ...]] | list[TileVal]
    if isinstance(st.elem, Select):
        n = st.elem.n
        if arr is None:
            batch = _static_len(st.shape[0], name)
            arr = _synthetic(synthetic_routing, batch, n, gen.get("topk", 1),
                             gen.get("seed", seed))
        rows, dims_of_trace = selector_ids(arr, n, len(st.shape), name, st)
        shape = list(dims_of_trace)
        values = [tuple(sorted(set(row))) for row in rows.astype(np.int64).tolist()]
    elif isinstance(st.elem, Tile):
        if arr is not None and arr.size and arr.max() > MAX_KV_LENGTH:
            raise TraceError(f"trace for `{name}` holds {int(arr.max()):,}: values of an "
                             f"integer stream (KV lengths) above {MAX_KV_LENGTH:,} make a run "
                             "that never ends")
        if arr is None:
            batch = _static_len(st.shape[0], name)
            arr = _synthetic(synthetic_kv_lengths, batch, gen.get("mean", 1024),
                             gen.get("std", 512), gen.get("seed", seed))
        if arr.ndim != len(st.shape):
            raise TraceError(f"trace for `{name}` has shape {list(arr.shape)}, which does not "
                             f"fit {st}")
        shape = list(arr.shape)
        values = [int_tile(int(v), st.elem.dtype) for v in arr.reshape(-1)]
    else:
        raise TraceError(f"`{name}` has type {st}; external streams carry selectors or "
                         "integer tiles")
    for axis, (d, actual) in enumerate(zip(st.shape, shape)):
        if d.is_Symbol:
            dims[d.name] = actual
        elif d.is_Integer and int(d) != actual:
            if isinstance(st.elem, Select) and arr.ndim == len(st.shape) \
                    and axis == len(shape) - 1:  # the ids of a row: its experts
                raise TraceError(f"trace for `{name}` routes each row to {actual} experts "
                                 f"(top-{actual}) where {st} expects {int(d)} (top-{int(d)}): "
                                 "a trace of another model? Its top-k must be the program's")
            raise TraceError(f"trace for `{name}` has {actual} where {st} expects {int(d)}")
    return list(zip(values, stops_for_shape(shape))), dims, arr


@lru_cache(maxsize=64)
def _synthetic(make, *args) -> np.ndarray:
    """A seeded trace, made once per arguments (a program often reads one external stream
    several ways) and read-only, as it is shared."""
    arr = make(*args)
    arr.flags.writeable = False
    return arr


def _static_len(d, name: str) -> int:
    if not d.is_Integer:
        raise TraceError(f"external stream `{name}` has a symbolic length {d}: give it a "
                         f"trace ({given('traces', name)}) so the run knows its data")
    return int(d)


# Operator -> its attribute naming the tensor whose contents it reads even in a timing-only
# run (to make its addresses or selectors).
TENSOR_READERS = {"SelectGen": "tensor", "MetadataGen": "tensor"}


def timing_reads(prog) -> set[str]:
    """The tensors a timing-only run must hold the contents of."""
    return {n.attrs[TENSOR_READERS[n.op]].name for n in prog.nodes.values()
            if n.op in TENSOR_READERS}


# ---------------------------------------------------------------- limits
@lru_cache(maxsize=4096)
def _count(dims: tuple) -> int | None:
    """The product of dims when all are integers, else None (worked out once per distinct
    dims: a program's streams share them)."""
    n = 1
    for d in dims:
        d = sympy.sympify(d)
        if not d.is_Integer:
            return None
        n *= int(d)
    return n


def check_limits(typed: TypedProgram, functional: bool, traces: dict[str, np.ndarray]) -> None:
    """Refuse, before any work, a run that could not hold its data: tensor values, one tile
    or buffer, or an external stream beyond what a run holds (SimError at the operator)."""
    prog = typed.program
    needed = timing_reads(prog)
    held = [t for t in prog.tensors.values() if functional or t.name in needed]
    total = sum(math.prod(t.shape) * DTYPE_BYTES[t.dtype] for t in held)
    if total > MAX_VALUE_BYTES:
        size = {t.name: math.prod(t.shape) * DTYPE_BYTES[t.dtype] for t in held}
        big = max(held, key=lambda t: size[t.name])
        hint = " (--timing-only carries no tile values)" if functional else ""
        user = next((n.name for n in prog.nodes.values()
                     if getattr(n.attrs.get("tensor"), "name", None) == big.name), None)
        raise SimError(f"the run would hold {_bytes(total)} of tensor values (tensor "
                       f"`{big.name}` {list(big.shape)} alone {_bytes(size[big.name])}); a run "
                       f"holds at most {_bytes(MAX_VALUE_BYTES)}{hint}", user)
    for (name, _port), st in typed.types.items():
        elem = st.elem
        tile = elem.tile if isinstance(elem, Buffer) else elem
        if not isinstance(tile, Tile):
            continue
        dims = (tile.rows, tile.cols) + (tuple(elem.shape) if isinstance(elem, Buffer) else ())
        n = _count(dims)
        if n is not None and n > MAX_TILE_ELEMENTS:
            what = "buffer" if isinstance(elem, Buffer) else "tile"
            raise SimError(f"a {what} of {n:,} elements ({elem}): a run holds tiles and "
                           f"buffers of at most {MAX_TILE_ELEMENTS:,} elements", name)
    for node in prog.nodes.values():
        if not OPS[node.op].external:
            continue
        arr = traces.get(node.attrs["name"])
        out = typed.types.get((node.name, 0))
        n = arr.size if arr is not None else (_count(out.shape) if out is not None else None)
        if n is not None and n > MAX_EXTERNAL_ELEMENTS:
            raise SimError(f"external stream `{node.attrs['name']}` has {n:,} elements: a run "
                           f"holds at most {MAX_EXTERNAL_ELEMENTS:,} per external stream",
                           node.name)


def _bytes(n: int) -> str:
    for scale, unit in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB")):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,} B"
