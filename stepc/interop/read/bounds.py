"""What the import takes of a graph's numbers before it writes a statement: the bounds that
keep a program's size and arithmetic small (the file, the operators, every shape's rank,
every list's length) and the values stepc's operators cannot take (a zero tile or dim, a
rank of 0 where a dim is reduced, an option the operator does not have). Each problem is
said with the field that has it (docs/interop.md, "Graphs past a bound, or with values no
operator takes")."""

from __future__ import annotations

from stepc.graph.limits import MAX_CONSUMERS, MAX_NODES
from stepc.interop.schema import is_repeated

MAX_GRAPH_BYTES = 16 * 2**20  # far beyond any graph (the corpus's largest: 130 KB)
MAX_OPERATORS = MAX_NODES  # a program holds at most this many operator instances
MAX_RANK = 32  # dims of one shape: a tensor, a view, a stream
MAX_NAME = 64  # characters of a debug name kept in identifiers and messages

# op kind -> fields that must be at least 1 (a tile, a count, a reduced rank)
POSITIVE: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("off_chip_load", "dyn_off_chip_load", "random_off_chip_load",
                     "random_off_chip_store", "off_chip_store"), ("tile_row", "tile_col")),
    **dict.fromkeys(("broadcast", "flat_partition", "parallelize"), ("num_consumers",)),
    "repeat_static": ("repeat_factor",), "reshape": ("chunk_size",),
    "accum": ("rank",), "binarymap_accum": ("rank",), "expand_ref": ("expand_rank",),
}
# fields that count dims of a stream
RANKS = ("rank", "partition_rank", "reassemble_rank", "parallelize_rank", "input_rank",
         "expand_rank", "split_dim", "input_stream_rank", "promote_rank", "bufferized_rank",
         "repeat_rank", "min_rank", "max_rank")
CONSUMER_COUNTS = ("num_consumers",)  # outputs of a router
# repeated fields: a shape (each dim at least 1), a list of inputs or of per-consumer values
SHAPES = ("tensor_shape_tiled", "out_shape_tiled")
LISTS = {"stride": MAX_RANK, "repeat_factor": MAX_RANK, "switch_cycles": MAX_CONSUMERS,
         "input_id_list": MAX_CONSUMERS, "input_stream_idx_list": MAX_CONSUMERS}


def field_problem(kind: str, msg) -> str | None:
    """The first value of the op message `msg` (of kind `kind`) that stepc cannot take."""
    for name in POSITIVE.get(kind, ()):
        if getattr(msg, name) < 1:
            return f"{name} = {getattr(msg, name)}: must be at least 1"
    names = {f.name for f in msg.DESCRIPTOR.fields}
    repeated = {f.name for f in msg.DESCRIPTOR.fields if is_repeated(f)}
    for name in names & set(RANKS):
        if getattr(msg, name) > MAX_RANK:
            return f"{name} = {getattr(msg, name):,}: the import takes at most {MAX_RANK} dims"
    for name in names & set(CONSUMER_COUNTS):
        if getattr(msg, name) > MAX_CONSUMERS:
            return (f"{name} = {getattr(msg, name):,}: an operator has at most "
                    f"{MAX_CONSUMERS:,} outputs")
    for name in names & set(SHAPES):
        dims = getattr(msg, name)
        if len(dims) > MAX_RANK:
            return f"{name} has {len(dims):,} dims; the import takes at most {MAX_RANK}"
        if any(d < 1 for d in dims):
            return f"{name} {list(dims)}: every dim must be at least 1"
    for name in repeated & set(LISTS):
        if len(getattr(msg, name)) > LISTS[name]:
            return f"{name} has {len(getattr(msg, name)):,} entries (at most {LISTS[name]:,})"
    return _kind_problem(kind, msg)


def _kind_problem(kind: str, msg) -> str | None:
    if "tensor_shape_tiled" in msg.DESCRIPTOR.fields_by_name and len(msg.tensor_shape_tiled) < 2:
        return f"tensor_shape_tiled {list(msg.tensor_shape_tiled)} needs at least 2 dims"
    if kind in ("off_chip_load", "dyn_off_chip_load"):
        if not msg.out_shape_tiled:
            return "out_shape_tiled is empty: a load streams at least one dim"
        if len(msg.stride) != len(msg.out_shape_tiled):
            return (f"stride has {len(msg.stride)} entries but out_shape_tiled has "
                    f"{len(msg.out_shape_tiled)}: one stride per dim")
    if kind == "flatten" and msg.min_rank > msg.max_rank:
        return f"min_rank {msg.min_rank} is above max_rank {msg.max_rank}"
    if kind in ("flat_reassemble", "eager_merge"):
        if not msg.input_id_list:
            return "input_id_list is empty: it merges at least one stream"
        if len(msg.input_stream_idx_list) > len(msg.input_id_list):
            return (f"input_stream_idx_list has {len(msg.input_stream_idx_list)} entries for "
                    f"{len(msg.input_id_list)} inputs")
    return None


def channel_problem(kind: str, fifo_depth: list[int], buffer_depth: int,
                    inputs: int) -> str | None:
    """What is wrong with stepc's channel fields of an operation with `inputs` inputs: one
    FIFO depth for every input or one per input (a lone 0: the hardware's), and a write
    buffer only on a random store."""
    if len(fifo_depth) > 1 and len(fifo_depth) != inputs:
        per_input = f"or one per input ({inputs})" if inputs > 1 else "(it has 1 input)" \
            if inputs else "(it reads no stream)"
        return (f"stepc_fifo_depth has {len(fifo_depth):,} entries: one depth for every input "
                + per_input)
    if len(fifo_depth) > 1 and 0 in fifo_depth:
        return f"stepc_fifo_depth[{fifo_depth.index(0)}] = 0: a FIFO holds at least 1 element"
    if buffer_depth and kind != "random_off_chip_store":
        return (f"stepc_buffer_depth = {buffer_depth:,} on a `{kind}`: only a "
                "random_off_chip_store has a write buffer")
    return None


def shape_problem(dims: int) -> str | None:
    """`out_stream_shape` with `dims` entries: at most MAX_RANK."""
    if dims > MAX_RANK:
        return f"out_stream_shape has {dims:,} dims; the import takes at most {MAX_RANK}"
    return None
