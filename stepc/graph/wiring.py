"""Wiring an elaborated program: one `Edge` per stream use, and an implicit Broadcast
wherever a stream has several consumers."""

from __future__ import annotations

from typing import Any

from stepc.graph.program import Edge, OpNode, TypeAnnotation
from stepc.graph.scope import Pending
from stepc.ops import OPS
from stepc.source import Span


def wire(nodes_made: dict[str, OpNode], uses: list[tuple[Any, str, int, Span]],
         pendings: list[Pending]) -> tuple[dict[str, OpNode], list[Edge],
                                           dict[tuple[str, int], TypeAnnotation], set[str]]:
    """The nodes (implicit Broadcasts included), the edges, the feedback streams' declared
    types and the nodes fed by a feedback stream never bound, from the stream uses
    `(stream or pending, consumer, slot, span)` in the order they were made."""
    consumers: dict[tuple[str, int], list[tuple[str, int, Span, bool]]] = {}
    feedback: dict[tuple[str, int], TypeAnnotation] = {}
    poisoned: set[str] = set()
    for v, dst, slot, span in uses:
        fb = isinstance(v, Pending)
        if fb:
            if v.bound is None:
                poisoned.add(dst)  # its error is reported at the declaration
                continue
            feedback[(v.bound.node, v.bound.port)] = v.annotation
            v = v.bound
        consumers.setdefault((v.node, v.port), []).append((dst, slot, span, fb))
    for p in pendings:
        if p.bound is not None:
            feedback[(p.bound.node, p.bound.port)] = p.annotation
    edges: list[Edge] = []
    nodes = dict(nodes_made)
    order = {n: i for i, n in enumerate(nodes_made)}
    fanouts: dict[str, list[OpNode]] = {}  # producer -> its implicit Broadcasts
    fanout_names: set[str] = set()
    for (src, port), cons in sorted(consumers.items(), key=lambda kv: (order[kv[0][0]],
                                                                         kv[0][1])):
        producer = nodes[src]
        producer.discarded.discard(port)
        fb_port = (src, port) in feedback
        if len(cons) == 1:
            dst, slot, span, _ = cons[0]
            edges.append(Edge(src, port, dst, slot, span, fb_port))
            continue
        label = producer.port_label(port)
        bname = f"{label}.bcast"
        while bname in nodes or bname in fanout_names:
            bname += "'"
        attrs = {"consumers": len(cons), "depth": None}
        bc = OpNode(bname, "Broadcast", attrs, [("in", None)],
                    list(OPS["Broadcast"].outputs(attrs)), producer.span, {},
                    producer.cluster, implicit=True, array_outputs=True)
        fanouts.setdefault(src, []).append(bc)
        fanout_names.add(bname)
        edges.append(Edge(src, port, bname, 0, producer.port_spans.get(port, producer.span),
                          False))
        for k, (dst, slot, span, _) in enumerate(cons):
            bc.port_names[k] = label
            edges.append(Edge(bname, k, dst, slot, span, fb_port))
    if fanouts:
        nodes = _with_fanouts(nodes, fanouts)
    return nodes, edges, feedback, poisoned


def _with_fanouts(nodes: dict[str, OpNode],
                  fanouts: dict[str, list[OpNode]]) -> dict[str, OpNode]:
    """`nodes` with each producer's implicit Broadcasts right after it, the last made first
    (as if each had been inserted right after its producer when it was made)."""
    out: dict[str, OpNode] = {}
    for k, v in nodes.items():
        out[k] = v
        for bc in reversed(fanouts.get(k, ())):
            out[bc.name] = bc
    return out
