"""Pairs of the format's operations that the import reads as one stepc operator: the
format's half of stepc's Promote (a Reshape adding the outer dim, then a Flatten), and a
source read only by a Flatten of its leading 1 (as `stepc export` writes a source whose 1
would meet a stream without it)."""

from __future__ import annotations

from stepc.interop.read.reader import Op
from stepc.interop.read.writer import Writer


def producer(w: Writer, op: Op) -> Op:
    """The operation `op`'s first input comes from."""
    return w.by_id[op.inputs[0].src]


def input_readers(w: Writer, op: Op) -> list[Op]:
    """The operations reading `op` through an input (not a selector)."""
    return [c for c in w.readers[op.id] if any(p.src == op.id for p in c.inputs)]


def leading_one_flatten(w: Writer, op: Op, dims) -> Op | None:
    """The Flatten that merges away the leading 1 of the source `op` (streaming `(1,) +
    dims`), when it is the source's only reader and states the shape it makes (a writer of
    the newer schema, such as `stepc export`, which flattens a source's 1 where it streams
    it): the pair reads back as the source without the 1, one operator, as written."""
    readers = w.readers[op.id]
    dims = list(dims)
    if len(readers) != 1 or readers[0].kind != "flatten" or readers[0].out_shape != dims or \
            (readers[0].msg.min_rank, readers[0].msg.max_rank) != (len(dims) - 1, len(dims)):
        return None
    w.unled[op.id] = readers[0].id
    return readers[0]


def promoting_reshape(w: Writer, op: Op) -> Op | None:
    """`op` when it is the format's half of stepc's Promote of a rank-0 stream: a Reshape
    by chunks of 1 adding the outer dim (1 if the stream has an element, else 0), read only
    by a Flatten of the two inner dims; the pair reads back as one Promote."""
    m = op.msg
    if op.kind != "reshape" or not (m.add_outer_dim and m.chunk_size == 1) or m.split_dim \
            or m.input_stream_rank or m.write_back_mu:
        return None
    readers = input_readers(w, op)
    if len(readers) != 1 or readers[0].kind != "flatten" or \
            (readers[0].msg.min_rank, readers[0].msg.max_rank) != (0, 1):
        return None
    return op
