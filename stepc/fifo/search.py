"""Searching FIFO depths by simulation: the smallest depths at which a program runs within
a tolerance of its cycles with unbounded FIFOs.

FIFOs are searched by class: the FIFOs into one input of one call in the source (the
iterations of a loop, the calls of a function share it), as one `depth=` would set them.
The FIFOs into a fan-out stepc inserted (a stream used twice) are a class of their own that
no `depth=` reaches: they keep the hardware's depth, as the program states it.
One run with unbounded FIFOs gives the reference cycles and each FIFO's high water: the
most elements it ever held, the depth it needs to change nothing. Every later run stops
as soon as it passes the tolerance (the simulator's `max_cycles`): a run that is too slow
costs only the cycles up to the bound.

0. Every FIFO at the hardware's depth, the uniform depth the report compares with: whether
   it deadlocks (the run stops past UNIFORM_LIMIT times the reference cycles).
1. Every class at its static minimum: when that run is within the tolerance, nothing
   smaller exists and the search ends (the bundled MoE layers).
2. Every class at the depth predicted from the reference run's occupancy log
   (`stepc.fifo.predict`), unless those depths hold more bytes than the uniform depth:
   when that run is within the tolerance, it stands for step 3's good run (no budget
   search). Runs 0, 1 and 2 are independent: they run at once on `jobs` cores.
3. Else (the budget search) every class is capped at one budget of bytes `U` per FIFO (the
   depth is `U / element bytes`, never above the high water, never below the static minimum
   under the depths around it), and `U` is bisected, first over powers of two, then within
   the last doubling, for the smallest budget whose run completes within the tolerance:
   FIFOs of small elements on the critical reconvergent paths get the depth they need,
   FIFOs of large tiles only what the cycles ask.
4. Each class is lowered to the most its FIFOs held in that good run (what it used).
5. The rows holding the most bytes are lowered back to their minimum, the longest prefix
   of them (heaviest first, found by bisection) whose run stays within the tolerance, in
   two passes (the second skips the row the first could not lower).

When no budget is good, a run at the high water marks ends the search; when that is not
good either, one run with the fan-outs stepc inserted at what they held with unbounded FIFOs
tells whether those fixed FIFOs are the reason (`SearchResult.fan_outs`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import sympy

from stepc.analyze import analyze
from stepc.fifo.predict import predicted_depths
from stepc.fifo.static import EdgeKey, FifoAnalysis, edge_key
from stepc.fifo.trials import Outcome, Runner, Trial
from stepc.measure import measure

ClassKey = tuple[str, int, bool]  # consumer call's location, input slot, settable
UNBOUNDED_DEPTH = 1 << 20  # a depth no bundled program fills: the unbounded-FIFO reference
UNIFORM_LIMIT = 10  # the run at the uniform depth stops past this many times the reference
REFINE_STEPS = 3  # bisections within the last doubling of the byte budget (to 1/8 of it)
SHRINK_SHARE = 100  # rows holding at least 1/SHRINK_SHARE of the FIFO bytes are lowered
SHRINK_ROUNDS = 2  # passes over them (each skips the row that could not be lowered)


@dataclass
class FifoClass:
    """The FIFOs one `depth=` entry sets: one input slot of one call in the source."""

    key: ClassKey
    edges: list[EdgeKey]
    settable: bool  # the consumer is written in the source (not a fan-out stepc inserted)
    static_minimum: int = 1
    data_dependent: bool = False
    depth: int = 1


@dataclass
class FanOutNeed:
    """A fan-out stepc inserted whose FIFO, at the hardware's depth, keeps the program from
    running within the tolerance: no `depth=` reaches it; an explicit Broadcast's would."""

    edge: EdgeKey  # the FIFO from the stream's producer into the fan-out
    consumers: int
    held: int  # the most it held with unbounded FIFOs: the depth that sufficed


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
    uniform_cycles: int | None = None  # every FIFO at the hardware's depth; 0: deadlock,
    # None: stopped past UNIFORM_LIMIT times the reference
    within_tolerance: bool = False  # the run at the searched depths is
    fan_outs: list[FanOutNeed] = field(default_factory=list)  # deeper, within the tolerance


def fifo_classes(analysis: FifoAnalysis, default_depth: int, bindings: dict) -> list[FifoClass]:
    """The program's FIFOs grouped by the `depth=` entry that sets them, each with its
    static minimum under the given default depth."""
    prog = analysis.typed.program
    by_key: dict[ClassKey, FifoClass] = {}
    for e in prog.edges:
        node = prog.nodes[e.dst]
        key = (str(node.span), e.slot, not node.implicit)
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
                  bindings: dict | None = None, jobs: int = 1) -> SearchResult:
    """Per-class depths within `tolerance` of the unbounded-FIFO cycles (see the module),
    independent runs `jobs` at a time (the answer is the same for any `jobs`)."""
    typed = analysis.typed
    start = time.perf_counter()
    preset = hw.fabric.fifo_depth
    classes = fifo_classes(analysis, preset, bindings or {})
    log: list[str] = []
    costs = analyze(typed, "artifact", hw)  # once: every run binds the same analysis
    runner = Runner(typed, hw, traces, costs, jobs)

    def per_edge(depths: dict[ClassKey, int], edges: dict[EdgeKey, int] | None = None
                 ) -> dict[EdgeKey, int]:
        """Each FIFO's depth: its class's (`edges`: single FIFOs at other depths)."""
        return {k: depths[c.key] for c in classes for k in c.edges} | (edges or {})

    def done(depths, m: Outcome | None, within: bool) -> SearchResult:
        for c in classes:
            c.depth = depths[c.key]
        return SearchResult(classes, reference.result.cycles if not reference.deadlocked
                            else 0, 0 if m is None else m.cycles,
                            runner.runs, time.perf_counter() - start, log,
                            dict(reference.result.bindings),
                            reference.analysis_totals.get("on_chip_bytes"), uniform, within,
                            fan_outs)

    uniform: int | None = None
    fan_outs: list[FanOutNeed] = []
    unbounded = {c.key: UNBOUNDED_DEPTH for c in classes}
    runner.runs += 1  # the reference, here: its occupancy log stays in this process
    reference = measure(typed, hw, traces, functional=False, analysis=costs,
                        depths=per_edge(unbounded), trace_ops=True)
    if reference.deadlocked:
        log.append("deadlocks with unbounded FIFOs: no depth helps")
        return done(unbounded, Outcome(0, {}), False)
    limit = int(reference.result.cycles * (1 + tolerance))  # a run past it stops early
    names = _channel_names(typed)
    high = {c.key: max([1] + [reference.result.fifo[names[k]][0] for k in c.edges])
            for c in classes}
    fixed = {c.key: preset for c in classes if not c.settable}

    known = {**reference.result.bindings, **(bindings or {})}
    each = {c.key: [element_bytes(typed, k, known) for k in c.edges] for c in classes}
    largest = max([b for sizes in each.values() for b in sizes if b] + [1])
    sizes = {k: max(b or largest for b in v) for k, v in each.items()}  # its largest FIFO's
    totals = {k: sum(b or largest for b in v) for k, v in each.items()}  # all its FIFOs'
    of_edge = {k: c.key for c in classes for k in c.edges}

    def capped(budget: int) -> dict[ClassKey, int]:
        return floored({c.key: fixed.get(c.key, max(1, min(high[c.key], budget // sizes[c.key])))
                        for c in classes})

    def floored(depths: dict[ClassKey, int]) -> dict[ClassKey, int]:
        """`depths` raised to the static minima under them."""
        depths = dict(depths)
        floors = analysis.minimum_depths(lambda k: depths[of_edge[k]], bindings)
        for k, (bound, _r) in floors.items():
            c = of_edge[k]
            if c not in fixed and bound.is_number:
                depths[c] = max(depths[c], int(bound))
        return depths

    def good(m: Outcome | None) -> bool:
        return m is not None and not m.deadlocked and m.cycles <= limit

    def trial(depths: dict[ClassKey, int], what: str) -> Outcome | None:
        m = runner.one(Trial(per_edge(depths), limit))
        log.append(f"{what}: {_outcome(m)}")
        return m

    # The uniform run, the static minima and the prediction: independent runs, at once.
    minimum = floored({c.key: fixed.get(c.key, 1) for c in classes})
    logs = {k: reference.result.fifo_logs.get(names[k], []) for k in of_edge}
    looks = {k: reference.result.fifo_looks.get(names[k], []) for k in of_edge}
    predicted = predicted_depths(list(of_edge), logs, looks, hw.fabric.hop_latency)
    guess = floored({c.key: fixed.get(c.key, max(predicted[k] for k in c.edges))
                     for c in classes})
    # The prediction keeps the cycles, not the bytes: one holding more than the uniform
    # depth is left to the budget search, which weighs bytes.
    light = sum(d * totals[k] for k, d in guess.items()) <= preset * sum(totals.values())
    first = [Trial(per_edge({c.key: preset for c in classes}),
                   UNIFORM_LIMIT * reference.result.cycles), Trial(per_edge(minimum), limit)]
    at_preset, best, *rest = runner.all(first + [Trial(per_edge(guess), limit)] * (
        guess != minimum and light))
    uniform = None if at_preset is None else at_preset.cycles
    log.append(f"every FIFO at the uniform depth {preset}: {_outcome(at_preset)}")
    log.append(f"every FIFO at its minimum: {_outcome(best)}")
    if good(best):  # nothing can be smaller
        return done(minimum, best, True)
    def budget_search() -> tuple[dict[ClassKey, int], Outcome | None]:
        """The smallest byte budget per FIFO whose run is within the tolerance (its
        depths and run), else the high water marks' run and the fan-outs it needs."""
        nonlocal fan_outs
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
            best = runner.one(Trial(per_edge(depths)))
            log.append(f"at the high water marks: {_outcome(best)}")
            if not good(best):
                def passes(edges: dict[EdgeKey, int]) -> bool:
                    m = runner.one(Trial(per_edge(depths, edges), limit))
                    log.append(f"the fan-outs stepc inserted at the most they held: {_outcome(m)}")
                    return good(m)
                fan_outs = _fan_outs_needed(classes, names, reference, preset, passes)
                fan_outs = [FanOutNeed(k, int(typed.program.nodes[k[2]].attrs["consumers"]), d)
                            for k, d in fan_outs]
                return depths, best
        return depths, best

    if rest:
        log.append(f"each FIFO at its predicted depth: {_outcome(rest[0])}")
    if rest and good(rest[0]):  # the prediction holds: lowered below as a budget's run
        depths, best = guess, rest[0]
    else:
        depths, best = budget_search()
        if not good(best):
            return done(depths, best, False)
    # Each class down to the most its FIFOs held in the good run: what it used.
    held = {c.key: fixed.get(c.key, max([1] + [best.held[names[k]] for k in c.edges]))
            for c in classes}
    used = floored({k: min(d, held[k]) for k, d in depths.items()})
    if used != depths:
        m = trial(used, "each FIFO at the most it held")
        if good(m):
            depths, best = used, m
    # The budget fits the deepest critical FIFOs; lower the rows holding the most bytes
    # back to their minimum, the longest prefix of them (by bytes) that stays good.
    def weight(k):
        return depths[k] * totals[k]
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
    return done(depths, best, True)


def _fan_outs_needed(classes, names, reference, preset, passes) -> list[tuple[EdgeKey, int]]:
    """The FIFOs into fan-outs stepc inserted that the program needs deeper than the
    hardware's depth to run within the tolerance, with the depth that suffices: those that
    held more with unbounded FIFOs, when the run with them at that (`passes(edges)`, the
    rest as searched) is within it."""
    deeper = {k: reference.result.fifo[names[k]][0] for c in classes if not c.settable
              for k in c.edges if reference.result.fifo[names[k]][0] > preset}
    if not deeper or not passes(deeper):
        return []
    return list(deeper.items())


def _outcome(m: Outcome | None) -> str:
    if m is None:
        return "over the tolerance (stopped)"
    return "deadlock" if m.deadlocked else f"{m.cycles:,} cycles"


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
