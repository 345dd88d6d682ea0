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
import zlib

import numpy as np

from stepc.interop.export_channels import ChannelOps
from stepc.interop.export_counts import CountOps, unsayable_integer_map
from stepc.interop.export_kv import INT_DTYPE, KvCacheOps
from stepc.interop.reader import InteropError
from stepc.interop.schema import ProgramGraph
from stepc.interop.stream_shapes import leading_ones, write_shape
from stepc.types import DTYPE_BYTES, Scalar, Select, Tile

MAP_FNS = {"matmul": "matmul", "mul": "mul", "add": "add", "silu": "silu", "div": "div",
           "exp": "exp", "row_sum": "row_wise_sum", "set_offset": "set_offset",
           "row_append": "row_wise_append", "cache_write_addr": "cache_write_addr_gen"}
ACCUM_FNS = {"matmul": "matmul", "mul": "mul", "add": "add", "retile_row": "retile_row",
             "retile_col": "retile_col", "signal_req_all_read": "signal_req_all_read"}


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


class _Exporter(KvCacheOps, CountOps, ChannelOps):
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

    # ------------------------------------------------------------------ operators
    def op_LinearOffChipLoad(self, op) -> None:
        a = self.node.attrs
        t = a["tensor"]
        tile = list(a["tile"])
        tiled = list(t.shape[:-2]) + [t.shape[-2] // tile[0], t.shape[-1] // tile[1]]
        shape = list(a["shape"]) if a.get("shape") else tiled
        stride = list(a["stride"]) if a.get("stride") else _row_major(shape)
        if self.ins:
            m = op.dyn_off_chip_load
            self.wire(m, 0, "ref_id", "ref_stream_idx")
            self.dtype(m.ref_dtype, 0)
        else:
            m = op.off_chip_load
        m.tensor_shape_tiled[:] = tiled
        m.stride[:] = stride
        m.out_shape_tiled[:] = shape
        m.tile_row, m.tile_col = tile
        m.n_byte = DTYPE_BYTES[t.dtype]
        self.dtype(m.dtype)
        m.par_dispatch = self.par()

    def op_LinearOffChipStore(self, op) -> None:
        t = self.node.attrs["tensor"]
        tile = self.in_type(0).elem
        m = op.off_chip_store
        self.wire(m, 0, "input_id", "stream_idx")
        m.tensor_shape_tiled[:] = [t.shape[-2] // int(tile.rows), t.shape[-1] // int(tile.cols)]
        m.tile_row, m.tile_col = int(tile.rows), int(tile.cols)
        self.dtype(m.dtype, 0)
        m.par_dispatch = self.par()

    def op_Broadcast(self, op) -> None:
        m = op.broadcast
        self.wire(m, 0, "input_id", "stream_idx")
        m.num_consumers = len(self.node.outputs)
        self.dtype(m.dtype, 0)

    def op_Flatten(self, op) -> None:
        m = op.flatten
        self.wire(m, 0, "input_id", "stream_idx")
        m.min_rank, m.max_rank = self.node.attrs["min"], self.node.attrs["max"]
        self.dtype(m.dtype, 0)

    def op_Repeat(self, op) -> None:
        m = op.repeat_static
        self.wire(m, 0, "input_id", "stream_idx")
        m.repeat_factor = self.node.attrs["count"]
        self.dtype(m.dtype, 0)

    def op_Reshape(self, op) -> None:
        a = self.node.attrs
        m = op.reshape
        self.wire(m, 0, "input_id", "stream_idx")
        m.split_dim, m.chunk_size = a.get("rank") or 0, a["chunk"]
        m.input_stream_rank = self.in_type(0).rank
        self.dtype(m.dtype, 0)
        if a.get("pad") is not None:
            m.pad_func.zero.SetInParent()
            tile = self.in_type(0).elem
            m.tile_row, m.tile_col = int(tile.rows), int(tile.cols)

    def op_Map(self, op) -> None:
        fn = self.node.attrs["fn"]
        if unsayable_integer_map(fn):
            return self.precomputed(op, fn)
        if fn.name not in MAP_FNS:
            self.fail(f"function `{fn.name}` has no counterpart in the format's "
                      f"ElemtoElemFunc (it has {', '.join(sorted(set(MAP_FNS.values())))})")
        if len(self.ins) == 1:
            m = op.unarymap
            self.wire(m, 0, "input_id", "stream_idx")
            self.dtype(m.dtype_a, 0)
            self.dtype(m.dtype_b)
        else:
            self.lockstep(self.ins)
            m = op.binarymap
            self.wire(m, 0, "input_id1", "stream_idx1")
            self.wire(m, 1, "input_id2", "stream_idx2")
            self.dtype(m.dtype_a, 0)
            self.dtype(m.dtype_b, 1)
            self.dtype(m.dtype_out)
        kind = MAP_FNS[fn.name]
        if kind == "matmul" and not self.out_type().elem.static:
            kind = "dyn_matmul"
        f = getattr(m.func, kind)
        f.SetInParent()
        if fn.name == "matmul" and dict(fn.kwargs).get("transpose"):
            f.weight_transposed = True
        if kind == "cache_write_addr_gen":
            f.offset_per_idx = self.row_offset(fn)
        m.compute_bw = self.bw()
        m.write_back_mu = bool(self.node.attrs.get("write_back"))

    def op_Accum(self, op) -> None:
        a = self.node.attrs
        fn = a["fn"]
        tile = self.out_type().elem
        if len(self.ins) == 2:
            if fn.name != "matmul":
                self.fail(f"Accum of two streams with `{fn.name}`: the format's "
                          "BinaryMapAccum takes matmul")
            self.lockstep(self.ins)
            m = op.binarymap_accum
            self.wire(m, 0, "input_id1", "stream_idx1")
            self.wire(m, 1, "input_id2", "stream_idx2")
            (m.func.matmul if tile.static else m.func.dyn_matmul).SetInParent()
        else:
            if fn.name not in ACCUM_FNS:
                self.fail(f"function `{fn.name}` has no counterpart in the format")
            m = op.accum
            self.wire(m, 0, "input_id", "stream_idx")
            getattr(m.func, ACCUM_FNS[fn.name]).SetInParent()
        empty = fn.name.startswith("retile") or not tile.static or (
            a.get("init") and a["init"].name == "empty")
        (m.init_func.empty if empty else m.init_func.zero).SetInParent()
        if not str(tile.cols).isdigit():
            self.fail("an accumulator of dynamically many columns: the format's init needs "
                      "tile_col")
        # a dynamically sized accumulator starts empty and takes its rows from its input
        m.tile_row = int(tile.rows) if str(tile.rows).isdigit() else 0
        m.tile_col = int(tile.cols)
        m.rank = a["rank"]
        m.compute_bw = self.bw()
        m.write_back_mu = bool(a.get("write_back"))
        self.dtype(m.dtype_a, 0)
        self.dtype(m.dtype_b)

    def op_External(self, op) -> None:
        st = self.out_type()
        if not isinstance(st.elem, Select) and getattr(st.elem, "dtype", None) != INT_DTYPE:
            self.fail(f"an external stream of {st.elem}: the format's sources stream "
                      f"selectors (SelectGen) or {INT_DTYPE} tiles (MetadataGen)")
        elems, dims, data = self.external_run(self.node)
        if not isinstance(st.elem, Select):
            self.metadata(op, np.asarray(data))
            return
        shape = [int(dims.get(str(d), d)) for d in st.shape]
        self.selectors(op, [sel for sel, _stop in elems], shape, st.elem.n)

    def external_run(self, node) -> tuple[list, dict, np.ndarray]:
        """The elements, the dims they fix and the data of the external stream `node`: its
        trace, else its declared file or seeded generator (as `stepc sim` uses)."""
        from stepc.sim.run import external_elements
        from stepc.traces import TraceError, external_file
        st = self.typed.types[(node.name, 0)]
        name, gen = node.attrs["name"], node.attrs.get("gen", {})
        try:
            arr = self.traces.get(name)
            if arr is None:
                arr = external_file(gen, getattr(st.elem, "n", None), len(st.shape))
            return external_elements(name, st, arr, gen, zlib.crc32(name.encode()) % 2**31)
        except TraceError as e:
            self.fail(str(e))

    def router(self, m, kind: str) -> None:
        a = self.node.attrs
        m.switch_cycles[:] = [a.get("switch_cycles") or 1] * (
            len(self.node.outputs) if kind == "partition" else len(self.ins) - 1)
        m.write_back_mu = bool(a.get("write_back"))

    def op_Partition(self, op) -> None:
        m = op.flat_partition
        self.wire(m, 0, "input_id", "input_stream_idx")
        self.wire(m, 1, "control_id", "control_stream_idx")
        m.partition_rank = self.node.attrs["rank"]
        m.num_consumers = len(self.node.outputs)
        self.dtype(m.input_dtype, 0)
        self.dtype(m.control_dtype, 1)
        self.router(m, "partition")

    def op_Parallelize(self, op) -> None:
        """The format's Parallelize deals chunks round-robin as stepc's does."""
        a = self.node.attrs
        m = op.parallelize
        self.wire(m, 0, "input_id", "input_stream_idx")
        m.parallelize_rank = self.in_type(0).rank if a.get("rank") is None else a["rank"]
        m.num_consumers = len(self.node.outputs)
        m.switch_cycles[:] = [a.get("switch_cycles") or 1] * m.num_consumers
        self.dtype(m.input_dtype, 0)

    def op_Reassemble(self, op) -> None:
        m = op.flat_reassemble
        for _slot, e in enumerate(self.ins[:-1]):
            src = self.typed.program.nodes[e.src]
            m.input_id_list.append(self.ids[e.src])
            m.input_stream_idx_list.append(e.port if src.array_outputs else -1)
            if e.port and not src.array_outputs:
                self.fail(f"reads output `{src.outputs[e.port]}` of `{src.name}`")
        self.wire(m, len(self.ins) - 1, "control_id", "control_stream_idx")
        m.reassemble_rank = self.node.attrs["rank"]
        self.dtype(m.input_dtype, 0)
        self.dtype(m.control_dtype, len(self.ins) - 1)
        self.router(m, "reassemble")

    def op_FlatMap(self, op) -> None:
        fn = self.node.attrs["fn"]
        if fn.name == "expert_addr":
            kw = dict(fn.kwargs)
            m = op.expert_addr_gen
            self.wire(m, 0, "input_id", "input_stream_idx")
            m.num_tile_per_expert, m.expert_addr_base = kw["tiles"], kw.get("base") or 0
            self.dtype(m.dtype, 0)
            return
        if fn.name == "cache_read_addr":
            return self.cache_read_addr(op, fn)
        if fn.name == "filter_last_tile":
            return self.filter_last_tile(op)
        if fn.name != "retile_streamify":
            self.fail(f"FlatMap `{fn.name}` is not exported yet")
        m = op.retile_streamify
        self.wire(m, 0, "input_id", "stream_idx")
        m.split_row = True
        m.filter_mask = bool(dict(fn.kwargs).get("filter"))
        self.dtype(m.dtype, 0)

    def op_Promote(self, op) -> None:
        """stepc's Promote of a rank-0 stream (an outer dim of 1 if it is non-empty, else 0)
        is the format's Reshape(chunk 1, add_outer_dim) then Flatten of the two inner dims
        (the format's own Promote always inserts 1)."""
        if self.node.attrs.get("rank") is not None or self.in_type(0).rank != 0:
            self.fail("Promote of a stream of rank > 0 or at a rank: the format's Promote "
                      "always inserts 1, and its add_outer_dim takes rank-0 streams")
        reshape_id = next(self.spare_ids)
        r = self.graph.operators.add(name=f"{self.node.name}.reshape", id=reshape_id).reshape
        self.wire(r, 0, "input_id", "stream_idx")
        r.chunk_size, r.add_outer_dim = 1, True
        self.dtype(r.dtype, 0)
        f = op.flatten
        f.input_id, f.min_rank, f.max_rank = reshape_id, 0, 1
        self.dtype(f.dtype, 0)

    def op_EagerMerge(self, op) -> None:
        if self.node.attrs.get("rank") not in (None, self.in_type(0).rank):
            self.fail("EagerMerge at a rank below its inputs': the format merges whole "
                      "inputs' chunks of their own rank")
        m = op.eager_merge
        for e in self.ins:
            src = self.typed.program.nodes[e.src]
            m.input_id_list.append(self.ids[e.src])
            m.input_stream_idx_list.append(e.port if src.array_outputs else -1)
        m.input_rank = self.in_type(0).rank
        self.dtype(m.dtype, 0)

    def op_RandomOffChipLoad(self, op) -> None:
        a = self.node.attrs
        t, tile = a["tensor"], list(a["tile"])
        m = op.random_off_chip_load
        self.wire(m, 0, "raddr_id", "raddr_stream_idx")
        m.tensor_shape_tiled[:] = list(t.shape[:-2]) + [t.shape[-2] // tile[0],
                                                         t.shape[-1] // tile[1]]
        m.tile_row, m.tile_col = tile
        m.n_byte = DTYPE_BYTES[t.dtype]
        m.par_dispatch = self.par()
        self.dtype(m.dtype)

    def op_Expand(self, op) -> None:
        if len(self.ins) != 2:
            self.fail("Expand by static sizes: the format's ExpandRef needs a reference "
                      "stream (use Repeat)")
        self.lockstep(self.ins)
        m = op.expand_ref
        self.wire(m, 0, "input_id", "stream_idx")
        self.wire(m, 1, "ref_id", "ref_stream_idx")
        m.expand_rank = (self.node.attrs.get("rank") or 0) + 1
        self.dtype(m.dtype, 0)
        self.dtype(m.ref_dtype, 1)

    def op_Sink(self, op) -> None:
        m = op.consumer_context
        self.wire(m, 0, "input_id", "stream_idx")
        self.dtype(m.dtype, 0)


def _row_major(shape: list[int]) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]
