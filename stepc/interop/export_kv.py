"""`stepc export` of sources of integer data and the KV-cache operators of decode
attention: the format's SelectGen, MetadataGen, CacheReadAddrGen, FilterLastTile and
RandomOffChipStore.

A mixin of the exporter (stepc/interop/export.py): each `op_<Op>` fills one Operation.
"""

from __future__ import annotations

import numpy as np

from stepc.types import DTYPE_BYTES, Tile

INT_DTYPE = "u64"  # the element type of stepc's integer streams and tensors


class KvCacheOps:
    """Operations of the exporter for integer data and the KV cache."""

    def metadata(self, op, data: np.ndarray) -> None:
        """A MetadataGen streaming `data` from a side file named after the node."""
        if data.ndim == 0:
            self.fail("a single integer: the format's MetadataGen streams an array")
        file = f"{self.node.name.replace('.', '_')}.npy"
        self.files[file] = np.asarray(data, dtype=np.int64)
        op.metadata_gen.npy_path = file
        op.metadata_gen.dtype.scalar_i64.SetInParent()  # as the reference's graphs say it

    def selectors(self, op, sels: list, shape: list[int], n: int) -> None:
        """A SelectGen streaming the selectors `sels` (tuples of targets) in `shape` from a
        multi-hot side file named after the node."""
        rows = np.zeros((len(sels), n), dtype=np.int64)
        for i, sel in enumerate(sels):
            rows[i, list(sel)] = 1
        file = f"{self.node.name.replace('.', '_')}.npy"
        self.files[file] = rows.reshape([*shape, n])
        op.select_gen.npy_path, op.select_gen.is_multihot = file, True

    def op_SelectGen(self, op) -> None:
        ids = self.tensor_values()
        if self.node.attrs["onehot"]:
            self.selectors(op, [(int(i),) for i in ids.reshape(-1)], list(ids.shape),
                           self.node.attrs["n"])
        else:
            sels = [tuple(sorted({int(i) for i in r})) for r in ids.reshape(-1, ids.shape[-1])]
            self.selectors(op, sels, list(ids.shape[:-1]), self.node.attrs["n"])

    def tensor_values(self, node=None) -> np.ndarray:
        """The values the tensor (or indexed view) of `node` (default: this node) starts a
        run with."""
        from stepc.sim.run import initial_value
        ref = (node or self.node).attrs["tensor"]
        values = initial_value(self.typed.program.tensors[ref.name])
        return values[tuple(ref.index)] if ref.index else values

    def op_MetadataGen(self, op) -> None:
        ref = self.node.attrs["tensor"]
        if ref.dtype != INT_DTYPE:
            self.fail(f"MetadataGen of a {ref.dtype} tensor: the format's MetadataGen "
                      f"streams {INT_DTYPE} tiles")
        self.metadata(op, self.tensor_values())

    def op_Zip(self, op) -> bool:
        """No operation: the format's CacheReadAddrGen reads the two streams itself."""
        readers = self.typed.program.out_edges(self.node.name)
        fns = [self.typed.program.nodes[e.dst].attrs.get("fn") for e in readers]
        if len(readers) != 1 or getattr(fns[0], "name", None) != "cache_read_addr":
            self.fail("a Zip the format has no operator for: its operators pair streams "
                      "only inside CacheReadAddrGen (FlatMap(Zip(idx, len), "
                      "fn=cache_read_addr))")
        return False

    def cache_read_addr(self, op, fn) -> None:
        zip_node = self.typed.program.nodes[self.ins[0].src]
        zipped = self.typed.program.in_edges(zip_node.name)
        if self.node.attrs.get("depth") is not None:
            self.fail("depth= on the FlatMap of a Zip: the format's CacheReadAddrGen reads "
                      "the zipped streams itself (set the Zip's depth)")
        self.fifo(op, zip_node)
        m = op.cache_read_addr_gen
        self.wire_edge(m, zipped[0], "idx_id", "idx_stream_idx")
        self.wire_edge(m, zipped[1], "seq_len_id", "seq_len_stream_idx")
        m.offset_per_idx = self.row_offset(fn)

    def filter_last_tile(self, op) -> None:
        self.wire(op.filter_last_tile, 0, "seq_len_id", "seq_len_stream_idx")

    def row_offset(self, fn) -> int:
        offset = dict(fn.kwargs).get("row_offset", 0)
        if offset < 0:
            self.fail(f"`{fn.name}` with row_offset {offset}: the format's offset_per_idx "
                      "is unsigned")
        return offset

    def op_RandomOffChipStore(self, op) -> None:
        t = self.node.attrs["tensor"]
        tile = self.in_type(1).elem
        if not isinstance(tile, Tile) or not (str(tile.rows).isdigit()
                                              and str(tile.cols).isdigit()):
            self.fail(f"a store of {tile} tiles: the format's RandomOffChipStore needs a "
                      "static tile_row and tile_col")
        rows, cols = int(tile.rows), int(tile.cols)
        m = op.random_off_chip_store
        self.wire(m, 0, "waddr_id", "waddr_stream_idx")
        self.wire(m, 1, "wdata_id", "wdata_stream_idx")
        m.tensor_shape_tiled[:] = [*t.shape[:-2], t.shape[-2] // rows, t.shape[-1] // cols]
        m.tile_row, m.tile_col = rows, cols
        m.n_byte = DTYPE_BYTES[t.dtype]
        m.par_dispatch = self.par()
        m.ack_based_on_waddr = True  # stepc acknowledges in the address stream's shape
        self.dtype(m.wdata_dtype, 1)
