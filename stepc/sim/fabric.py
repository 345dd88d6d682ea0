"""Fabric timing: the roofline cost of one element on a compute unit, and the simulation
environment behaviors share (configuration, tensors, traces, statistics).

Per element: `max(load, compute, store)` cycles (paper Section 4.3), where
`load = sum over input tiles sitting in an on-chip memory unit of ceil(bytes / onchip_bw)`,
`compute = ceil(FLOPs / compute_bw)` (or a function's fixed cycle count), and
`store = ceil(output bytes / onchip_bw)` when the operator writes back to a memory unit.
Tiles read from off-chip arrive in a memory unit; a compute operator's output is in one
only if it writes back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stepc.graph.program import OpNode
from stepc.hw import HardwareConfig
from stepc.ops import OPS
from stepc.ops.functions import FUNCTIONS
from stepc.sim.hbm.window import MemoryModel
from stepc.sim.tokens import TileVal, payload_bytes


@dataclass
class SimEnv:
    """What behaviors read: hardware, data, and where results go."""

    hw: HardwareConfig
    functional: bool
    memory: MemoryModel  # the off-chip memory model: it also lays out tile addresses
    tensors: dict[str, np.ndarray] = field(default_factory=dict)  # off-chip contents
    layout: dict[str, tuple] = field(default_factory=dict)  # tensor -> (byte address, shape)
    externals: dict[str, list] = field(default_factory=dict)  # name -> [(payload, stop)]
    ports: dict[str, tuple[int, int]] = field(default_factory=dict)  # node -> HBM port
    useful_bytes: dict[str, int] = field(default_factory=dict)  # node -> tile bytes moved
    written: dict[str, np.ndarray] = field(default_factory=dict)  # output tensor contents
    flops: dict[str, int] = field(default_factory=dict)  # node -> FLOPs performed
    peak_onchip: int = 0

    def setting(self, node: OpNode, name: str):
        """An operator attribute that mirrors a hardware key: its own value when the
        program sets it, else the hardware's."""
        value = node.attrs.get(name)
        return value if value is not None else self.hw.value(OPS[node.op].param(name).hw)

    def compute_bw(self, node: OpNode) -> int:
        return self.setting(node, "compute_bw")

    def run_element(self, ctx, free: int, heads: list, cycles: int, label: str) -> int | None:
        """Occupy a compute unit for one element of `cycles` roofline cycles. Its inputs
        (stream `heads`) arrived by now; the unit was free from `free`. With whole tiles the
        element starts when the unit has all of them. With streamed tiles
        (`fabric.stream_tile = P`: tiles move as P x P physical tiles) it starts with the
        first physical tiles of its inputs and ends no earlier than the last one's share of
        the work after the last input is complete. Returns the cycle the first physical
        tile of a streamed output is visible downstream (None: not streamed)."""
        p = self.hw.fabric.stream_tile
        if not p or not any(type(h[1]) is TileVal and h[1].first is not None for h in heads):
            ctx.work(ctx.t, cycles, label)
            return None
        start = max([free] + [h[1].first if type(h[1]) is TileVal and
                              h[1].first is not None else h[0] for h in heads])
        pieces = max(-(-h[1].rows // p) * -(-h[1].cols // p) for h in heads
                     if type(h[1]) is TileVal)
        share = -(-cycles // pieces)
        finish = max(start + cycles, ctx.t + share)
        first = start + share + 1
        ctx.work(finish - cycles, cycles, label)  # the unit's work, packed before its end
        return first if first < finish else None

    def element_cost(self, node: OpNode, fn) -> ElementCost:
        """The roofline cycles of one element of `node` applying function `fn` (see
        `ElementCost`)."""
        return ElementCost(self, node, fn)


class ElementCost:
    """The roofline cycles of one element of a node applying a function, called with its
    arguments and its output (None: not sized by its output); it counts the element's
    FLOPs into the run's `flops`. The node's settings are read once, and the load and
    compute terms and FLOPs (which depend only on the arguments' shapes, types and whether
    they sit in a memory unit) once per kind of arguments (`by_kind`, keyed by `kind`)."""

    __slots__ = ("bw", "fixed", "compute_bw", "write_back", "flops_of", "fn", "by_kind",
                 "totals", "name")

    def __init__(self, env: SimEnv, node: OpNode, fn):
        spec = FUNCTIONS[fn.name]
        self.bw = env.hw.fabric.onchip_bw
        self.fixed = spec.fixed_cycles
        self.compute_bw = env.compute_bw(node) if self.fixed is None else 0
        self.write_back = bool(node.attrs.get("write_back"))
        self.flops_of, self.fn = spec.flops, fn
        self.by_kind: dict[tuple, tuple[int, int]] = {}
        self.totals, self.name = env.flops, node.name

    def terms(self, args: list) -> tuple[int, int]:
        """max(load, compute) cycles and the FLOPs of an element."""
        load = 0
        for a in args:
            if isinstance(a, TileVal) and a.in_mu:
                load += -(-a.nbytes // self.bw)
        fixed = self.fixed
        flops = 0 if fixed is not None else int(self.flops_of(args, self.fn))
        compute = fixed if fixed is not None else -(-flops // self.compute_bw)
        return max(load, compute), flops

    def known(self, key: tuple | None, args: list) -> tuple[int, int]:
        """The terms of arguments of kind `key` (None: not memoised), worked out once."""
        known = self.by_kind.get(key) if key is not None else None
        if known is None:
            known = self.terms(args)
            if key is not None:
                self.by_kind[key] = known
        return known

    def finish(self, known: tuple[int, int], out) -> int:
        """An element's cycles from its terms: its FLOPs counted, its store (when the node
        writes back) weighed against them."""
        cycles, flops = known
        if flops:
            self.totals[self.name] = self.totals.get(self.name, 0) + flops
        if self.write_back and out is not None:
            store = -(-payload_bytes(out) // self.bw)
            if store > cycles:
                return store
        return cycles

    def __call__(self, args: list, out) -> int:
        return self.finish(self.known(kind(args), args), out)


def kind(args: list) -> tuple | None:
    """What an element's terms depend on: each argument tile's shape, type and whether it
    sits in a memory unit (None: an argument is not a tile)."""
    key: tuple = ()
    for a in args:
        if type(a) is not TileVal:
            return None
        key += (a.rows, a.cols, a.dtype, a.in_mu)
    return key


@dataclass(frozen=True)
class Override:
    """Operators that set an attribute mirroring a hardware key to their own value."""

    attr: str
    value: object
    key: str  # the hardware key, e.g. "fabric.compute_bw"
    hw_value: object
    nodes: tuple[str, ...]


def hardware_overrides(nodes, hw: HardwareConfig) -> list[Override]:
    """Which operators override which hardware keys with another value, grouped by
    (attribute, value); an attribute equal to the hardware's value overrides nothing."""
    groups: dict[tuple, list[str]] = {}
    for node in nodes:
        for p in OPS[node.op].hw_params:
            value = node.attrs.get(p.name)
            if value is not None and not _same(value, hw.value(p.hw)):
                key = (p.name, tuple(value) if isinstance(value, list) else value, p.hw)
                groups.setdefault(key, []).append(node.name)
    return [Override(attr, list(v) if isinstance(v, tuple) else v, key, hw.value(key),
                     tuple(names)) for (attr, v, key), names in sorted(
                         groups.items(), key=lambda g: (g[0][0], str(g[0][1])))]


def _same(value, hw_value) -> bool:
    """Whether an operator's attribute equals the hardware's value (lists as tuples)."""
    def norm(v):
        return tuple(v) if isinstance(v, (list, tuple)) else v
    return norm(value) == norm(hw_value)
