"""Building and running a simulation of a checked program.

`simulate(typed, hw, ...)` goes in three steps a reader can follow:

- `build`: materialise the data the run needs (`load_data`: tensor contents, external
  streams from traces or seeded generators; `stepc.sim.data`), wire one FIFO per stream
  edge (`wire_fifos`) and make one context per operator running its behavior
  (`make_contexts`);
- `run` the kernel;
- `bind` the dims the run determined (`stepc.sim.bind`) and collect the results
  (`collect`): cycles, off-chip traffic (in requests and in useful bytes), per-operator
  busy time, and in functional mode the output tensors.
"""

from __future__ import annotations

import gc
import time
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import sympy

from stepc.diagnostics import did_you_mean
from stepc.hw import HardwareConfig
from stepc.ops import OPS
from stepc.ops.base import LOAD, STORE, STREAMS, VARSTREAMS
from stepc.sim.behaviors import BEHAVIORS
from stepc.sim.behaviors.memory import tensor_layout
from stepc.sim.bind import bind_dims
from stepc.sim.data import check_limits, external_elements, initial_value, timing_reads
from stepc.sim.estimate import MAX_RUN_CYCLES, cycles_lower_bound, refusal
from stepc.sim.fabric import Override, SimEnv, hardware_overrides
from stepc.sim.hbm import MemoryStats, make_memory
from stepc.sim.kernel import Blocked, Channel, Kernel, SimError, core
from stepc.sim.native import compiled
from stepc.sim.tokens import NP_DTYPES
from stepc.spelling import given
from stepc.traces import TraceError, external_file
from stepc.typecheck.checker import TypedProgram

RUN_GC_ALLOCATIONS = 100_000  # net allocations between sweeps of the youngest generation

if TYPE_CHECKING:
    from stepc.analyze import Analysis
    from stepc.fifo.static import EdgeKey


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
    fifo_looks: dict[str, list] = field(default_factory=dict)  # FIFO -> per element, the
    #                                   cycle its consumer first wanted it (traced runs)
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


@dataclass
class Build:
    """A program made ready to run: its kernel holding one context per operator and one
    FIFO per stream edge, the environment the behaviors share, and the dims its data
    fixed."""

    typed: TypedProgram
    hw: HardwareConfig
    functional: bool
    kernel: Kernel
    env: SimEnv
    chans: dict[EdgeKey, Channel]
    bindings: dict[str, int]


def simulate(typed: TypedProgram, hw: HardwareConfig, traces: dict[str, np.ndarray] | None = None,
             functional: bool = True, trace_ops: bool = False, max_cycles: int | None = None,
             progress=None, values: dict[str, np.ndarray] | None = None,
             analysis: Analysis | None = None, ref_strategy: str = "auto",
             depths: dict[EdgeKey, int] | None = None) -> SimResult:
    """Run a checked program on the given hardware. `values` replaces the declared
    contents of the named tensors (weights and inputs loaded from a file). With the
    program's `analysis` and no `max_cycles`, a run whose roofline bound exceeds
    MAX_RUN_CYCLES is refused before it starts. `ref_strategy` says how the `ref` memory
    model serves requests (`stepc.sim.hbm.ref.STRATEGIES`). `depths` sets the depth of
    FIFOs by (producer, port, consumer, input slot), over `depth=` and the hardware's."""
    with fewer_collections():
        built = build(typed, hw, traces or {}, functional, trace_ops, max_cycles, progress,
                      values, analysis, ref_strategy, depths or {})
        wall = run(built.kernel)
        result = collect(built, bind_dims(typed, built.chans, built.bindings), wall)
        release(built.kernel)
        del built  # its objects go now, not in a sweep of the collector
        return result


@contextmanager
def fewer_collections():
    """The cyclic collector's youngest generation swept every RUN_GC_ALLOCATIONS net
    allocations instead of 700: a run allocates its FIFOs, contexts and millions of
    short-lived tuples and tiles, few of them in cycles, and each older-generation sweep
    walks the whole heap (the checked program with it)."""
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], RUN_GC_ALLOCATIONS), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)


# ---------------------------------------------------------------- build
def build(typed: TypedProgram, hw: HardwareConfig, traces: dict[str, np.ndarray],
          functional: bool, trace_ops: bool, max_cycles: int | None, progress,
          values: dict[str, np.ndarray] | None, analysis: Analysis | None, ref_strategy: str,
          depths: dict[EdgeKey, int]) -> Build:
    """The data, FIFOs and contexts of a run, checked against what a run holds and (with
    `analysis` and no `max_cycles`) how long it may take."""
    check_limits(typed, functional, traces)
    kernel = core().Kernel(hop=hw.fabric.hop_latency, max_cycles=max_cycles, progress=progress)
    kernel.memory = make_memory(kernel, hw, ref_strategy)
    env = SimEnv(hw, functional, kernel.memory)
    bindings, data = load_data(typed, env, traces, values)
    if analysis is not None and max_cycles is None:
        need = cycles_lower_bound(analysis, typed, hw, data)
        if need is not None and need > MAX_RUN_CYCLES:
            raise SimError(refusal(need))
    chans, ins, outs = wire_fifos(typed.program, kernel, hw.fabric.fifo_depth, depths, trace_ops)
    env.ports = hbm_ports(typed.program)
    make_contexts(typed, kernel, env, ins, outs, trace_ops)
    return Build(typed, hw, functional, kernel, env, chans, bindings)


def load_data(typed: TypedProgram, env: SimEnv, traces: dict[str, np.ndarray],
              values: dict[str, np.ndarray] | None) -> tuple[dict[str, int], dict]:
    """Fill `env` with the tensors' layout and contents (all in a functional run, those
    read for addresses or selectors in a timing-only one) and the external streams'
    elements; return the dims that data fixes and each external stream's data."""
    prog, functional = typed.program, env.functional
    bindings: dict[str, int] = {}
    env.layout = tensor_layout(prog.tensors.values(), env.memory.tensor_stagger())
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
    return bindings, data


def wire_fifos(prog, kernel: Kernel, default_depth: int, depths: dict[EdgeKey, int],
               trace_ops: bool) -> tuple[dict[EdgeKey, Channel], dict[str, dict],
                                         dict[str, list]]:
    """One FIFO per stream edge, its depth from `depths`, else the consumer's `depth`, else
    `default_depth`; returns them by edge, and each node's inputs (by parameter: a FIFO,
    or a list in slot order) and outputs (by port)."""
    outs: dict[str, list] = {n: [None] * len(node.outputs) for n, node in prog.nodes.items()}
    ins: dict[str, dict] = {n: {} for n in prog.nodes}
    chans = {}
    for e in prog.edges:
        node = prog.nodes[e.dst]
        depth = node.attrs.get("depth")
        if isinstance(depth, list):
            depth = depth[e.slot] if e.slot < len(depth) else None
        depth = depths.get((e.src, e.port, e.dst, e.slot)) or depth or default_depth
        ch = kernel.channel(f"{prog.nodes[e.src].port_label(e.port)} -> {e.dst}",
                            depth, e.src, e.dst)
        if trace_ops:
            ch.log, ch.looks = [], []
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
    return chans, ins, outs


def hbm_ports(prog) -> dict[str, tuple[int, int]]:
    """Each off-chip load's read port (0, i) and each store's write port (1, i)."""
    reads, writes = [], []
    for n, node in prog.nodes.items():
        memory = OPS[node.op].memory
        if memory is not None and memory.off_chip and memory.direction in (LOAD, STORE):
            (reads if memory.direction == LOAD else writes).append(n)
    ports = {n: (0, i) for i, n in enumerate(reads)}
    ports.update({n: (1, i) for i, n in enumerate(writes)})
    return ports


def make_contexts(typed: TypedProgram, kernel: Kernel, env: SimEnv, ins: dict[str, dict],
                  outs: dict[str, list], trace_ops: bool) -> None:
    """One context per operator, running its behavior on its FIFOs (or, in the compiled
    core, its compiled machine where it has one)."""
    machines = compiled_machines(kernel)
    for n, node in typed.program.nodes.items():
        ctx = kernel.context(n, node.op)
        ctx.outs = [ch for ch in outs[n] if ch is not None]
        if trace_ops:
            ctx.trace = []
        behavior = machines.get(node.op) or BEHAVIORS[node.op]
        kernel.add(ctx, behavior(ctx, node, ins[n], outs[n], env, NodeTypes(typed, n)))


class NodeTypes:
    """What a behavior reads of its node's stream types: `["in"]`, its inputs' by parameter
    (`TypedProgram.input_types`), and `["out"]`, its outputs' by port; each worked out when
    first read (most behaviors read neither)."""

    __slots__ = ("typed", "node", "known")

    def __init__(self, typed: TypedProgram, node: str):
        self.typed, self.node, self.known = typed, node, {}

    def __getitem__(self, key: str):
        if key not in self.known:
            if key == "in":
                self.known[key] = self.typed.input_types(self.node)
            elif key == "out":
                outputs = self.typed.program.nodes[self.node].outputs
                self.known[key] = [self.typed.types.get((self.node, p))
                                   for p in range(len(outputs))]
            else:
                raise KeyError(key)
        return self.known[key]


def compiled_machines(kernel: Kernel) -> dict:
    """The operators a compiled kernel runs as compiled machines (`stepc.sim._machines`),
    by name; none in the Python core."""
    if isinstance(kernel, Kernel):
        return {}
    machines = compiled("stepc.sim._machines")
    return machines.MACHINES if machines is not None else {}


# ---------------------------------------------------------------- run and collect
def run(kernel: Kernel) -> float:
    """Run the kernel to the end; the wall-clock seconds it took. An error at an operator
    is raised anew (without the kernel's frames)."""
    start = time.perf_counter()
    try:
        kernel.run()
    except SimError as e:
        if e.node is None:
            raise
        raise type(e)(str(e), e.node) from None
    return time.perf_counter() - start


def collect(built: Build, bindings: dict[str, sympy.Expr], wall: float) -> SimResult:
    """What the run measured, with the dims it determined (`bindings`)."""
    kernel, env, prog = built.kernel, built.env, built.typed.program
    blocked = kernel.blocked()
    mem_clock = max((c.t for c in kernel.contexts if _off_chip(c.op)), default=None)
    cycles = max((c.t for c in kernel.contexts), default=0)
    if mem_clock is not None:
        cycles = max(cycles, mem_clock + 2)  # the HBM node's closing handshake (reference)
    stats = kernel.memory.stats
    return SimResult(
        prog.name, built.hw, built.functional, cycles, stats.read_requests,
        stats.write_requests, sum(env.useful_bytes.values()), sum(env.flops.values()),
        [OpStats(c.name, c.op, c.busy, c.t, c.mem_ops) for c in kernel.contexts], bindings,
        outputs={k: v for k, v in env.written.items() if prog.tensors[k].role == "output"}
        if built.functional else {},
        deadlock=blocked or None, wall_seconds=wall,
        trace={c.name: c.trace for c in kernel.contexts if c.trace},
        fifo={ch.name: (ch.high_water, ch.cap, ch.count) for ch in kernel.channels},
        fifo_bytes=sum(ch.high_water * ch.elem_bytes for ch in kernel.channels),
        fifo_logs={ch.name: ch.log for ch in kernel.channels if ch.log},
        fifo_looks={ch.name: ch.looks for ch in kernel.channels if ch.looks}, memory=stats,
        overrides=hardware_overrides(prog.nodes.values(), built.hw))


def release(kernel: Kernel) -> None:
    """Break a finished run's reference cycles (each context and its generator, each FIFO
    and the contexts waiting on it, the kernel and its memory model), so that its objects
    go as soon as the run is dropped instead of in a sweep of the cyclic collector, which
    would walk every one of them first."""
    for ctx in kernel.contexts:
        ctx.gen = None
    for ch in kernel.channels:
        ch.recv_waiter = ch.send_waiter = None
    kernel.contexts.clear()
    kernel.channels.clear()
    kernel.memory = None


def _off_chip(op: str, direction: str | None = None) -> bool:
    """Whether `op` loads from or stores to HBM (in `direction`, when given)."""
    memory = OPS[op].memory
    return memory is not None and memory.off_chip and direction in (None, memory.direction)
