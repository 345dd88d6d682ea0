"""Searching FIFO depths by simulation: the smallest depths at which a program runs within
a tolerance of its cycles with unbounded FIFOs.

FIFOs are searched by class: the FIFOs into one input of one call in the source (the
iterations of a loop, the calls of a function share it), as one `depth=` would set them.
One run with unbounded FIFOs gives the reference cycles and each FIFO's high water: the
most elements it ever held, the depth it needs to change nothing. Every later run stops
as soon as it passes the tolerance (the simulator's `max_cycles`): a run that is too slow
costs only the cycles up to the bound.

1. Every class at its static minimum: when that run is within the tolerance, nothing
   smaller exists and the search ends (the bundled MoE layers: two runs).
2. Else every class is capped at one budget of bytes `U` per FIFO (the depth is
   `U / element bytes`, never above the high water, never below the static minimum under
   the depths around it), and `U` is bisected, first over powers of two, then within the
   last doubling, for the smallest budget whose run completes within the tolerance: FIFOs
   of small elements on the critical reconvergent paths get the depth they need, FIFOs of
   large tiles only what the cycles ask.
3. Each class is lowered to the most its FIFOs held in that good run (what it used).
4. The rows holding the most bytes are lowered back to their minimum, the longest prefix
   of them (heaviest first, found by bisection) whose run stays within the tolerance, in
   two passes (the second skips the row the first could not lower).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import sympy

from stepc.analyze import analyze
from stepc.fifo.static import EdgeKey, FifoAnalysis, edge_key
from stepc.measure import Measurement, measure
from stepc.sim.kernel import CycleLimitError

UNBOUNDED_DEPTH = 1 << 20  # a depth no bundled program fills: the unbounded-FIFO reference
REFINE_STEPS = 3  # bisections within the last doubling of the byte budget (to 1/8 of it)
SHRINK_SHARE = 100  # rows holding at least 1/SHRINK_SHARE of the FIFO bytes are lowered
SHRINK_ROUNDS = 2  # passes over them (each skips the row that could not be lowered)


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
    """The searched depths (in `classes`), the cycles with them and with unbounded FIFOs
    (0: deadlocked), and what the search cost."""

    classes: list[FifoClass]
    unbounded_cycles: int
    cycles: int
    runs: int
    seconds: float
    log: list[str] = field(default_factory=list)
    bindings: dict = field(default_factory=dict)  # the dims the reference run determined
    on_chip_bytes: object = None  # the operators' on-chip bytes, bound to the reference run


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
                  bindings: dict | None = None) -> SearchResult:
    """Per-class depths within `tolerance` of the unbounded-FIFO cycles (see the module)."""
    typed = analysis.typed
    start = time.perf_counter()
    classes = fifo_classes(analysis, hw.fabric.fifo_depth, bindings or {})
    runs = [0]
    log: list[str] = []
    costs = analyze(typed, "artifact", hw)  # once: every run binds the same analysis

    def run(depths: dict[tuple[str, int], int], limit: int | None = None) -> Measurement | None:
        """One timing-only run; None when it passed `limit` cycles (it stops there)."""
        runs[0] += 1
        per_edge = {k: depths[c.key] for c in classes for k in c.edges}
        try:
            return measure(typed, hw, traces, functional=False, analysis=costs,
                           depths=per_edge, max_cycles=limit)
        except CycleLimitError:
            if limit is None:
                raise
            return None

    reference = run({c.key: UNBOUNDED_DEPTH for c in classes})
    if reference.deadlocked:
        log.append("deadlocks with unbounded FIFOs: no depth helps")
        return _done(classes, {c.key: UNBOUNDED_DEPTH for c in classes}, reference,
                     reference, runs[0], start, log)
    limit = int(reference.result.cycles * (1 + tolerance))  # a run past it stops early
    names = _channel_names(typed)
    high = {c.key: max([1] + [reference.result.fifo[names[k]][0] for k in c.edges])
            for c in classes}
    fixed = {c.key: hw.fabric.fifo_depth for c in classes if not c.settable}

    known = {**reference.result.bindings, **(bindings or {})}
    sizes = {c.key: element_bytes(typed, c.edges[0], known) for c in classes}
    largest = max([b for b in sizes.values() if b] + [1])
    sizes = {k: b or largest for k, b in sizes.items()}
    of_edge = {k: c.key for c in classes for k in c.edges}

    def capped(budget: int) -> dict[tuple[str, int], int]:
        return floored({c.key: fixed.get(c.key, max(1, min(high[c.key], budget // sizes[c.key])))
                        for c in classes})

    def floored(depths: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """`depths` raised to the static minima under them."""
        depths = dict(depths)
        floors = analysis.minimum_depths(lambda k: depths[of_edge[k]], bindings)
        for k, (bound, _r) in floors.items():
            c = of_edge[k]
            if c not in fixed and bound.is_number:
                depths[c] = max(depths[c], int(bound))
        return depths

    def good(m: Measurement | None) -> bool:
        return m is not None and not m.deadlocked and m.result.cycles <= limit

    def trial(depths: dict[tuple[str, int], int], what: str) -> Measurement | None:
        m = run(depths, limit)
        log.append(f"{what}: {_outcome(m)}")
        return m

    depths = floored({c.key: fixed.get(c.key, 1) for c in classes})
    best = trial(depths, "every FIFO at its minimum")
    if good(best):  # nothing can be smaller
        return _done(classes, depths, reference, best, runs[0], start, log)
    top = max(high[k] * sizes[k] for k in high)
    best = None  # the run at the smallest good budget, once one is found
    low = min(sizes.values())
    coarse, refined = True, 0
    while low < top:
        if coarse and top > 2 * low:  # powers of two first: the budget's magnitude
            mid = 1 << ((low.bit_length() + top.bit_length()) // 2)
            if not low < mid < top:
                coarse = False
                continue
        else:  # then halving within the last doubling
            coarse = False
            if refined == REFINE_STEPS:
                break
            refined += 1
            mid = (low + top) // 2
            if not low < mid < top:
                break
        m = trial(capped(mid), f"{mid:,} B per FIFO")
        if good(m):
            top, best = mid, m
        else:
            low = mid
    depths = capped(top)
    if best is None:  # no smaller budget was good: the high water marks themselves
        best = run(depths)
        log.append(f"at the high water marks: {_outcome(best)}")
        if not good(best):
            return _done(classes, depths, reference, best, runs[0], start, log)
    # Each class down to the most its FIFOs held in the good run: what it used.
    held = {c.key: fixed.get(c.key, max([1] + [best.result.fifo[names[k]][0] for k in c.edges]))
            for c in classes}
    used = floored({k: min(d, held[k]) for k, d in depths.items()})
    if used != depths:
        m = trial(used, "each FIFO at the most it held")
        if good(m):
            depths, best = used, m
    # The budget fits the deepest critical FIFOs; lower the rows holding the most bytes
    # back to their minimum, the longest prefix of them (by bytes) that stays good.
    def weight(k):
        return depths[k] * sizes[k] * members[k]
    members = {c.key: len(c.edges) for c in classes}
    total = sum(weight(k) for k in depths)
    heavy = sorted((k for k in depths if k not in fixed and depths[k] > 1
                    and weight(k) * SHRINK_SHARE >= total), key=weight, reverse=True)
    for _ in range(SHRINK_ROUNDS):
        if not heavy:
            break
        lowered = floored({**depths, **{k: 1 for k in heavy}})
        m = trial(lowered, f"{len(heavy)} heaviest rows at their minimum")
        if good(m):
            depths, best = lowered, m
            break
        fine, bad = 0, len(heavy)  # a prefix of `fine` rows can be lowered, of `bad` not
        while bad - fine > 1:
            mid = (fine + bad) // 2
            lowered = floored({**depths, **{k: 1 for k in heavy[:mid]}})
            m = trial(lowered, f"{mid} heaviest rows at their minimum")
            if good(m):
                fine, depths, best = mid, lowered, m
            else:
                bad = mid
        heavy = heavy[bad:]  # the row at `bad` must stay: try those after it
    return _done(classes, depths, reference, best, runs[0], start, log)


def _outcome(m: Measurement | None) -> str:
    if m is None:
        return "over the tolerance (stopped)"
    return "deadlock" if m.deadlocked else f"{m.result.cycles:,} cycles"


def _done(classes, depths, reference, m, runs, start, log) -> SearchResult:
    for c in classes:
        c.depth = depths[c.key]
    cycles = 0 if m.deadlocked else m.result.cycles
    return SearchResult(classes, 0 if reference.deadlocked else reference.result.cycles,
                        cycles, runs, time.perf_counter() - start, log,
                        dict(reference.result.bindings),
                        reference.analysis_totals.get("on_chip_bytes"))


def _channel_names(typed) -> dict[EdgeKey, str]:
    """The simulator's name of each FIFO."""
    prog = typed.program
    return {edge_key(e): f"{prog.nodes[e.src].port_label(e.port)} -> {e.dst}"
            for e in prog.edges}


def element_bytes(typed, key: EdgeKey, bindings: dict) -> int | None:
    """Bytes of one element of a FIFO's stream, once its dims are bound."""
    st = typed.types.get((key[0], key[1]))
    size = getattr(getattr(st, "elem", None), "bytes", None)
    if size is None:
        return None
    size = sympy.sympify(size)
    size = size.xreplace({s: sympy.sympify(bindings[s.name]) for s in size.free_symbols
                          if s.name in bindings})
    return int(sympy.ceiling(size)) if size.is_number else None
