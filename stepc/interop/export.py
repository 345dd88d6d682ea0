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

import numpy as np

from stepc.interop.export_channels import ChannelOps
from stepc.interop.export_counts import CountOps, RoutedCounts, unsayable_integer_map
from stepc.interop.export_kv import KvCacheOps
from stepc.interop.export_ops import OperatorOps
from stepc.interop.reader import InteropError
from stepc.interop.schema import ProgramGraph
from stepc.interop.stream_shapes import dropped_sources, leading_ones, write_shape
from stepc.types import Scalar, Select, Tile


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
    routed = RoutedCounts()
    flats = {name: next(spare_ids) for name in p.nodes if name in dropped}
    # what no composition of the format's operators says is refused before the rest
    order = sorted(p.nodes, key=lambda n: p.nodes[n].op != "Map" or
                   not unsayable_integer_map(p.nodes[n].attrs["fn"]))
    for name in order:
        node = p.nodes[name]
        op = g.operators.add(name=name, id=ids[name])
        ins = p.in_edges(name)
        exporter = _Exporter(path, typed, node, ins, ids, hw, traces or {}, files, g,
                             spare_ids, computed, ones, [] if notes is None else notes, routed,
                             flats)
        try:
            if exporter.fill(op) is False:  # said by its reader
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
                exporter.flatten_source(next(iter(shapes)))
        except ValueError as e:
            if not str(e).startswith(_OUT_OF_RANGE):
                raise
            exporter.fail(f"a number the format cannot hold ({e}): its integer fields are "
                          "unsigned, of 32 bits (64 for offsets)")
    routed.finish(g, ids)
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
            names = [f"`{n}`" for n in sorted(loop, key=order.index)]
            names = ", ".join(names[:6] + ["..."] * (len(names) > 6))
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
    cut = nx.DiGraph(p.graph.subgraph(loop))
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


class _Exporter(OperatorOps, KvCacheOps, CountOps, ChannelOps):
    def __init__(self, path, typed, node, ins, ids, hw, traces, files, graph, spare_ids,
                 computed, ones, notes, routed, flats):
        self.path, self.typed, self.node, self.ins, self.ids, self.hw = \
            path, typed, node, ins, ids, hw
        self.traces, self.files, self.graph, self.spare_ids = traces, files, graph, spare_ids
        self.computed = computed  # node -> its tiles were computed, not loaded
        self.ones, self.notes = ones, notes  # node -> leading 1s of the format's reading
        self.routed = routed  # the routed counts' Partitions, shared by the export
        self.flats = flats  # source -> id of the Flatten of its leading 1 its readers read

    def fail(self, message: str):
        raise InteropError(self.path, f"operator `{self.node.name}` ({self.node.op}): {message}")

    def out_type(self, port: int = 0):
        return self.typed.types[(self.node.name, port)]

    def in_type(self, slot: int):
        e = self.ins[slot]
        return self.typed.types[(e.src, e.port)]

    def wire(self, msg, slot: int, id_field: str, idx_field: str) -> None:
        self.wire_edge(msg, self.ins[slot], id_field, idx_field)

    def wire_edge(self, msg, e, id_field: str, idx_field: str) -> None:
        src = self.typed.program.nodes[e.src]
        setattr(msg, id_field, self.source_id(e))
        if src.array_outputs or src.op in ("EagerMerge",):
            setattr(msg, idx_field, e.port)
        elif e.port:
            self.fail(f"reads output `{src.outputs[e.port]}` of `{src.name}`, which the "
                      "format's operator does not have")

    def source_id(self, e) -> int:
        """The id of the operation the edge `e` reads: its producer's, or for a source whose
        leading 1 is flattened away, that Flatten's."""
        return self.flats.get(e.src, self.ids[e.src])

    def flatten_source(self, shape) -> None:
        """A Flatten of this source's leading 1, which its readers read instead (see
        stream_shapes.dropped_sources)."""
        flat = self.graph.operators.add(name=f"{self.node.name}.flat",
                                        id=self.flats[self.node.name])
        f = flat.flatten
        f.input_id, f.min_rank, f.max_rank = self.ids[self.node.name], len(shape) - 1, len(shape)
        self.dtype(f.dtype)
        flat.parallel_factor = 1
        write_shape(flat, shape, 0)

    def dtype(self, msg, slot: int | None = None) -> None:
        """The format's DataType of input `slot` (None: of the output). The format's tiles
        are f16 or f32 and only loads say `n_byte`: bf16 tiles from a 2-byte load are f32
        (the reference's mock bf16), and bf16 tiles an operator computes are f16, the
        format's 2-byte float, downstream too (the importer reads them back as bf16)."""
        if slot is None:
            elem, made = self.out_type().elem, self.computed[self.node.name]
        else:
            e = slot if not isinstance(slot, int) else self.ins[slot]  # an edge, or a slot
            elem, made = self.typed.types[(e.src, e.port)].elem, self.computed[e.src]
        if made and isinstance(elem, Tile) and elem.dtype == "bf16":
            msg.f16.SetInParent()
        elif isinstance(elem, Select):
            msg.multi_hot.SetInParent()
        elif isinstance(elem, Tile) and elem.dtype in ("f32", "bf16"):
            msg.f32.SetInParent()  # the reference's tiles are f32; 2-byte loads say n_byte
        elif isinstance(elem, Tile) and elem.dtype == "f16":
            msg.f16.SetInParent()
        elif isinstance(elem, Tile) and elem.dtype == "u64":
            msg.u64.SetInParent()
        elif isinstance(elem, Scalar) and elem.dtype == "bool":
            msg.scalar_bool.SetInParent()  # a random store's acknowledgements
        else:
            self.fail(f"element type {elem} has no counterpart in the format")

    def bw(self) -> int:
        return self.node.attrs.get("compute_bw") or self.hw.fabric.compute_bw

    def par(self) -> int:
        return self.node.attrs.get("par_dispatch") or self.hw.hbm.par_dispatch

    def fill(self, op) -> bool | None:
        """Fill `op`; False when the node is said by another operation instead."""
        handler = getattr(self, f"op_{self.node.op}", None)
        if handler is None:
            self.fail("the format has no operator for it (yet)")
        said = handler(op)
        if said is not False:
            self.fifo(op, self.node)
        return said
