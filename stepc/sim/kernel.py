"""The discrete-event kernel: contexts with private clocks, bounded FIFOs with credits.

Each operator instance is a Python generator (a *context*) with its own integer clock. It
yields small tuples to the kernel (`PEEK`, `POP`, `SEND`, `SELECT`, `MEM`, `ISSUE`,
`AWAIT`, `FIRST`, ...; `PEEK_ALL`, `POP_ALL` and `SEND_ALL` do over a list of channels
what the single operations do one after the other, in one resume of the generator); delays
are plain additions to `ctx.t`. A FIFO holds `(visible_time, payload, stop)` entries and a
deque of credit (slot-free) times, following the DAM channel rules: an element sent at
clock c is visible at `max(stamp, c + 1)`; a dequeue at clock c frees its slot at c + 1;
the i-th send into a FIFO of capacity C waits for the credit of element i - C.

Scheduling is data-driven: contexts run whenever they can, in any order, because their
outputs depend only on input values and times. Only arrival-order-sensitive decisions
(`SELECT`, `FIRST`, the memory models) wait in a time-ordered heap and run when nothing
else can: at that point every token still to come is stamped after the decision's time, so
the decision sees exactly what it would at that cycle. There is no global cycle stepping.

This module is the readable statement of those rules and the Python core; `_kernel.pyx`
is the same kernel compiled (C fields, the same operations, event order and errors), and
`core()` says which one a run builds.
"""

from __future__ import annotations

import heapq
import sys
from collections import deque
from dataclasses import dataclass, field
from types import ModuleType

from stepc.sim.tokens import TileVal

PEEK, POP, RECV, SEND, SEND_AT, SELECT, MEM, ISSUE, AWAIT, FIRST, PEEK_ALL, POP_ALL, \
    SEND_ALL = range(13)


class SimError(Exception):
    """A run-time error in the simulated program (bad address, mismatched stops, ...)."""

    def __init__(self, message: str, node: str | None = None, span=None,
                 code: str | None = None):
        super().__init__(message)
        self.node, self.span, self.code = node, span, code  # span, code: where no node is


class CycleLimitError(SimError):
    """The run passed its `max_cycles` (it stops there, unfinished)."""



class Channel:
    """A bounded single-producer single-consumer FIFO."""

    __slots__ = ("name", "q", "credits", "cap", "outstanding", "closed", "recv_waiter",
                 "send_waiter", "src", "dst", "high_water", "count", "elem_bytes", "reserved",
                 "log", "looks", "looked_at")

    def __init__(self, name: str, cap: int, src: str, dst: str):
        self.name, self.cap, self.src, self.dst = name, cap, src, dst
        self.q: deque = deque()
        self.credits: deque = deque()
        self.outstanding = 0
        self.closed = False
        self.recv_waiter: Ctx | None = None
        self.send_waiter: Ctx | None = None
        self.high_water = 0
        self.count = 0
        self.elem_bytes = 0  # bytes of the largest element sent
        self.reserved = False  # a SEND_ALL claimed a slot here and waits for the others
        self.log: list | None = None  # (time, +1 | -1) occupancy changes, when tracing
        self.looks: list | None = None  # per element, when tracing: the cycle its consumer
        #                                 first wanted it (its first peek, else its take)
        self.looked_at: int | None = None  # the head's first peek, while it waits


class Ctx:
    """A running operator instance."""

    __slots__ = ("name", "op", "gen", "t", "done", "outs", "busy", "value", "blocked",
                 "selecting", "spans", "trace", "fired", "mem_ops", "last_mem")

    def __init__(self, name: str, op: str):
        self.name, self.op = name, op
        self.gen = None
        self.t = 0
        self.done = False
        self.outs: list[Channel] = []
        self.busy = 0  # cycles spent computing (roofline or memory waits)
        self.value = None  # the result of the last kernel operation
        self.blocked: tuple | None = None  # the operation it waits on
        self.selecting: list[Channel] | None = None
        self.trace: list | None = None
        self.fired = 0
        self.mem_ops = 0
        self.last_mem = 0  # end of the last interval it waited on memory

    def work(self, start: int, cycles: int, label: str = "") -> None:
        """Record `cycles` of work starting at `start` (clock moves to start + cycles)."""
        if cycles > 0:
            self.busy += cycles
            if self.trace is not None:
                self.trace.append((start, cycles, label))
        self.t = start + cycles


def _claim_slot(ch: Channel, ctx: Ctx, op: tuple) -> bool:
    """Take a FIFO slot for a send: with the FIFO full, wait for the oldest credit (the
    clock moves to it); without one, block on `op` and return False."""
    if ch.outstanding >= ch.cap:
        if not ch.credits:
            ch.send_waiter = ctx
            ctx.blocked = op
            return False
        c = ch.credits.popleft()
        ch.outstanding -= 1
        if c > ctx.t:
            ctx.t = c
    return True


@dataclass
class Blocked:
    """One context that could not finish (deadlock report)."""

    ctx: str
    op: str
    waiting: str  # "empty input" | "full output" | "memory"
    channel: str
    partner: str
    occupancy: str


@dataclass
class Kernel:
    contexts: list[Ctx] = field(default_factory=list)
    channels: list[Channel] = field(default_factory=list)
    ready: deque = field(default_factory=deque)
    heap: list = field(default_factory=list)
    seq: int = 0
    memory: object = None  # the HBM model: .issue(ctx, port, requests, per_message, write,
    #                        addr, wait) -> Burst
    hop: int = 1  # cycles from a send to the element being visible
    max_cycles: int | None = None  # stop with an error past this cycle
    progress: object = None  # called now and then with the latest simulated cycle
    steps: int = 0

    # ------------------------------------------------------------ construction
    def channel(self, name: str, cap: int, src: str, dst: str) -> Channel:
        ch = Channel(name, cap, src, dst)
        self.channels.append(ch)
        return ch

    def context(self, name: str, op: str) -> Ctx:
        """A new context of this kernel's core (added to the run by `add`)."""
        return Ctx(name, op)

    def add(self, ctx: Ctx, gen) -> None:
        ctx.gen = gen
        self.contexts.append(ctx)
        self.ready.append(ctx)

    def at(self, t: int, kind: int, obj, value=None) -> None:
        """Schedule a time-ordered event: 0 = resume a select, 1 = wake (memory done),
        2 = memory-model activation, 3 = decide a `FIRST` (after the memory at that cycle)."""
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, obj, value))

    # ------------------------------------------------------------ main loop
    def run(self) -> None:
        ready, heap = self.ready, self.heap
        while True:
            while ready:
                self._step(ready.popleft())
                self.steps += 1
                if self.progress is not None and self.steps % 4096 == 0:
                    self.progress(max(c.t for c in self.contexts))
            if not heap:
                return
            t, kind, _, obj, value = heapq.heappop(heap)
            if self.max_cycles is not None and t > self.max_cycles:
                raise CycleLimitError(f"the run passed --max-cycles {self.max_cycles:,} (cycle "
                               f"{t:,})", getattr(obj, "name", None))
            if kind == 2:
                obj.activate(t)
            elif kind == 1:
                obj.t = max(obj.t, value)
                obj.value = None
                obj.blocked = None
                self._step(obj)
            elif kind == 3:
                obj.value = self._first(obj, obj.blocked, t)
                obj.blocked = None
                self._step(obj)
            else:
                self._finish_select(obj)

    def next_event_time(self) -> int | None:
        return self.heap[0][0] if self.heap else None

    def _put(self, ctx: Ctx, ch: Channel, payload, stop: int, at: int) -> None:
        """Enqueue an element sent at `ctx.t` into `ch` (its slot claimed), visible a hop
        later or at `at` if later, and wake the receiver."""
        vis = ctx.t + self.hop
        if self.max_cycles is not None and vis > self.max_cycles:
            raise CycleLimitError(f"the run passed --max-cycles {self.max_cycles:,} "
                                  f"(cycle {vis:,})", ctx.name)
        if at > vis:
            vis = at
        q = ch.q
        q.append((vis, payload, stop))
        if ch.log is not None:
            ch.log.append((ctx.t, 1))
        ch.outstanding += 1
        ch.count += 1
        if len(q) > ch.high_water:
            ch.high_water = len(q)
            nb = payload.nbytes if type(payload) is TileVal else 8
            if nb > ch.elem_bytes:
                ch.elem_bytes = nb
        if ch.recv_waiter is not None:
            w, ch.recv_waiter = ch.recv_waiter, None
            self._wake(w)

    def _release(self, ch: Channel, t: int) -> None:
        """Dequeue the head of `ch` at clock `t`: its credit returns at t + 1."""
        ch.q.popleft()
        ch.credits.append(t + 1)
        if ch.log is not None:
            ch.log.append((t + 1, -1))
        if ch.looks is not None:
            ch.looks.append(t if ch.looked_at is None else ch.looked_at)
            ch.looked_at = None
        if ch.send_waiter is not None:
            w, ch.send_waiter = ch.send_waiter, None
            self._wake(w)

    def _wake(self, ctx: Ctx | None) -> None:
        """A blocked context can retry its operation (a select re-enters the heap)."""
        if ctx is not None and ctx.blocked is not None:
            if ctx.selecting is not None:
                self._try_select(ctx)
            else:
                self.ready.append(ctx)

    def _step(self, ctx: Ctx) -> None:
        """Run a context until it blocks or finishes."""
        gen = ctx.gen
        op, ctx.blocked = ctx.blocked, None  # retry the operation it blocked on, if any
        value = ctx.value
        try:
            while True:
                if op is None:
                    op = gen.send(value)
                code = op[0]
                if code == SEND or code == SEND_AT:
                    ch = op[1]
                    if not _claim_slot(ch, ctx, op):
                        return
                    self._put(ctx, ch, op[2], op[3], op[4] if code == SEND_AT else 0)
                    value, op = None, None
                elif code == PEEK or code == RECV:
                    ch = op[1]
                    q = ch.q
                    if not q:
                        if ch.closed:
                            value, op = None, None
                            continue
                        ch.recv_waiter = ctx
                        ctx.blocked = op
                        return
                    head = q[0]
                    if head[0] > ctx.t:
                        ctx.t = head[0]
                    if code == RECV:
                        self._release(ch, ctx.t)
                    elif ch.looks is not None and ch.looked_at is None:
                        ch.looked_at = ctx.t
                    value, op = head, None
                elif code == POP:
                    self._release(op[1], ctx.t)
                    value, op = None, None
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
                            return
                        head = q[0]
                        if head[0] > ctx.t:
                            ctx.t = head[0]
                        if ch.looks is not None and ch.looked_at is None:
                            ch.looked_at = ctx.t
                        heads.append(head)
                    value, op = heads, None
                elif code == POP_ALL:
                    for ch in op[1]:
                        self._release(ch, ctx.t)
                    value, op = None, None
                elif code == SEND_ALL:  # a slot in every channel (in order), then the copies
                    for ch in op[1]:
                        if not ch.reserved:
                            if not _claim_slot(ch, ctx, op):
                                return
                            ch.reserved = True
                    for ch in op[1]:
                        ch.reserved = False
                        self._put(ctx, ch, op[2], op[3], 0)
                    value, op = None, None
                elif code == SELECT:
                    ctx.selecting = op[1]
                    ctx.blocked = op
                    self._try_select(ctx)
                    return
                elif code == MEM:  # issue a burst and wait for its last response
                    ctx.blocked = op
                    ctx.mem_ops += 1
                    self.memory.issue(ctx, *op[1:])
                    return
                elif code == ISSUE:  # post a burst and go on; the value is its handle
                    ctx.mem_ops += 1
                    value, op = self.memory.issue(ctx, *op[1:], wait=False), None
                elif code == AWAIT:  # wait for a posted burst's last response
                    b = op[1]
                    if not b.done:
                        b.waiter = ctx
                        ctx.blocked = op
                        return
                    if b.completion > ctx.t:
                        ctx.t = b.completion
                    value, op = None, None
                elif code == FIRST:  # whichever comes first: a channel's head or a burst
                    value = self._first(ctx, op, None)
                    if value is None:
                        ctx.blocked = op
                        return
                    op = None
                else:  # pragma: no cover - a behavior bug
                    raise SimError(f"unknown kernel operation {op!r}", ctx.name)
        except SimError as e:  # located at the operator that raised it
            if e.node is None:
                e.node = ctx.name
            raise
        except StopIteration:
            ctx.done = True
            ctx.blocked = None
            for ch in ctx.outs:
                ch.closed = True
                if ch.recv_waiter is not None:
                    w, ch.recv_waiter = ch.recv_waiter, None
                    self._wake(w)

    # ------------------------------------------------------------ selection
    def _try_select(self, ctx: Ctx) -> None:
        """Wait (in the time-ordered heap) until the earliest head among the channels is safe
        to choose; with no heads, wait for any of them to receive or close."""
        best = None
        open_any = False
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
            return
        if not open_any:
            ctx.selecting = None
            ctx.blocked = None
            ctx.value = -1
            self.ready.append(ctx)
            return
        for ch in ctx.selecting:
            if not ch.q and not ch.closed:
                ch.recv_waiter = ctx

    def _finish_select(self, ctx: Ctx) -> None:
        best, idx = None, -1
        for i, ch in enumerate(ctx.selecting):
            if ch.q and (best is None or ch.q[0][0] < best):
                best, idx = ch.q[0][0], i
        ctx.selecting = None
        ctx.blocked = None
        ctx.value = idx
        self._step(ctx)

    # ------------------------------------------------------------ first of two
    def _first(self, ctx: Ctx, op: tuple, now: int | None) -> int | None:
        """`(FIRST, ch, burst)`: 0 if `ch`'s head (or its end) comes first, 1 if the burst's
        last response does (ties go to the burst). Decided at once when both times are
        known; else in the heap at the earlier known time (`now`), when every burst ending
        by then is done and every token still to come is stamped later; else it waits for
        either. None: not decided yet."""
        ch, b = op[1], op[2]
        if not ch.q and ch.closed:
            b.watcher = None
            return 0
        head = max(ch.q[0][0], ctx.t) if ch.q else None
        done = max(b.completion, ctx.t) if b.done else None
        if now is not None or head is not None and done is not None or done == ctx.t:
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

    def watched(self, ctx: Ctx) -> None:
        """A burst that `ctx` waits on in a `FIRST` is done."""
        if ctx.blocked is not None and ctx.blocked[0] == FIRST:
            ch, b = ctx.blocked[1], ctx.blocked[2]
            b.watcher = None
            if ch.recv_waiter is ctx:  # woken once
                ch.recv_waiter = None
            self._wake(ctx)

    # ------------------------------------------------------------ diagnosis
    def blocked(self) -> list[Blocked]:
        out = []
        for ctx in self.contexts:
            if ctx.done:
                continue
            op = ctx.blocked
            if op is None:
                out.append(Blocked(ctx.name, ctx.op, "never scheduled", "", "", ""))
                continue
            if op[0] == PEEK_ALL:  # the first input it waits on
                op = (PEEK, next(ch for ch in op[1] if not ch.q and not ch.closed))
            elif op[0] == SEND_ALL:  # the first output without a free slot
                op = (SEND, next(ch for ch in op[1] if not ch.reserved))
            if op[0] in (PEEK, RECV, FIRST):
                ch = op[1]
                out.append(Blocked(ctx.name, ctx.op, "empty input", ch.name, ch.src,
                                   f"0/{ch.cap}"))
            elif op[0] in (SEND, SEND_AT):
                ch = op[1]
                out.append(Blocked(ctx.name, ctx.op, "full output", ch.name, ch.dst,
                                   f"{ch.outstanding}/{ch.cap}"))
            elif op[0] == SELECT:
                names = ", ".join(ch.name for ch in op[1])
                srcs = ", ".join(sorted({ch.src for ch in op[1]}))
                out.append(Blocked(ctx.name, ctx.op, "empty inputs", names, srcs, ""))
            else:
                out.append(Blocked(ctx.name, ctx.op, "memory", "", "hbm", ""))
        return out


def core() -> ModuleType:
    """The module whose `Kernel`, `Ctx` and `Channel` run a simulation: the compiled
    `stepc.sim._kernel` when it is built and chosen (`stepc.sim.native`), else this one
    (same cycles, slower)."""
    from stepc.sim import native
    return native.compiled("stepc.sim._kernel") or sys.modules[__name__]
