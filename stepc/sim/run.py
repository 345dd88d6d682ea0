"""Building and running a simulation of a checked program.

`simulate(typed, hw, ...)` materialises the data the run needs (tensor contents, external
streams from traces or seeded generators), builds one context per operator and one FIFO
per stream, runs the kernel, and collects the results: cycles, off-chip traffic (in
requests and in useful bytes), per-operator busy time, the dims the run determined, and in
functional mode the output tensors.
"""

from __future__ import annotations

import math
import time
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import sympy

from stepc.diagnostics import did_you_mean
from stepc.graph.declarations import MAX_KV_LENGTH
from stepc.hw import HardwareConfig
from stepc.ops import OPS
from stepc.ops.base import LOAD, STORE, STREAMS, VARSTREAMS
from stepc.sim.behaviors import BEHAVIORS
from stepc.sim.behaviors.memory import tensor_layout
from stepc.sim.estimate import MAX_RUN_CYCLES, cycles_lower_bound, refusal
from stepc.sim.fabric import Override, SimEnv, hardware_overrides
from stepc.sim.hbm import MemoryStats, make_memory
from stepc.sim.kernel import Blocked, Ctx, Kernel, SimError
from stepc.sim.tensor_files import load_tensor_file
from stepc.sim.tokens import NP_DTYPES, int_tile, stops_for_shape
from stepc.spelling import given
from stepc.traces import (
    MAX_EXTERNAL_ELEMENTS,
    TraceError,
    external_file,
    selector_ids,
    synthetic_kv_lengths,
    synthetic_routing,
)
from stepc.typecheck.checker import TypedProgram
from stepc.types import DTYPE_BYTES, Buffer, Select, StreamType, Tile

if TYPE_CHECKING:
    from stepc.analyze import Analysis

# What one run can hold; checked before the run starts (`check_limits`).
MAX_VALUE_BYTES = 4 * 2**30  # tensor values a run materialises
MAX_TILE_ELEMENTS = 2**24  # elements of one tile or buffer (64 MiB of f32)


@dataclass
class OpStats:
    name: str
    op: str
    busy: int
    finish: int
    mem_ops: int


@dataclass
class SimResult:
    """Everything a run measured."""

    program: str
    hw: HardwareConfig
    functional: bool
    cycles: int
    read_requests: int
    write_requests: int
    useful_bytes: int  # bytes of the tiles moved to and from HBM
    flops: int
    ops: list[OpStats]
    bindings: dict[str, sympy.Expr]  # symbolic dims, as this run determined them
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    deadlock: list[Blocked] | None = None
    wall_seconds: float = 0.0
    trace: dict[str, list] = field(default_factory=dict)  # node -> [(start, dur, label)]
    fifo_logs: dict[str, list] = field(default_factory=dict)  # FIFO -> occupancy changes
    fifo: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # high water, cap, n
    fifo_bytes: int = 0  # sum over FIFOs of high-water elements x element bytes
    memory: MemoryStats = field(default_factory=MemoryStats)  # the memory model's counters
    overrides: list[Override] = field(default_factory=list)  # attributes shadowing hw keys

    @property
    def request_bytes(self) -> int:
        return (self.read_requests + self.write_requests) * self.hw.hbm.request_bytes

    @property
    def achieved_bw(self) -> float:
        return self.request_bytes / self.cycles if self.cycles else 0.0

    @property
    def row_hit_rate(self) -> float | None:
        """Share of requests that found their row open (the `dram` model only)."""
        m = self.memory
        rows = m.row_hits + m.row_misses + m.row_conflicts
        return m.row_hits / rows if rows else None

    def channel_bw(self) -> list[float]:
        """Bytes per cycle each channel moved over the whole run."""
        size = self.hw.hbm.request_bytes
        return [int(n) * size / self.cycles if self.cycles else 0.0
                for n in self.memory.per_channel]


# ---------------------------------------------------------------- data
def tensor_values(t, functional: bool) -> np.ndarray | None:
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
    if isinstance(st.elem, Select):
        n = st.elem.n
        if arr is None:
            batch = _static_len(st.shape[0], name)
            arr = synthetic_routing(batch, n, gen.get("topk", 1), gen.get("seed", seed))
        rows, dims_of_trace = selector_ids(arr, n, len(st.shape), name, st)
        shape = list(dims_of_trace)
        values = [tuple(sorted({int(i) for i in row})) for row in rows]
    elif isinstance(st.elem, Tile):
        if arr is not None and arr.size and arr.max() > MAX_KV_LENGTH:
            raise TraceError(f"trace for `{name}` holds {int(arr.max()):,}: values of an "
                             f"integer stream (KV lengths) above {MAX_KV_LENGTH:,} make a run "
                             "that never ends")
        if arr is None:
            batch = _static_len(st.shape[0], name)
            arr = synthetic_kv_lengths(batch, gen.get("mean", 1024), gen.get("std", 512),
                                       gen.get("seed", seed))
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
def _count(dims) -> int | None:
    """The product of dims when all are integers, else None."""
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
    for (node, _port), st in typed.types.items():
        elem = st.elem
        tile = elem.tile if isinstance(elem, Buffer) else elem
        if not isinstance(tile, Tile):
            continue
        dims = (tile.rows, tile.cols) + (tuple(elem.shape) if isinstance(elem, Buffer) else ())
        n = _count(dims)
        if n is not None and n > MAX_TILE_ELEMENTS:
            what = "buffer" if isinstance(elem, Buffer) else "tile"
            raise SimError(f"a {what} of {n:,} elements ({elem}): a run holds tiles and "
                           f"buffers of at most {MAX_TILE_ELEMENTS:,} elements", node)
    for node in prog.nodes.values():
        if not OPS[node.op].external:
            continue
        arr = traces.get(node.attrs["name"])
        st = typed.types.get((node.name, 0))
        n = arr.size if arr is not None else (_count(st.shape) if st is not None else None)
        if n is not None and n > MAX_EXTERNAL_ELEMENTS:
            raise SimError(f"external stream `{node.attrs['name']}` has {n:,} elements: a run "
                           f"holds at most {MAX_EXTERNAL_ELEMENTS:,} per external stream",
                           node.name)


def _bytes(n: int) -> str:
    for scale, unit in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB")):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,} B"


# ---------------------------------------------------------------- build and run
def simulate(typed: TypedProgram, hw: HardwareConfig, traces: dict[str, np.ndarray] | None = None,
             functional: bool = True, trace_ops: bool = False, max_cycles: int | None = None,
             progress=None, values: dict[str, np.ndarray] | None = None,
             analysis: Analysis | None = None, ref_strategy: str = "auto",
             depths: dict[tuple[str, int, str, int], int] | None = None) -> SimResult:
    """Run a checked program on the given hardware. `values` replaces the declared
    contents of the named tensors (weights and inputs loaded from a file). With the
    program's `analysis` and no `max_cycles`, a run whose roofline bound exceeds
    MAX_RUN_CYCLES is refused before it starts. `ref_strategy` says how the `ref` memory
    model serves requests (`stepc.sim.hbm.ref.STRATEGIES`). `depths` sets the depth of
    FIFOs by (producer, port, consumer, input slot), over `depth=` and the hardware's."""
    prog = typed.program
    traces = traces or {}
    check_limits(typed, functional, traces)
    kernel = Kernel(hop=hw.fabric.hop_latency, max_cycles=max_cycles, progress=progress)
    kernel.memory = make_memory(kernel, hw, ref_strategy)
    env = SimEnv(hw, functional, kernel.memory)
    bindings: dict[str, int] = {}

    env.layout = tensor_layout(prog.tensors.values(), kernel.memory.tensor_stagger())
    needed = timing_reads(prog)
    for t in prog.tensors.values():
        if t.role == "output":
            if functional:
                env.written[t.name] = np.zeros(t.shape, dtype=NP_DTYPES[t.dtype])
        elif functional or t.name in needed:
            env.tensors[t.name] = initial_value(t, values)
            if functional and t.role == "scratch":  # stores write what later loads read
                env.tensors[t.name] = env.written[t.name] = np.array(env.tensors[t.name])
    externals = [n for n in prog.nodes.values() if OPS[n.op].external]
    for name in traces:
        if name not in {n.attrs["name"] for n in externals}:
            raise TraceError(f"{given('traces', name)}: the program has no external stream "
                             f"`{name}`"
                             + did_you_mean(name, {n.attrs["name"] for n in externals}))
    data: dict[str, np.ndarray] = {}
    for node in externals:
        name = node.attrs["name"]
        st = typed.types[(node.name, 0)]
        seed = zlib.crc32(name.encode()) % 2**31
        try:
            gen = node.attrs.get("gen", {})
            arr = traces[name] if name in traces else external_file(
                gen, getattr(st.elem, "n", None), len(st.shape))
            elems, dims, data[name] = external_elements(name, st, arr, gen, seed)
        except TraceError as e:
            e.span = e.span or node.span
            raise
        env.externals[node.name] = elems
        bindings.update(dims)
    if analysis is not None and max_cycles is None:
        need = cycles_lower_bound(analysis, typed, hw, data)
        if need is not None and need > MAX_RUN_CYCLES:
            raise SimError(refusal(need))

    # channels: one per stream edge, depth from the consumer's `depth` or the fabric default
    outs: dict[str, list] = {n: [None] * len(node.outputs) for n, node in prog.nodes.items()}
    ins: dict[str, dict] = {n: {} for n in prog.nodes}
    chans = {}
    default_depth = hw.fabric.fifo_depth
    for e in prog.edges:
        node = prog.nodes[e.dst]
        depth = node.attrs.get("depth")
        if isinstance(depth, list):
            depth = depth[e.slot] if e.slot < len(depth) else None
        depth = (depths or {}).get((e.src, e.port, e.dst, e.slot)) or depth or default_depth
        ch = kernel.channel(f"{prog.nodes[e.src].port_label(e.port)} -> {e.dst}",
                            depth, e.src, e.dst)
        if trace_ops:
            ch.log = []
        chans[(e.src, e.port, e.dst, e.slot)] = ch
        outs[e.src][e.port] = ch
        pname, idx = node.inputs[e.slot]
        if idx is None:
            ins[e.dst][pname] = ch
        else:
            ins[e.dst].setdefault(pname, []).append((idx, ch))
    for n, node in prog.nodes.items():
        spec = OPS[node.op]
        for p in spec.stream_params:
            if p.kind in (STREAMS, VARSTREAMS):
                ins[n][p.name] = [ch for _, ch in sorted(ins[n].get(p.name, []),
                                                         key=lambda x: x[0])]
    reads = [n for n, node in prog.nodes.items() if _off_chip(node.op, LOAD)]
    writes = [n for n, node in prog.nodes.items() if _off_chip(node.op, STORE)]
    env.ports = {n: (0, i) for i, n in enumerate(reads)}
    env.ports.update({n: (1, i) for i, n in enumerate(writes)})

    contexts = {}
    for n, node in prog.nodes.items():
        ctx = Ctx(n, node.op)
        ctx.outs = [ch for ch in outs[n] if ch is not None]
        if trace_ops:
            ctx.trace = []
        info = {"in": typed.input_types(n),
                "out": [typed.types.get((n, p)) for p in range(len(node.outputs))]}
        kernel.add(ctx, BEHAVIORS[node.op](ctx, node, ins[n], outs[n], env, info))
        contexts[n] = ctx

    start = time.perf_counter()
    try:
        kernel.run()
    except SimError as e:
        if e.node is None:
            raise
        raise type(e)(str(e), e.node) from None
    wall = time.perf_counter() - start

    blocked = kernel.blocked()
    mem_clock = max((c.t for c in kernel.contexts if _off_chip(c.op)), default=None)
    cycles = max((c.t for c in kernel.contexts), default=0)
    if mem_clock is not None:
        cycles = max(cycles, mem_clock + 2)  # the HBM node's closing handshake (reference)
    stats = kernel.memory.stats
    counts = {}
    for (src, port, _dst, _slot), ch in chans.items():
        st = typed.types.get((src, port))
        if st is not None and any(d.free_symbols for d in st.shape):
            counts[(src, port)] = (st, ch.count)
    merges, declared = _merged_tiles(typed), _declared_dims(typed)
    while True:  # each pass can fix dims that the next pass needs
        known = len(bindings)
        values = {sympy.Symbol(k, integer=True, nonnegative=True): v for k, v in bindings.items()}
        for st, count in counts.values():
            _bind_from_count(st, count, bindings, values)
        for sym, dims in merges:
            _bind_largest(sym, dims, bindings, values)
        for sym, dim in declared:
            _bind_declared(sym, dim, bindings, values)
        if len(bindings) == known:
            break
    result = SimResult(
        prog.name, hw, functional, cycles, stats.read_requests, stats.write_requests,
        sum(env.useful_bytes.values()), sum(env.flops.values()),
        [OpStats(c.name, c.op, c.busy, c.t, c.mem_ops) for c in kernel.contexts],
        {k: sympy.sympify(v) for k, v in bindings.items()},
        outputs={k: v for k, v in env.written.items() if prog.tensors[k].role == "output"}
        if functional else {},
        deadlock=blocked or None, wall_seconds=wall,
        trace={c.name: c.trace for c in kernel.contexts if c.trace},
        fifo={ch.name: (ch.high_water, ch.cap, ch.count) for ch in kernel.channels},
        fifo_bytes=sum(ch.high_water * ch.elem_bytes for ch in kernel.channels),
        fifo_logs={ch.name: ch.log for ch in kernel.channels if ch.log}, memory=stats,
        overrides=hardware_overrides(prog.nodes.values(), hw))
    return result


def _off_chip(op: str, direction: str | None = None) -> bool:
    """Whether `op` loads from or stores to HBM (in `direction`, when given)."""
    memory = OPS[op].memory
    return memory is not None and memory.off_chip and direction in (None, memory.direction)


def _bind_from_count(st: StreamType, count: int, bindings: dict, values: dict) -> None:
    """A stream whose shape has one unknown symbol as a dim: its element count fixes it
    (to the mean, for a ragged dim, which keeps cardinalities exact)."""
    unknown = [d for d in st.shape if d.free_symbols and not d.free_symbols <= values.keys()]
    if len(unknown) != 1 or not unknown[0].is_Symbol or unknown[0].name in bindings:
        return
    sym = unknown[0]
    others = sympy.Mul(*[d for d in st.shape if d is not sym]).xreplace(values)
    if others.free_symbols or others == 0:
        return
    bindings[sym.name] = sympy.Rational(count, int(others))


def _merged_tiles(typed: TypedProgram) -> list[tuple[sympy.Symbol, list[sympy.Expr]]]:
    """The tile dims that merging dynamically sized tiles creates (EagerMerge, Reassemble:
    a fresh row count), each with the same dim of the merged inputs' tiles."""
    out = []
    for name, _node in typed.program.nodes.items():
        st = typed.types.get((name, 0))
        tile = getattr(st, "elem", None)
        if not isinstance(tile, Tile) or not tile.rows.is_Symbol:
            continue
        ins = [typed.types.get((e.src, e.port)) for e in typed.program.in_edges(name)]
        rows = [t.elem.rows for t in ins if isinstance(getattr(t, "elem", None), Tile)]
        if len(rows) > 1 and all(r != tile.rows for r in rows):
            out.append((tile.rows, rows))
    return out


def _bind_largest(sym: sympy.Symbol, dims: list, bindings: dict, values: dict) -> None:
    """A merged tile's row count, once its inputs' are known: the largest of them, the
    tile that the buffers downstream of the merge must hold."""
    if sym.name in bindings:
        return
    known = [sympy.sympify(d).xreplace(values) for d in dims]
    if all(k.is_number for k in known):
        bindings[sym.name] = max(known)


def _declared_dims(typed: TypedProgram) -> list[tuple[sympy.Symbol, sympy.Expr]]:
    """The unknown (`?`) dims of declared streams, each with the dim inferred for it."""
    out = []
    for key, decl in typed.declared.items():
        inferred = typed.types.get(key)
        if inferred is None or len(decl.shape) != len(inferred.shape):
            continue
        pairs = list(zip(decl.shape, inferred.shape))
        if isinstance(decl.elem, Tile) and isinstance(inferred.elem, Tile):
            pairs += [(decl.elem.rows, inferred.elem.rows), (decl.elem.cols, inferred.elem.cols)]
        out += [(d, i) for d, i in pairs if d.is_Symbol and d != i]
    return out


def _bind_declared(sym: sympy.Symbol, dim, bindings: dict, values: dict) -> None:
    """A declared stream's unknown dim takes the value of the dim inferred for it."""
    if sym.name not in bindings:
        known = sympy.sympify(dim).xreplace(values)
        if known.is_number:
            bindings[sym.name] = known
