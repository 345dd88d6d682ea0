"""`stepc export`'s table of operators: one `op_<Op>` method per stepc operator fills the
Operation that says it in the format (the KV-cache, count and channel operations live in
their own mixins). A mixin of the exporter (stepc/interop/export.py), whose graph walk
calls them.
"""

from __future__ import annotations

import zlib

import numpy as np

from stepc.interop.export_counts import unsayable_integer_map
from stepc.interop.export_kv import INT_DTYPE
from stepc.types import DTYPE_BYTES, Select

MAP_FNS = {"matmul": "matmul", "mul": "mul", "add": "add", "silu": "silu", "div": "div",
           "exp": "exp", "row_sum": "row_wise_sum", "set_offset": "set_offset",
           "row_append": "row_wise_append", "cache_write_addr": "cache_write_addr_gen"}
ACCUM_FNS = {"matmul": "matmul", "mul": "mul", "add": "add", "retile_row": "retile_row",
             "retile_col": "retile_col", "signal_req_all_read": "signal_req_all_read"}


class OperatorOps:
    """The exporter's operations, one per stepc operator."""

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
        m.tensor_shape_tiled[:] = [*t.shape[:-2], t.shape[-2] // int(tile.rows),
                                   t.shape[-1] // int(tile.cols)]
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
            m.input_id_list.append(self.source_id(e))
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
            m.input_id_list.append(self.source_id(e))
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

