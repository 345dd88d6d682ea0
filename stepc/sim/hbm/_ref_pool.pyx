"""The `ref` model's window service compiled: `WindowedMemory` with `RefHbm`'s service
(`ref.py`, `window.py`) for pools without an arbiter or a credit limit, request by request
in C. Windows, pickups and the order of every kernel event are those of the Python model,
so every cycle, count and completion is the same (tests/test_ref_kernels.py)."""

# cython: language_level=3

from libc.stdlib cimport free as cfree
from libc.stdlib cimport malloc

from stepc.sim.hbm._ref_stretch cimport Stretches

from bisect import insort
from collections import deque

import numpy as np

from stepc.sim.hbm.window import MemoryStats
from stepc.sim.kernel import SimError

cdef long long NEVER = 1LL << 62  # no response yet: above any cycle
# stretches of constant single-request ports at least this many channel-pattern periods
# long are served in closed form (`_ref_stretch`), shorter ones request by request
cdef long long STRETCH_PERIODS = 2


cdef struct Window:
    long long* start  # per picked burst: its first pickup cycle in the window
    long long* end  # ... one past its last
    Py_ssize_t* port_end  # per port with pickups: one past its last picked burst


cdef void release(Window* w) noexcept:
    cfree(w.start)
    cfree(w.end)
    cfree(w.port_end)


cdef class Burst:
    """`window.Burst`, with C fields for the service (same names, same meaning)."""

    cdef public object waiter, port, addr, watcher
    cdef public long long next_cycle, messages, per_message, last_requests, requests
    cdef public long long issued, completion
    cdef public bint write, done
    cdef long long first_c  # NEVER: no response yet

    def __init__(self, waiter, port, long long next_cycle, long long messages,
                 long long per_message, long long last_requests, bint write,
                 long long requests, addr=None):
        self.fill(waiter, port, next_cycle, messages, per_message, last_requests, write,
                  requests, addr)

    cdef void fill(self, waiter, port, long long next_cycle, long long messages,
                   long long per_message, long long last_requests, bint write,
                   long long requests, addr):
        """Its fields, as posted (the pool makes its bursts without a Python call)."""
        self.waiter, self.port, self.addr, self.watcher = waiter, port, addr, None
        self.next_cycle, self.messages = next_cycle, messages
        self.per_message, self.last_requests = per_message, last_requests
        self.write, self.requests = write, requests
        self.issued = self.completion = 0
        self.done = False
        self.first_c = NEVER

    @property
    def first(self):
        """The cycle its first response is visible (None before any)."""
        return None if self.first_c == NEVER else self.first_c

    @first.setter
    def first(self, value):
        self.first_c = NEVER if value is None else value


cdef class RefPool:
    """The reference simulator's channel pool, served in C (see the module docstring)."""

    cdef public object kernel, pending_at, free
    cdef object _stats  # the shared statistics, brought up to date when read
    cdef public long long offset, min_latency
    cdef public bint want_first
    cdef Stretches stretches
    cdef long long n, ii
    cdef long long[:] free_v
    cdef long long[:] per_channel
    cdef list active  # bursts with messages to issue, in posting order
    cdef dict queues  # port -> deque of its bursts, in order
    cdef list ports  # the ports with bursts, sorted
    cdef long long reads, writes, served
    cdef object first_cycle
    cdef long long last_cycle

    def __init__(self, kernel, cfg, bint want_first):
        stats = MemoryStats(per_channel=np.zeros(cfg.channels, dtype=np.int64))
        self.kernel, self._stats, self.pending_at = kernel, stats, None
        self.n, self.ii = cfg.channels, cfg.request_interval
        self.min_latency = cfg.startup + cfg.latency + 1  # service start -> visible
        self.want_first = want_first
        self.stretches = Stretches(self.n, self.ii)
        self.free = np.zeros(self.n, dtype=np.int64)  # next free cycle per channel
        self.free_v = self.free
        self.per_channel = stats.per_channel
        self.offset = 0
        self.active, self.queues, self.ports = [], {}, []
        self.reads = self.writes = self.served = 0
        self.first_cycle, self.last_cycle = stats.first_cycle, stats.last_cycle

    def tensor_stagger(self):
        """Placement does not matter to the pool."""
        return 0, 1

    def addresses(self, layout, tref, tile_index, rows, cols):
        """The pool reads no addresses."""
        return None

    # ------------------------------------------------------------ posting
    def issue(self, ctx, port, long long requests, long long per_message, bint write,
              addr=None, bint wait=True):
        cdef long long n_msgs = (requests + per_message - 1) // per_message if requests else 0
        cdef long long last = requests - (n_msgs - 1) * per_message if n_msgs else 0
        cdef long long now = ctx.t
        cdef Burst b = Burst.__new__(Burst)
        b.fill(ctx if wait else None, port, now + 1, n_msgs, per_message, last, write,
               requests, addr)
        if n_msgs == 0:
            self._complete(b, now)
            return b
        self.active.append(b)
        queue = self.queues.get(port)
        if queue is None:
            self.queues[port] = deque((b,))
            insort(self.ports, port)
        else:
            queue.append(b)
        self._schedule(b.next_cycle)
        return b

    cdef void _complete(self, Burst b, long long cycle):
        b.done, b.completion = True, cycle
        if b.waiter is not None:
            self.kernel.at(cycle, 1, b.waiter, cycle)
        if b.watcher is not None:
            self.kernel.watched(b.watcher)

    cdef void _schedule(self, long long cycle):
        if self.pending_at is None or cycle < self.pending_at:
            self.pending_at = cycle
            self.kernel.at(cycle, 2, self)

    cdef void _note(self, long long cycle):
        if self.first_cycle is None or cycle < self.first_cycle:
            self.first_cycle = cycle
        if cycle > self.last_cycle:
            self.last_cycle = cycle

    # ------------------------------------------------------------ serving
    def activate(self, long long t):
        """Serve cycles from `t` until the next event another context could react to."""
        if self.pending_at is None or self.pending_at != t:
            return  # superseded by an earlier activation
        self.pending_at = None
        cdef list active = self.active
        cdef object limit_obj = self.kernel.next_event_time()
        cdef bint has_limit = limit_obj is not None
        cdef long long limit = limit_obj if has_limit else 0
        cdef long long cycle = t, floor, earliest, e, last, lo
        cdef Burst b
        cdef list finished
        cdef Py_ssize_t j
        while active:
            lo = self._next_pickup()
            if lo > cycle:
                cycle = lo
            if has_limit and cycle > limit:
                break
            floor = self.free_v[0]
            for j in range(1, self.n):
                if self.free_v[j] < floor:
                    floor = self.free_v[j]
            floor += self.min_latency
            if has_limit and floor > limit:  # no burst can end before the limit
                last = limit
            else:
                earliest = NEVER
                for j in range(len(active)):
                    b = <Burst>active[j]
                    e = (b.next_cycle if b.next_cycle > cycle else cycle) + b.messages + \
                        self.min_latency
                    if b.completion > e:
                        e = b.completion
                    if e < earliest:
                        earliest = e
                if floor > earliest:
                    earliest = floor
                last = earliest - 1
                if has_limit and limit < last:
                    last = limit
            finished = self._window(cycle, last)
            for j in range(len(finished)):
                b = <Burst>finished[j]
                if b.completion < last:  # a woken operator's next burst would be missed
                    raise SimError(f"internal: the ref memory model completed a burst at "
                                   f"{b.completion}, inside its window ending at {last}")
                self._complete(b, b.completion)
                self._note(b.completion)
                if not has_limit or b.completion < limit:
                    limit, has_limit = b.completion, True
            cycle = last + 1
        if active:
            lo = self._next_pickup()
            self._schedule(cycle if cycle > lo else lo)

    cdef long long _next_pickup(self):
        """The earliest cycle at which a burst still issuing picks up its next message."""
        cdef long long lo = NEVER
        cdef Burst b
        for b in self.active:
            if b.next_cycle < lo:
                lo = b.next_cycle
        return lo

    @property
    def stats(self):
        """The pool's `MemoryStats`, up to date."""
        self._publish()
        return self._stats

    cdef void _publish(self):
        """Bring the shared statistics up to date."""
        st = self._stats
        st.read_requests += self.reads
        st.write_requests += self.writes
        self.reads = self.writes = 0
        st.first_cycle, st.last_cycle = self.first_cycle, self.last_cycle
        if self.served:
            by = st.served_by
            by["native"] = by.get("native", 0) + self.served
            self.served = 0

    cdef list _window(self, long long c0, long long c1):
        """Serve every message picked up in cycles c0..c1: each port issues one message per
        cycle, its bursts back to back, ports in order; request i of a cycle goes to channel
        offset + i(i+1)/2 (mod n), starts at max(arrival, channel free) and is visible
        `min_latency` after it starts. Returns the bursts whose last message went out."""
        cdef Py_ssize_t cap = len(self.active), nk = 0, np_ = 0, k, before
        cdef Window w
        w.start = <long long*>malloc(cap * sizeof(long long))
        w.end = <long long*>malloc(cap * sizeof(long long))
        w.port_end = <Py_ssize_t*>malloc((cap + 1) * sizeof(Py_ssize_t))
        if w.start == NULL or w.end == NULL or w.port_end == NULL:
            release(&w)
            raise MemoryError()
        cdef list picked = []  # bursts of the window, by port, in each port's order
        cdef Burst b, nxt
        cdef long long c, s, e, lo = NEVER, hi = -1
        try:
            for port in list(self.ports):
                queue = self.queues[port]
                c = c0
                before = nk
                while True:
                    b = <Burst>queue[0]
                    s = c if c > b.next_cycle else b.next_cycle
                    if s > c1:
                        break
                    e = s + b.messages - 1
                    picked.append(b)
                    w.start[nk] = s
                    if e > c1:  # it goes on after the window
                        w.end[nk] = c1 + 1
                        nk += 1
                        b.messages = e - c1
                        b.next_cycle = c1 + 1
                        break
                    w.end[nk] = e + 1
                    nk += 1
                    b.messages = 0
                    b.next_cycle = c = e + 1
                    queue.popleft()
                    if queue:  # the port's next burst starts after this one's last message
                        nxt = <Burst>queue[0]
                        if b.next_cycle > nxt.next_cycle:
                            nxt.next_cycle = b.next_cycle
                    else:
                        del self.queues[port]
                        self.ports.remove(port)
                        break
                if nk > before:
                    w.port_end[np_] = nk
                    np_ += 1
            if nk == 0:
                return []
            for k in range(nk):
                if w.start[k] < lo:
                    lo = w.start[k]
                if w.end[k] > hi:
                    hi = w.end[k]
            self._serve(picked, &w, nk, np_, lo, hi)
        finally:
            release(&w)
        self._note(lo)
        self._note(hi - 1)
        cdef list finished = []
        for k in range(nk):
            b = <Burst>picked[k]
            if b.messages == 0:
                self.active.remove(b)
                finished.append(b)
        return finished

    cdef void _serve(self, list picked, Window* w, Py_ssize_t nk, Py_ssize_t np_,
                     long long lo, long long hi) except *:
        """The request loop over cycles lo..hi-1, ports in order within a cycle (a port's
        bursts of the window follow each other in time)."""
        cdef long long* per = <long long*>malloc(nk * sizeof(long long))
        cdef long long* last_count = <long long*>malloc(nk * sizeof(long long))
        cdef long long* latest = <long long*>malloc(nk * sizeof(long long))
        cdef long long* earliest = <long long*>malloc(nk * sizeof(long long))
        cdef long long* served = <long long*>malloc(nk * sizeof(long long))
        cdef Py_ssize_t* cur = <Py_ssize_t*>malloc((np_ + 1) * sizeof(Py_ssize_t))
        cdef Py_ssize_t* live = <Py_ssize_t*>malloc((np_ + 1) * sizeof(Py_ssize_t))
        cdef Py_ssize_t k, p, j, end, n_live = 0
        cdef long long change = lo  # the next cycle at which a port starts or ends a burst
        cdef Burst b
        cdef long long n = self.n, ii = self.ii, lat = self.min_latency
        cdef long long offset = self.offset, c, r, count, ch, t, step, hi_t, lo_t, arrive
        cdef bint single = True  # every live port issues single-request messages
        cdef long long* fp = &self.free_v[0]
        cdef long long* cp = &self.per_channel[0]
        try:
            if per == NULL or last_count == NULL or latest == NULL or earliest == NULL or \
                    served == NULL or cur == NULL or live == NULL:
                raise MemoryError()
            for k in range(nk):
                b = <Burst>picked[k]
                per[k] = b.per_message
                last_count[k] = b.last_requests if b.messages == 0 else -1  # -1: not its last
                latest[k], earliest[k], served[k] = -1, NEVER, 0
            for p in range(np_):
                cur[p] = 0 if p == 0 else w.port_end[p - 1]
            c = lo
            while c < hi:
                if c == change:  # the ports issuing from this cycle on, in port order
                    n_live, change, single = 0, hi, True
                    for p in range(np_):
                        k, end = cur[p], w.port_end[p]
                        while k < end and w.end[k] <= c:
                            k += 1
                        cur[p] = k
                        if k == end:
                            continue
                        if w.start[k] > c:
                            if w.start[k] < change:
                                change = w.start[k]
                            continue
                        live[n_live] = k
                        n_live += 1
                        single = single and per[k] == 1
                        if w.end[k] < change:
                            change = w.end[k]
                if single and n_live and \
                        change - c >= STRETCH_PERIODS * self.stretches.period(n_live):
                    offset = self.stretches.serve(c, change - c, live, n_live, offset, latest,
                                                  earliest, self.want_first, fp, cp)
                    for j in range(n_live):
                        served[live[j]] += change - c
                    c = change
                    continue
                arrive = c + 1
                ch = offset  # (offset + i(i+1)/2) mod n, kept without dividing
                step = 0  # (i + 1) mod n, for the cycle's i-th request
                for j in range(n_live):
                    k = live[j]
                    count = last_count[k] if last_count[k] >= 0 and c == w.end[k] - 1 \
                        else per[k]
                    hi_t, lo_t = latest[k], earliest[k]  # of the requests' starts
                    for r in range(count):
                        t = fp[ch]
                        if t < arrive:
                            t = arrive
                        fp[ch] = t + ii
                        hi_t = t if t > hi_t else hi_t
                        lo_t = t if t < lo_t else lo_t
                        cp[ch] += 1
                        step += 1
                        if step == n:
                            step = 0
                        ch += step
                        if ch >= n:
                            ch -= n
                    latest[k], earliest[k] = hi_t, lo_t
                    served[k] += count
                offset = ch  # the next cycle's offset: L(L+1)/2 on for L requests
                c += 1
            self.offset = offset
            for k in range(nk):
                b = <Burst>picked[k]
                b.issued += served[k]
                self.served += served[k]
                if b.write:
                    self.writes += served[k]
                else:
                    self.reads += served[k]
                if latest[k] + lat > b.completion:
                    b.completion = latest[k] + lat
                if self.want_first and earliest[k] + lat < b.first_c:
                    b.first_c = earliest[k] + lat
        finally:
            cfree(per)
            cfree(last_count)
            cfree(latest)
            cfree(earliest)
            cfree(served)
            cfree(cur)
            cfree(live)
