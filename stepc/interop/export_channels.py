"""`stepc export` of what the program says about its channels: the FIFO and write-buffer
depths (in stepc's extension fields of Operation, see schema.STEPC_OPERATION_FIELDS), and
inputs read in lockstep that the format's reading gives different leading dims of 1 (see
stream_shapes.py), paired behind a Flatten of the 1.

A mixin of the exporter (stepc/interop/export.py).
"""

from __future__ import annotations

from stepc.interop.stream_shapes import write_shape


class ChannelOps:
    """Operations of the exporter for channel settings and lockstep inputs."""

    def fifo(self, op, node) -> None:
        """`node`'s FIFO and write-buffer depths in stepc's extension fields of `op` (the
        format has none; see schema.STEPC_OPERATION_FIELDS)."""
        depth, buffer = node.attrs.get("depth"), node.attrs.get("buffer_depth")
        if depth is not None:
            if node.op == "Promote":
                self.fail("depth= on a Promote, which the format says as two operations")
            op.stepc_fifo_depth[:] = depth if isinstance(depth, list) else [depth]
        if buffer not in (None, 1):
            op.stepc_buffer_depth = buffer

    def lockstep(self, edges) -> None:
        """Inputs read in lockstep that the format's reading gives different leading dims
        of 1 (one from a source, one not) are paired behind a Flatten of the 1."""
        ones = [self.ones[e.src] for e in edges]
        if max(ones) - min(ones) > 1:
            self.fail(f"inputs read in lockstep with {min(ones)} and {max(ones)} leading dims "
                      "of 1 in the format's reading")
        self.lockstep_ones = min(ones)

    def merged_leading_one(self, e) -> int:
        """The id of a new Flatten of the leading 1 of the stream of edge `e`."""
        st = self.typed.types[(e.src, e.port)]
        flat_id = next(self.spare_ids)
        flat = self.graph.operators.add(name=f"{self.node.name}.{e.src}.flat", id=flat_id)
        keep, self.lockstep_ones = self.lockstep_ones, None
        self.wire_edge(flat.flatten, e, "input_id", "stream_idx")
        self.lockstep_ones = keep
        f = flat.flatten
        f.min_rank, f.max_rank = len(st.shape) - 1, len(st.shape)
        self.dtype(f.dtype, e)
        flat.parallel_factor = 1
        write_shape(flat, st.shape, 0)
        return flat_id
