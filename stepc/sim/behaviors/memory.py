"""Off-chip and on-chip memory operators: loads and stores through the HBM model, and the
Bufferize/Streamify pair."""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from stepc.sim.behaviors.table import behavior
from stepc.sim.hbm import Addresses, tiled_shape
from stepc.sim.kernel import AWAIT, FIRST, ISSUE, PEEK, POP, RECV, SEND, SimError
from stepc.sim.tokens import BufferVal, TileVal, iter_stops, iter_view_indices, with_last
from stepc.types import DTYPE_BYTES

TENSOR_ALIGN = 4096


def tensor_layout(tensors, stagger: tuple[int, int] = (0, 1)
                  ) -> dict[str, tuple[int, tuple[int, ...]]]:
    """Byte address and shape of each off-chip tensor, in declaration order, each aligned
    to 4 KiB. With a `stagger` of (bytes between banks, banks) from the memory model,
    tensor k also starts in bank k (mod the banks): tensors streamed side by side then
    never walk the same banks in step."""
    span, banks = stagger
    layout, at = {}, 0
    for k, t in enumerate(tensors):
        if span:
            at = -(-at // (span * banks)) * span * banks + (k % banks) * span
        layout[t.name] = (at, tuple(t.shape))
        at += -(-math.prod(t.shape) * DTYPE_BYTES[t.dtype] // TENSOR_ALIGN) * TENSOR_ALIGN
    return layout


def tile_addresses(env, tref, tile_index: int, rows: int, cols: int) -> Addresses | None:
    """Where tile `tile_index` (row-major over the tiled view `tref`) lives, for a memory
    model that reads addresses."""
    return env.memory.addresses(env.layout, tref, tile_index, rows, cols)


def requests_per_tile(rows: int, cols: int, dtype: str, request_bytes: int) -> int:
    """Each tile row costs ceil(row bytes / request size) requests (partial ones count)."""
    return rows * math.ceil(cols * DTYPE_BYTES[dtype] / request_bytes)


def _tensor_tile(env, tref, tile_index: int, tile: list[int]):
    """Values of tile number `tile_index` (row-major over the tiled tensor) of a slice."""
    arr = env.tensors.get(tref.name)
    if arr is None or not env.functional:
        return None
    view = arr[tuple(tref.index)] if tref.index else arr
    tiled = tiled_shape(view.shape, tile)
    *lead, r, c = np.unravel_index(tile_index, tiled)
    sub = view[tuple(lead)] if lead else view
    return sub[r * tile[0]:(r + 1) * tile[0], c * tile[1]:(c + 1) * tile[1]]


def streamed(env, b) -> int | None:
    """With streamed tiles, a loaded tile's first physical tile is visible with the first
    response (one hop later)."""
    if not env.hw.fabric.stream_tile or b.first is None or b.first >= b.completion:
        return None
    return b.first + env.hw.fabric.hop_latency


class InFlight:
    """The tiles a memory operator has issued but not finished, oldest first.

    With `hbm.tile_buffers = B` an operator may have B tiles in flight: it issues a tile's
    requests as soon as a buffer is free and finishes tiles in order (a load sends the
    tile on, a store acknowledges it) as soon as they are complete, whether or not its next
    input has arrived. B = 1 is the reference simulator's loader: issue a
    tile, wait for every response, send it, then issue the next. Busy time is the union of
    the intervals during which the operator waits on memory."""

    def __init__(self, ctx, node, env, write: bool):
        self.ctx, self.node, self.env, self.write = ctx, node, env, write
        self.port = env.ports[node.name]
        self.pd = env.setting(node, "par_dispatch")
        self.buffers = env.hw.hbm.tile_buffers
        self.label = "store" if write else "load"
        self.tiles: deque = deque()  # (burst, clock at issue, finish, its argument)

    def issue(self, requests: int, where, finish, arg):
        """Post a tile's burst (after finishing the oldest tile if every buffer is busy);
        when the tile is complete, `finish(burst, arg)` gives the operation to yield then
        (a send), or None. Plain functions: no generator per tile. This, `finish_before`
        and `drain` each wait for a tile inline, one generator each."""
        tiles = self.tiles
        if len(tiles) >= self.buffers:
            entry = tiles.popleft()
            yield (AWAIT, entry[0])
            op = self._finished(entry)
            if op is not None:
                yield op
        b = yield (ISSUE, self.port, requests, self.pd, self.write, where)
        tiles.append((b, self.ctx.t, finish, arg))

    def _finished(self, entry):
        """Count the wait for a tile now complete; the operation finishing it, or None."""
        b, issued, finish, arg = entry
        ctx = self.ctx
        start = max(issued, ctx.last_mem)
        ctx.work(start, ctx.t - start, self.label)
        ctx.last_mem = ctx.t
        return finish(b, arg)

    def finish_before(self, ch):
        """Finish the tiles whose last response comes before `ch`'s next element (or end).
        Callers test `tiles` first: no generator made when nothing is in flight."""
        tiles = self.tiles
        while tiles:
            if not (yield (FIRST, ch, tiles[0][0])):
                return
            entry = tiles.popleft()
            yield (AWAIT, entry[0])
            op = self._finished(entry)
            if op is not None:
                yield op

    def drain(self):
        """Finish every tile in flight, oldest first."""
        tiles = self.tiles
        while tiles:
            entry = tiles.popleft()
            yield (AWAIT, entry[0])
            op = self._finished(entry)
            if op is not None:
                yield op


def linear_view(node) -> tuple[list[int], list[int]]:
    """The affine view a LinearOffChipLoad walks over its tensor's tiles: shape, stride."""
    a = node.attrs
    tref, tile = a["tensor"], a["tile"]
    tiled = (tref.shape[:-2] if tref.shape else ()) + (tref.shape[-2] // tile[0],
                                                        tref.shape[-1] // tile[1])
    shape = a["shape"] or list(tiled)
    stride = a["stride"] or [math.prod(shape[i + 1:]) for i in range(len(shape))]
    return shape, stride


@behavior("LinearOffChipLoad")
def linear_load(ctx, node, ins, outs, env, info):
    a = node.attrs
    tref, tile = a["tensor"], a["tile"]
    shape, stride = linear_view(node)
    reqs = requests_per_tile(tile[0], tile[1], tref.dtype, env.hw.hbm.request_bytes)
    tile_bytes = tile[0] * tile[1] * DTYPE_BYTES[tref.dtype]
    out = outs[0]
    ref = ins.get("ref")
    flight = InFlight(ctx, node, env, False)
    functional = env.functional  # else a tile carries no values

    def send(b, at):
        """Tile number `at[0]` is complete: count it, send it with stop `at[1]`."""
        env.useful_bytes[node.name] = env.useful_bytes.get(node.name, 0) + tile_bytes
        data = _tensor_tile(env, tref, at[0], tile) if functional else None
        if out is None:
            return None
        return (SEND, out, TileVal(tile[0], tile[1], tref.dtype, None, True, data,
                                   streamed(env, b)), at[1])

    def stream(ref_stop):
        """One affine view; `ref_stop` (the ref element's stop) closes the whole view."""
        stops = iter_stops(shape, None if ref_stop is None else len(shape) + ref_stop)
        for at in zip(iter_view_indices(shape, stride), stops):
            yield from flight.issue(reqs, tile_addresses(env, tref, at[0], *tile), send, at)

    if ref is None:
        yield from stream(None)
        yield from flight.drain()
        return
    while True:
        if flight.tiles:
            yield from flight.finish_before(ref)
        head = yield (PEEK, ref)
        if head is None:
            yield from flight.drain()
            return
        yield from stream(head[2])
        if flight.buffers == 1:  # the reference holds its ref element until the last send
            yield from flight.drain()
        yield (POP, ref)


@behavior("LinearOffChipStore")
def linear_store(ctx, node, ins, outs, env, info):
    tref = node.attrs["tensor"]
    src = ins["in"]
    written = env.written.get(tref.name)
    flight = InFlight(ctx, node, env, True)
    count = 0

    def done(b, t: TileVal):
        env.useful_bytes[node.name] = env.useful_bytes.get(node.name, 0) + t.nbytes

    while True:
        if flight.tiles:
            yield from flight.finish_before(src)
        head = yield (PEEK, src)
        if head is None:
            yield from flight.drain()
            return
        t: TileVal = head[1]
        reqs = requests_per_tile(t.rows, t.cols, t.dtype, env.hw.hbm.request_bytes)
        yield from flight.issue(reqs, tile_addresses(env, tref, count, t.rows, t.cols),
                                done, t)
        if written is not None and t.data is not None:
            _write_tile(written, tref, count, t)
        count += 1
        if flight.buffers == 1:  # the reference releases its input after the last ack
            yield from flight.drain()
        yield (POP, src)


def _write_tile(written: np.ndarray, tref, index: int, t: TileVal) -> None:
    view = written[tuple(tref.index)] if tref.index else written
    tiled = tiled_shape(view.shape, [t.rows, t.cols])
    total = math.prod(tiled)
    if index >= total:
        raise SimError(f"LinearOffChipStore writes tile {index} past the end of `{tref}` "
                       f"({total} tiles)")
    *lead, r, c = np.unravel_index(index, tiled)
    sub = view[tuple(lead)] if lead else view
    sub[r * t.rows:(r + 1) * t.rows, c * t.cols:(c + 1) * t.cols] = t.data


@behavior("RandomOffChipLoad")
def random_load(ctx, node, ins, outs, env, info):
    a = node.attrs
    tref, tile = a["tensor"], a["tile"]
    addr = ins["raddr"]
    reqs = requests_per_tile(tile[0], tile[1], tref.dtype, env.hw.hbm.request_bytes)
    total = math.prod(tiled_shape(tref.shape, tile))
    tile_bytes = tile[0] * tile[1] * DTYPE_BYTES[tref.dtype]
    out = outs[0]
    flight = InFlight(ctx, node, env, False)
    functional = env.functional  # else a tile carries no values

    def send(b, head):
        """The tile read for address element `head` = (data, stop) is complete."""
        env.useful_bytes[node.name] = env.useful_bytes.get(node.name, 0) + tile_bytes
        if out is None:
            return None
        return (SEND, out, TileVal(tile[0], tile[1], tref.dtype, None, True, head[0],
                                   streamed(env, b)), head[1])

    while True:
        if flight.tiles:
            yield from flight.finish_before(addr)
        head = yield (PEEK, addr)
        if head is None:
            yield from flight.drain()
            return
        a_t: TileVal = head[1]
        data, where = None, None
        if a_t.data is not None:
            i = a_t.scalar()
            if not 0 <= i < total:
                raise SimError(f"RandomOffChipLoad address {i} is outside `{tref}` "
                               f"({total} tiles)", node.name)
            data = _tensor_tile(env, tref, i, tile) if functional else None
            where = tile_addresses(env, tref, i, *tile)
        yield from flight.issue(reqs, where, send, (data, head[2]))
        if flight.buffers == 1:  # the reference holds the address until the tile is sent
            yield from flight.drain()
        yield (POP, addr)


@behavior("RandomOffChipStore")
def random_store(ctx, node, ins, outs, env, info):
    tref = node.attrs["tensor"]
    waddr, wdata = ins["waddr"], ins["wdata"]
    written = env.written.get(tref.name)
    out = outs[0]
    flight = InFlight(ctx, node, env, True)

    def ack(b, stored):
        """Tile `stored[0]` is written: count it, acknowledge with stop `stored[1]`."""
        env.useful_bytes[node.name] = env.useful_bytes.get(node.name, 0) + stored[0].nbytes
        return (SEND, out, True, stored[1]) if out is not None else None

    while True:
        if flight.tiles:
            yield from flight.finish_before(waddr)
        ha = yield (PEEK, waddr)
        if flight.tiles:
            yield from flight.finish_before(wdata)
        hd = yield (PEEK, wdata)
        if ha is None or hd is None:
            if (ha is None) != (hd is None):
                raise SimError("RandomOffChipStore: `waddr` and `wdata` end at different "
                               "elements", node.name)
            yield from flight.drain()
            return
        t: TileVal = hd[1]
        reqs = requests_per_tile(t.rows, t.cols, t.dtype, env.hw.hbm.request_bytes)
        where = tile_addresses(env, tref, ha[1].scalar(), t.rows, t.cols) \
            if ha[1].data is not None else None
        if written is not None and t.data is not None and ha[1].data is not None:
            i = ha[1].scalar()
            view = written[tuple(tref.index)] if tref.index else written
            total = math.prod(tiled_shape(view.shape, [t.rows, t.cols]))
            if not 0 <= i < total:
                raise SimError(f"RandomOffChipStore address {i} is outside `{tref}` "
                               f"({total} tiles)", node.name)
            _write_tile(written, tref, i, t)
        yield from flight.issue(reqs, where, ack, (t, ha[2]))
        if flight.buffers == 1:  # the reference releases its inputs after the ack
            yield from flight.drain()
        yield (POP, waddr)
        yield (POP, wdata)


@behavior("Bufferize")
def bufferize(ctx, node, ins, outs, env, info):
    b = node.attrs["rank"]
    src, out = ins["in"], outs[0]
    elems: list = []
    nbytes = 0
    while True:
        head = yield (RECV, src)
        if head is None:
            if elems:
                raise SimError("Bufferize: the stream ended inside a buffer", node.name)
            return
        _, p, s = head
        ctx.work(ctx.t, 1, "store")
        elems.append((p, min(s, b)))
        nbytes += p.nbytes
        if s >= b:
            buf = BufferVal(elems, _buffer_shape(elems, b), nbytes)
            env.peak_onchip = max(env.peak_onchip, nbytes)
            elems, nbytes = [], 0
            if out is not None:
                yield (SEND, out, buf, s - b)


def _buffer_shape(elems, b: int) -> tuple[int, ...]:
    """The shape of a buffer from its elements' stops: dim k (from the innermost) counts
    the sub-tensors closed at level k inside one level-(k+1) sub-tensor."""
    closed = [0] * (b + 1)  # closed[k]: elements whose stop is >= k
    for _, s in elems:
        for k in range(b + 1):
            if s >= k:
                closed[k] += 1
    return tuple(closed[k] // max(closed[k + 1], 1) if k < b else closed[k]
                 for k in range(b - 1, -1, -1))


@behavior("Streamify")
def streamify(ctx, node, ins, outs, env, info):
    a = node.attrs
    src, ref, out = ins["in"], ins.get("ref"), outs[0]
    repeat = a["repeat"] or []
    c = info["in"]["ref"].rank - info["in"]["in"].rank if ref is not None else 0

    def emit(buf: BufferVal, extra: int):
        """Stream one buffer (or its affine view); its last element closes rank + extra."""
        if a["shape"] is not None:
            shape = a["shape"]
            stride = a["stride"] or [math.prod(shape[i + 1:]) for i in range(len(shape))]
            items = ((buf.elements[i][0], s) for i, s in
                     zip(iter_view_indices(shape, stride), iter_stops(shape)))
            rank = len(shape)
        else:
            items, rank = buf.elements, len(buf.shape)
        for (p, s), last in with_last(items):
            if out is not None:
                yield (SEND, out, p, rank + extra if last else s)
            ctx.t += 1  # one element per cycle

    while True:
        head = yield (PEEK, src)
        if head is None:
            return
        buf, bstop = head[1], head[2]
        if ref is not None:  # read the buffer once per element of its reference group
            while True:
                r = yield (PEEK, ref)
                if r is None:
                    raise SimError("Streamify: the reference stream ended before the "
                                   "buffers", node.name)
                yield from emit(buf, r[2])
                yield (POP, ref)
                if r[2] >= c:
                    break
        else:
            rstops = iter_stops(list(repeat)) if repeat else [0]
            for rs, last in with_last(rstops):
                yield from emit(buf, len(repeat) + bstop if last else rs)
        yield (POP, src)
