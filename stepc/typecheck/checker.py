"""Type and shape inference over the whole graph.

Walks the graph in topological order (feedback edges removed; a feedback stream's declared
type seeds its consumers and the producer's inferred type is checked against it), applies
each operator's rule from `OPS`, checks annotations, and applies `assume` facts as soon as
everything they mention is known.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stepc.canon import symbols_in
from stepc.codes import (
    ASSUMPTION_UNKNOWN_SYMBOL,
    CYCLE_WITHOUT_FEEDBACK,
    EMPTY_PROGRAM,
    FEEDBACK_TYPE_MISMATCH,
    FUNCTION_NOT_USABLE,
    MATMUL_INNER_MISMATCH,
    NOT_ELEMENTWISE,
    UNPROVEN_EQUALITY,
    UNUSED_STREAM,
    WRONG_OPERAND_TYPE,
)
from stepc.diagnostics import DiagnosticBag, Note
from stepc.graph.program import Assumption, Edge, OpNode, Program
from stepc.ops import OPS
from stepc.ops.base import STREAMS, VARSTREAMS, InferCtx, OpError
from stepc.typecheck.annotations import AnnotationError, Annotator
from stepc.typecheck.assumptions import AssumptionSolver
from stepc.types import Buffer, StreamType, SymbolTable, Tile, Tuple

if TYPE_CHECKING:
    import sympy
else:
    from stepc.sympy_lazy import sympy


@dataclass
class TypedProgram:
    """A program with a StreamType for every stream that could be typed."""

    program: Program
    types: dict[tuple[str, int], StreamType]
    symbols: SymbolTable
    facts: list[sympy.Basic] = field(default_factory=list)
    subst: dict = field(default_factory=dict)  # symbols replaced by `assume` or annotations
    declared: dict[tuple[str, int], StreamType] = field(default_factory=dict)  # feedback types

    def input_types(self, node: str) -> dict:
        """A node's typed stream inputs by parameter name (lists for list parameters)."""
        n = self.program.nodes[node]
        out: dict = {}
        for e in self.program.in_edges(node):
            t = self.declared.get((e.src, e.port)) if e.feedback else None
            t = t if t is not None else self.types.get((e.src, e.port))
            pname, idx = n.inputs[e.slot]
            if idx is None:
                out[pname] = t
            else:
                out.setdefault(pname, []).append(t)
        return out

    def typed_nodes(self):
        """Nodes whose inputs and outputs are all typed, in source order."""
        for node, _ in self.typed_nodes_inputs():
            yield node

    def typed_nodes_inputs(self):
        """(node, its `input_types`) for each of `typed_nodes`."""
        for name, node in self.program.nodes.items():
            if all((name, p) in self.types for p in range(len(node.outputs))):
                inputs = self.input_types(name)
                if all(t is not None for t in flat_types(inputs.values())):
                    yield node, inputs


    def streams_in_order(self):
        """(node, port, label, span, type) for every named stream, in source order."""
        for name, node in self.program.nodes.items():
            if node.implicit:
                continue
            for port in range(len(node.outputs)):
                t = self.types.get((name, port))
                if t is None or port in node.discarded:
                    continue
                yield node, port, node.port_label(port), node.port_spans.get(port, node.span), t


def flat_types(values):
    """The stream types of an operator's inputs, a list-valued input's one by one."""
    for v in values:
        if isinstance(v, list):
            yield from v
        else:
            yield v


class Checker(AssumptionSolver):
    def __init__(self, prog: Program, bag: DiagnosticBag):
        self.prog, self.bag = prog, bag
        self.symbols = SymbolTable()
        self.types: dict[tuple[str, int], StreamType] = {}
        self.subst: dict[sympy.Symbol, sympy.Expr] = {}
        self.subst_users: dict[sympy.Symbol, set] = {}  # symbol -> subst keys mentioning it
        self.facts: list[sympy.Basic] = []
        self.failed: set[str] = set()
        self.shared: dict = {}
        self.pending: set[Assumption] = set(prog.assumptions)
        self.waiting: dict[str, list[Assumption]] = {}  # node -> assumptions it unblocks
        self.symbolic: list[Assumption] = []  # waiting for symbols to exist
        self.symbols_seen = -1
        for a in self.pending:
            if a.streams:
                self.waiting.setdefault(a.streams[0].node, []).append(a)
            else:
                self.symbolic.append(a)
        self.annotator = Annotator(self.symbols)
        self.uses: dict[sympy.Symbol, set] = {}  # symbol -> keys of the types that mention it
        self.free: dict[tuple[str, int], set] = {}  # key -> the symbols its type mentions

    # ------------------------------------------------------------ driver
    def run(self) -> TypedProgram:
        order = self.topo_order()
        for name in order:
            self.visit(self.prog.nodes[name])
            self.try_assumptions(name)
        for a in self.pending:
            if all((r.node, r.port) in self.types for r in a.streams):
                self.bag.error(ASSUMPTION_UNKNOWN_SYMBOL, "assumption refers to an unknown symbol: "
                               + ", ".join(sorted(self.unknown_symbols(a))), a.span)
        self.check_feedback()
        self.unconsumed()
        if not self.prog.nodes and not self.bag.errors:
            self.bag.warning(EMPTY_PROGRAM, "the program calls no operator: there is nothing "
                             "to analyze or simulate", None,
                             [Note("a program streams data: load a tensor (LinearOffChipLoad) "
                                   "and store or sink what it computes; a file of `graph` "
                                   "definitions is checked by a program that calls them")])
        declared = {}
        for key in self.prog.feedback:
            try:
                declared[self.source_of(*key)] = self.apply_subst(self.feedback_type(key))
            except AnnotationError:
                pass
        return TypedProgram(self.prog, self.types, self.symbols, self.facts, self.subst,
                            declared)

    def topo_order(self) -> list[str]:
        """Nodes in dependency order (feedback edges left out), ties in source order."""
        order = self.prog.order
        indegree = {n: 0 for n in self.prog.nodes}
        succs: dict[str, list[str]] = {n: [] for n in self.prog.nodes}
        for e in self.prog.edges:
            if not e.feedback:
                indegree[e.dst] += 1
                succs[e.src].append(e.dst)
        ready = [(order[n], n) for n, k in indegree.items() if k == 0]
        heapq.heapify(ready)
        out: list[str] = []
        while ready:
            _, n = heapq.heappop(ready)
            out.append(n)
            for m in succs[n]:
                indegree[m] -= 1
                if indegree[m] == 0:
                    heapq.heappush(ready, (order[m], m))
        if len(out) < len(indegree):
            self.report_cycle()
            return []
        return out

    def report_cycle(self) -> None:
        """E0403 for a cycle of non-feedback streams (found by networkx, loaded only here)."""
        import networkx as nx
        dag = nx.MultiDiGraph()
        dag.add_nodes_from(self.prog.nodes)
        for e in self.prog.edges:
            if not e.feedback:
                dag.add_edge(e.src, e.dst)
        names = [u for u, *_ in nx.find_cycle(dag)]
        node = self.prog.nodes[names[0]]
        self.bag.error(CYCLE_WITHOUT_FEEDBACK, "cycle without a declared feedback stream: "
                       + " -> ".join(names + names[:1]), node.span)

    # ------------------------------------------------------------ one node
    def input_type(self, e: Edge) -> StreamType | None:
        if e.feedback:
            try:
                return self.feedback_type(self.source_of(e.src, e.port))
            except AnnotationError:
                return None
        t = self.types.get((e.src, e.port))
        if t is None or not self.substitutes(self.free[(e.src, e.port)]):
            return t
        return self.apply_subst(t)

    def feedback_type(self, key: tuple[str, int]) -> StreamType:
        """The declared type of a feedback stream; its `?` dims are named after the stream
        (`xt_0_1_d`)."""
        node = self.prog.nodes[key[0]]
        return self.annotator.declared(self.prog.feedback[key], origin=node.name,
                                       span=node.port_spans.get(key[1], node.span))

    def source_of(self, node: str, port: int) -> tuple[str, int]:
        """The stream a (possibly Broadcast) port carries, traced back through fan-outs."""
        n = self.prog.nodes[node]
        while OPS[n.op].fan_out and self.prog.in_edges(n.name):
            e = self.prog.in_edges(n.name)[0]
            node, port = e.src, e.port
            n = self.prog.nodes[node]
        return node, port

    def visit(self, node: OpNode) -> None:
        if node.name in self.prog.poisoned:
            self.failed.add(node.name)
            return
        spec = OPS[node.op]
        in_edges = self.prog.in_edges(node.name)
        inputs: dict = {}
        keys: dict = {}
        for p in spec.stream_params:
            if p.kind in (STREAMS, VARSTREAMS):
                inputs[p.name] = []
        for e in in_edges:
            t = self.input_type(e)
            if t is None:
                self.failed.add(node.name)
                return
            pname, idx = node.inputs[e.slot]
            if idx is None:
                inputs[pname] = t
            else:
                inputs[pname].append(t)
            keys.setdefault(pname, self.source_of(e.src, e.port))
        attrs = dict(node.attrs)
        if OPS[node.op].external:
            try:
                attrs["type"] = self.annotator.declared(attrs["type"], origin=node.name,
                                                        span=node.span)
            except AnnotationError as err:
                self.bag.error(err.code, err.message, err.span)
                self.failed.add(node.name)
                return
        ctx = InferCtx(node.name, node.op, inputs, attrs, self.symbols, node.span,
                       shared=self.shared, keys=keys)
        try:
            outs = spec.infer(ctx)
        except OpError as err:
            self.report(node, err, in_edges, inputs)
            self.failed.add(node.name)
            return
        for w in ctx.warnings:
            self.report(node, w, in_edges, inputs, warning=True)
        for port, t in enumerate(outs):
            free = free_symbols(t)
            if self.substitutes(free):
                t = self.apply_subst(t)
                free = free_symbols(t)
            self.store((node.name, port), t, free)
        for port, anns in sorted(node.annotations.items()):
            for ann in anns:
                if (node.name, port) in self.types:
                    self.check_annotation(node, port, ann, "annotation")

    def report(self, node: OpNode, err: OpError, in_edges: list[Edge], inputs: dict,
               warning: bool = False) -> None:
        span = node.span
        notes: list[Note] = list(err.notes)
        if err.arg is not None:
            span = node.arg_spans.get(err.arg, node.span)
            if err.arg == "fn":  # a function's tile rule: every input's type matters
                slots = list(in_edges) if err.code in (WRONG_OPERAND_TYPE, FUNCTION_NOT_USABLE,
                                                       MATMUL_INNER_MISMATCH, NOT_ELEMENTWISE) \
                    else []
            else:
                slots = [e for e in in_edges if node.inputs[e.slot][0] == err.arg
                         and (err.index is None or node.inputs[e.slot][1] == err.index)][:1]
            if slots and err.index is not None:
                span = slots[0].span
            for e in slots:
                notes.extend(self.producer_note(e))
        notes.extend(self.symbol_notes(err.message))
        msg = err.message
        if warning:
            self.bag.warning(err.code, msg, span, notes)
        else:
            self.bag.error(err.code, msg, span, notes)

    def stream_note(self, r) -> list[Note]:
        node = self.prog.nodes[r.node]
        t = self.types.get((r.node, r.port))
        if t is None:
            return []
        return [Note(f"`{node.port_label(r.port)}` is inferred as {t}",
                     node.port_spans.get(r.port, node.span))]

    def producer_note(self, e: Edge) -> list[Note]:
        src, port = self.source_of(e.src, e.port)
        producer = self.prog.nodes[src]
        t = self.types.get((src, port))
        if t is None:
            return []
        where = producer.port_spans.get(port, producer.span)
        return [Note(f"`{producer.port_label(port)}` is produced by {producer.op} here with "
                     f"type {t}", where)]

    def symbol_notes(self, message: str) -> list[Note]:
        """Say where each symbol a message mentions comes from."""
        notes = []
        words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_']*", message))
        for name in sorted(words):
            info = self.symbols.infos.get(name)
            if info is None or not info.origin:
                continue
            kind = "ragged" if info.kind == "ragged" else "dynamic-regular"
            notes.append(Note(f"`{name}` ({kind}) was introduced by `{info.origin}`: "
                              f"{info.reason}", info.span))
        return notes

    # ------------------------------------------------------------ annotations
    def check_annotation(self, node: OpNode, port: int, ann, what: str) -> None:
        inferred = self.types[(node.name, port)]
        try:
            renames = self.annotator.match(ann, inferred)
        except AnnotationError as err:
            notes = [Note(f"`{node.port_label(port)}` is inferred as {inferred}",
                          node.port_spans.get(port, node.span))]
            code = FEEDBACK_TYPE_MISMATCH if what == "feedback" else err.code
            self.bag.error(code, err.message if what != "feedback" else
                           f"feedback stream `{node.port_label(port)}`: {err.message}",
                           err.span, notes)
            return
        for old, new in renames:
            self.substitute(old, new)
        for msg in self.annotator.unproved:
            self.bag.warning(UNPROVEN_EQUALITY, msg, ann.type.span,
                             [Note(f"`{node.port_label(port)}` is inferred as {inferred}",
                                   node.port_spans.get(port, node.span))])
        self.annotator.unproved.clear()

    def check_feedback(self) -> None:
        for (name, port), ann in sorted(self.prog.feedback.items()):
            if (name, port) in self.types:
                self.check_annotation(self.prog.nodes[name], port, ann, "feedback")

    # ------------------------------------------------------------ substitution
    def apply_subst(self, t: StreamType) -> StreamType:
        if not self.subst:
            return t
        return self.annotator.substitute(t, self.subst)

    def substitutes(self, symbols: set) -> bool:
        """Whether a substitution replaces one of `symbols` (a walk over `symbols`, the
        smaller side)."""
        return not self.subst.keys().isdisjoint(symbols)

    def store(self, key: tuple[str, int], t: StreamType, free: set | None = None) -> None:
        """Record `key`'s type and index it under its symbols (`free`, when the caller has
        them already: `free_symbols(t)`)."""
        if free is None:
            free = free_symbols(t)
        self.types[key] = t
        self.free[key] = free
        for sym in free:
            self.uses.setdefault(sym, set()).add(key)

    def substitute(self, old: sympy.Symbol, new: sympy.Expr) -> None:
        new = sympy.sympify(new)
        for k in sorted(self.subst_users.pop(old, ()), key=lambda s: s.name):
            self.subst[k] = self.subst[k].xreplace({old: new})
            self.note_subst_users(k)
        self.subst[old] = new
        self.note_subst_users(old)
        for key in sorted(self.uses.pop(old, ())):
            self.store(key, self.annotator.substitute(self.types[key], {old: new}))
        if isinstance(new, sympy.Symbol):  # a renaming: shared dims follow it
            h = hash(old)  # cached by sympy: a cheap test before its slow equality
            for key, sym in list(self.shared.items()):
                if hash(sym) == h and sym == old:
                    self.shared[key] = new

    def note_subst_users(self, key: sympy.Symbol) -> None:
        """Index the substitution of `key` under the symbols its value mentions."""
        for sym in self.subst[key].free_symbols:
            self.subst_users.setdefault(sym, set()).add(key)

    # ------------------------------------------------------------ warnings
    def unconsumed(self) -> None:
        """One warning per operator instance listing its outputs that go nowhere."""
        consumed = {(e.src, e.port) for e in self.prog.edges}
        for name, node in self.prog.nodes.items():
            if name in self.failed:
                continue
            ports = [p for p in range(len(node.outputs))
                     if (name, p) not in consumed and p not in node.discarded
                     and not ((name, p) in self.prog.named and self.bag.errors)]
            if not ports:
                continue
            labels = ", ".join(f"`{node.port_label(p)}`" for p in ports)
            what = f"stream {labels} is" if len(ports) == 1 else f"streams {labels} are"
            self.bag.warning(UNUSED_STREAM, f"{what} never consumed",
                             node.port_spans.get(ports[0], node.span),
                             [Note("consume it, pass it to Sink(...), or bind it to `_`")])


def free_symbols(t: StreamType) -> set:
    """Every symbol a stream type mentions (shape, tile dims, buffer dims)."""
    dims = list(t.shape)
    elems = [t.elem]
    while elems:
        e = elems.pop()
        if isinstance(e, Tile):
            dims += (e.rows, e.cols)
        elif isinstance(e, Buffer):
            elems.append(e.tile)
            dims += e.shape
        elif isinstance(e, Tuple):
            elems.extend(e.elems)
    out: set = set()
    for d in dims:
        if not d.is_Integer:
            out |= dim_symbols(d)
    return out


_DIM_SYMBOLS: dict = {}  # dim -> its symbols: the types of a program share most dims
DIM_SYMBOLS_SIZE = 65536  # dims kept (then the memo starts over)


def dim_symbols(d) -> frozenset:
    """The symbols of one dim, walked once per distinct dim."""
    found = _DIM_SYMBOLS.get(d)
    if found is None:
        if len(_DIM_SYMBOLS) >= DIM_SYMBOLS_SIZE:
            _DIM_SYMBOLS.clear()
        found = _DIM_SYMBOLS[d] = frozenset(symbols_in([d]))
    return found


def check(prog: Program, bag: DiagnosticBag) -> TypedProgram:
    """Infer and check every stream type of an elaborated program."""
    return Checker(prog, bag).run()
