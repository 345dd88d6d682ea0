"""The event kernel compiled: `Kernel`, `Channel` and `Ctx` of `stepc.sim.kernel` as C types,
with exactly its semantics (the same operations, the same order of ready contexts and heap
events, the same logs and counters, the same errors). `stepc.sim.kernel` is the readable
statement of those rules and the fallback when this module is not built; `kernel.core()`
chooses between them. The operator generators and memory models stay Python: a generator
is resumed as by `gen.send(value)`, the memory model is called as from the Python kernel.
"""

cimport cython
from cpython.ref cimport PyObject, Py_XDECREF

from collections import deque
from heapq import heappop, heappush
from operator import index

from stepc.sim import kernel as _rules
from stepc.sim.kernel import CycleLimitError, SimError
from stepc.sim.tokens import TileVal

cdef extern from "Python.h":
    # 0: the generator returned, 1: it yielded, -1: it raised (the error is set)
    int PyIter_Send(object iterator, object arg, PyObject **result) except -1

# the operation codes, as C ints (their values are `stepc.sim.kernel`'s)
cdef int PEEK = _rules.PEEK
cdef int POP = _rules.POP
cdef int RECV = _rules.RECV
cdef int SEND = _rules.SEND
cdef int SEND_AT = _rules.SEND_AT
cdef int SELECT = _rules.SELECT
cdef int MEM = _rules.MEM
cdef int ISSUE = _rules.ISSUE
cdef int AWAIT = _rules.AWAIT
cdef int FIRST = _rules.FIRST
cdef int PEEK_ALL = _rules.PEEK_ALL
cdef int POP_ALL = _rules.POP_ALL
cdef int SEND_ALL = _rules.SEND_ALL

# a deque's methods, called without looking them up on each deque
cdef object _append = deque.append
cdef object _popleft = deque.popleft


cdef inline long long _cycle(object value) except? -1:
    """A cycle from Python as a C integer: an int or an integer type such as numpy's (a
    float is refused, where a C conversion would drop its fraction)."""
    if type(value) is not int:
        value = index(value)
    return value


cdef class Channel:
    """A bounded single-producer single-consumer FIFO (see `stepc.sim.kernel.Channel`)."""

    def __init__(self, str name, long long cap, str src, str dst):
        self.name, self.cap, self.src, self.dst = name, cap, src, dst
        self.q = deque()
        self.credits = deque()
        # the counters start at 0, the flags at False, the waiters and logs at None


cdef class Ctx:
    """A running operator instance (see `stepc.sim.kernel.Ctx`): a generator (`gen`) or
    a compiled state machine (`machine`, `stepc.sim._machines`)."""

    def __init__(self, str name, str op):
        self.name, self.op = name, op
        self.outs = []
        # the clock and counters start at 0, `done` at False, the rest at None

    @property
    def t(self):
        """Its clock."""
        return self.clock

    @t.setter
    def t(self, value):
        self.clock = _cycle(value)

    def work(self, start, cycles, label=""):
        """Record `cycles` of work starting at `start` (clock moves to start + cycles)."""
        cdef long long s = _cycle(start), n = _cycle(cycles)
        if n > 0:
            self.busy += n
            if self.trace is not None:
                self.trace.append((start, cycles, label))
        self.clock = s + n

    cdef int _work(self, long long start, long long cycles, str label) except -1:
        """`work` for a compiled machine."""
        if cycles > 0:
            self.busy += cycles
            if self.trace is not None:
                self.trace.append((start, cycles, label))
        self.clock = start + cycles
        return 0


cdef class Machine:
    """An operator run by the kernel directly, without a generator: `resume` performs its
    kernel operations in the order its behavior's generator yields them, with the same
    blocking (`ctx.blocked` holds the operation it waits on, as a generator's would)."""

    cdef int resume(self, Kernel k, Ctx ctx) except -1:
        """Run until the operator blocks (0) or ends (1)."""
        raise NotImplementedError


cdef bint _claim_slot(Channel ch, Ctx ctx, object op) except -1:
    """Take a FIFO slot for a send: with the FIFO full, wait for the oldest credit (the
    clock moves to it); without one, block on `op` and return False."""
    cdef long long c
    if ch.outstanding >= ch.cap:
        if not ch.credits:
            ch.send_waiter = ctx
            ctx.blocked = op
            return False
        c = _popleft(ch.credits)
        ch.outstanding -= 1
        if c > ctx.clock:
            ctx.clock = c
    return True


cdef class Kernel:
    """The discrete-event kernel (see `stepc.sim.kernel.Kernel`)."""

    def __init__(self, contexts=None, channels=None, ready=None, heap=None, long long seq=0,
                 memory=None, long long hop=1, max_cycles=None, progress=None,
                 long long steps=0):
        self.contexts = [] if contexts is None else contexts
        self.channels = [] if channels is None else channels
        self.ready = deque() if ready is None else ready
        self.heap = [] if heap is None else heap
        self.seq = seq
        self.memory = memory
        self.hop = hop
        self.max_cycles = max_cycles
        self.progress = progress
        self.steps = steps

    @property
    def max_cycles(self):
        """Stop with an error past this cycle (None: no limit)."""
        return self._max_cycles

    @max_cycles.setter
    def max_cycles(self, value):
        self._max_cycles = value
        self._limited = value is not None
        self._limit = _cycle(value) if value is not None else 0

    # ------------------------------------------------------------ construction
    def channel(self, str name, long long cap, str src, str dst):
        ch = Channel(name, cap, src, dst)
        self.channels.append(ch)
        return ch

    def context(self, str name, str op):
        """A new context of this kernel's core (added to the run by `add`)."""
        return Ctx(name, op)

    def add(self, Ctx ctx, gen):
        """Run `ctx` as `gen`: a behavior's generator or a compiled `Machine`."""
        if isinstance(gen, Machine):
            ctx.machine = gen
        else:
            ctx.gen = gen
        self.contexts.append(ctx)
        _append(self.ready, ctx)

    def at(self, t, int kind, obj, value=None):
        """Schedule a time-ordered event: 0 = resume a select, 1 = wake (memory done),
        2 = memory-model activation, 3 = decide a `FIRST` (after the memory at that cycle)."""
        self.seq += 1
        heappush(self.heap, (t, kind, self.seq, obj, value))

    # ------------------------------------------------------------ main loop
    def run(self):
        cdef Ctx ctx
        cdef int kind
        cdef long long t
        ready, heap = self.ready, self.heap
        while True:
            while ready:
                self._step(_popleft(ready))
                self.steps += 1
                if self.progress is not None and self.steps % 4096 == 0:
                    self.progress(max(c.t for c in self.contexts))
            if not heap:
                return
            t_obj, kind, _, obj, value = heappop(heap)
            t = _cycle(t_obj)
            if self._limited and t > self._limit:
                raise CycleLimitError(f"the run passed --max-cycles {self._max_cycles:,} "
                                      f"(cycle {t_obj:,})", getattr(obj, "name", None))
            if kind == 2:
                obj.activate(t_obj)
            elif kind == 1:
                ctx = obj
                if _cycle(value) > ctx.clock:
                    ctx.clock = value
                ctx.value = None
                ctx.blocked = None
                self._step(ctx)
            elif kind == 3:
                ctx = obj
                ctx.value = self._first(ctx, ctx.blocked, t_obj)
                ctx.blocked = None
                self._step(ctx)
            else:
                self._finish_select(obj)

    def next_event_time(self):
        return self.heap[0][0] if self.heap else None

    cdef int _put(self, Ctx ctx, Channel ch, payload, stop, long long at) except -1:
        """Enqueue an element sent at `ctx.t` into `ch` (its slot claimed), visible a hop
        later or at `at` if later, and wake the receiver."""
        cdef long long vis = ctx.clock + self.hop
        cdef long long n, nb
        cdef Ctx w
        if self._limited and vis > self._limit:
            raise CycleLimitError(f"the run passed --max-cycles {self._max_cycles:,} "
                                  f"(cycle {vis:,})", ctx.name)
        if at > vis:
            vis = at
        q = ch.q
        _append(q, (vis, payload, stop))
        if ch.log is not None:
            ch.log.append((ctx.clock, 1))
        ch.outstanding += 1
        ch.count += 1
        n = len(q)
        if n > ch.high_water:
            ch.high_water = n
            nb = payload.nbytes if type(payload) is TileVal else 8
            if nb > ch.elem_bytes:
                ch.elem_bytes = nb
        if ch.recv_waiter is not None:
            w, ch.recv_waiter = ch.recv_waiter, None
            self._wake(w)
        return 0

    cdef int _release(self, Channel ch, long long t) except -1:
        """Dequeue the head of `ch` at clock `t`: its credit returns at t + 1."""
        cdef Ctx w
        _popleft(ch.q)
        _append(ch.credits, t + 1)
        if ch.log is not None:
            ch.log.append((t + 1, -1))
        if ch.looks is not None:
            ch.looks.append(t if ch.looked_at is None else ch.looked_at)
            ch.looked_at = None
        if ch.send_waiter is not None:
            w, ch.send_waiter = ch.send_waiter, None
            self._wake(w)
        return 0

    cdef int _wake(self, Ctx ctx) except -1:
        """A blocked context can retry its operation (a select re-enters the heap)."""
        if ctx is not None and ctx.blocked is not None:
            if ctx.selecting is not None:
                self._try_select(ctx)
            else:
                _append(self.ready, ctx)
        return 0

    @cython.boundscheck(True)
    @cython.wraparound(True)
    cdef int _step(self, Ctx ctx) except -1:
        """Run a context until it blocks or finishes."""
        cdef PyObject *sent
        cdef int code
        cdef long long ht
        cdef Channel ch
        cdef Ctx w
        cdef list heads
        if ctx.machine is not None:
            ctx.blocked = None  # it retries the operation it blocked on, if any
            try:
                if not ctx.machine.resume(self, ctx):
                    return 0
            except SimError as e:
                if e.node is None:
                    e.node = ctx.name
                raise
            return self._finish(ctx)
        gen = ctx.gen
        op = ctx.blocked  # retry the operation it blocked on, if any
        ctx.blocked = None
        value = ctx.value
        try:
            while True:
                if op is None:
                    if PyIter_Send(gen, value, &sent) == 0:  # the generator returned
                        Py_XDECREF(sent)
                        break
                    op = <object>sent
                    Py_XDECREF(sent)
                code = op[0]
                if code == SEND or code == SEND_AT:
                    ch = op[1]
                    if not _claim_slot(ch, ctx, op):
                        return 0
                    self._put(ctx, ch, op[2], op[3], _cycle(op[4]) if code == SEND_AT else 0)
                    value = op = None
                elif code == PEEK or code == RECV:
                    ch = op[1]
                    q = ch.q
                    if not q:
                        if ch.closed:
                            value = op = None
                            continue
                        ch.recv_waiter = ctx
                        ctx.blocked = op
                        return 0
                    head = q[0]
                    ht = _cycle(head[0])
                    if ht > ctx.clock:
                        ctx.clock = ht
                    if code == RECV:
                        self._release(ch, ctx.clock)
                    elif ch.looks is not None and ch.looked_at is None:
                        ch.looked_at = ctx.clock
                    value = head
                    op = None
                elif code == POP:
                    self._release(op[1], ctx.clock)
                    value = op = None
                elif code == PEEK_ALL:  # every channel's head, in order (None: ended)
                    heads = []
                    for ch in op[1]:
                        q = ch.q
                        if not q:
                            if ch.closed:
                                heads.append(None)
                                continue
                            ch.recv_waiter = ctx  # retried from the first: peeks are
                            ctx.blocked = op  # idempotent for the only consumer
                            return 0
                        head = q[0]
                        ht = _cycle(head[0])
                        if ht > ctx.clock:
                            ctx.clock = ht
                        if ch.looks is not None and ch.looked_at is None:
                            ch.looked_at = ctx.clock
                        heads.append(head)
                    value = heads
                    op = None
                elif code == POP_ALL:
                    for ch in op[1]:
                        self._release(ch, ctx.clock)
                    value = op = None
                elif code == SEND_ALL:  # a slot in every channel (in order), then the copies
                    for ch in op[1]:
                        if not ch.reserved:
                            if not _claim_slot(ch, ctx, op):
                                return 0
                            ch.reserved = True
                    for ch in op[1]:
                        ch.reserved = False
                        self._put(ctx, ch, op[2], op[3], 0)
                    value = op = None
                elif code == SELECT:
                    ctx.selecting = op[1]
                    ctx.blocked = op
                    self._try_select(ctx)
                    return 0
                elif code == MEM:  # issue a burst and wait for its last response
                    ctx.blocked = op
                    ctx.mem_ops += 1
                    self.memory.issue(ctx, *op[1:])
                    return 0
                elif code == ISSUE:  # post a burst and go on; the value is its handle
                    ctx.mem_ops += 1
                    value = self.memory.issue(ctx, *op[1:], wait=False)
                    op = None
                elif code == AWAIT:  # wait for a posted burst's last response
                    b = op[1]
                    if not b.done:
                        b.waiter = ctx
                        ctx.blocked = op
                        return 0
                    ht = _cycle(b.completion)
                    if ht > ctx.clock:
                        ctx.clock = ht
                    value = op = None
                elif code == FIRST:  # whichever comes first: a channel's head or a burst
                    value = self._first(ctx, op, None)
                    if value is None:
                        ctx.blocked = op
                        return 0
                    op = None
                else:  # a behavior bug
                    raise SimError(f"unknown kernel operation {op!r}", ctx.name)
        except SimError as e:  # located at the operator that raised it
            if e.node is None:
                e.node = ctx.name
            raise
        except StopIteration:
            pass
        return self._finish(ctx)

    cdef int _finish(self, Ctx ctx) except -1:
        """`ctx` ended: its outputs close."""
        cdef Channel ch
        cdef Ctx w
        ctx.done = True
        ctx.blocked = None
        for ch in ctx.outs:
            ch.closed = True
            if ch.recv_waiter is not None:
                w, ch.recv_waiter = ch.recv_waiter, None
                self._wake(w)
        return 0

    # ------------------------------------------------------------ for compiled machines
    cdef object peek(self, Ctx ctx, Channel ch, bint take, tuple op):
        """`PEEK` (or with `take`, `RECV`) of `ch` for a machine: the head, else None: `ch`
        ended, or the context waits on `op` (the operation a generator would yield; it is
        then in `ctx.blocked`)."""
        cdef long long ht
        q = ch.q
        if not q:
            if ch.closed:
                return None
            ch.recv_waiter = ctx
            ctx.blocked = op
            return None
        head = q[0]
        ht = _cycle(head[0])
        if ht > ctx.clock:
            ctx.clock = ht
        if take:
            self._release(ch, ctx.clock)
        elif ch.looks is not None and ch.looked_at is None:
            ch.looked_at = ctx.clock
        return head

    cdef list peek_all(self, Ctx ctx, list chans, tuple op):
        """`PEEK_ALL` of `chans` for a machine: their heads (None: ended), else None when
        the context waits on `op` (retried from the first channel)."""
        cdef Channel ch
        cdef long long ht
        cdef list heads = []
        for ch in chans:
            q = ch.q
            if not q:
                if ch.closed:
                    heads.append(None)
                    continue
                ch.recv_waiter = ctx
                ctx.blocked = op
                return None
            head = q[0]
            ht = _cycle(head[0])
            if ht > ctx.clock:
                ctx.clock = ht
            if ch.looks is not None and ch.looked_at is None:
                ch.looked_at = ctx.clock
            heads.append(head)
        return heads

    cdef int release_all(self, Ctx ctx, list chans) except -1:
        """`POP_ALL` of `chans` for a machine."""
        cdef Channel ch
        for ch in chans:
            self._release(ch, ctx.clock)
        return 0

    cdef bint send(self, Ctx ctx, Channel ch, payload, stop) except -1:
        """`SEND` for a machine: False when it waits for a slot."""
        if ch.outstanding >= ch.cap and not ch.credits:
            ch.send_waiter = ctx
            ctx.blocked = (SEND, ch, payload, stop)
            return False
        _claim_slot(ch, ctx, None)
        self._put(ctx, ch, payload, stop, 0)
        return True

    cdef bint send_all(self, Ctx ctx, list chans, payload, stop) except -1:
        """`SEND_ALL` for a machine: False when it waits for a slot (those it claimed stay
        claimed)."""
        cdef Channel ch
        for ch in chans:
            if not ch.reserved:
                if ch.outstanding >= ch.cap and not ch.credits:
                    ch.send_waiter = ctx
                    ctx.blocked = (SEND_ALL, chans, payload, stop)
                    return False
                _claim_slot(ch, ctx, None)
                ch.reserved = True
        for ch in chans:
            ch.reserved = False
            self._put(ctx, ch, payload, stop, 0)
        return True

    cdef int select(self, Ctx ctx, list chans) except -1:
        """`SELECT` among `chans` for a machine: it resumes with the index in `ctx.value`."""
        ctx.selecting = chans
        ctx.blocked = (SELECT, chans)
        return self._try_select(ctx)

    # ------------------------------------------------------------ selection
    cdef int _try_select(self, Ctx ctx) except -1:
        """Wait (in the time-ordered heap) until the earliest head among the channels is safe
        to choose; with no heads, wait for any of them to receive or close."""
        cdef Channel ch
        cdef bint open_any = False
        best = None
        for ch in ctx.selecting:
            if ch.q:
                t = ch.q[0][0]
                if best is None or t < best:
                    best = t
            elif not ch.closed:
                open_any = True
        if best is not None:
            for ch in ctx.selecting:
                if ch.recv_waiter is ctx:
                    ch.recv_waiter = None
            self.at(best, 0, ctx)
            return 0
        if not open_any:
            ctx.selecting = None
            ctx.blocked = None
            ctx.value = -1
            _append(self.ready, ctx)
            return 0
        for ch in ctx.selecting:
            if not ch.q and not ch.closed:
                ch.recv_waiter = ctx
        return 0

    cdef int _finish_select(self, Ctx ctx) except -1:
        cdef Channel ch
        cdef Py_ssize_t i, idx = -1
        best = None
        for i, ch in enumerate(ctx.selecting):
            if ch.q and (best is None or ch.q[0][0] < best):
                best, idx = ch.q[0][0], i
        ctx.selecting = None
        ctx.blocked = None
        ctx.value = idx
        return self._step(ctx)

    # ------------------------------------------------------------ first of two
    @cython.boundscheck(True)
    @cython.wraparound(True)
    cdef object _first(self, Ctx ctx, tuple op, now):
        """`(FIRST, ch, burst)`: 0 if `ch`'s head (or its end) comes first, 1 if the burst's
        last response does (ties go to the burst); None: not decided yet (the rules are
        `stepc.sim.kernel.Kernel._first`'s)."""
        cdef Channel ch = op[1]
        b = op[2]
        if not ch.q and ch.closed:
            b.watcher = None
            return 0
        head = max(ch.q[0][0], ctx.clock) if ch.q else None
        done = max(b.completion, ctx.clock) if b.done else None
        if now is not None or head is not None and done is not None or done == ctx.clock:
            return 1 if done is not None and (head is None or done <= head) else 0
        if ch.recv_waiter is ctx:
            ch.recv_waiter = None
        b.watcher = None
        if head is None and done is None:
            ch.recv_waiter = ctx
            b.watcher = ctx
        else:
            self.at(head if done is None else done, 3, ctx)
        return None

    def watched(self, Ctx ctx):
        """A burst that `ctx` waits on in a `FIRST` is done."""
        cdef Channel ch
        if ctx.blocked is not None and ctx.blocked[0] == FIRST:
            ch, b = ctx.blocked[1], ctx.blocked[2]
            b.watcher = None
            if ch.recv_waiter is ctx:  # woken once
                ch.recv_waiter = None
            self._wake(ctx)

    # ------------------------------------------------------------ diagnosis
    def blocked(self):
        """The contexts that could not finish, as `Blocked` (the deadlock report)."""
        return _rules.Kernel.blocked(self)
