"""`stepc export` of the operators that move and compute tiles: each handler fills the
Operation that says its operator in the format; `HANDLERS` names the operators this family
writes (the KV cache's are in kv_cache.py)."""

from __future__ import annotations

import numpy as np

from stepc.interop.write.counts import precomputed, unsayable_integer_map
from stepc.interop.write.kv_cache import cache_read_addr, filter_last_tile, row_offset
from stepc.interop.write.sources import INT_DTYPE, external_run, metadata, selectors
from stepc.interop.write.state import NodeExport
from stepc.types import DTYPE_BYTES, Select

MAP_FNS = {"matmul": "matmul", "mul": "mul", "add": "add", "silu": "silu", "div": "div",
           "exp": "exp", "row_sum": "row_wise_sum", "set_offset": "set_offset",
           "row_append": "row_wise_append", "cache_write_addr": "cache_write_addr_gen"}
ACCUM_FNS = {"matmul": "matmul", "mul": "mul", "add": "add", "retile_row": "retile_row",
             "retile_col": "retile_col", "signal_req_all_read": "signal_req_all_read"}


def linear_off_chip_load(x: NodeExport, op) -> None:
    a = x.node.attrs
    t = a["tensor"]
    tile = list(a["tile"])
    tiled = list(t.shape[:-2]) + [t.shape[-2] // tile[0], t.shape[-1] // tile[1]]
    shape = list(a["shape"]) if a.get("shape") else tiled
    stride = list(a["stride"]) if a.get("stride") else _row_major(shape)
    if x.ins:
        m = op.dyn_off_chip_load
        x.wire(m, 0, "ref_id", "ref_stream_idx")
        x.dtype(m.ref_dtype, 0)
    else:
        m = op.off_chip_load
    m.tensor_shape_tiled[:] = tiled
    m.stride[:] = stride
    m.out_shape_tiled[:] = shape
    m.tile_row, m.tile_col = tile
    m.n_byte = DTYPE_BYTES[t.dtype]
    x.dtype(m.dtype)
    m.par_dispatch = x.par()

def linear_off_chip_store(x: NodeExport, op) -> None:
    t = x.node.attrs["tensor"]
    tile = x.in_type(0).elem
    m = op.off_chip_store
    x.wire(m, 0, "input_id", "stream_idx")
    m.tensor_shape_tiled[:] = [*t.shape[:-2], t.shape[-2] // int(tile.rows),
                               t.shape[-1] // int(tile.cols)]
    m.tile_row, m.tile_col = int(tile.rows), int(tile.cols)
    x.dtype(m.dtype, 0)
    m.par_dispatch = x.par()

def broadcast(x: NodeExport, op) -> None:
    m = op.broadcast
    x.wire(m, 0, "input_id", "stream_idx")
    m.num_consumers = len(x.node.outputs)
    x.dtype(m.dtype, 0)

def flatten(x: NodeExport, op) -> None:
    m = op.flatten
    x.wire(m, 0, "input_id", "stream_idx")
    m.min_rank, m.max_rank = x.node.attrs["min"], x.node.attrs["max"]
    x.dtype(m.dtype, 0)

def repeat(x: NodeExport, op) -> None:
    m = op.repeat_static
    x.wire(m, 0, "input_id", "stream_idx")
    m.repeat_factor = x.node.attrs["count"]
    x.dtype(m.dtype, 0)

def reshape(x: NodeExport, op) -> None:
    a = x.node.attrs
    m = op.reshape
    x.wire(m, 0, "input_id", "stream_idx")
    m.split_dim, m.chunk_size = a.get("rank") or 0, a["chunk"]
    m.input_stream_rank = x.in_type(0).rank
    x.dtype(m.dtype, 0)
    if a.get("pad") is not None:
        m.pad_func.zero.SetInParent()
        tile = x.in_type(0).elem
        m.tile_row, m.tile_col = int(tile.rows), int(tile.cols)

def map_(x: NodeExport, op) -> None:
    fn = x.node.attrs["fn"]
    if unsayable_integer_map(fn):
        return precomputed(x, op, fn)
    if fn.name not in MAP_FNS:
        x.fail(f"function `{fn.name}` has no counterpart in the format's "
                  f"ElemtoElemFunc (it has {', '.join(sorted(set(MAP_FNS.values())))})")
    if len(x.ins) == 1:
        m = op.unarymap
        x.wire(m, 0, "input_id", "stream_idx")
        x.dtype(m.dtype_a, 0)
        x.dtype(m.dtype_b)
    else:
        m = op.binarymap
        x.wire(m, 0, "input_id1", "stream_idx1")
        x.wire(m, 1, "input_id2", "stream_idx2")
        x.dtype(m.dtype_a, 0)
        x.dtype(m.dtype_b, 1)
        x.dtype(m.dtype_out)
    kind = MAP_FNS[fn.name]
    if kind == "matmul" and not x.out_type().elem.static:
        kind = "dyn_matmul"
    f = getattr(m.func, kind)
    f.SetInParent()
    if fn.name == "matmul" and dict(fn.kwargs).get("transpose"):
        f.weight_transposed = True
    if kind == "cache_write_addr_gen":
        f.offset_per_idx = row_offset(x, fn)
    m.compute_bw = x.bw()
    m.write_back_mu = bool(x.node.attrs.get("write_back"))

def accum(x: NodeExport, op) -> None:
    a = x.node.attrs
    fn = a["fn"]
    tile = x.out_type().elem
    if len(x.ins) == 2:
        if fn.name != "matmul":
            x.fail(f"Accum of two streams with `{fn.name}`: the format's "
                      "BinaryMapAccum takes matmul")
        m = op.binarymap_accum
        x.wire(m, 0, "input_id1", "stream_idx1")
        x.wire(m, 1, "input_id2", "stream_idx2")
        (m.func.matmul if tile.static else m.func.dyn_matmul).SetInParent()
    else:
        if fn.name not in ACCUM_FNS:
            x.fail(f"function `{fn.name}` has no counterpart in the format")
        m = op.accum
        x.wire(m, 0, "input_id", "stream_idx")
        getattr(m.func, ACCUM_FNS[fn.name]).SetInParent()
    empty = fn.name.startswith("retile") or not tile.static or (
        a.get("init") and a["init"].name == "empty")
    (m.init_func.empty if empty else m.init_func.zero).SetInParent()
    if not str(tile.cols).isdigit():
        x.fail("an accumulator of dynamically many columns: the format's init needs "
                  "tile_col")
    # a dynamically sized accumulator starts empty and takes its rows from its input
    m.tile_row = int(tile.rows) if str(tile.rows).isdigit() else 0
    m.tile_col = int(tile.cols)
    m.rank = a["rank"]
    m.compute_bw = x.bw()
    m.write_back_mu = bool(a.get("write_back"))
    x.dtype(m.dtype_a, 0)
    x.dtype(m.dtype_b)

def external(x: NodeExport, op) -> None:
    st = x.out_type()
    if not isinstance(st.elem, Select) and getattr(st.elem, "dtype", None) != INT_DTYPE:
        x.fail(f"an external stream of {st.elem}: the format's sources stream "
                  f"selectors (SelectGen) or {INT_DTYPE} tiles (MetadataGen)")
    elems, dims, data = external_run(x, x.node)
    if not isinstance(st.elem, Select):
        metadata(x, op, np.asarray(data))
        return
    shape = [int(dims.get(str(d), d)) for d in st.shape]
    selectors(x, op, [sel for sel, _stop in elems], shape, st.elem.n)

def _router(x: NodeExport, m, kind: str) -> None:
    a = x.node.attrs
    m.switch_cycles[:] = [a.get("switch_cycles") or 1] * (
        len(x.node.outputs) if kind == "partition" else len(x.ins) - 1)
    m.write_back_mu = bool(a.get("write_back"))

def partition(x: NodeExport, op) -> None:
    m = op.flat_partition
    x.wire(m, 0, "input_id", "input_stream_idx")
    x.wire(m, 1, "control_id", "control_stream_idx")
    m.partition_rank = x.node.attrs["rank"]
    m.num_consumers = len(x.node.outputs)
    x.dtype(m.input_dtype, 0)
    x.dtype(m.control_dtype, 1)
    _router(x, m, "partition")

def parallelize(x: NodeExport, op) -> None:
    """The format's Parallelize deals chunks round-robin as stepc's does."""
    a = x.node.attrs
    m = op.parallelize
    x.wire(m, 0, "input_id", "input_stream_idx")
    m.parallelize_rank = x.in_type(0).rank if a.get("rank") is None else a["rank"]
    m.num_consumers = len(x.node.outputs)
    m.switch_cycles[:] = [a.get("switch_cycles") or 1] * m.num_consumers
    x.dtype(m.input_dtype, 0)

def reassemble(x: NodeExport, op) -> None:
    m = op.flat_reassemble
    for _slot, e in enumerate(x.ins[:-1]):
        src = x.typed.program.nodes[e.src]
        m.input_id_list.append(x.source_id(e))
        m.input_stream_idx_list.append(e.port if src.array_outputs else -1)
        if e.port and not src.array_outputs:
            x.fail(f"reads output `{src.outputs[e.port]}` of `{src.name}`")
    x.wire(m, len(x.ins) - 1, "control_id", "control_stream_idx")
    m.reassemble_rank = x.node.attrs["rank"]
    x.dtype(m.input_dtype, 0)
    x.dtype(m.control_dtype, len(x.ins) - 1)
    _router(x, m, "reassemble")

def flat_map(x: NodeExport, op) -> None:
    fn = x.node.attrs["fn"]
    if fn.name == "expert_addr":
        kw = dict(fn.kwargs)
        m = op.expert_addr_gen
        x.wire(m, 0, "input_id", "input_stream_idx")
        m.num_tile_per_expert, m.expert_addr_base = kw["tiles"], kw.get("base") or 0
        x.dtype(m.dtype, 0)
        return
    if fn.name == "cache_read_addr":
        return cache_read_addr(x, op, fn)
    if fn.name == "filter_last_tile":
        return filter_last_tile(x, op)
    if fn.name != "retile_streamify":
        x.fail(f"FlatMap `{fn.name}` is not exported yet")
    m = op.retile_streamify
    x.wire(m, 0, "input_id", "stream_idx")
    m.split_row = True
    m.filter_mask = bool(dict(fn.kwargs).get("filter"))
    x.dtype(m.dtype, 0)

def promote(x: NodeExport, op) -> None:
    """stepc's Promote of a rank-0 stream (an outer dim of 1 if it is non-empty, else 0)
    is the format's Reshape(chunk 1, add_outer_dim) then Flatten of the two inner dims
    (the format's own Promote always inserts 1)."""
    if x.node.attrs.get("rank") is not None or x.in_type(0).rank != 0:
        x.fail("Promote of a stream of rank > 0 or at a rank: the format's Promote "
                  "always inserts 1, and its add_outer_dim takes rank-0 streams")
    reshape_id = next(x.export.spare_ids)
    r = x.export.graph.operators.add(name=f"{x.node.name}.reshape", id=reshape_id).reshape
    x.wire(r, 0, "input_id", "stream_idx")
    r.chunk_size, r.add_outer_dim = 1, True
    x.dtype(r.dtype, 0)
    f = op.flatten
    f.input_id, f.min_rank, f.max_rank = reshape_id, 0, 1
    x.dtype(f.dtype, 0)

def eager_merge(x: NodeExport, op) -> None:
    if x.node.attrs.get("rank") not in (None, x.in_type(0).rank):
        x.fail("EagerMerge at a rank below its inputs': the format merges whole "
                  "inputs' chunks of their own rank")
    m = op.eager_merge
    for e in x.ins:
        src = x.typed.program.nodes[e.src]
        m.input_id_list.append(x.source_id(e))
        m.input_stream_idx_list.append(e.port if src.array_outputs else -1)
    m.input_rank = x.in_type(0).rank
    x.dtype(m.dtype, 0)

def random_off_chip_load(x: NodeExport, op) -> None:
    a = x.node.attrs
    t, tile = a["tensor"], list(a["tile"])
    m = op.random_off_chip_load
    x.wire(m, 0, "raddr_id", "raddr_stream_idx")
    m.tensor_shape_tiled[:] = list(t.shape[:-2]) + [t.shape[-2] // tile[0],
                                                     t.shape[-1] // tile[1]]
    m.tile_row, m.tile_col = tile
    m.n_byte = DTYPE_BYTES[t.dtype]
    m.par_dispatch = x.par()
    x.dtype(m.dtype)

def expand(x: NodeExport, op) -> None:
    if len(x.ins) != 2:
        x.fail("Expand by static sizes: the format's ExpandRef needs a reference "
                  "stream (use Repeat)")
    m = op.expand_ref
    x.wire(m, 0, "input_id", "stream_idx")
    x.wire(m, 1, "ref_id", "ref_stream_idx")
    m.expand_rank = (x.node.attrs.get("rank") or 0) + 1
    x.dtype(m.dtype, 0)
    x.dtype(m.ref_dtype, 1)

def sink(x: NodeExport, op) -> None:
    m = op.consumer_context
    x.wire(m, 0, "input_id", "stream_idx")
    x.dtype(m.dtype, 0)


def _row_major(shape: list[int]) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


HANDLERS = {
    "LinearOffChipLoad": linear_off_chip_load,
    "LinearOffChipStore": linear_off_chip_store,
    "Broadcast": broadcast,
    "Flatten": flatten,
    "Repeat": repeat,
    "Reshape": reshape,
    "Map": map_,
    "Accum": accum,
    "External": external,
    "Partition": partition,
    "Parallelize": parallelize,
    "Reassemble": reassemble,
    "FlatMap": flat_map,
    "Promote": promote,
    "EagerMerge": eager_merge,
    "RandomOffChipLoad": random_off_chip_load,
    "Expand": expand,
    "Sink": sink,
}
