"""Searching FIFO depths by simulation: the smallest depths at which a program completes,
and those at which it runs within a tolerance of its cycles with unbounded FIFOs.

FIFOs are searched by class: the FIFOs into one input of one call in the source (the
iterations of a loop, the calls of a function share it), as one `depth=` would set them.
The search starts every class at its static minimum (1 where the analysis sets none) and
is guided by the runs: a deadlock names the full FIFOs that block it, which are doubled;
a run too slow doubles the classes whose FIFOs filled up (the back-pressure on its critical
paths). Then each class is bisected down to the smallest depth that keeps the run deadlock
free and within the tolerance, the others held.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import sympy

from stepc.fifo.static import EdgeKey, FifoAnalysis, edge_key
from stepc.measure import Measurement, measure

UNBOUNDED_DEPTH = 1 << 20  # a depth no bundled program fills: the unbounded-FIFO reference
MAX_ROUNDS = 24  # doublings before the search gives up on a class


@dataclass
class FifoClass:
    """The FIFOs one `depth=` entry sets: one input slot of one call in the source."""

    key: tuple[str, int]  # (consumer call's location, input slot)
    edges: list[EdgeKey]
    settable: bool  # the consumer is written in the source (not a fan-out stepc inserted)
    static_minimum: int = 1
    data_dependent: bool = False
    depth: int = 1


@dataclass
class SearchResult:
    classes: list[FifoClass]
    unbounded_cycles: int
    cycles: int
    runs: int
    seconds: float
    log: list[str] = field(default_factory=list)


def fifo_classes(analysis: FifoAnalysis, default_depth: int, bindings: dict) -> list[FifoClass]:
    """The program's FIFOs grouped by the `depth=` entry that sets them, each with its
    static minimum under the given default depth."""
    prog = analysis.typed.program
    by_key: dict[tuple[str, int], FifoClass] = {}
    for e in prog.edges:
        node = prog.nodes[e.dst]
        key = (str(node.span), e.slot)
        c = by_key.setdefault(key, FifoClass(key, [], not node.implicit))
        c.edges.append(edge_key(e))
    minima = analysis.minimum_depths(lambda k: default_depth, bindings)
    routed = {k for r in analysis.reconvergences if r.data_dependent for k in r.needs}
    for c in by_key.values():
        for k in c.edges:
            if k in minima and minima[k][0].is_number:
                c.static_minimum = max(c.static_minimum, int(minima[k][0]))
            c.data_dependent |= k in routed
    return list(by_key.values())


def search_depths(analysis: FifoAnalysis, hw, traces=None, tolerance: float = 0.01,
                  bindings: dict | None = None, budget_seconds: float = 120.0) -> SearchResult:
    """Per-class depths within `tolerance` of the unbounded-FIFO cycles (see the module)."""
    typed = analysis.typed
    start = time.perf_counter()
    classes = fifo_classes(analysis, hw.fabric.fifo_depth, bindings or {})
    runs = [0]
    log: list[str] = []

    def run(depths: dict[tuple[str, int], int]) -> Measurement:
        runs[0] += 1
        per_edge = {k: depths[c.key] for c in classes for k in c.edges}
        return measure(typed, hw, traces, functional=False, depths=per_edge)

    free = {c.key: UNBOUNDED_DEPTH for c in classes}
    reference = run(free)
    if reference.deadlocked:
        return SearchResult(classes, 0, 0, runs[0], time.perf_counter() - start,
                            ["deadlocks with unbounded FIFOs: no depth helps"])
    target = reference.result.cycles * (1 + tolerance)
    fixed = {c.key: hw.fabric.fifo_depth for c in classes if not c.settable}
    depths = {c.key: fixed.get(c.key, c.static_minimum) for c in classes}
    by_channel = _channel_classes(typed, classes)

    def good(m: Measurement) -> bool:
        return not m.deadlocked and m.result.cycles <= target

    m = run(depths)
    for _ in range(MAX_ROUNDS):
        if good(m):
            break
        if m.deadlocked:
            grow = {by_channel[b.channel] for b in m.result.deadlock
                    if b.waiting == "full output" and b.channel in by_channel}
        else:
            grow = {by_channel[name] for name, (high, cap, _n) in m.result.fifo.items()
                    if high >= cap and name in by_channel}
        grow -= set(fixed)
        if not grow:
            grow = {c.key for c in classes if c.settable}
        for k in grow:
            depths[k] = min(depths[k] * 2, UNBOUNDED_DEPTH)
        log.append(f"{'deadlock' if m.deadlocked else m.result.cycles}: doubled "
                   f"{len(grow)} classes")
        m = run(depths)
    if not good(m):
        log.append("no depths within the tolerance found")
        return _done(classes, depths, reference, m, runs[0], start, log)
    for c in sorted(classes, key=lambda c: -depths[c.key]):
        low, high = c.static_minimum, depths[c.key]
        if c.key in fixed or high <= low:
            continue
        if time.perf_counter() - start > budget_seconds:
            log.append("time budget spent: later classes not bisected")
            break
        while low < high:
            mid = (low + high) // 2
            trial = run({**depths, c.key: mid})
            if good(trial):
                high, m = mid, trial
            else:
                low = mid + 1
        depths[c.key] = high
    m = run(depths)
    return _done(classes, depths, reference, m, runs[0], start, log)


def _done(classes, depths, reference, m, runs, start, log) -> SearchResult:
    for c in classes:
        c.depth = depths[c.key]
    cycles = 0 if m.deadlocked else m.result.cycles
    return SearchResult(classes, reference.result.cycles, cycles, runs,
                        time.perf_counter() - start, log)


def _channel_classes(typed, classes: list[FifoClass]) -> dict[str, tuple[str, int]]:
    """The class of each simulator channel, by the channel's name."""
    prog = typed.program
    out = {}
    for c in classes:
        for src, port, dst, _slot in c.edges:
            out[f"{prog.nodes[src].port_label(port)} -> {dst}"] = c.key
    return out


def element_bytes(typed, key: EdgeKey, bindings: dict) -> int | None:
    """Bytes of one element of a FIFO's stream, once its dims are bound."""
    st = typed.types.get((key[0], key[1]))
    size = getattr(getattr(st, "elem", None), "bytes", None)
    if size is None:
        return None
    values = {sympy.Symbol(k, integer=True, nonnegative=True): v for k, v in bindings.items()}
    size = sympy.sympify(size).xreplace(values)
    return int(size) if size.is_number else None
