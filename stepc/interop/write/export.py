"""A checked stepc program as a ProgramGraph for the reference toolchain (`stepc export`).

Each operator becomes one Operation; its inputs name their producers' ids and output
indices. Settings the program leaves to the hardware (`compute_bw`, `par_dispatch`) are
written with the hardware's values, since the format has no defaults. Every Operation
also carries the newer schema's `out_stream_shape` (see stream_shapes.py) and
`parallel_factor`. What the format cannot say is refused, naming the operator: an
`InteropError` like the importer's.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from stepc.interop.read.reader import InteropError
from stepc.interop.schema import ProgramGraph
from stepc.interop.write import kv_cache, operators
from stepc.interop.write.channels import fifo
from stepc.interop.write.counts import unsayable_integer_map
from stepc.interop.write.state import ExportState, NodeExport, RoutedCounts
from stepc.interop.write.stream_shapes import dropped_sources, leading_ones, write_shape

# stepc operator -> its handler, which fills the Operation saying it (False: the node is
# said by the operation of its reader instead)
Handler = Callable[[NodeExport, Any], bool | None]
HANDLERS: dict[str, Handler] = {**operators.HANDLERS, **kv_cache.HANDLERS}


def export_program(prog, path: str, hw, traces: dict | None = None,
                   notes: list[str] | None = None) -> tuple[bytes, dict[str, np.ndarray]]:
    """The ProgramGraph bytes of `prog` (a stepc.Program) on hardware `hw`, and the side
    files it names (selector data, by file name: the external streams' traces from
    `traces`, else their seeded generators, as `stepc sim` would use). What the graph
    fixes that the program left open (counts precomputed from default data) is added to
    `notes`."""
    typed = prog.typed
    p = typed.program
    ids = {name: i for i, name in enumerate(_id_order(p, path))}
    g = ProgramGraph(name=os.path.splitext(os.path.basename(p.name))[0])
    g.stepc_statement_order[:] = [ids[name] for name in p.nodes]  # for the import
    files: dict[str, np.ndarray] = {}
    spare_ids = itertools.count(len(ids))  # for operations that are not stepc nodes
    dropped = dropped_sources(typed)
    ones, computed = leading_ones(typed, dropped), _computed(typed)
    flats = {name: next(spare_ids) for name in p.nodes if name in dropped}
    export = ExportState(path, typed, ids, hw, traces or {}, files, g, spare_ids, computed,
                         ones, [] if notes is None else notes, RoutedCounts(), flats)
    # what no composition of the format's operators says is refused before the rest
    order = sorted(p.nodes, key=lambda n: p.nodes[n].op != "Map" or
                   not unsayable_integer_map(p.nodes[n].attrs["fn"]))
    for name in order:
        node = p.nodes[name]
        op = g.operators.add(name=name, id=ids[name])
        writing = NodeExport(export, node, p.in_edges(name))
        try:
            if _fill(writing, op) is False:  # said by its reader
                del g.operators[len(g.operators) - 1]
                continue
            shapes = {typed.types[(name, i)].shape for i in range(len(node.outputs))}
            if node.op == "Promote":  # its first half, the Reshape, was added after it
                reshape = g.operators[-1]
                reshape.parallel_factor = 1
                write_shape(reshape, (*next(iter(shapes)), 1), 0)
            op.parallel_factor = 1  # stepc runs each operator once
            if len(shapes) == 1 and op.WhichOneof("op_type") != "consumer_context":
                write_shape(op, next(iter(shapes)), 1 if name in dropped else ones[name])
            if name in dropped:  # its readers read it behind a Flatten of its leading 1
                writing.flatten_source(next(iter(shapes)))
        except ValueError as e:
            if not str(e).startswith(_OUT_OF_RANGE):
                raise
            writing.fail(f"a number the format cannot hold ({e}): its integer fields are "
                         "unsigned, of 32 bits (64 for offsets)")
    export.routed.finish(g, ids)
    g.operators.sort(key=lambda o: o.id)
    return g.SerializeToString(), files


_OUT_OF_RANGE = "Value out of range"  # protobuf's error for a number its field cannot hold


def _id_order(p, path: str) -> list[str]:
    """The nodes in source order, but each loop's closing EagerMerge before the rest of its
    loop. The format declares no feedback streams; its readers (the reference's builder,
    stepc's import) know a loop by an EagerMerge whose inputs on the loop come after it
    (larger ids) and whose selector output carries the loop back."""
    import networkx as nx
    order = list(p.nodes)
    for loop in nx.strongly_connected_components(p.graph):
        if len(loop) < 2:
            continue
        closer = next((n for n in sorted(loop, key=order.index) if _closes(p, n, loop)), None)
        if closer is None:
            quoted = [f"`{n}`" for n in sorted(loop, key=order.index)]
            names = ", ".join(quoted[:6] + ["..."] * (len(quoted) > 6))
            raise InteropError(path, f"the loop through {names} is closed by no "
                               "EagerMerge whose selector output carries it back: the format "
                               "declares no feedback streams, and its readers know a loop only "
                               "by such an EagerMerge")
        order.remove(closer)
        order.insert(min(order.index(n) for n in loop if n != closer), closer)
    return order


def _closes(p, name: str, loop: set[str]) -> bool:
    """Whether the EagerMerge `name` closes `loop`: its selector output (port 1) is read on
    the loop, its data output is not, and without its inputs the loop has no cycle."""
    import networkx as nx
    if p.nodes[name].op != "EagerMerge":
        return False
    out = [e for e in p.out_edges(name) if e.dst in loop]
    if not out or any(e.port != 1 for e in out):
        return False
    cut: nx.DiGraph[str] = nx.DiGraph(p.graph.subgraph(loop))
    cut.remove_edges_from(list(cut.in_edges(name)))
    return nx.is_directed_acyclic_graph(cut)


def _computed(typed) -> dict[str, bool]:
    """Per node, whether its tiles were computed (by a Map or an Accum, then moved by
    operators that pass tiles on) rather than loaded."""
    p = typed.program
    out: dict[str, bool] = {}

    def computed(name: str, seen: frozenset) -> bool:
        if name not in out:
            node, ins = p.nodes[name], p.in_edges(name)
            if node.op in ("Map", "Accum"):
                out[name] = True
            elif not ins or node.op in ("LinearOffChipLoad", "RandomOffChipLoad") or \
                    name in seen:
                out[name] = False
            else:
                out[name] = computed(ins[0].src, seen | {name})
        return out[name]

    for name in p.nodes:
        computed(name, frozenset())
    return out


def _fill(writing: NodeExport, op) -> bool | None:
    """Fill `op` by the handler of the node's operator; False when the node is said by
    another operation instead."""
    handler = HANDLERS.get(writing.node.op)
    if handler is None:
        writing.fail("the format has no operator for it (yet)")
    said = handler(writing, op)
    if said is not False:
        fifo(writing, op, writing.node)
    return said
