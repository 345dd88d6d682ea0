"""Memory operators compiled as state machines for the compiled kernel (see `_machines`):
with single-buffered ports (`hbm.tile_buffers = 1`, the reference's loaders),
LinearOffChipLoad and RandomOffChipLoad (`stepc/sim/behaviors/memory.py`); with more
buffers their behaviors run."""

from libc.stdlib cimport calloc
from libc.stdlib cimport free as cfree

from stepc.sim._kernel cimport Channel, Ctx, Kernel, Machine

from stepc.sim.behaviors import memory
from stepc.sim.hbm import tiled_shape
from stepc.sim.kernel import AWAIT, PEEK, SimError
from stepc.sim.tokens import TileVal
from stepc.types import DTYPE_BYTES

# a machine's states: the operation it performs next
cdef enum:
    TAKE, ISSUE_TILE, WAIT_TILE, GIVE_TILE


cdef class LinearLoad(Machine):
    """`memory.linear_load` with one tile buffer: per tile of the affine view (per element
    of `ref`, when given, whose stop closes the view), issue its burst, wait for it, count
    the wait and send the tile; with `ref`, release its element after the last send."""

    cdef Channel ref, out
    cdef object env, tref, tile, port, pd, dtype, ref_stop, burst
    cdef object addresses, layout, issue, useful  # the memory model's, the run's
    cdef str name
    cdef long long rank, reqs, tile_bytes, rows, cols, at, issued
    cdef long long* shape
    cdef long long* stride
    cdef long long* idx
    cdef bint more, functional, streams
    cdef tuple peek_ref
    cdef int state
    cdef object val, stop

    def __cinit__(self):
        self.shape = self.stride = self.idx = NULL

    def __dealloc__(self):
        cfree(self.shape)
        cfree(self.stride)
        cfree(self.idx)

    def __init__(self, ctx, node, ins, outs, env, info):
        tref, tile = node.attrs["tensor"], node.attrs["tile"]
        shape, stride = memory.linear_view(node)
        self.rank = len(shape)
        self.shape = <long long*>calloc(self.rank + 1, sizeof(long long))
        self.stride = <long long*>calloc(self.rank + 1, sizeof(long long))
        self.idx = <long long*>calloc(self.rank + 1, sizeof(long long))
        if self.shape == NULL or self.stride == NULL or self.idx == NULL:
            raise MemoryError()
        for j in range(self.rank):
            self.shape[j], self.stride[j] = shape[j], stride[j]
        self.name, self.env, self.tref, self.tile = node.name, env, tref, tile
        self.addresses, self.layout, self.issue = env.memory.addresses, env.layout, \
            env.memory.issue
        self.useful = env.useful_bytes
        self.rows, self.cols, self.dtype = tile[0], tile[1], tref.dtype
        self.reqs = memory.requests_per_tile(tile[0], tile[1], tref.dtype,
                                             env.hw.hbm.request_bytes)
        self.tile_bytes = tile[0] * tile[1] * DTYPE_BYTES[tref.dtype]
        self.out, self.ref = outs[0], ins.get("ref")
        self.port, self.pd = env.ports[node.name], env.setting(node, "par_dispatch")
        self.functional, self.streams = env.functional, bool(env.hw.fabric.stream_tile)
        if self.ref is not None:
            self.peek_ref = (PEEK, self.ref)
            self.state = TAKE
        else:
            self._start(None)

    cdef int _start(self, ref_stop) except -1:
        """Walk the view from its first tile; `ref_stop` (None: no ref) closes it."""
        cdef long long j
        self.more = True
        for j in range(self.rank):
            self.idx[j] = 0
            if self.shape[j] <= 0:
                self.more = False
        self.at, self.ref_stop = 0, ref_stop
        self.state = ISSUE_TILE
        return 0

    cdef object _stop(self):
        """The stop of the view's current tile (`tokens.iter_stops`)."""
        cdef long long j, s = 0
        for j in range(self.rank - 1, -1, -1):
            if self.idx[j] != self.shape[j] - 1:
                break
            s += 1
        if s == self.rank and self.ref_stop is not None:  # the view's last tile
            return self.rank + self.ref_stop
        return s if s < self.rank - 1 else self.rank - 1

    cdef bint _advance(self):
        """Move to the view's next tile (`tokens.iter_view_indices`); False past the end."""
        cdef long long j
        for j in range(self.rank - 1, -1, -1):
            self.idx[j] += 1
            self.at += self.stride[j]
            if self.idx[j] < self.shape[j]:
                return True
            self.at -= self.stride[j] * self.shape[j]
            self.idx[j] = 0
        return False

    cdef int resume(self, Kernel k, Ctx ctx) except -1:
        cdef long long start
        while True:
            if self.state == TAKE:
                head = k.peek(ctx, self.ref, False, self.peek_ref)
                if head is None:
                    return ctx.blocked is None
                self._start(head[2])
            if self.state == ISSUE_TILE:
                if not self.more:
                    if self.ref is None:
                        return 1
                    k._release(self.ref, ctx.clock)
                    self.state = TAKE
                    continue
                where = self.addresses(self.layout, self.tref, self.at, self.rows, self.cols)
                ctx.mem_ops += 1  # the kernel's ISSUE: post the burst without waiting
                self.burst = self.issue(ctx, self.port, self.reqs, self.pd, False, where, False)
                self.issued = ctx.clock
                if not self.burst.done:
                    self.burst.waiter = ctx
                    ctx.blocked = (AWAIT, self.burst)
                    self.state = WAIT_TILE
                    return 0
                if self.burst.completion > ctx.clock:
                    ctx.clock = self.burst.completion
                self.state = WAIT_TILE
            if self.state == WAIT_TILE:  # the tile is complete (a wake moved the clock)
                start = self.issued if self.issued > ctx.last_mem else ctx.last_mem
                ctx._work(start, ctx.clock - start, "load")
                ctx.last_mem = ctx.clock
                self.useful[self.name] = self.useful.get(self.name, 0) + self.tile_bytes
                self.stop = self._stop()
                if self.out is not None:
                    data = memory._tensor_tile(self.env, self.tref, self.at, self.tile) \
                        if self.functional else None
                    first = memory.streamed(self.env, self.burst) if self.streams else None
                    self.val = TileVal(self.rows, self.cols, self.dtype, None, True, data,
                                       first)
                self.burst = None
                self.state = GIVE_TILE
            if self.out is not None and not k.send(ctx, self.out, self.val, self.stop):
                return 0
            self.val = None
            self.more = self._advance()
            self.state = ISSUE_TILE


cdef class RandomLoad(Machine):
    """`memory.random_load` with one tile buffer: per address element, issue the tile's
    burst, wait for it, count the wait, send the tile, release the address."""

    cdef Channel addr, out
    cdef object env, tref, tile, port, pd, dtype, burst, data, stop, val
    cdef object addresses, layout, issue, useful  # the memory model's, the run's
    cdef str name
    cdef long long reqs, tile_bytes, rows, cols, total, issued
    cdef bint functional, streams
    cdef tuple peek_addr
    cdef int state

    def __init__(self, ctx, node, ins, outs, env, info):
        tref, tile = node.attrs["tensor"], node.attrs["tile"]
        self.name, self.env, self.tref, self.tile = node.name, env, tref, tile
        self.addresses, self.layout, self.issue = env.memory.addresses, env.layout, \
            env.memory.issue
        self.useful = env.useful_bytes
        self.rows, self.cols, self.dtype = tile[0], tile[1], tref.dtype
        self.addr, self.out = ins["raddr"], outs[0]
        self.reqs = memory.requests_per_tile(tile[0], tile[1], tref.dtype,
                                             env.hw.hbm.request_bytes)
        self.total = 1
        for d in tiled_shape(tref.shape, tile):
            self.total *= d
        self.tile_bytes = tile[0] * tile[1] * DTYPE_BYTES[tref.dtype]
        self.port, self.pd = env.ports[node.name], env.setting(node, "par_dispatch")
        self.functional, self.streams = env.functional, bool(env.hw.fabric.stream_tile)
        self.peek_addr = (PEEK, self.addr)
        self.state = TAKE

    cdef int resume(self, Kernel k, Ctx ctx) except -1:
        cdef long long start
        while True:
            if self.state == TAKE:
                head = k.peek(ctx, self.addr, False, self.peek_addr)
                if head is None:
                    return ctx.blocked is None
                a_t = head[1]
                self.data, where = None, None
                if a_t.data is not None:
                    i = a_t.scalar()
                    if not 0 <= i < self.total:
                        raise SimError(f"RandomOffChipLoad address {i} is outside "
                                       f"`{self.tref}` ({self.total} tiles)", self.name)
                    if self.functional:
                        self.data = memory._tensor_tile(self.env, self.tref, i, self.tile)
                    where = self.addresses(self.layout, self.tref, i, self.rows, self.cols)
                self.stop = head[2]
                ctx.mem_ops += 1  # the kernel's ISSUE: post the burst without waiting
                self.burst = self.issue(ctx, self.port, self.reqs, self.pd, False, where, False)
                self.issued = ctx.clock
                self.state = WAIT_TILE
                if not self.burst.done:
                    self.burst.waiter = ctx
                    ctx.blocked = (AWAIT, self.burst)
                    return 0
                if self.burst.completion > ctx.clock:
                    ctx.clock = self.burst.completion
            if self.state == WAIT_TILE:  # the tile is complete (a wake moved the clock)
                start = self.issued if self.issued > ctx.last_mem else ctx.last_mem
                ctx._work(start, ctx.clock - start, "load")
                ctx.last_mem = ctx.clock
                self.useful[self.name] = self.useful.get(self.name, 0) + self.tile_bytes
                if self.out is not None:
                    first = memory.streamed(self.env, self.burst) if self.streams else None
                    self.val = TileVal(self.rows, self.cols, self.dtype, None, True,
                                       self.data, first)
                self.burst = self.data = None
                self.state = GIVE_TILE
            if self.out is not None and not k.send(ctx, self.out, self.val, self.stop):
                return 0
            self.val = self.stop = None
            k._release(self.addr, ctx.clock)
            self.state = TAKE


def random_load(ctx, node, ins, outs, env, info):
    """RandomOffChipLoad's machine with one tile buffer, else its behavior."""
    if env.hw.hbm.tile_buffers == 1:
        return RandomLoad(ctx, node, ins, outs, env, info)
    return memory.random_load(ctx, node, ins, outs, env, info)


def linear_load(ctx, node, ins, outs, env, info):
    """LinearOffChipLoad's machine with one tile buffer, else its behavior."""
    if env.hw.hbm.tile_buffers == 1:
        return LinearLoad(ctx, node, ins, outs, env, info)
    return memory.linear_load(ctx, node, ins, outs, env, info)


MACHINES = {"LinearOffChipLoad": linear_load, "RandomOffChipLoad": random_load}
"""Operator -> its machine (or its behavior where the machine does not apply)."""
