"""Stream payloads and stop-token helpers.

A stream element travels as `(payload, stop)`: `stop = 0` is a plain value and `stop = k`
is the value followed by the stop token `S_k` (the reference simulator's fused encoding:
a stop is attached to the value before it; Done is the channel closing). An empty stream is
a channel closed with no elements; an empty inner sub-tensor is not representable (as in the
reference).

Payloads: `TileVal` (shape, dtype, valid rows, read-from-memory flag, optional numpy array),
selectors as tuples of selected indices, `BufferVal` (stored elements), tuples, bools.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from stepc.types import DTYPE_BYTES

NP_DTYPES = {"bf16": np.float32, "f16": np.float16, "f32": np.float32, "i32": np.int32,
             "u32": np.uint32, "u64": np.uint64, "bool": np.bool_}


class TileVal:
    """One tile: its shape, element type, valid (non-padding) rows, whether it sits in an
    on-chip memory unit (its consumer pays a read), its values (functional mode), and with
    streamed tiles (`fabric.stream_tile`) the cycle its first physical tile was visible
    (`first`; its stream entry's time is when the last one is)."""

    __slots__ = ("rows", "cols", "dtype", "valid", "in_mu", "data", "first")

    def __init__(self, rows: int, cols: int, dtype: str, valid: int | None = None,
                 in_mu: bool = False, data: np.ndarray | None = None,
                 first: int | None = None):
        self.rows, self.cols, self.dtype = rows, cols, dtype
        self.valid = rows if valid is None else valid
        self.in_mu, self.data, self.first = in_mu, data, first

    @property
    def nbytes(self) -> int:
        return self.rows * self.cols * DTYPE_BYTES[self.dtype]

    def with_mu(self, in_mu: bool) -> TileVal:
        if in_mu == self.in_mu:
            return self
        return TileVal(self.rows, self.cols, self.dtype, self.valid, in_mu, self.data,
                       self.first)

    def scalar(self) -> int:
        """The integer held by a [1, 1] tile (addresses, lengths, indices)."""
        if self.data is None:
            raise ValueError("tile has no value")
        return int(self.data.item(0))

    def __repr__(self) -> str:
        return f"Tile[{self.rows}x{self.cols} {self.dtype}]"


def int_tile(value: int, dtype: str = "u64") -> TileVal:
    data = np.empty((1, 1), NP_DTYPES[dtype])  # filled in place: a third of np.array's time,
    data[0, 0] = value                          # with the same conversions and errors
    return TileVal(1, 1, dtype, 1, False, data)


@dataclass
class BufferVal:
    """An on-chip buffer: the stored elements (with their inner stops) and its shape."""

    elements: list  # [(payload, stop)]
    shape: tuple[int, ...]
    nbytes: int


def payload_bytes(p) -> int:
    """Bytes of a payload moved on chip (for roofline load/store terms)."""
    if isinstance(p, TileVal):
        return p.nbytes
    if isinstance(p, tuple) and p and not isinstance(p[0], int):
        return sum(payload_bytes(x) for x in p)
    if isinstance(p, BufferVal):
        return p.nbytes
    return 8


def iter_stops(dims: list[int], last: int | None = None):
    """Stop levels of a row-major walk over a stream of shape `dims` (outer first), one at
    a time: each element's stop is the number of trailing dims at their last index, at most
    the stream's rank len(dims) - 1 (the outermost dim is closed by the end of the stream,
    not a stop). `last`, if given, replaces the final element's stop. Lazy, so that a huge
    stream costs nothing until it is walked."""
    n = math.prod(dims)
    rank = len(dims) - 1
    inward = range(rank, -1, -1)  # innermost dim first
    idx = [0] * len(dims)
    for k in range(n):
        stop = 0
        for j in inward:
            if idx[j] == dims[j] - 1:
                stop += 1
            else:
                break
        yield last if last is not None and k == n - 1 else (stop if stop < rank else rank)
        for j in inward:
            idx[j] += 1
            if idx[j] < dims[j]:
                break
            idx[j] = 0


def stops_for_shape(dims: list[int]) -> list[int]:
    """`iter_stops` as a list (for streams known to be small)."""
    return list(iter_stops(dims))


def iter_view_indices(shape: list[int], stride: list[int]):
    """Flat indices of an affine view (row-major over `shape`, index = sum(idx * stride)),
    one at a time."""
    if any(n <= 0 for n in shape):
        return
    idx, at = [0] * len(shape), 0
    while True:
        yield at
        for j in range(len(shape) - 1, -1, -1):  # an odometer: itertools.product would
            idx[j] += 1                            # materialise each range first
            at += stride[j]
            if idx[j] < shape[j]:
                break
            at -= stride[j] * shape[j]
            idx[j] = 0
        else:
            return


def with_last(items):
    """(item, is_last) pairs of an iterable, without materialising it."""
    it = iter(items)
    try:
        prev = next(it)
    except StopIteration:
        return
    for item in it:
        yield prev, False
        prev = item
    yield prev, True
