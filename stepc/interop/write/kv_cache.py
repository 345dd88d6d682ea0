"""`stepc export` of sources of integer data and the KV-cache operators of decode
attention: the format's SelectGen, MetadataGen, CacheReadAddrGen, FilterLastTile and
RandomOffChipStore. `HANDLERS` names the operators this family writes."""

from __future__ import annotations

from stepc.interop.write.channels import fifo
from stepc.interop.write.sources import INT_DTYPE, metadata, selectors, tensor_values
from stepc.interop.write.state import NodeExport
from stepc.types import DTYPE_BYTES, Tile


def select_gen(x: NodeExport, op) -> None:
    ids = tensor_values(x)
    if x.node.attrs["onehot"]:
        selectors(x, op, [(int(i),) for i in ids.reshape(-1)], list(ids.shape),
                  x.node.attrs["n"])
    else:
        sels = [tuple(sorted({int(i) for i in r})) for r in ids.reshape(-1, ids.shape[-1])]
        selectors(x, op, sels, list(ids.shape[:-1]), x.node.attrs["n"])


def metadata_gen(x: NodeExport, op) -> None:
    ref = x.node.attrs["tensor"]
    if ref.dtype != INT_DTYPE:
        x.fail(f"MetadataGen of a {ref.dtype} tensor: the format's MetadataGen "
               f"streams {INT_DTYPE} tiles")
    metadata(x, op, tensor_values(x))


def zip_(x: NodeExport, op) -> bool:
    """No operation: the format's CacheReadAddrGen reads the two streams itself."""
    readers = x.typed.program.out_edges(x.node.name)
    fns = [x.typed.program.nodes[e.dst].attrs.get("fn") for e in readers]
    if len(readers) != 1 or getattr(fns[0], "name", None) != "cache_read_addr":
        x.fail("a Zip the format has no operator for: its operators pair streams "
               "only inside CacheReadAddrGen (FlatMap(Zip(idx, len), "
               "fn=cache_read_addr))")
    return False


def cache_read_addr(x: NodeExport, op, fn) -> None:
    zip_node = x.typed.program.nodes[x.ins[0].src]
    zipped = x.typed.program.in_edges(zip_node.name)
    if x.node.attrs.get("depth") is not None:
        x.fail("depth= on the FlatMap of a Zip: the format's CacheReadAddrGen reads "
               "the zipped streams itself (set the Zip's depth)")
    fifo(x, op, zip_node)
    m = op.cache_read_addr_gen
    x.wire_edge(m, zipped[0], "idx_id", "idx_stream_idx")
    x.wire_edge(m, zipped[1], "seq_len_id", "seq_len_stream_idx")
    m.offset_per_idx = row_offset(x, fn)


def filter_last_tile(x: NodeExport, op) -> None:
    x.wire(op.filter_last_tile, 0, "seq_len_id", "seq_len_stream_idx")


def row_offset(x: NodeExport, fn) -> int:
    offset = dict(fn.kwargs).get("row_offset", 0)
    if offset < 0:
        x.fail(f"`{fn.name}` with row_offset {offset}: the format's offset_per_idx "
               "is unsigned")
    return offset


def random_off_chip_store(x: NodeExport, op) -> None:
    t = x.node.attrs["tensor"]
    tile = x.in_type(1).elem
    if not isinstance(tile, Tile) or not (str(tile.rows).isdigit()
                                          and str(tile.cols).isdigit()):
        x.fail(f"a store of {tile} tiles: the format's RandomOffChipStore needs a "
               "static tile_row and tile_col")
    rows, cols = int(tile.rows), int(tile.cols)
    m = op.random_off_chip_store
    x.wire(m, 0, "waddr_id", "waddr_stream_idx")
    x.wire(m, 1, "wdata_id", "wdata_stream_idx")
    m.tensor_shape_tiled[:] = [*t.shape[:-2], t.shape[-2] // rows, t.shape[-1] // cols]
    m.tile_row, m.tile_col = rows, cols
    m.n_byte = DTYPE_BYTES[t.dtype]
    m.par_dispatch = x.par()
    m.ack_based_on_waddr = True  # stepc acknowledges in the address stream's shape
    x.dtype(m.wdata_dtype, 1)


HANDLERS = {"SelectGen": select_gen, "MetadataGen": metadata_gen, "Zip": zip_,
            "RandomOffChipStore": random_off_chip_store}
