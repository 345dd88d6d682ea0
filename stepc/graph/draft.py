"""The program as elaboration builds it: its operator nodes and stream uses, tensors,
params, assumptions and feedback streams, the files read, and the diagnostics. Every part
of the elaborator writes into one `Draft`."""

from __future__ import annotations

from typing import Any

from stepc.codes import PROGRAM_TOO_LARGE
from stepc.diagnostics import DiagnosticBag
from stepc.grammar import ast
from stepc.graph.limits import MAX_NODES, Abort, Fatal
from stepc.graph.program import Assumption, OpNode, Program, Tensor
from stepc.graph.scope import Pending, Scope
from stepc.graph.wiring import wire
from stepc.ops import OPS
from stepc.source import SourceFile, Span

ARRAY_OUTPUT_OPS = tuple(name for name, spec in OPS.items() if spec.indexed_outputs)


class Draft:
    """The program under construction and the diagnostics found so far."""

    def __init__(self, main: ast.Module, src: SourceFile):
        self.main = main
        self.sources = {src.name: src}
        self.import_stack: list[str] = []  # the files being read, the innermost last
        self.bag = DiagnosticBag()
        self.nodes: dict[str, OpNode] = {}
        self.last_node: OpNode | None = None  # the node made last
        self.edges: list[tuple[Any, str, int, Span]] = []  # (StreamVal|Pending, dst, slot, span)
        self.tensors: dict[str, Tensor] = {}
        self.params: dict[str, int] = {}
        self.param_spans: dict[str, Span] = {}
        self.assumptions: list[Assumption] = []
        self.pendings: list[Pending] = []

    def error(self, code: str, message: str, span: Span | None, notes=()) -> Abort:
        """Record an error; the caller raises the returned `Abort`."""
        self.bag.error(code, message, span, notes)
        return Abort()

    def new_node(self, op: str, name: str, scope: Scope, span: Span, name_span: Span,
                 attrs: dict, inputs: list, arg_spans: dict) -> OpNode:
        spec = OPS[op]
        if len(self.nodes) >= MAX_NODES:
            self.error(PROGRAM_TOO_LARGE, f"the program has more than {MAX_NODES:,} operator "
                       "instances", span)
            raise Fatal()
        while name in self.nodes:
            name += "'"
        node = OpNode(name, op, attrs, inputs, list(spec.outputs(attrs)), span, arg_spans,
                      scope.cluster, array_outputs=op in ARRAY_OUTPUT_OPS)
        self.nodes[name] = node
        self.last_node = node
        return node

    def build(self, named: set[tuple[str, int]]) -> Program:
        """The program, wired, with the streams the source names."""
        nodes, edges, feedback, poisoned = wire(self.nodes, self.edges, self.pendings)
        prog = Program(self.main.name, nodes, edges, self.tensors, self.params,
                       self.param_spans, self.assumptions, feedback, self.sources,
                       named=named, poisoned=poisoned)
        prog.order = {n: i for i, n in enumerate(nodes)}
        return prog
