"""How each reference operator is written in stepc's language: one function per op kind,
each returning the statement (and a note for its comment) or refusing the operator with the
field that stepc cannot say. See docs/interop.md for the table."""

from __future__ import annotations

import re

import numpy as np

from stepc.interop.read.pairs import (
    input_readers,
    leading_one_flatten,
    producer,
    promoting_reshape,
)
from stepc.interop.read.reader import InteropError, Op, Port, relative_to
from stepc.interop.read.writer import Writer

# bytes per element of an off-chip tensor -> its stepc element type (`n_byte` of the loads;
# the reference keeps f32 tiles and counts 2 bytes when it mocks bf16)
N_BYTE_DTYPES = {2: "bf16", 4: "f32"}
TILE_DTYPES = {"f32": "f32", "f16": "f16", "u64": "u64", "scalar_u64": "u64", "bool": "bool",
               "scalar_bool": "bool", "scalar_i64": "u64"}
MAP_FNS = {"matmul": "matmul", "dyn_matmul": "matmul", "mul": "mul", "add": "add",
           "silu": "silu", "div": "div", "exp": "exp", "row_wise_sum": "row_sum",
           "set_offset": "set_offset", "row_wise_append": "row_append",
           "cache_write_addr_gen": "cache_write_addr"}
ACCUM_FNS = {"matmul": "matmul", "mul": "mul", "add": "add", "retile_row": "retile_row",
             "retile_col": "retile_col", "signal_req_all_read": "signal_req_all_read"}
DEFAULT_INIT = {"retile_row": "empty", "retile_col": "empty"}  # others: zero



# ------------------------------------------------------------------------ helpers
def _dtype(w: Writer, op: Op, dt, what: str) -> str:
    kind = dt.WhichOneof("type")
    if kind is None or kind not in TILE_DTYPES:
        raise InteropError(w.path, f"{what}: element type `{kind}` has no stepc equivalent", op)
    return TILE_DTYPES[kind]


def _one_switch(w: Writer, op: Op) -> int:
    cycles = set(op.msg.switch_cycles)
    if len(cycles) > 1:
        raise InteropError(w.path, "switch_cycles differ between consumers "
                           f"({sorted(cycles)}); stepc has one switch cost per operator", op)
    return cycles.pop() if cycles else 1


def n_byte_dtype(w: Writer, op: Op, dtype=None) -> str:
    m = op.msg
    if m.n_byte not in N_BYTE_DTYPES:
        raise InteropError(w.path, f"n_byte = {m.n_byte}: stepc's element types have 2 or 4 "
                           "bytes", op)
    tile = _dtype(w, op, m.dtype if dtype is None else dtype, "dtype")
    if tile == "f16" and m.n_byte == 2:
        return "f16"
    return N_BYTE_DTYPES[m.n_byte]


def _tensor(w: Writer, op: Op, name: str, dtype: str, role: str, source: str = "") -> str:
    """Declare the tensor of the off-chip operator `op` (its `tensor_shape_tiled` tiles of
    `tile_row` x `tile_col`; at least 2 dims, bounds.py)."""
    m = op.msg
    dims = list(m.tensor_shape_tiled)
    full = dims[:-2] + [dims[-2] * m.tile_row, dims[-1] * m.tile_col]
    tname = name.upper()
    w.tensors.append(f"tensor {tname} : {dtype}[{', '.join(map(str, full))}] {role}{source}")
    w.tensor_ops[tname] = op.id
    return tname


def _attrs(**kv) -> str:
    parts = []
    for k, v in kv.items():
        if v is None or v is False:
            continue
        if v is True:
            v = "true"
        elif isinstance(v, (list, tuple)):
            v = "[" + ", ".join(map(str, v)) + "]"
        parts.append(f"{k}={v}")
    return ", ".join(parts)


def _out_dtype(w: Writer, op: Op, inputs: list[Port], dt) -> str | None:
    """`dtype=` for a compute operator: given when the output's type differs from the first
    input's."""
    out = w.narrow.get(op.id) or _dtype(w, op, dt, "output dtype")
    first = w.dtypes.get(inputs[0].src) if inputs else None
    out = _two_byte(out, first)
    w.dtypes[op.id] = out
    return None if first == out else out


def _two_byte(said: str, first: str | None) -> str:
    """The format's tiles are f16 or f32, and only loads say `n_byte`: an f16 result of
    bf16 tiles (a 2-byte load's) is bf16, as `stepc export` writes it."""
    return "bf16" if said == "f16" and first == "bf16" else said


# ------------------------------------------------------------------------ operators
def _off_chip_load(w: Writer, op: Op, name: str):
    """A static view streams `(1,) + out_shape_tiled` in the reference: stepc's view gets
    the leading 1 (stride 0); with a reference stream the view follows each element."""
    m = op.msg
    dtype = n_byte_dtype(w, op)
    src = f" = file(path=\"{w.side_file(m.npy_path)}\")" if m.HasField("npy_path") else ""
    t = _tensor(w, op, name, dtype, "input", src)
    w.dtypes[op.id] = dtype
    stride, shape = list(m.stride), list(m.out_shape_tiled)
    if op.inputs:
        ref = f", ref={w.ref(op, op.inputs[0])}"
    elif leading_one_flatten(w, op, shape) is not None:
        ref = ""  # read behind a Flatten of the 1: the view without it
    else:
        ref, stride, shape = "", [0] + stride, [1] + shape
    return (f"{name} = LinearOffChipLoad({t}{ref}, " + _attrs(
        tile=[m.tile_row, m.tile_col], stride=stride, shape=shape,
        par_dispatch=m.par_dispatch or None) + ")", "")


def _off_chip_store(w: Writer, op: Op, name: str):
    m = op.msg
    dtype = _dtype(w, op, m.dtype, "dtype")
    if w.dtypes.get(op.inputs[0].src) == "bf16" and dtype in ("f16", "f32"):
        dtype = "bf16"  # it writes the 2-byte tiles it is given, as `stepc export` says them
    t = _tensor(w, op, name, dtype, "output")
    if m.HasField("store_path"):
        raise InteropError(w.path, "store_path: stepc writes outputs with `stepc sim --out`",
                           op)
    store = (f"LinearOffChipStore({w.ref(op, op.inputs[0])}, {t}, "
             f"{_attrs(par_dispatch=m.par_dispatch or None)})")
    return store, ""


def _broadcast(w: Writer, op: Op, name: str):
    w.outputs[op.id] = op.msg.num_consumers
    w.dtypes[op.id] = w.dtypes.get(op.inputs[0].src, "f32")
    return f"{name} = Broadcast({w.ref(op, op.inputs[0])}, consumers={op.msg.num_consumers})", ""


def _pass(w: Writer, op: Op, port: int = 0) -> None:
    w.dtypes[op.id] = w.dtypes.get(op.inputs[port].src, "f32")


def _flatten(w: Writer, op: Op, name: str):
    _pass(w, op)
    m = op.msg
    source = producer(w, op)
    if w.unled.get(source.id) == op.id:  # said by its source, without the leading 1
        w.names[op.id] = w.names[source.id]
        return "", ""
    reshape = promoting_reshape(w, producer(w, op))
    if reshape is not None:
        return (f"{name} = Promote({w.ref(reshape, reshape.inputs[0])})",
                f"with op {reshape.id}: Reshape(chunk 1, add_outer_dim) + Flatten is Promote")
    return f"{name} = Flatten({w.ref(op, op.inputs[0])}, min={m.min_rank}, max={m.max_rank})", ""


def _repeat(w: Writer, op: Op, name: str):
    _pass(w, op)
    return f"{name} = Repeat({w.ref(op, op.inputs[0])}, count={op.msg.repeat_factor})", ""


def _reshape(w: Writer, op: Op, name: str):
    _pass(w, op)
    m = op.msg
    if promoting_reshape(w, op) is not None:
        return "", ""  # said by its Flatten (see promoting_reshape)
    pad = None
    if m.HasField("pad_func"):
        pad = m.pad_func.WhichOneof("init_fn")
        if pad != "zero":
            raise InteropError(w.path, f"pad_func `{pad}`: stepc pads with zero tiles", op)
    call = (f"Reshape({w.ref(op, op.inputs[0])}, " +
            _attrs(chunk=m.chunk_size, rank=m.split_dim or None, pad=pad) + ")")
    notes = []
    if m.add_outer_dim:
        call = f"Promote({call})"
        notes.append("add_outer_dim: Promote adds the outer dim (1 if any element, else 0)")
    if m.write_back_mu:
        readers = _compute_readers(w, op)
        if readers:
            raise InteropError(w.path, "write_back_mu on a Reshape read by a compute operator "
                               f"({readers[0]}): stepc's Reshape has no memory write", op)
        notes.append("write_back_mu: no compute operator reads it, so it costs nothing")
    return f"{name} = {call}", "; ".join(notes)


def _compute_readers(w: Writer, op: Op) -> list[str]:
    return [c.name for c in input_readers(w, op)
            if c.kind in ("binarymap", "unarymap", "binarymap_accum", "accum")]


def _npy_shape(w: Writer, op: Op, npy: str) -> tuple[str, tuple[int, ...]]:
    path = w.side_file(npy)
    try:
        shape = np.load(relative_to(w.path, npy), mmap_mode="r", allow_pickle=False).shape
    except (OSError, ValueError) as e:
        raise InteropError(w.path, f"cannot read {npy}: {e}", op) from None
    return path, shape


def _source(w: Writer, op: Op, name: str, elem: str, dims: tuple[int, ...], data: str):
    """A file-backed source: an external stream of the file's data with the reference's
    leading 1 (its sources stream `(1,) + shape`), unless a Flatten of it is its only
    reader (see leading_one_flatten)."""
    lead = () if leading_one_flatten(w, op, dims) is not None else (1,)
    shape = ", ".join(map(str, (*lead, *dims)))
    w.streams.append(f"stream {name} : Strm<{elem}, {len(lead + dims) - 1}>[{shape}] = {data}"
                     f"  # op {op.id}")
    return "", ""


def _select_gen(w: Writer, op: Op, name: str):
    m = op.msg
    path, shape = _npy_shape(w, op, m.npy_path)
    if not m.is_multihot:
        raise InteropError(w.path, "is_multihot = false (an index selector): stepc reads "
                           "multi-hot selector files", op)
    if len(shape) < 2:
        raise InteropError(w.path, f"{m.npy_path} has shape {list(shape)}; selectors need "
                           "[.., n]", op)
    return _source(w, op, name, f"MultiHot<{shape[-1]}>", shape[:-1],
                   f'external("{name}", file="{path}", multihot=true)')


def _metadata_gen(w: Writer, op: Op, name: str):
    m = op.msg
    path, shape = _npy_shape(w, op, m.npy_path)
    w.dtypes[op.id] = "u64"
    if not shape:
        raise InteropError(w.path, f"{m.npy_path} holds a scalar; MetadataGen needs an array",
                           op)
    return _source(w, op, name, "Tile<u64, [1, 1]>", shape, f'external("{name}", file="{path}")')


def _partition(w: Writer, op: Op, name: str):
    m = op.msg
    _pass(w, op)
    w.outputs[op.id] = m.num_consumers
    dim = w.partition_dims.setdefault((_root(w, op.inputs[1]), m.num_consumers), name)
    return (f"{name} = Partition({w.ref(op, op.inputs[0])}, {w.ref(op, op.inputs[1])}, " +
            _attrs(rank=m.partition_rank, consumers=m.num_consumers,
                   switch_cycles=_one_switch(w, op), write_back=m.write_back_mu,
                   dim=f'"{dim}"') + ")", "")


def _parallelize(w: Writer, op: Op, name: str):
    m = op.msg
    if m.write_back_mu:
        raise InteropError(w.path, "write_back_mu on a Parallelize: stepc's Parallelize "
                           "does not write its chunks to a memory unit", op)
    _pass(w, op)
    w.outputs[op.id] = m.num_consumers
    return (f"{name} = Parallelize({w.ref(op, op.inputs[0])}, " +
            _attrs(consumers=m.num_consumers, rank=m.parallelize_rank,
                   switch_cycles=_one_switch(w, op)) + ")", "")


def _root(w: Writer, port: Port) -> Port:
    """The stream a Broadcast's output copies (through any chain of Broadcasts): Partitions
    routed by copies of one selector route equally many elements to each output, so they
    share their count symbols (`dim=`)."""
    while w.by_id[port.src].kind == "broadcast":
        port = w.by_id[port.src].inputs[0]
    return Port(port.src, port.idx or 0)


def _reassemble(w: Writer, op: Op, name: str):
    m = op.msg
    assert op.control is not None  # the reader gives every FlatReassemble its control input
    _pass(w, op)
    ins = ", ".join(w.ref(op, p) for p in op.inputs)
    return (f"{name} = Reassemble([{ins}], {w.ref(op, op.control)}, " +
            _attrs(rank=m.reassemble_rank, switch_cycles=_one_switch(w, op),
                   write_back=m.write_back_mu) + ")", "")


def _func(w: Writer, op: Op, func, table: dict[str, str], oneof: str) -> str:
    kind = func.WhichOneof(oneof)
    if kind not in table:
        raise InteropError(w.path, f"function `{kind}` has no stepc equivalent", op)
    fn = table[kind]
    if kind in ("matmul", "dyn_matmul") and getattr(func, kind).weight_transposed:
        fn = "matmul(transpose=true)"
    if kind == "cache_write_addr_gen":
        fn = f"cache_write_addr(row_offset={func.cache_write_addr_gen.offset_per_idx})"
    return fn


def _map(w: Writer, op: Op, name: str):
    m = op.msg
    fn = _func(w, op, m.func, MAP_FNS, "elem_elem_fn")
    out = m.dtype_out if op.kind == "binarymap" else m.dtype_b
    if fn.startswith("matmul"):  # a new tile, of the graph's output type
        dtype = _out_dtype(w, op, op.inputs, out)
    else:  # elementwise: bf16 with f32 gives f32; 2-byte tiles alone stay bf16
        kinds = [w.dtypes.get(p.src) for p in op.inputs]
        out_kind = "f32" if "f32" in kinds and _dtype(w, op, out, "dtype") == "f32" \
            else kinds[0] or "f32"
        out_kind = w.narrow.get(op.id, out_kind)
        w.dtypes[op.id] = out_kind
        dtype = None if out_kind == kinds[0] else out_kind
    ins = ", ".join(w.ref(op, p) for p in op.inputs)
    return (f"{name} = Map({ins}, " + _attrs(fn=fn, dtype=dtype, compute_bw=m.compute_bw or None,
                                              write_back=m.write_back_mu) + ")", "")


def _accum(w: Writer, op: Op, name: str):
    m = op.msg
    if op.kind == "accum":
        fn = _func(w, op, m.func, ACCUM_FNS, "accum_fn")
    else:
        fn = _func(w, op, m.func, MAP_FNS, "map_accum_fn")
    init = m.init_func.WhichOneof("init_fn") or "zero"
    note = ""
    if init != DEFAULT_INIT.get(fn, "zero"):
        if fn == "matmul" and init == "empty":
            note = "init empty: stepc's matmul accumulator takes its first product's rows"
        else:
            raise InteropError(w.path, f"init_func `{init}` for `{fn}` has no stepc "
                               "equivalent", op)
    dtype = _out_dtype(w, op, op.inputs, m.dtype_b)
    ins = ", ".join(w.ref(op, p) for p in op.inputs)
    return (f"{name} = Accum({ins}, " + _attrs(fn=fn, rank=m.rank, dtype=dtype,
                                                compute_bw=m.compute_bw or None,
                                                write_back=m.write_back_mu) + ")", note)


def _retile_streamify(w: Writer, op: Op, name: str):
    m = op.msg
    _pass(w, op)
    if not m.split_row:
        raise InteropError(w.path, "split_row = false (column split): stepc's "
                           "retile_streamify splits rows", op)
    fn = "retile_streamify(filter=true)" if m.filter_mask else "retile_streamify"
    return f"{name} = FlatMap({w.ref(op, op.inputs[0])}, fn={fn})", ""


def _eager_merge(w: Writer, op: Op, name: str):
    _pass(w, op)
    m = op.msg
    sel = _merge_ports(w, op, name)[1]
    ins = ", ".join(w.ref(op, p) for p in op.inputs)
    rank = f", rank={m.input_rank}" if m.input_rank else ""
    return f"{name}, {sel} = EagerMerge([{ins}]{rank})", ""


def _merge_ports(w: Writer, op: Op, name: str) -> list[str]:
    """The names of an EagerMerge's data and selector outputs (named once)."""
    if op.id not in w.ports:
        sel = w.unique(re.sub(r"_(\d+)$", r"_sel_\1", name) if name[-1].isdigit()
                       else f"{name}_sel", op.id)
        w.ports[op.id] = [name, sel]
    return w.ports[op.id]


def declare_feedback(w: Writer, op: Op) -> None:
    """Name an operator whose outputs are read before it (the reader's loop) and declare the
    fed-back streams: an EagerMerge's selector, one one-hot row over its inputs per chunk
    it merges: of the shape the graph states (stepc's export writes it in
    `out_stream_shape`), else a fresh `?` dim until the import learns the length."""
    if op.kind != "eager_merge" or op.fed_back != [1]:
        raise InteropError(w.path, f"output{'s' if len(op.fed_back) > 1 else ''} "
                           f"{', '.join(map(str, op.fed_back))} read before the operator (a "
                           "loop): stepc declares a fed-back stream with its type, which the "
                           "format gives only for an EagerMerge's selector (output 1)", op)
    name = w.fresh(op)
    w.names[op.id] = name
    sel = _merge_ports(w, op, name)[1]
    shape = f"[{', '.join(map(str, op.out_shape))}]" if op.out_shape else ""
    w.feedback[sel] = (len(w.streams), shape)
    rank = max(len(op.out_shape) - 1, 0)
    w.streams.append(f"stream {sel} : Strm<MultiHot<{len(op.inputs)}>, {rank}>{shape or '[?]'}"
                     f"  # op {op.id}'s selector, fed back: bound by the EagerMerge below")


def _expert_addr_gen(w: Writer, op: Op, name: str):
    m = op.msg
    w.dtypes[op.id] = "u64"
    return (f"{name} = FlatMap({w.ref(op, op.inputs[0])}, fn=expert_addr(" +
            _attrs(tiles=m.num_tile_per_expert, base=m.expert_addr_base or None) + "))", "")


def _random_off_chip_load(w: Writer, op: Op, name: str):
    m = op.msg
    if m.base_addr_byte:
        raise InteropError(w.path, f"base_addr_byte = {m.base_addr_byte}: stepc addresses "
                           "a tensor from its first tile (give each region its own tensor)", op)
    dtype = n_byte_dtype(w, op)
    src = f" = file(path=\"{w.side_file(m.npy_path)}\")" if m.HasField("npy_path") else ""
    t = _tensor(w, op, name, dtype, "input", src)
    w.dtypes[op.id] = dtype
    return (f"{name} = RandomOffChipLoad({w.ref(op, op.inputs[0])}, {t}, " + _attrs(
        tile=[m.tile_row, m.tile_col], par_dispatch=m.par_dispatch or None) + ")", "")


def _cache_read_addr_gen(w: Writer, op: Op, name: str):
    idx, length = (w.ref(op, p) for p in op.inputs)
    w.dtypes[op.id] = "u64"
    fn = f"cache_read_addr(row_offset={op.msg.offset_per_idx})"
    return f"{name} = FlatMap({with_fifo(f'Zip({idx}, {length})', op)}, fn={fn})", ""


def with_fifo(call: str, op: Op) -> str:
    """`call` with the depths stepc's extension fields of `op` give (see
    schema.STEPC_OPERATION_FIELDS)."""
    depth = (op.fifo_depth[0] or None) if len(op.fifo_depth) == 1 else op.fifo_depth or None
    extra = _attrs(depth=depth, buffer_depth=op.buffer_depth or None)
    return f"{call[:-1]}, {extra})" if extra else call


def _filter_last_tile(w: Writer, op: Op, name: str):
    return f"{name} = FlatMap({w.ref(op, op.inputs[0])}, fn=filter_last_tile)", ""


def _expand_ref(w: Writer, op: Op, name: str):
    _pass(w, op)
    e = op.msg.expand_rank  # at least 1 (bounds.py)
    x, ref = (w.ref(op, p) for p in op.inputs)
    return f"{name} = Expand({x}, ref={ref}" + (f", rank={e - 1})" if e > 1 else ")"), ""


def _random_off_chip_store(w: Writer, op: Op, name: str):
    m = op.msg
    if m.base_addr_byte:
        raise InteropError(w.path, f"base_addr_byte = {m.base_addr_byte}: stepc addresses "
                           "a tensor from its first tile", op)
    if not m.ack_based_on_waddr:
        raise InteropError(w.path, "ack_based_on_waddr = false: stepc acknowledges writes in "
                           "the address stream's shape", op)
    if m.HasField("npy_path"):
        raise InteropError(w.path, "npy_path on a store: stepc writes outputs with "
                           "`stepc sim --out`", op)
    dtype = _two_byte(n_byte_dtype(w, op, m.wdata_dtype), w.dtypes.get(op.inputs[1].src))
    t = _tensor(w, op, name, dtype, "output")
    w.dtypes[op.id] = "bool"
    waddr, wdata = (w.ref(op, p) for p in op.inputs)
    return (f"{name} = RandomOffChipStore({waddr}, {wdata}, {t}, " +
            _attrs(par_dispatch=m.par_dispatch or None) + ")", "")


def _consumer_context(w: Writer, op: Op, name: str):
    return f"Sink({w.ref(op, op.inputs[0])})", ""


SINKS = ("off_chip_store", "consumer_context")
HANDLERS = {
    "off_chip_load": _off_chip_load, "dyn_off_chip_load": _off_chip_load,
    "off_chip_store": _off_chip_store, "broadcast": _broadcast, "flatten": _flatten,
    "repeat_static": _repeat, "reshape": _reshape, "select_gen": _select_gen,
    "flat_partition": _partition, "parallelize": _parallelize,
    "flat_reassemble": _reassemble, "binarymap": _map,
    "unarymap": _map, "accum": _accum, "binarymap_accum": _accum,
    "retile_streamify": _retile_streamify, "eager_merge": _eager_merge,
    "expert_addr_gen": _expert_addr_gen, "random_off_chip_load": _random_off_chip_load,
    "metadata_gen": _metadata_gen, "cache_read_addr_gen": _cache_read_addr_gen,
    "filter_last_tile": _filter_last_tile, "expand_ref": _expand_ref,
    "random_off_chip_store": _random_off_chip_store, "consumer_context": _consumer_context,
}
