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

import numpy as np

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
        """Serve cycles from `t` until the next event another context could react to.

        Works window by window with numpy: a window ends before the earliest cycle at which
        a burst could complete (a woken loader may post a new burst right after it) or
        the next kernel event, so the set of bursts issuing in it is fixed. Within it the
        reference's rules become array arithmetic: request i of a cycle with offset o goes
        to channel o + i(i+1)/2 (mod N), the next cycle's offset grows by L(L+1)/2 for L
        requests, and a channel serving requests that arrive at a_j starts them at
        j*II + max(free, cummax(a_l - l*II))."""
        if self.pending_at != t:
            return  # superseded by an earlier activation
        self.pending_at = None
        cfg, stats, active = self.cfg, self.stats, self.active
        n, ii = cfg.channels, cfg.request_interval
        extra = cfg.startup + cfg.latency + 1  # service start -> visible at the loader
        limit = self.kernel.next_event_time()
        cycle = t
        while active:
            cycle = max(cycle, min(b.next_cycle for b in active))
            if limit is not None and cycle > limit:
                break
            earliest_done = min(b.next_cycle + b.messages for b in active) + extra
            last = earliest_done - 1 if limit is None else min(limit, earliest_done - 1)
            finished = self._serve(cycle, last, n, ii, extra, stats)
            for b in finished:
                active.remove(b)
                self.kernel.at(b.completion, 1, b.ctx, b.completion)
                stats.note(b.completion)
                if limit is None or b.completion < limit:
                    limit = b.completion
            cycle = last + 1
        if active:
            self._schedule(max(cycle, min(b.next_cycle for b in active)))

    def _serve(self, c0: int, c1: int, n: int, ii: int, extra: int, stats) -> list[Burst]:
        """Serve every request picked up in cycles c0..c1; return the bursts that ended."""
        cyc, bid, rank = [], [], []
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
            cyc.append(np.repeat(np.arange(s, e + 1, dtype=np.int64), counts))
            bid.append(np.full(int(counts.sum()), len(issuing), dtype=np.int64))
            rank.append(np.full(int(counts.sum()), r, dtype=np.int64))
            issuing.append((b, msgs, ends, int(counts.sum())))
        if not issuing:
            return []
        cyc_a, bid_a, rank_a = np.concatenate(cyc), np.concatenate(bid), np.concatenate(rank)
        order = np.lexsort((np.arange(len(cyc_a)), rank_a, cyc_a))  # cycle, port, request
        cyc_a, bid_a = cyc_a[order], bid_a[order]
        cycles, first, per_cycle = np.unique(cyc_a, return_index=True, return_counts=True)
        i = np.arange(len(cyc_a)) - np.repeat(first, per_cycle)  # index within its cycle
        jumps = per_cycle * (per_cycle + 1) // 2
        offsets = (self.offset + np.concatenate(([0], np.cumsum(jumps)[:-1]))) % n
        chan = (np.repeat(offsets, per_cycle) + i * (i + 1) // 2) % n
        self.offset = int((self.offset + int(jumps.sum())) % n)
        arrive = cyc_a + 1
        done = np.empty_like(arrive)
        by_chan = np.argsort(chan, kind="stable")
        bounds = np.searchsorted(chan[by_chan], np.arange(n + 1))
        for ch in range(n):
            idx = by_chan[bounds[ch]:bounds[ch + 1]]
            if not len(idx):
                continue
            j = np.arange(len(idx), dtype=np.int64)
            base = np.maximum.accumulate(arrive[idx] - j * ii)
            start = j * ii + np.maximum(base, self.free[ch])
            self.free[ch] = int(start[-1]) + ii
            done[idx] = start + extra
            stats.per_channel[ch] += len(idx)
        completion = np.full(len(issuing), -1, dtype=np.int64)
        np.maximum.at(completion, bid_a, done)
        stats.note(int(cycles[0]))
        stats.note(int(cycles[-1]))
        finished = []
        for k, (b, msgs, ends, reqs) in enumerate(issuing):
            b.completion = max(b.completion, int(completion[k]))
            b.messages -= msgs
            b.next_cycle += msgs
            if b.write:
                stats.write_requests += reqs
            else:
                stats.read_requests += reqs
            if ends:
                finished.append(b)
        return finished


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
