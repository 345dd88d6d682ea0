"""What the memory models share: a burst of requests, statistics, and window-by-window
service for the request-level models (`ref`, `dram`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from stepc.sim.kernel import SimError


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


@dataclass
class Burst:
    ctx: object
    port: tuple[int, int]  # (0 read / 1 write, registration index)
    next_cycle: int  # pickup cycle of its next message
    messages: int  # messages left
    per_message: int
    last_requests: int  # requests in the final message
    write: bool
    requests: int  # in all
    addr: Addresses | None = None
    issued: int = 0  # requests picked up so far
    completion: int = 0


@dataclass
class MemoryStats:
    read_requests: int = 0
    write_requests: int = 0
    first_cycle: int | None = None
    last_cycle: int = 0
    per_channel: list[int] = field(default_factory=list)  # requests served per channel
    row_hits: int = 0  # dram only: requests whose row was open
    row_misses: int = 0  # ... whose bank had no open row
    row_conflicts: int = 0  # ... whose bank had another row open
    refreshes: int = 0

    def note(self, cycle: int) -> None:
        if self.first_cycle is None or cycle < self.first_cycle:
            self.first_cycle = cycle
        if cycle > self.last_cycle:
            self.last_cycle = cycle


class MemoryModel:
    """What every memory model does: turn a memory operation into a burst and schedule its
    own activations on the kernel's event heap."""

    def __init__(self, kernel, channels: int):
        self.kernel = kernel
        self.pending_at: int | None = None  # the cycle of the scheduled activation
        self.stats = MemoryStats(per_channel=[0] * channels)

    def _burst(self, ctx, port, requests: int, per_message: int, write: bool,
               addr: Addresses | None) -> Burst | None:
        """The burst of a memory operation picked up from the next cycle on, or None (and
        `ctx` woken at once) when it has no requests."""
        n_msgs = math.ceil(requests / per_message) if requests else 0
        if n_msgs == 0:
            self.kernel.at(ctx.t, 1, ctx, ctx.t)
            return None
        last = requests - (n_msgs - 1) * per_message
        return Burst(ctx, port, ctx.t + 1, n_msgs, per_message, last, write, requests, addr)

    def _schedule(self, cycle: int) -> None:
        if self.pending_at is None or cycle < self.pending_at:
            self.pending_at = cycle
            self.kernel.at(cycle, 2, self)


class WindowedMemory(MemoryModel):
    """Serves requests window by window: a window ends before the earliest cycle at which
    a burst could complete (a woken loader may post a new burst right after it) or at the
    kernel's next event, so the set of bursts issuing in it is fixed. Subclasses set
    `min_latency` (pickup to visible, a lower bound; or override `_earliest_done`) and
    implement `_serve(requests)`."""

    min_latency = 1

    def __init__(self, kernel, channels: int):
        super().__init__(kernel, channels)
        self.active: list[Burst] = []

    def issue(self, ctx, port, requests: int, per_message: int, write: bool,
              addr: Addresses | None = None) -> None:
        b = self._burst(ctx, port, requests, per_message, write, addr)
        if b is not None:
            self.active.append(b)
            self.active.sort(key=lambda x: x.port)
            self._schedule(b.next_cycle)

    def activate(self, t: int) -> None:
        """Serve cycles from `t` until the next event another context could react to."""
        if self.pending_at != t:
            return  # superseded by an earlier activation
        self.pending_at = None
        stats, active = self.stats, self.active
        limit = self.kernel.next_event_time()
        cycle = t
        while active:
            cycle = max(cycle, min(b.next_cycle for b in active))
            if limit is not None and cycle > limit:
                break
            earliest_done = min(self._earliest_done(b) for b in active)
            last = earliest_done - 1 if limit is None else min(limit, earliest_done - 1)
            for b in self._window(cycle, last):
                if b.completion < last:  # a woken loader's next burst would be missed
                    raise SimError(f"internal: the {type(self).__name__} memory model "
                                   f"completed a burst at {b.completion}, inside its "
                                   f"window ending at {last}")
                active.remove(b)
                self.kernel.at(b.completion, 1, b.ctx, b.completion)
                stats.note(b.completion)
                if limit is None or b.completion < limit:
                    limit = b.completion
            cycle = last + 1
        if active:
            self._schedule(max(cycle, min(b.next_cycle for b in active)))

    def _earliest_done(self, b: Burst) -> int:
        """A lower bound of the cycle at which burst `b` completes."""
        return b.next_cycle + b.messages + self.min_latency

    def _window(self, c0: int, c1: int) -> list[Burst]:
        """Serve every request picked up in cycles c0..c1; return the bursts that ended."""
        cyc, bid, rank, req = [], [], [], []
        issuing = []
        for r, b in enumerate(self.active):
            s = max(c0, b.next_cycle)
            e = min(c1, b.next_cycle + b.messages - 1)
            if e < s:
                continue
            msgs = e - s + 1
            ends = e == b.next_cycle + b.messages - 1
            counts = np.full(msgs, b.per_message, dtype=np.int64)
            if ends:
                counts[-1] = b.last_requests
            n = int(counts.sum())
            cyc.append(np.repeat(np.arange(s, e + 1, dtype=np.int64), counts))
            bid.append(np.full(n, len(issuing), dtype=np.int64))
            rank.append(np.full(n, r, dtype=np.int64))
            req.append(np.arange(b.issued, b.issued + n, dtype=np.int64))
            issuing.append((b, msgs, ends, n))
        if not issuing:
            return []
        cyc_a, bid_a, rank_a = np.concatenate(cyc), np.concatenate(bid), np.concatenate(rank)
        order = np.lexsort((np.arange(len(cyc_a)), rank_a, cyc_a))  # cycle, port, request
        cyc_a, bid_a, req_a = cyc_a[order], bid_a[order], np.concatenate(req)[order]
        bursts = [b for b, *_ in issuing]
        done = self._serve(cyc_a, bid_a, req_a, bursts)
        completion = np.full(len(issuing), -1, dtype=np.int64)
        np.maximum.at(completion, bid_a, done)
        self.stats.note(int(cyc_a[0]))
        self.stats.note(int(cyc_a[-1]))
        finished = []
        for k, (b, msgs, ends, n) in enumerate(issuing):
            b.completion = max(b.completion, int(completion[k]))
            b.messages -= msgs
            b.next_cycle += msgs
            b.issued += n
            if b.write:
                self.stats.write_requests += n
            else:
                self.stats.read_requests += n
            if ends:
                finished.append(b)
        return finished

    def _serve(self, cycles: np.ndarray, burst: np.ndarray, request: np.ndarray,
               bursts: list[Burst]) -> np.ndarray:
        """The visible completion cycle of each request, given its pickup cycle, its burst
        (index into `bursts`) and its number within the burst; in pickup order."""
        raise NotImplementedError
