"""`stepc export` of what the program says about its channels: the FIFO and write-buffer
depths, in stepc's extension fields of Operation (see schema.STEPC_OPERATION_FIELDS)."""

from __future__ import annotations

from stepc.interop.write.state import NodeExport


def fifo(x: NodeExport, op, node) -> None:
    """`node`'s FIFO and write-buffer depths in stepc's extension fields of `op` (the format
    has none; see schema.STEPC_OPERATION_FIELDS)."""
    depth, buffer = node.attrs.get("depth"), node.attrs.get("buffer_depth")
    if depth is not None:
        if node.op == "Promote":
            x.fail("depth= on a Promote, which the format says as two operations")
        op.stepc_fifo_depth[:] = depth if isinstance(depth, list) else [depth]
    if buffer not in (None, 1):
        op.stepc_buffer_depth = buffer
