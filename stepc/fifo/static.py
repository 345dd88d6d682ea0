"""Static FIFO analysis: reconvergent paths, the depth below which a FIFO must deadlock,
and feedback loops no depth can start.

A fork (an operator copying each element to several outputs) whose branches meet again at
one operator (a join: a Map over several streams, a load with a reference stream, ...)
deadlocks when a branch must take in many of the fork's elements before its first element
reaches the join (an Accum over a chunk, a Bufferize) while the join waits for it: the fork
sends every copy together, so the other branch's FIFOs must hold all those elements.

For each branch the analysis walks back from the join to the fork and counts the fork's
elements the branch needs before the join gets its first element: through an operator,
`need_in = ceil(need_out * elements(in) / elements(out))` from the inferred stream shapes
(an Accum over C elements needs C inputs for its first output, a Repeat one). The branch
needing the most (the slow one) sets what the others must buffer; the FIFO into the join on
a fast branch needs `need_slow - need_fast + 1` elements less what the branch's other FIFOs
hold (an operator holds its input in its FIFO until its output is sent). Where selectors
route elements (Partition, Reassemble) the need depends on the data: the analysis says so
and the search (`stepc.fifo.search`) measures it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from stepc.graph.program import Edge
from stepc.ops import OPS
from stepc.typecheck.checker import TypedProgram, flat_types
from stepc.types import Select

EdgeKey = tuple[str, int, str, int]  # producer, port, consumer, input slot
# Operators that emit from whichever input has an element (they do not wait for all of
# them): a feedback loop through one can start without a fed-back element.
EAGER_INPUTS = {"EagerMerge"}


def edge_key(e: Edge) -> EdgeKey:
    return (e.src, e.port, e.dst, e.slot)


@dataclass
class Reconvergence:
    """A fork whose branches meet again at a join."""

    fork: str
    join: str
    needs: dict[EdgeKey, sympy.Expr | None]  # join input -> fork elements before its first
    data_dependent: str | None = None  # why the needs depend on the data (None: they don't)
    paths: dict[EdgeKey, list[Edge]] = field(default_factory=dict)  # fork -> join input


@dataclass
class DeadLoop:
    """A feedback loop that no element ever enters."""

    feedback: Edge
    nodes: list[str]
    reason: str


@dataclass
class FifoAnalysis:
    """Every reconvergence and dead loop of a program, and the static minimum depths."""

    typed: TypedProgram
    reconvergences: list[Reconvergence]
    loops: list[DeadLoop]
    counts: _Counts = field(repr=False, default=None)

    def minimum_depths(self, depth_of, bindings: dict | None = None
                       ) -> dict[EdgeKey, tuple[sympy.Expr, Reconvergence]]:
        """The smallest depth of each fast-branch FIFO into a join below which the program
        must deadlock, given the depths of the other FIFOs (`depth_of(edge_key)`), bound to
        `bindings` (symbol name -> value) where given; the largest over the reconvergences
        a FIFO is on."""
        named = {k: sympy.sympify(v) for k, v in (bindings or {}).items()}

        def bind(expr):
            expr = sympy.sympify(expr)
            return expr.xreplace({s: named[s.name] for s in expr.free_symbols
                                  if s.name in named})
        out: dict[EdgeKey, tuple[sympy.Expr, Reconvergence]] = {}
        counts = self.counts
        for r in self.reconvergences:
            if r.data_dependent:
                continue
            needs = {k: bind(v) for k, v in r.needs.items()}
            slow = sympy.Max(*needs.values())
            for k, need in needs.items():
                if need == slow:
                    continue
                path = r.paths[k]
                fork_count = counts.of(path[0])
                held = sum((sympy.Integer(depth_of(edge_key(e))) *
                            fork_count / counts.of(e) for e in path[:-1]), sympy.Integer(0))
                rate = counts.of(path[-1]) / fork_count
                bound = sympy.ceiling(bind(rate) * (slow - need + 1 - bind(held)))
                bound = sympy.Max(1, bound)
                old = out.get(k)
                out[k] = (bound if old is None else sympy.Max(old[0], bound), r)
        return out


class _Counts:
    """Elements of each stream, from its inferred shape."""

    def __init__(self, typed: TypedProgram):
        self.typed = typed
        self.memo: dict[tuple[str, int], sympy.Expr] = {}
        self.ratios: dict[tuple, sympy.Expr] = {}  # _ceil_ratio's, up to renamed symbols

    def of(self, e: Edge) -> sympy.Expr:
        """Elements of the stream, its dims taken as positive: a stream the join waits on
        has elements (`(1 if n > 0 else 0)` counts as 1)."""
        key = (e.src, e.port)
        if key not in self.memo:
            st = self.typed.types.get(key)
            n = sympy.Mul(*st.shape) if st is not None and st.shape else sympy.Integer(1)
            n = n.xreplace({s: sympy.Symbol(s.name, integer=True, positive=True)
                            for s in n.free_symbols})
            self.memo[key] = n if n != 0 else sympy.Integer(1)
        return self.memo[key]

    def ceil_ratio(self, need: sympy.Expr, num: sympy.Expr, den: sympy.Expr) -> sympy.Expr:
        """`_ceil_ratio`, remembered up to a renaming of the symbols: the experts of a MoE
        layer ask the same question, each in its own dims, and sympy's ceiling of an
        expression is slow."""
        if num == den:
            return need
        names = sorted({s for v in (need, num, den) for s in v.free_symbols},
                       key=lambda s: s.name)
        if not names:
            return _ceil_ratio(need, num, den)
        canonical = {s: sympy.Symbol(f"_s{i}", **s.assumptions0) for i, s in enumerate(names)}
        key = tuple(v.xreplace(canonical) for v in (need, num, den))
        if key not in self.ratios:
            self.ratios[key] = _ceil_ratio(*key)
        return _renamed(self.ratios[key], {c: s for s, c in canonical.items()})


def analyze_fifos(typed: TypedProgram) -> FifoAnalysis:
    """Find the reconvergent paths and dead feedback loops of a checked program."""
    prog = typed.program
    order = _topological(prog)
    bit = {n: 1 << i for i, n in enumerate(order)}
    forward = [e for e in prog.edges if not e.feedback]
    ins: dict[str, list[Edge]] = {n: [] for n in prog.nodes}
    outs: dict[str, list[Edge]] = {n: [] for n in prog.nodes}
    for e in forward:
        ins[e.dst].append(e)
        outs[e.src].append(e)
    anc: dict[str, int] = {}
    for n in order:
        a = 0
        for e in ins[n]:
            a |= anc[e.src] | bit[e.src]
        anc[n] = a
    forks = 0
    for n in prog.nodes:
        if len(outs[n]) > 1:
            forks |= bit[n]
    counts = _Counts(typed)
    found: list[Reconvergence] = []
    for join in order:
        edges = ins[join]
        if len(edges) < 2:
            continue
        reach = [anc[e.src] | bit[e.src] for e in edges]
        for fork in _lowest_common_forks(reach, forks, order, anc, bit):
            fb = bit[fork]
            branch = [e for e, r in zip(edges, reach) if r & fb]
            if len(branch) < 2:
                continue
            found.append(_reconvergence(typed, fork, join, branch, anc, bit, outs, order,
                                        counts))
    return FifoAnalysis(typed, found, _dead_loops(typed, anc, bit), counts)


def _topological(prog) -> list[str]:
    import networkx as nx
    g = nx.DiGraph()
    g.add_nodes_from(prog.nodes)
    g.add_edges_from((e.src, e.dst) for e in prog.edges if not e.feedback)
    position = prog.order or {n: i for i, n in enumerate(prog.nodes)}
    return list(nx.lexicographical_topological_sort(g, key=lambda n: position.get(n, 0)))


def _lowest_common_forks(reach: list[int], forks: int, order, anc, bit) -> list[str]:
    """The forks every pair of join inputs shares that are not upstream of another one."""
    common = 0
    for i in range(len(reach)):
        for j in range(i + 1, len(reach)):
            common |= reach[i] & reach[j]
    common &= forks
    names = [order[i] for i in _bits(common)]
    return [f for f in names if not any(anc[g] & bit[f] for g in names if g != f)]


def _reconvergence(typed, fork, join, branch, anc, bit, outs, order, counts) -> Reconvergence:
    """Each join input's need of fork elements before its first element arrives."""
    fb = bit[fork]
    needs: dict[EdgeKey, sympy.Expr | None] = {}
    paths: dict[EdgeKey, list[Edge]] = {}
    why = None if OPS[typed.program.nodes[fork].op].fan_out else (
        f"`{fork}` routes its elements to its outputs by the data")
    for last in branch:
        upstream = [order[i] for i in _bits(anc[last.src] | bit[last.src])]
        inside = {n for n in upstream if anc[n] & fb}
        inside.add(fork)
        need: dict[EdgeKey, sympy.Expr] = {edge_key(last): sympy.Integer(1)}
        best: dict[EdgeKey, Edge] = {}  # edge -> the downstream edge its need came from
        for n in reversed(upstream):  # downstream first
            here = [o for o in outs[n] if edge_key(o) in need]
            if not here or n == fork or n not in inside:
                continue
            if why is None and _routes_by_data(typed, n):
                why = f"`{n}` ({typed.program.nodes[n].op}) routes by selectors"
            for i in (e for e in typed.program.in_edges(n) if not e.feedback and
                      (e.src in inside)):
                for o in here:
                    v = counts.ceil_ratio(need[edge_key(o)], counts.of(i), counts.of(o))
                    k = edge_key(i)
                    if k not in need or _larger(v, need[k]):
                        need[k], best[k] = v, o
        starts = [o for o in outs[fork] if edge_key(o) in need]
        first = max(starts, key=lambda o: _sort_value(need[edge_key(o)]))
        needs[edge_key(last)] = need[edge_key(first)]
        path, e = [first], first
        while edge_key(e) in best:
            e = best[edge_key(e)]
            path.append(e)
        paths[edge_key(last)] = path
    return Reconvergence(fork, join, needs, why, paths)


def _renamed(expr: sympy.Expr, names: dict) -> sympy.Expr:
    """`expr` with its symbols renamed, its ceilings and floors kept as they are (they were
    evaluated under the old names: evaluating them again asks sympy's assumptions, slowly)."""
    if expr in names:
        return names[expr]
    if not expr.args:
        return expr
    args = [_renamed(a, names) for a in expr.args]
    if isinstance(expr, (sympy.ceiling, sympy.floor)):
        return expr.func(*args, evaluate=False)
    return expr.func(*args)


def _bits(mask: int) -> list[int]:
    """The positions of the set bits of `mask`, lowest first."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def _ceil_ratio(need: sympy.Expr, num: sympy.Expr, den: sympy.Expr) -> sympy.Expr:
    """ceil(need * num / den), in integers when all three are numbers (sympy's ceiling of a
    number asks its assumptions, slowly)."""
    if num == den:
        return need
    if need.is_Integer and num.is_Integer and den.is_Integer:
        return sympy.Integer(-(-int(need) * int(num) // int(den)))
    ratio = need * num / den
    if ratio.is_Integer:
        return ratio
    if ratio.is_Rational:
        return sympy.Integer(-(-ratio.p // ratio.q))
    return sympy.ceiling(ratio)


def _routes_by_data(typed: TypedProgram, node: str) -> bool:
    """Whether an operator reads a selector stream (its routing depends on the data)."""
    return any(isinstance(getattr(t, "elem", None), Select)
               for t in flat_types(typed.input_types(node).values()))


def _larger(a: sympy.Expr, b: sympy.Expr) -> bool:
    d = sympy.sympify(a - b)
    if d.is_number:
        return bool(d > 0)
    return _sort_value(a) > _sort_value(b)


def _sort_value(v: sympy.Expr) -> float:
    """A number to compare symbolic needs by: each symbol taken as 64."""
    v = sympy.sympify(v)
    if v.is_number:
        return float(v)
    try:
        return float(v.xreplace({s: 64 for s in v.free_symbols}))
    except (TypeError, ValueError):
        return 0.0


def _dead_loops(typed: TypedProgram, anc: dict, bit: dict) -> list[DeadLoop]:
    """Feedback loops that no element from outside enters: no operator on them emits from
    whichever input has an element while one of its inputs comes from outside the loop, so
    every operator on them waits for the fed-back stream, which nothing ever fills."""
    prog = typed.program
    loops = []
    for e in prog.edges:
        if not e.feedback:
            continue
        start = bit[e.dst]
        if e.src != e.dst and not anc[e.src] & start:
            continue  # this consumer of the fed-back stream is on no loop
        on = [n for n in anc if (anc[n] & start or n == e.dst) and
              (anc[e.src] & bit[n] or n == e.src)]
        inside = set(on)
        if any(prog.nodes[n].op in EAGER_INPUTS and any(
                i.src not in inside for i in prog.in_edges(n) if not i.feedback) for n in on):
            continue  # an eager merge on the loop takes its first elements from outside
        stream = prog.nodes[e.src].port_label(e.port)
        loops.append(DeadLoop(e, on, f"`{e.dst}` ({prog.nodes[e.dst].op}) needs the "
                              f"fed-back stream `{stream}` before any element has gone round, "
                              "and no merge on the loop takes a first element from outside it"))
    return loops
