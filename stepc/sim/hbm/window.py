"""What the memory models share: a burst of requests, statistics, and window-by-window
service for the request-level models (`ref`, `dram`).

A memory operator posts one burst per tile on its port. A port issues its bursts in order,
one message of `par_dispatch` requests per cycle. Without an arbiter every port issues in
every cycle (the reference's HBM node collects one message from each port per cycle); with
`hbm.arbiter_grants = G` a round-robin arbiter grants G ports per cycle, as the HDL's
memory ports share one arbiter in front of the memory controller.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from stepc.sim.kernel import SimError


def tiled_shape(shape: tuple[int, ...], tile: list[int]) -> tuple[int, ...]:
    """The shape of a tensor's grid of `tile` (rows, cols) tiles."""
    return tuple(shape[:-2]) + (shape[-2] // tile[0], shape[-1] // tile[1])


@dataclass(frozen=True)
class Addresses:
    """Byte addresses of a burst's requests: request k of a burst reads or writes
    `base + (k // per_row) * row_stride + (k % per_row) * request_bytes` (tile rows inside
    a tensor)."""

    base: int
    row_stride: int
    per_row: int

    def at(self, k: int, request_bytes: int) -> int:
        """The byte address of request `k`."""
        return self.base + (k // self.per_row) * self.row_stride + \
            (k % self.per_row) * request_bytes


@dataclass(eq=False)
class Burst:
    """The requests of one tile, posted on a port at `ready - 1`."""

    waiter: object  # the context to wake at completion (None: it will AWAIT the burst)
    port: tuple[int, int]  # (0 read / 1 write, registration index)
    next_cycle: int  # earliest pickup cycle of its next message
    messages: int  # messages left
    per_message: int
    last_requests: int  # requests in the final message
    write: bool
    requests: int  # in all
    addr: Addresses | None = None
    issued: int = 0  # requests picked up so far
    completion: int = 0  # cycle its last response is visible (once done)
    first: int | None = None  # cycle its first response is visible
    done: bool = False
    watcher: object = None  # a context waiting on it or on a channel, whichever first


# the cycles at which each burst's messages are picked up in a window (a range when they
# are consecutive), bursts in port order
Pickups = list[tuple[Burst, np.ndarray | range]]


@dataclass(slots=True)
class _PortState:
    """A port while a window is arbitrated: its bursts, the head's index, the head's
    messages left, the cycle it may next issue at and (under `outstanding`) the requests it
    picked up in this window."""

    bursts: list[Burst]
    head: int
    left: int
    ready: int
    picked: int = 0


@dataclass
class MemoryStats:
    read_requests: int = 0
    write_requests: int = 0
    first_cycle: int | None = None
    last_cycle: int = 0
    per_channel: np.ndarray = field(  # requests served per channel
        default_factory=lambda: np.zeros(0, dtype=np.int64))
    row_hits: int = 0  # dram only: requests whose row was open
    row_misses: int = 0  # ... whose bank had no open row
    row_conflicts: int = 0  # ... whose bank had another row open
    refreshes: int = 0
    served_by: dict[str, int] = field(default_factory=dict)  # ref only: requests per path

    def note(self, cycle: int) -> None:
        if self.first_cycle is None or cycle < self.first_cycle:
            self.first_cycle = cycle
        if cycle > self.last_cycle:
            self.last_cycle = cycle


class MemoryModel:
    """What every memory model does: turn a memory operation into a burst, complete it,
    and schedule its own activations on the kernel's event heap."""

    def __init__(self, kernel, channels: int):
        self.kernel = kernel
        self.pending_at: int | None = None  # the cycle of the scheduled activation
        self.stats = MemoryStats(per_channel=np.zeros(channels, dtype=np.int64))

    def tensor_stagger(self) -> tuple[int, int]:
        """(bytes between consecutive banks, banks) when tensor k should start in bank k
        (mod the banks); (0, 1) when placement does not matter to the model."""
        return 0, 1

    def addresses(self, layout: dict[str, tuple], tref, tile_index: int, rows: int,
                  cols: int) -> Addresses | None:
        """Where tile `tile_index` (row-major over the tiled view `tref`) lives, given each
        tensor's (byte address, shape) in `layout`; None for a model that reads no
        addresses."""
        return None

    def _burst(self, ctx, port, requests: int, per_message: int, write: bool,
               addr: Addresses | None, wait: bool) -> Burst:
        """The burst of a memory operation posted at `ctx.t`; one without requests is
        complete at once."""
        n_msgs = math.ceil(requests / per_message) if requests else 0
        last = requests - (n_msgs - 1) * per_message if n_msgs else 0
        b = Burst(ctx if wait else None, port, ctx.t + 1, n_msgs, per_message, last, write,
                  requests, addr)
        if n_msgs == 0:
            self._complete(b, ctx.t)
        return b

    def _complete(self, b: Burst, cycle: int) -> None:
        """Burst `b`'s last response is visible at `cycle`: wake whoever waits on it."""
        b.done, b.completion = True, cycle
        if b.waiter is not None:
            self.kernel.at(cycle, 1, b.waiter, cycle)
        if b.watcher is not None:
            self.kernel.watched(b.watcher)

    def _schedule(self, cycle: int) -> None:
        if self.pending_at is None or cycle < self.pending_at:
            self.pending_at = cycle
            self.kernel.at(cycle, 2, self)


class WindowedMemory(MemoryModel):
    """Serves requests window by window: a window ends before the earliest cycle at which
    a burst could complete (a woken operator may post a new burst right after it) or at the
    kernel's next event, so the set of bursts issuing in it is fixed. Subclasses set
    `min_latency` (pickup to visible, a lower bound; or override `_earliest_done`) and
    implement `_serve(requests)`."""

    min_latency = 1

    def __init__(self, kernel, channels: int, arbiter_grants: int = 0, outstanding: int = 0):
        super().__init__(kernel, channels)
        self.active: list[Burst] = []  # bursts with messages to issue, in posting order
        self.queues: dict[tuple[int, int], deque[Burst]] = {}  # per issuing port, in order
        self.grants = arbiter_grants  # ports granted per cycle (0: every port, every cycle)
        self.last_granted: tuple[int, int] | None = None  # the arbiter's round-robin pointer
        self.outstanding = outstanding  # requests a port may have in flight (0: no limit)
        self.in_flight: dict[tuple[int, int], list[int]] = {}  # port -> completions, sorted

    def issue(self, ctx, port, requests: int, per_message: int, write: bool,
              addr: Addresses | None = None, wait: bool = True) -> Burst:
        b = self._burst(ctx, port, requests, per_message, write, addr, wait)
        if not b.done:
            self.active.append(b)
            self.queues.setdefault(port, deque()).append(b)
            self._schedule(b.next_cycle)
        return b

    def activate(self, t: int) -> None:
        """Serve cycles from `t` until the next event another context could react to."""
        if self.pending_at != t:
            return  # superseded by an earlier activation
        self.pending_at = None
        active = self.active
        limit = self.kernel.next_event_time()
        cycle = t
        while active:
            cycle = max(cycle, min(b.next_cycle for b in active))
            if limit is not None and cycle > limit:
                break
            floor = self._done_floor()
            if limit is not None and floor > limit:  # no burst can end before the limit
                last = limit
            else:
                earliest_done = max(floor, min(self._earliest_done(b, cycle) for b in active))
                last = earliest_done - 1 if limit is None else min(limit, earliest_done - 1)
            finished, last = self._window(cycle, last)
            for b in finished:
                if b.completion < last:  # a woken operator's next burst would be missed
                    raise SimError(f"internal: the {type(self).__name__} memory model "
                                   f"completed a burst at {b.completion}, inside its "
                                   f"window ending at {last}")
                self._complete(b, b.completion)
                self.stats.note(b.completion)
                if limit is None or b.completion < limit:
                    limit = b.completion
            cycle = last + 1
        if active:
            self._schedule(max(cycle, min(b.next_cycle for b in active)))

    def _done_floor(self) -> int:
        """A lower bound of the cycle at which any burst still issuing completes."""
        return 0

    def _earliest_done(self, b: Burst, cycle: int) -> int:
        """A lower bound of the cycle at which burst `b` completes, serving from `cycle`."""
        return max(b.next_cycle, cycle) + b.messages + self.min_latency

    # ------------------------------------------------------------ issuing
    def _pickups(self, c0: int, c1: int) -> tuple[Pickups, int]:
        """The pickup cycles, within c0..c1 (or an earlier end it returns), of each
        burst's messages, in port order; advances the bursts and the port queues."""
        picked: Pickups
        if self.outstanding:
            picked, c1 = self._limited(c0, c1)
        elif self.grants:
            picked = self._arbitrate(c0, c1)
        else:
            return self._every_port(c0, c1), c1
        for b, cyc in picked:
            b.messages -= len(cyc)
            b.next_cycle = int(cyc[-1]) + 1
            if b.messages == 0:
                self._next_in_queue(b)
        picked.sort(key=lambda p: p[0].port)  # the servers order by cycle, then port
        return picked, c1

    def _next_in_queue(self, b: Burst) -> None:
        """Burst `b` has issued its last message: its port moves on to the next burst."""
        queue = self.queues[b.port]
        queue.popleft()
        if queue:  # the port's next burst starts after this one's last message
            queue[0].next_cycle = max(queue[0].next_cycle, b.next_cycle)
        else:  # only ports with bursts to issue are walked
            del self.queues[b.port]

    def _every_port(self, c0: int, c1: int) -> Pickups:
        """No arbiter: each port issues one message per cycle, its bursts back to back
        (ports in order; advances the bursts and the port queues as it goes)."""
        out: Pickups = []
        for port in sorted(self.queues):
            queue = self.queues[port]
            c = c0
            while True:
                b = queue[0]
                s = c if c > b.next_cycle else b.next_cycle
                if s > c1:
                    break
                e = s + b.messages - 1
                if e > c1:  # it goes on after the window
                    out.append((b, range(s, c1 + 1)))
                    b.messages = e - c1
                    b.next_cycle = c1 + 1
                    break
                out.append((b, range(s, e + 1)))
                b.messages = 0
                b.next_cycle = c = e + 1
                self._next_in_queue(b)
                if port not in self.queues:
                    break
        return out

    def _arbitrate(self, c0: int, c1: int) -> Pickups:
        """A round-robin arbiter granting `grants` ports (one message each) per cycle,
        in closed form between the cycles at which a port starts or ends a burst: with k
        ports waiting and g = min(grants, k) grants per cycle, the s-th grant goes to the
        (s mod k)-th waiting port after the last one granted, in cycle c + s // g."""
        state = {p: _PortState(list(q), 0, q[0].messages, q[0].next_cycle)
                 for p, q in self.queues.items() if q}
        picked: dict[int, tuple[Burst, list[np.ndarray]]] = {}
        c = c0
        while c <= c1 and state:
            waiting = sorted(p for p, st in state.items() if st.ready <= c)
            future = min((st.ready for st in state.values() if st.ready > c), default=c1 + 1)
            if not waiting:
                c = future
                continue
            if self.last_granted is not None:  # start after the last granted port
                k0 = next((i for i, p in enumerate(waiting) if p > self.last_granted), 0)
                waiting = waiting[k0:] + waiting[:k0]
            k = len(waiting)
            g = min(self.grants, k)
            end = min(c + (j + k * (state[p].left - 1)) // g for j, p in enumerate(waiting))
            end = min(end, c1, future - 1)
            slots = (end - c + 1) * g
            for j, p in enumerate(waiting[:slots]):
                st = state[p]
                b = st.bursts[st.head]
                cyc = c + (j + k * np.arange((slots - 1 - j) // k + 1, dtype=np.int64)) // g
                picked.setdefault(id(b), (b, []))[1].append(cyc)
                st.left -= len(cyc)
                if st.left == 0:  # the port moves on to its next burst, if any
                    st.head += 1
                    if st.head == len(st.bursts):
                        del state[p]
                    else:
                        nxt = st.bursts[st.head]
                        st.left, st.ready = nxt.messages, max(nxt.next_cycle, int(cyc[-1]) + 1)
            self.last_granted = waiting[(slots - 1) % k]
            c = end + 1
        return [(b, np.concatenate(parts)) for b, parts in picked.values()]

    def _limited(self, c0: int, c1: int) -> tuple[Pickups, int]:
        """Cycle by cycle: a port may issue a message only while its requests in flight
        stay within `outstanding`; the arbiter (if any) grants round robin among them.
        Only requests picked up before the window free slots in it, which is exact until a
        port is refused at a cycle that a request of this window may already have returned
        by (`min_latency` after the window's start): the window ends before that cycle."""
        state = {p: _PortState(list(q), 0, q[0].messages, q[0].next_cycle)
                 for p, q in self.queues.items() if q}
        order = sorted(state)
        picked: dict[int, tuple[Burst, list[int]]] = {}
        exact_until = c0 + self.min_latency - 1
        for c in range(c0, c1 + 1):
            ready, refused = [], False
            for p in order:
                st = state.get(p)
                if st is None or st.ready > c:
                    continue
                b = st.bursts[st.head]
                size = b.last_requests if st.left == 1 else b.per_message
                done = self.in_flight.get(p, ())
                busy = len(done) - bisect_right(done, c) + st.picked
                if busy + size <= self.outstanding:
                    ready.append(p)
                else:
                    refused = True
            if refused and c > exact_until:
                c1 = c - 1
                break
            if not ready:
                continue
            if self.grants:  # round robin from the port after the last one granted
                k0 = 0 if self.last_granted is None else \
                    next((i for i, p in enumerate(ready) if p > self.last_granted), 0)
                ready = (ready[k0:] + ready[:k0])[:self.grants]
                self.last_granted = ready[-1]
            for p in ready:
                st = state[p]
                b = st.bursts[st.head]
                st.picked += b.last_requests if st.left == 1 else b.per_message
                picked.setdefault(id(b), (b, []))[1].append(c)
                st.left -= 1
                if st.left == 0:
                    st.head += 1
                    if st.head == len(st.bursts):
                        del state[p]
                        order.remove(p)
                    else:
                        nxt = st.bursts[st.head]
                        st.left, st.ready = nxt.messages, max(nxt.next_cycle, c + 1)
            if not state:
                break
        return [(b, np.array(cyc, dtype=np.int64)) for b, cyc in picked.values()], c1

    def _track(self, bursts: list[Burst], burst: np.ndarray, done: np.ndarray,
               now: int) -> None:
        """Remember when each port's requests of this window return (for `outstanding`);
        forget those already back by cycle `now`."""
        for k, b in enumerate(bursts):
            back = done[burst == k]
            old = self.in_flight.get(b.port, [])
            merged = sorted(old[bisect_right(old, now):] + back.tolist())
            self.in_flight[b.port] = merged

    # ------------------------------------------------------------ serving
    def _window(self, c0: int, c1: int) -> tuple[list[Burst], int]:
        """Serve every request picked up in cycles c0..c1 (or up to an earlier end);
        return the bursts that ended and the window's last cycle."""
        picked, c1 = self._pickups(c0, c1)
        if not picked:
            return [], c1
        bursts = [b for b, _ in picked]
        ended = [b.messages == 0 for b in bursts]
        n_req, completion, first = self._requests(picked, ended, c1)
        finished = []
        reads = writes = 0
        for i, b in enumerate(bursts):
            n = int(n_req[i])
            b.issued += n
            if b.write:
                writes += n
            else:
                reads += n
            done = int(completion[i])
            if done > b.completion:
                b.completion = done
            if first is not None:
                b.first = int(first[i]) if b.first is None else min(b.first, int(first[i]))
            if ended[i]:
                self.active.remove(b)
                finished.append(b)
        self.stats.read_requests += reads
        self.stats.write_requests += writes
        return finished, c1

    def _requests(self, picked, ended, c1: int):
        """Serve the requests of the picked messages (bursts in port order): per burst, the
        requests served, its latest completion and its earliest one. All in numpy: a
        window costs a few array operations, whatever the number of bursts."""
        bursts = [b for b, _ in picked]
        k = len(bursts)
        n_msgs = np.fromiter((len(c) for _, c in picked), np.int64, k)
        msg_end = np.cumsum(n_msgs)
        msg_start = msg_end - n_msgs
        if all(type(c) is range for _, c in picked):  # consecutive cycles: no arrays yet
            first_cycle = np.fromiter((c.start for _, c in picked), np.int64, k)
            msg_cycle = np.arange(int(msg_end[-1]), dtype=np.int64) + \
                np.repeat(first_cycle - msg_start, n_msgs)
        else:
            msg_cycle = np.concatenate([np.asarray(c, dtype=np.int64) for _, c in picked])
        per_msg = np.repeat(np.fromiter((b.per_message for b in bursts), np.int64, k), n_msgs)
        ended = np.array(ended, dtype=bool)
        per_msg[(msg_end - 1)[ended]] = np.fromiter(
            (b.last_requests for b in bursts), np.int64, k)[ended]
        n_req = np.add.reduceat(per_msg, msg_start)
        req_end = np.cumsum(n_req)
        req_start = req_end - n_req
        cyc = np.repeat(msg_cycle, per_msg)
        issued = np.fromiter((b.issued for b in bursts), np.int64, k)
        req = np.arange(len(cyc), dtype=np.int64) - np.repeat(req_start - issued, n_req)
        low = int(cyc.min())
        key = (cyc - low).astype(np.uint16) if int(cyc.max()) - low < 1 << 16 else cyc
        order = np.argsort(key, kind="stable")  # by cycle, then port, then request
        bid = np.repeat(np.arange(k, dtype=np.int64), n_req)[order]
        done_sorted = self._serve(cyc[order], bid, req[order], bursts)
        done = np.empty_like(done_sorted)
        done[order] = done_sorted  # back in burst order
        if self.outstanding:
            self._track(bursts, bid, done_sorted, c1)
        self.stats.note(low)
        self.stats.note(int(cyc.max()))
        return n_req, np.maximum.reduceat(done, req_start), np.minimum.reduceat(done, req_start)

    def _serve(self, cycles: np.ndarray, burst: np.ndarray, request: np.ndarray,
               bursts: list[Burst]) -> np.ndarray:
        """The visible completion cycle of each request, given its pickup cycle, its burst
        (index into `bursts`) and its number within the burst; in pickup order."""
        raise NotImplementedError
