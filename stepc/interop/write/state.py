"""The state of one `stepc export` (`ExportState`, shared by every operator's handler) and
of one operator's writing (`NodeExport`: its node, inputs and the helpers every handler
uses: its types, wiring its inputs, the format's data types, its refusal)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np

from stepc.interop.read.reader import InteropError
from stepc.interop.write.stream_shapes import write_shape
from stepc.types import Scalar, Select, Tile


@dataclass
class RoutedCounts:
    """The routed MetadataGen + FlatPartition pairs of one export, shared by its Maps."""
    partitions: dict = field(default_factory=dict)  # key -> [(partition id, ports read)]
    extra_readers: dict[str, int] = field(default_factory=dict)  # selector fan-out -> more

    def finish(self, graph, ids: dict[str, int]) -> None:
        """Give each selector's fan-out (a Broadcast) the readers the Partitions added."""
        by_id = {op.id: op for op in graph.operators}
        for name, extra in self.extra_readers.items():
            by_id[ids[name]].broadcast.num_consumers += extra


@dataclass
class ExportState:
    """What the export of one program shares across its operators."""
    path: str  # the graph file (named in refusals)
    typed: Any  # the checked program (a TypedProgram)
    ids: dict[str, int]  # node -> its operation's id
    hw: Any  # the HardwareConfig filling in what the program leaves to the hardware
    traces: dict[str, np.ndarray]  # external stream -> its data
    files: dict[str, np.ndarray]  # the side files written so far, by file name
    graph: Any  # the ProgramGraph being filled
    spare_ids: Iterator[int]  # ids for operations that are not stepc nodes
    computed: dict[str, bool]  # node -> its tiles were computed, not loaded
    ones: dict[str, int]  # node -> leading 1s of the format's reading
    notes: list[str]  # what the graph fixes that the program left open
    routed: RoutedCounts  # the routed counts' Partitions
    flats: dict[str, int]  # source -> id of the Flatten of its leading 1 its readers read


class NodeExport:
    """The writing of one node of the program as the format's operation(s)."""

    def __init__(self, export: ExportState, node, ins: list):
        self.export, self.node, self.ins = export, node, ins
        self.typed = export.typed

    def fail(self, message: str) -> NoReturn:
        raise InteropError(self.export.path,
                           f"operator `{self.node.name}` ({self.node.op}): {message}")

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
        return self.export.flats.get(e.src, self.export.ids[e.src])

    def flatten_source(self, shape) -> None:
        """A Flatten of this source's leading 1, which its readers read instead (see
        stream_shapes.dropped_sources)."""
        flat = self.export.graph.operators.add(name=f"{self.node.name}.flat",
                                               id=self.export.flats[self.node.name])
        f = flat.flatten
        f.input_id, f.min_rank, f.max_rank = \
            self.export.ids[self.node.name], len(shape) - 1, len(shape)
        self.dtype(f.dtype)
        flat.parallel_factor = 1
        write_shape(flat, shape, 0)

    def dtype(self, msg, slot: int | None = None) -> None:
        """The format's DataType of input `slot` (None: of the output). The format's tiles
        are f16 or f32 and only loads say `n_byte`: bf16 tiles from a 2-byte load are f32
        (the reference's mock bf16), and bf16 tiles an operator computes are f16, the
        format's 2-byte float, downstream too (the importer reads them back as bf16)."""
        computed = self.export.computed
        if slot is None:
            elem, made = self.out_type().elem, computed[self.node.name]
        else:
            e = slot if not isinstance(slot, int) else self.ins[slot]  # an edge, or a slot
            elem, made = self.typed.types[(e.src, e.port)].elem, computed[e.src]
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
        return self.node.attrs.get("compute_bw") or self.export.hw.fabric.compute_bw

    def par(self) -> int:
        return self.node.attrs.get("par_dispatch") or self.export.hw.hbm.par_dispatch
