"""Off-chip memory models behind one interface: `issue(ctx, port, messages, per_message,
write)` takes a tile's burst of requests and wakes `ctx` at the cycle its last response
is visible.

- `ref`: the reference simulator's HBM node, request by request: one message of
  `par_dispatch` requests per port per cycle (readers, then writers, in registration order),
  the triangular round-robin channel choice, per-channel FIFO service every
  `request_interval` cycles, `startup + latency` per request, +1 per hop.
- `fluid`: a bandwidth + latency server, O(1) per burst: requests are served FIFO at
  `channels / request_interval` per cycle after the same unloaded latency.

Both process time in order: a memory model runs from the kernel's event heap only when no
other context can run, so every burst that could start at a cycle is known before that
cycle is served.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from stepc.hw.config import Hbm


@dataclass
class Burst:
    ctx: object
    port: tuple[int, int]  # (0 read / 1 write, registration index)
    next_cycle: int  # pickup cycle of its next message
    messages: int  # messages left
    per_message: int
    last_requests: int  # requests in the final message
    write: bool
    completion: int = 0


@dataclass
class MemoryStats:
    read_requests: int = 0
    write_requests: int = 0
    first_cycle: int | None = None
    last_cycle: int = 0
    per_channel: list[int] = field(default_factory=list)

    def note(self, cycle: int) -> None:
        if self.first_cycle is None or cycle < self.first_cycle:
            self.first_cycle = cycle
        if cycle > self.last_cycle:
            self.last_cycle = cycle


class RefHbm:
    """Exact emulation of the reference simulator's channel-pool HBM node."""

    def __init__(self, kernel, cfg: Hbm):
        self.kernel, self.cfg = kernel, cfg
        self.free = [0] * cfg.channels
        self.offset = 0
        self.active: list[Burst] = []
        self.pending_at: int | None = None  # the cycle of the scheduled activation
        self.stats = MemoryStats(per_channel=[0] * cfg.channels)

    def issue(self, ctx, port, messages: int, per_message: int, write: bool) -> None:
        requests = messages
        n_msgs = math.ceil(requests / per_message) if requests else 0
        if n_msgs == 0:
            self.kernel.at(ctx.t, 1, ctx, ctx.t)
            return
        last = requests - (n_msgs - 1) * per_message
        b = Burst(ctx, port, ctx.t + 1, n_msgs, per_message, last, write)
        self.active.append(b)
        self.active.sort(key=lambda x: x.port)
        self._schedule(b.next_cycle)

    def _schedule(self, cycle: int) -> None:
        if self.pending_at is None or cycle < self.pending_at:
            self.pending_at = cycle
            self.kernel.at(cycle, 2, self)

    def activate(self, t: int) -> None:
        """Serve cycles from `t` until the next event another context could react to."""
        if self.pending_at != t:
            return  # superseded by an earlier activation
        self.pending_at = None
        cfg, free, stats = self.cfg, self.free, self.stats
        n, ii = cfg.channels, cfg.request_interval
        extra = cfg.startup + cfg.latency + 1  # service start -> visible at the loader
        per_channel = stats.per_channel
        limit = self.kernel.next_event_time()
        active = self.active
        cycle = max(t, min(b.next_cycle for b in active)) if active else t
        while active:
            if limit is not None and cycle > limit:
                break
            o, count = self.offset, 0
            arrive = cycle + 1
            finished = None
            for b in active:
                if b.next_cycle != cycle:
                    continue
                k = b.last_requests if b.messages == 1 else b.per_message
                latest = b.completion
                for _ in range(k):
                    o = (o + count) % n
                    count += 1
                    f = free[o]
                    start = f if f > arrive else arrive
                    free[o] = start + ii
                    per_channel[o] += 1
                    if start + extra > latest:
                        latest = start + extra
                b.completion = latest
                if b.write:
                    stats.write_requests += k
                else:
                    stats.read_requests += k
                b.messages -= 1
                b.next_cycle = arrive
                if b.messages == 0:
                    finished = finished or []
                    finished.append(b)
            if count:
                self.offset = (o + count) % n
                stats.note(cycle)
            if finished:
                for b in finished:
                    active.remove(b)
                    self.kernel.at(b.completion, 1, b.ctx, b.completion)
                    stats.note(b.completion)
                    if limit is None or b.completion < limit:
                        limit = b.completion
                if not active:
                    break
            cycle += 1
            if count == 0:  # nothing issued this cycle: jump to the next pickup
                cycle = max(cycle, min(b.next_cycle for b in active))
        if active:
            self._schedule(max(cycle, min(b.next_cycle for b in active)))


class FluidHbm:
    """A fluid FIFO server: bursts offer `par_dispatch` requests per cycle while they issue;
    the pool drains `channels / request_interval` requests per cycle. The backlog W(t) is
    piecewise linear between burst starts and ends, and a burst's last request completes at
    `t_last + 1 + W(t_last) / rate` plus the reference's unloaded latency. O(active bursts)
    per burst start or end; no per-request work."""

    def __init__(self, kernel, cfg: Hbm):
        self.kernel, self.cfg = kernel, cfg
        self.rate = cfg.channels / cfg.request_interval
        self.backlog = 0.0
        self.offered = 0.0  # requests per cycle offered by the bursts issuing now
        self.clock = 0
        self.waiting: list[Burst] = []  # posted, not started
        self.issuing: list[Burst] = []  # started, last message not yet picked up
        self.pending_at: int | None = None
        self.stats = MemoryStats()

    def issue(self, ctx, port, messages: int, per_message: int, write: bool) -> None:
        requests = messages
        if requests == 0:
            self.kernel.at(ctx.t, 1, ctx, ctx.t)
            return
        n_msgs = math.ceil(requests / per_message)
        b = Burst(ctx, port, ctx.t + 1, n_msgs, per_message, requests, write)
        self.waiting.append(b)
        self._schedule(b.next_cycle)

    def _schedule(self, cycle: int) -> None:
        if self.pending_at is None or cycle < self.pending_at:
            self.pending_at = cycle
            self.kernel.at(cycle, 2, self)

    def _advance(self, t: int) -> None:
        if t > self.clock:
            self.backlog = max(0.0, self.backlog + (self.offered - self.rate) * (t - self.clock))
            self.clock = t

    def activate(self, t: int) -> None:
        if self.pending_at != t:
            return
        self.pending_at = None
        cfg = self.cfg
        self._advance(t)
        for b in [b for b in self.waiting if b.next_cycle == t]:
            self.waiting.remove(b)
            b.completion = t + b.messages - 1  # pickup cycle of its last message
            self.issuing.append(b)
            self.offered += b.last_requests / b.messages
            self.stats.note(t)
        for b in [b for b in self.issuing if b.completion == t]:
            self.issuing.remove(b)
            self.offered -= b.last_requests / b.messages
            done = t + 1 + math.ceil(self.backlog / self.rate) + cfg.startup + cfg.latency + 1
            if b.write:
                self.stats.write_requests += b.last_requests
            else:
                self.stats.read_requests += b.last_requests
            self.stats.note(done)
            self.kernel.at(done, 1, b.ctx, done)
        events = [b.next_cycle for b in self.waiting] + [b.completion for b in self.issuing]
        if events:
            self._schedule(min(events))


def make_memory(kernel, cfg: Hbm):
    if cfg.model == "fluid":
        return FluidHbm(kernel, cfg)
    return RefHbm(kernel, cfg)
