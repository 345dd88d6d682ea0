"""Operators compiled as state machines the compiled kernel runs directly, and the table of
them (`MACHINES`): here the routing ones, Broadcast, Flatten, Partition and Reassemble
(`stepc/sim/behaviors/routing.py`, `shape.py`); the compute ones in `_compute_machines`,
the memory ones in `_memory_machines`. Each
performs the kernel operations its behavior's generator yields, in the same order, with the
same blocking, clock moves, work records and errors, so a run gives the same cycles, logs
and reports either way (tests/test_sim_native.py). The behaviors stay the statement of what
the operators do and run them in the Python core.
"""

from stepc.sim._kernel cimport Channel, Ctx, Kernel, Machine

from stepc.sim._compute_machines import MACHINES as COMPUTE
from stepc.sim._memory_machines import MACHINES as MEMORY
from stepc.sim.kernel import PEEK, RECV, SimError
from stepc.sim.tokens import TileVal

# a machine's states: the operation it performs next
cdef enum:
    TAKE, GIVE, CHOOSE, TAKE_CHUNK, GIVE_CHUNK, CHECK_ENDED, PICK


cdef inline long long _ceil_div(long long n, long long d):
    return (n + d - 1) // d


cdef long long _load_cycles(long long bw, p) except -1:
    """Cycles reading payload `p` from a memory unit (`routing._load_cycles`)."""
    if isinstance(p, TileVal) and p.in_mu:
        return _ceil_div(p.nbytes, bw)
    return 0


cdef long long _store_cycles(long long bw, bint write_back, p) except -1:
    """Cycles writing payload `p` back to a memory unit (`routing._store_cycles`)."""
    if write_back and isinstance(p, TileVal):
        return _ceil_div(p.nbytes, bw)
    return 0


cdef object _with_mu(val, in_mu):
    """`TileVal.with_mu` of a payload that may not be a tile (then itself), called only
    when it makes a new tile."""
    if not isinstance(val, TileVal) or in_mu == val.in_mu:
        return val
    return val.with_mu(in_mu)


cdef class Broadcast(Machine):
    """`routing.broadcast`: take an element, then send it to every output with one stamp."""

    cdef Channel src
    cdef list targets
    cdef tuple take
    cdef int state
    cdef object val, stop

    def __init__(self, ctx, node, ins, outs, env, info):
        self.src = ins["in"]
        self.targets = [o for o in outs if o is not None]
        self.take = (RECV, self.src)
        self.state = TAKE

    cdef int resume(self, Kernel k, Ctx ctx) except -1:
        while True:
            if self.state == TAKE:
                head = k.peek(ctx, self.src, True, self.take)
                if head is None:
                    return ctx.blocked is None
                self.val, self.stop = head[1], head[2]
                self.state = GIVE
            if not k.send_all(ctx, self.targets, self.val, self.stop):
                return 0
            self.val = self.stop = None
            self.state = TAKE


cdef class Flatten(Machine):
    """`shape.flatten`: each element with its stop levels lo+1..hi merged into lo."""

    cdef Channel src, out
    cdef long long lo, hi
    cdef tuple take
    cdef int state
    cdef object val, stop

    def __init__(self, ctx, node, ins, outs, env, info):
        self.lo, self.hi = node.attrs["min"], node.attrs["max"]
        self.src, self.out = ins["in"], outs[0]
        self.take = (RECV, self.src)
        self.state = TAKE

    cdef int resume(self, Kernel k, Ctx ctx) except -1:
        cdef long long s
        while True:
            if self.state == TAKE:
                head = k.peek(ctx, self.src, True, self.take)
                if head is None:
                    return ctx.blocked is None
                if self.out is None:
                    continue
                s = head[2]
                if s > self.hi:
                    s -= self.hi - self.lo
                elif s > self.lo:
                    s = self.lo
                self.val, self.stop = head[1], s
                self.state = GIVE
            if not k.send(ctx, self.out, self.val, self.stop):
                return 0
            self.val = self.stop = None
            self.state = TAKE


cdef class Partition(Machine):
    """`routing.partition`: per selector element, each element of the next rank-p chunk
    loaded, released, switched and sent to every selected output."""

    cdef Channel src, sel
    cdef list outs
    cdef long long p, switch, bw
    cdef object wb  # write_back, as given
    cdef str name
    cdef tuple peek_src, take_sel
    cdef int state
    cdef Py_ssize_t sending  # the index into `chosen` of the next send
    cdef bint end
    cdef object chosen, sstop, val, stop

    def __init__(self, ctx, node, ins, outs, env, info):
        self.p, self.switch = node.attrs["rank"], node.attrs["switch_cycles"]
        self.src, self.sel, self.outs = ins["in"], ins["sel"], list(outs)
        self.wb = node.attrs.get("write_back", False)
        self.bw = env.hw.fabric.onchip_bw
        self.name = node.name
        self.peek_src, self.take_sel = (PEEK, self.src), (RECV, self.sel)
        self.state = TAKE

    cdef int resume(self, Kernel k, Ctx ctx) except -1:
        cdef long long s, n = len(self.outs)
        cdef Channel o
        while True:
            if self.state == TAKE:  # the data decides when the Partition is done
                head = k.peek(ctx, self.src, False, self.peek_src)
                if head is None:
                    return ctx.blocked is None
                self.state = CHOOSE
            if self.state == CHOOSE:
                hs = k.peek(ctx, self.sel, True, self.take_sel)
                if hs is None:
                    if ctx.blocked is not None:
                        return 0
                    raise SimError("Partition: data left over after the selector ended",
                                   self.name)
                self.chosen, self.sstop = hs[1], hs[2]
                for i in self.chosen:
                    if not 0 <= i < n:
                        raise SimError(f"Partition selector chooses output {i}, but there "
                                       f"are {n}", self.name)
                self.state = TAKE_CHUNK
            if self.state == TAKE_CHUNK:
                head = k.peek(ctx, self.src, False, self.peek_src)
                if head is None:
                    if ctx.blocked is not None:
                        return 0
                    raise SimError("Partition: the data stream ended before the selector",
                                   self.name)
                val, s = head[1], head[2]
                ctx._work(ctx.clock, _load_cycles(self.bw, val), "load")
                k._release(self.src, ctx.clock)
                self.end = s >= self.p
                if self.end and s != self.sstop + self.p:
                    raise SimError(f"Partition: a chunk ends with stop level {s}, but the "
                                   f"selector element expects {self.sstop + self.p}",
                                   self.name)
                if not self.chosen:
                    self.state = TAKE if self.end else TAKE_CHUNK
                    continue
                ctx._work(ctx.clock, self.switch + _store_cycles(self.bw, bool(self.wb), val),
                          "switch")
                self.val = _with_mu(val, self.wb)
                self.stop = self.p if self.end else s
                self.sending = 0
                self.state = GIVE_CHUNK
            while self.sending < len(self.chosen):
                o = self.outs[self.chosen[self.sending]]
                if o is not None and not k.send(ctx, o, self.val, self.stop):
                    return 0
                self.sending += 1
            self.val = self.stop = None
            self.state = TAKE if self.end else TAKE_CHUNK


cdef class Reassemble(Machine):
    """`routing.reassemble`: per selector element, one chunk from each selected input,
    earliest available first; the group closes one level above the chunks."""

    cdef list srcs
    cdef Channel sel, out, ch
    cdef long long q, switch, bw
    cdef object wb  # write_back, as given
    cdef bint first, end
    cdef str name
    cdef tuple take_sel, peek_ch
    cdef int state
    cdef Py_ssize_t index, checked
    cdef list remaining
    cdef object sstop, val, stop

    def __init__(self, ctx, node, ins, outs, env, info):
        self.q, self.switch = node.attrs["rank"], node.attrs["switch_cycles"]
        self.srcs, self.sel, self.out = list(ins["ins"]), ins["sel"], outs[0]
        self.wb = node.attrs.get("write_back", False)
        self.bw = env.hw.fabric.onchip_bw
        self.name = node.name
        self.take_sel = (RECV, self.sel)
        self.state = TAKE

    cdef int resume(self, Kernel k, Ctx ctx) except -1:
        cdef long long s, t, n = len(self.srcs)
        cdef Channel ch
        while True:
            if self.state == TAKE:
                hs = k.peek(ctx, self.sel, True, self.take_sel)
                if hs is None:
                    if ctx.blocked is not None:
                        return 0
                    self.checked = 0
                    self.state = CHECK_ENDED
                    continue
                chosen, self.sstop = list(hs[1]), hs[2]
                for i in chosen:
                    if not 0 <= i < n:
                        raise SimError(f"Reassemble selector chooses input {i}, but there "
                                       f"are {n}", self.name)
                self.remaining = chosen
                self.state = CHOOSE
            if self.state == CHECK_ENDED:  # the selector ended: so must every input
                while self.checked < n:
                    ch = self.srcs[self.checked]
                    head = k.peek(ctx, ch, False, (PEEK, ch))
                    if head is not None:
                        raise SimError("Reassemble: an input has data left after the "
                                       "selector ended", self.name)
                    if ctx.blocked is not None:
                        return 0
                    self.checked += 1
                return 1
            if self.state == CHOOSE:
                if not self.remaining:
                    self.state = TAKE
                    continue
                self.state = PICK
                k.select(ctx, [self.srcs[i] for i in self.remaining])
                return 0
            if self.state == PICK:  # resumed with the selected input
                if ctx.value < 0:
                    raise SimError(f"Reassemble: selected input {self.remaining[0]} ended "
                                   "early", self.name)
                self.index = self.remaining.pop(ctx.value)
                self.ch = self.srcs[self.index]
                self.peek_ch = (PEEK, self.ch)
                self.first = True
                self.state = TAKE_CHUNK
            if self.state == TAKE_CHUNK:
                head = k.peek(ctx, self.ch, False, self.peek_ch)
                if head is None:
                    if ctx.blocked is not None:
                        return 0
                    raise SimError(f"Reassemble: input {self.index} ended inside a chunk",
                                   self.name)
                val, s = head[1], head[2]
                if self.first:
                    t = head[0]
                    ctx.clock = (ctx.clock if ctx.clock > t else t) + self.switch
                    self.first = False
                ctx._work(ctx.clock, _load_cycles(self.bw, val) +
                          _store_cycles(self.bw, bool(self.wb), val), "merge")
                k._release(self.ch, ctx.clock)
                self.end = s >= self.q
                if self.out is None:
                    self.state = (CHOOSE if self.end else TAKE_CHUNK)
                    continue
                if self.end:
                    self.stop = self.q + 1 + self.sstop if not self.remaining else self.q
                else:
                    self.stop = s
                self.val = _with_mu(val, self.wb)
                self.state = GIVE_CHUNK
            if not k.send(ctx, self.out, self.val, self.stop):
                return 0
            self.val = self.stop = None
            self.state = CHOOSE if self.end else TAKE_CHUNK


MACHINES = {"Broadcast": Broadcast, "Flatten": Flatten, "Partition": Partition,
            "Reassemble": Reassemble, **COMPUTE, **MEMORY}
"""Operator -> its machine, made as its behavior is: (ctx, node, ins, outs, env, info)."""
