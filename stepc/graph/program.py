"""The elaborated program: operator nodes, stream edges, tensors and facts (a directed
multigraph kept as adjacency lists; `Program.graph` gives it as a networkx graph)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from stepc.grammar import ast
from stepc.source import SourceFile, Span

if TYPE_CHECKING:
    import networkx as nx


@dataclass(frozen=True)
class Cluster:
    """A `for` iteration or a `graph` instance that a node belongs to (drawn as a DOT cluster)."""

    kind: str  # "loop" | "graph"
    key: str  # unique and stable: statement position + iteration, or instance name
    label: str  # what to show: "i = 3", "expert e[3]"
    group: str = ""  # same for all iterations of one loop (for --collapse)


@dataclass(frozen=True)
class TypeAnnotation:
    """A stream type written in the source, with the integer environment to evaluate it in."""

    type: ast.StreamTypeAst
    env: tuple[tuple[str, int], ...]


@dataclass
class OpNode:
    """One operator instance."""

    name: str
    op: str
    attrs: dict[str, Any]
    inputs: list[tuple[str, int | None]]  # one (param name, list index) per stream input slot
    outputs: list[str]  # output port names
    span: Span  # the call
    arg_spans: dict[str, Span]
    cluster: tuple[Cluster, ...] = ()
    port_names: dict[int, str] = field(default_factory=dict)  # port -> bound stream name
    port_spans: dict[int, Span] = field(default_factory=dict)  # port -> binding target span
    discarded: set[int] = field(default_factory=set)  # ports explicitly or implicitly dropped
    annotations: dict[int, list[TypeAnnotation]] = field(default_factory=dict)
    implicit: bool = False  # inserted by stepc (fan-out Broadcast)
    array_outputs: bool = False  # outputs are indexed: p[0], p[1], ...

    def port_label(self, port: int) -> str:
        if port in self.port_names:
            return self.port_names[port]
        if self.array_outputs:
            return f"{self.name}[{port}]"
        return self.name if len(self.outputs) == 1 else f"{self.name}.{self.outputs[port]}"


@dataclass(frozen=True)
class Edge:
    """A stream from a producer port to a consumer input slot."""

    src: str
    port: int
    dst: str
    slot: int
    span: Span  # where the consumer names the stream
    feedback: bool = False


@dataclass(frozen=True)
class Tensor:
    """An off-chip tensor declaration."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    role: str
    source: Any  # FnValue or None
    span: Span


@dataclass(frozen=True)
class StreamRefTerm:
    node: str
    port: int
    span: Span


@dataclass(frozen=True)
class Assumption:
    """`assume lhs op rhs`: terms are sympy expressions or `shape(x)` / `dim(x, k)` references."""

    lhs: Any
    op: str
    rhs: Any
    span: Span
    streams: tuple[StreamRefTerm, ...]  # streams the terms mention


@dataclass
class Program:
    """The result of elaboration."""

    name: str
    nodes: dict[str, OpNode]  # in source order
    edges: list[Edge]
    tensors: dict[str, Tensor]
    params: dict[str, int]
    param_spans: dict[str, Span]
    assumptions: list[Assumption]
    feedback: dict[tuple[str, int], TypeAnnotation]  # declared types of feedback streams
    sources: dict[str, SourceFile]
    order: dict[str, int] = field(default_factory=dict)  # node name -> source position
    named: set[tuple[str, int]] = field(default_factory=set)  # streams referenced by name
    poisoned: set[str] = field(default_factory=set)  # nodes fed by a failed declaration

    @cached_property
    def _adjacent(self) -> tuple[dict[str, list[Edge]], dict[str, list[Edge]]]:
        """Each node's incoming edges by slot and outgoing edges by (port, consumer's
        position, slot)."""
        ins: dict[str, list[Edge]] = {n: [] for n in self.nodes}
        outs: dict[str, list[Edge]] = {n: [] for n in self.nodes}
        for e in self.edges:
            ins[e.dst].append(e)
            outs[e.src].append(e)
        for v in ins.values():
            v.sort(key=lambda e: e.slot)
        for v in outs.values():
            v.sort(key=lambda e: (e.port, self.order[e.dst], e.slot))
        return ins, outs

    def in_edges(self, node: str) -> list[Edge]:
        return list(self._adjacent[0][node])

    def out_edges(self, node: str) -> list[Edge]:
        return list(self._adjacent[1][node])

    @cached_property
    def graph(self) -> nx.MultiDiGraph:
        """The program as a networkx multigraph (one edge per stream, data key `edge`)."""
        import networkx as nx
        g: nx.MultiDiGraph[str] = nx.MultiDiGraph()
        g.add_nodes_from(self.nodes)
        for e in self.edges:
            g.add_edge(e.src, e.dst, edge=e)
        return g
