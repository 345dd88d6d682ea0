"""`stepc export` of integer counts the format cannot compute: a `Map(fn=ceildiv_int)` (KV
tile counts from KV lengths) or a `cache_write_addr` with a negative `row_offset` (the rows
of the last KV tile) becomes a MetadataGen of the values, computed here from the data its
inputs stream at export time, as the reference's own attention graphs carry such counts in
MetadataGen files.

The Map stays a Map (`x * 0 + values`, the format's cache_write_addr_gen with offset 0), so
it still waits for its input and takes its fixed cycle: the graph's timing is the program's.
Only values of data known before the run are precomputed: they must come from sources (a
traced or generated external stream, a MetadataGen) through operators that move values
(Flatten, Reshape without padding, Repeat, Parallelize, fan-out, other such Maps, and
`cache_write_addr(row_offset=0)`, whose first input only gates); the rest is refused.

Counts of a stream routed at run time (a region's requests, dealt by a Partition whose
selector the run computes) are said as the reference's dynamic attention graph says its
regions' counts: the values of every request, computed at export, in one MetadataGen that
a FlatPartition routes by the same selector (one more reader of its fan-out), so each
region's Map reads its own requests' values. The Maps of the regions share that Partition,
one output each.
"""

from __future__ import annotations

import numpy as np

from stepc.interop.write.sources import external_run, metadata, tensor_values
from stepc.interop.write.state import NodeExport
from stepc.interop.write.stream_shapes import write_shape
from stepc.ops.functions import FUNCTIONS
from stepc.types import fmt_shape


def unsayable_integer_map(fn) -> bool:
    """Whether the Map of `fn` computes integers none of the format's functions compute."""
    return fn.name == "ceildiv_int" or \
        fn.name == "cache_write_addr" and dict(fn.kwargs).get("row_offset", 0) < 0


def _static(shape) -> list[int] | None:
    """`shape` as integers, or None when a dim is symbolic."""
    dims = [int(d) for d in shape if str(d).isdigit()]
    return dims if len(dims) == len(shape) else None


def _apply(fn, values: list[np.ndarray]) -> np.ndarray:
    """The integers `fn` computes of `values` (an integer function: it has `ints`)."""
    ints = FUNCTIONS[fn.name].ints
    assert ints is not None, fn.name
    return np.asarray(ints(values, dict(fn.kwargs)), dtype=np.int64)


def precomputed(x: NodeExport, op, fn) -> None:
    """`op` as `Map(x, values, fn=cache_write_addr(row_offset=0))` (x * 0 + values): the
    values this node's Map computes come from a MetadataGen, and the Map still waits for
    its first input `x` and takes its one fixed cycle, so the timing is the program's."""
    shape = _static(x.out_type().shape)
    m = op.binarymap
    x.wire(m, 0, "input_id1", "stream_idx1")
    if shape is None:  # over requests routed at run time
        m.input_id2, m.stream_idx2 = routed_values(x, fn)
    else:
        values = _apply(fn, [stream_values(x, e) for e in x.ins]).reshape(shape)
        m.input_id2 = values_source(x, values, x.export.ones[x.node.name])
    x.dtype(m.dtype_a, 0)
    m.dtype_b.u64.SetInParent()
    x.dtype(m.dtype_out)
    m.func.cache_write_addr_gen.offset_per_idx = 0
    m.compute_bw = x.bw()

def routed_values(x: NodeExport, fn) -> tuple[int, int]:
    """The partition id and output of the values this node's Map computes over streams
    routed at run time: every request's values, computed from the streams before the
    Partitions that route the Map's inputs, routed by their selector (see above)."""
    p = x.typed.program
    routes = [routing(x, e) for e in x.ins]
    shape = None
    if None not in routes:
        data = [p.in_edges(part.name)[0] for part, _port in routes]
        shape = _static(x.typed.types[(data[0].src, data[0].port)].shape)
    if shape is None:
        x.fail(f"`{fn.name}` over a stream of shape {fmt_shape(x.out_type().shape)}"
                  ", whose length only the run knows and that no Partition of a stream "
                  "of static shape routes: the format computes no such integers, and a "
                  "MetadataGen file of the values needs a static shape")
    keys = {(routing_key(x, part), port) for part, port in routes}
    if len(keys) > 1:
        x.fail(f"`{fn.name}` over streams routed by different selectors or to "
                  "different outputs: the values go out as one MetadataGen file routed "
                  "by one selector")
    values = _apply(fn, [stream_values(x, e) for e in data]).reshape(shape)
    part, port = routes[0]
    key = (keys.pop()[0], values.tobytes())
    for part_id, read in x.export.routed.partitions.setdefault(key, []):
        if port not in read:
            read.add(port)
            return part_id, port
    part_id = routed_partition(x, part, values)
    x.export.routed.partitions[key].append((part_id, {port}))
    return part_id, port

def routing(x: NodeExport, edge):
    """The Partition and its output that route the stream of `edge` (through fan-out),
    or None."""
    p = x.typed.program
    while p.nodes[edge.src].op == "Broadcast":
        edge = p.in_edges(edge.src)[0]
    node = p.nodes[edge.src]
    return (node, edge.port) if node.op == "Partition" else None

def routing_key(x: NodeExport, part) -> tuple:
    """What routes as the Partition `part` does: its selector (before fan-out), rank,
    consumers, switch cost and write-back."""
    p = x.typed.program
    sel = p.in_edges(part.name)[1]
    while p.nodes[sel.src].op == "Broadcast":
        sel = p.in_edges(sel.src)[0]
    a = part.attrs
    return ((sel.src, sel.port), a["rank"], len(part.outputs), a.get("switch_cycles"),
            bool(a.get("write_back")))

def routed_partition(x: NodeExport, part, values: np.ndarray) -> int:
    """The id of a new FlatPartition routing a new MetadataGen of `values` as `part`
    routes its data, by a new reader of the fan-out of `part`'s selector."""
    p = x.typed.program
    sel = p.in_edges(part.name)[1]
    fan = p.nodes[sel.src]
    if fan.op != "Broadcast":
        x.fail(f"the selector of `{part.name}`, which routes this Map's input, has no "
                  "other reader: the routed values would need a fan-out of it")
    source_id = values_source(x, values, x.export.ones[fan.name])  # in step with it
    extra = x.export.routed.extra_readers.get(fan.name, 0)
    x.export.routed.extra_readers[fan.name] = extra + 1
    part_id = next(x.export.spare_ids)
    routed = x.export.graph.operators.add(name=f"{x.node.name}.routed", id=part_id)
    m = routed.flat_partition
    m.input_id, m.control_id = source_id, x.export.ids[fan.name]
    m.control_stream_idx = len(fan.outputs) + extra
    m.partition_rank, m.num_consumers = part.attrs["rank"], len(part.outputs)
    m.input_dtype.u64.SetInParent()
    m.control_dtype.multi_hot.SetInParent()
    m.switch_cycles[:] = [part.attrs.get("switch_cycles") or 1] * len(part.outputs)
    m.write_back_mu = bool(part.attrs.get("write_back"))
    routed.parallel_factor = 1
    return part_id

def values_source(x: NodeExport, values: np.ndarray, ones: int) -> int:
    """The id of a new MetadataGen streaming `values` with `ones` leading 1s (the
    format's MetadataGen leads with one; a Flatten merges it away for none)."""
    source_id = next(x.export.spare_ids)
    source = x.export.graph.operators.add(name=f"{x.node.name}.values", id=source_id)
    metadata(x, source, values)
    source.parallel_factor = 1
    write_shape(source, values.shape, 1)
    if ones == 1:
        return source_id
    if ones:
        x.fail(f"an input with {ones} leading dims of 1 in the format's reading")
    flat_id = next(x.export.spare_ids)
    flat = x.export.graph.operators.add(name=f"{x.node.name}.values.flat", id=flat_id)
    f = flat.flatten
    f.input_id, f.min_rank, f.max_rank = source_id, values.ndim - 1, values.ndim
    f.dtype.scalar_i64.SetInParent()
    flat.parallel_factor = 1
    write_shape(flat, values.shape, 0)
    return flat_id

def stream_values(x: NodeExport, edge) -> np.ndarray:
    """The values the stream of `edge` carries, in stream order (flat)."""
    p = x.typed.program
    node, ins = p.nodes[edge.src], p.in_edges(edge.src)
    fn = node.attrs.get("fn")
    if node.op == "External":
        return known_data(x, node)
    if node.op == "MetadataGen":
        return tensor_values(x, node).astype(np.int64).reshape(-1)
    if node.op == "Map" and fn.name == "cache_write_addr" and \
            not dict(fn.kwargs).get("row_offset"):
        return stream_values(x, ins[1])  # x * 0 + values: a gate on x
    if node.op == "Map" and fn.name in ("ceildiv_int", "cache_write_addr"):
        return _apply(fn, [stream_values(x, e) for e in ins])
    if node.op in ("Flatten", "Broadcast") or \
            node.op == "Reshape" and node.attrs.get("pad") is None:
        return stream_values(x, ins[0])  # the same values in the same order
    if node.op == "Repeat":  # each element `count` times
        return np.repeat(stream_values(x, ins[0]), node.attrs["count"])
    if node.op == "Parallelize":
        st = x.typed.types[(ins[0].src, ins[0].port)]
        rank = st.rank if node.attrs.get("rank") is None else node.attrs["rank"]
        size = int(np.prod([int(d) for d in st.shape[len(st.shape) - rank:]]))
        chunks = stream_values(x, ins[0]).reshape(-1, size)
        return chunks[edge.port::len(node.outputs)].reshape(-1)
    what = f"{node.op}" + (f"(fn={fn.name})" if fn is not None else "")
    x.fail(f"`{x.node.attrs['fn'].name}` over a stream computed by `{node.name}` "
              f"({what}): the format computes no such integers, so their values go out "
              "in a MetadataGen file computed at export, from data known before the run "
              "only (traces, MetadataGen, moved by Flatten, Reshape, Repeat, "
              "Parallelize)")

def known_data(x: NodeExport, node) -> np.ndarray:
    """The data of the external stream `node` the counts are computed from: its trace,
    else the data the program declares for it (a file or a seeded generator, noted)."""
    name, gen = node.attrs["name"], node.attrs.get("gen") or {}
    if name not in x.export.traces:
        if not gen:
            x.fail(f"`{x.node.attrs['fn'].name}` over the external stream `{name}`, "
                      "whose data the program does not declare: the values go out "
                      "precomputed as a "
                      f"MetadataGen file, so pass its data: --trace {name}=LENS.npy")
        said = ", ".join(f"{k}={v}" for k, v in gen.items())
        note = (f"`{name}`: no --trace, so the counts computed from it are those of the "
                f"program's default data ({said}); pass --trace {name}=LENS.npy for others")
        if note not in x.export.notes:
            x.export.notes.append(note)
    return np.asarray(external_run(x, node)[2], dtype=np.int64).reshape(-1)
