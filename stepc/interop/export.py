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
from stepc.interop.export_counts import CountOps, unsayable_integer_map
from stepc.interop.export_kv import KvCacheOps
from stepc.interop.export_ops import OperatorOps
from stepc.interop.reader import InteropError
from stepc.interop.schema import ProgramGraph
from stepc.interop.stream_shapes import leading_ones, write_shape
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
    ids = {name: i for i, name in enumerate(p.nodes)}
    g = ProgramGraph(name=os.path.splitext(os.path.basename(p.name))[0])
    files: dict[str, np.ndarray] = {}
    spare_ids = itertools.count(len(ids))  # for operations that are not stepc nodes
    ones, computed = leading_ones(typed), _computed(typed)
    # what no composition of the format's operators says is refused before the rest
    order = sorted(p.nodes, key=lambda n: p.nodes[n].op != "Map" or
                   not unsayable_integer_map(p.nodes[n].attrs["fn"]))
    for name in order:
        node = p.nodes[name]
        op = g.operators.add(name=name, id=ids[name])
        ins = p.in_edges(name)
        exporter = _Exporter(path, typed, node, ins, ids, hw, traces or {}, files, g,
                             spare_ids, computed, ones, [] if notes is None else notes)
        if exporter.fill(op) is False:  # said by its reader
            del g.operators[len(g.operators) - 1]
            continue
        shapes = {typed.types[(name, i)].shape for i in range(len(node.outputs))}
        if node.op == "Promote":  # its first half, the Reshape, was added after it
            if ones[name]:
                raise InteropError(path, f"operator `{name}` (Promote): the reference streams "
                                   "its input with a leading dim of 1 (from a source), and "
                                   "Reshape's add_outer_dim takes rank-0 streams only")
            reshape = g.operators[-1]
            reshape.parallel_factor = 1
            write_shape(reshape, (*next(iter(shapes)), 1), 0)
        op.parallel_factor = 1  # stepc runs each operator once
        if len(shapes) == 1 and op.WhichOneof("op_type") != "consumer_context":
            write_shape(op, shapes.pop(), ones[name])
    g.operators.sort(key=lambda o: o.id)
    return g.SerializeToString(), files


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
                 computed, ones, notes):
        self.path, self.typed, self.node, self.ins, self.ids, self.hw = \
            path, typed, node, ins, ids, hw
        self.traces, self.files, self.graph, self.spare_ids = traces, files, graph, spare_ids
        self.computed = computed  # node -> its tiles were computed, not loaded
        self.ones, self.notes = ones, notes  # node -> leading 1s of the format's reading
        self.lockstep_ones: int | None = None  # set while wiring inputs read in lockstep

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
        if self.ones[e.src] > self.ones[self.node.name] and self.lockstep_ones is not None:
            setattr(msg, id_field, self.merged_leading_one(e))
            return
        src = self.typed.program.nodes[e.src]
        setattr(msg, id_field, self.ids[e.src])
        if src.array_outputs or src.op in ("EagerMerge",):
            setattr(msg, idx_field, e.port)
        elif e.port:
            self.fail(f"reads output `{src.outputs[e.port]}` of `{src.name}`, which the "
                      "format's operator does not have")

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
