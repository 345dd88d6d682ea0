"""`fluid`: the channel pool as one bandwidth + latency server, O(1) per burst."""

from __future__ import annotations

import math

from stepc.hw.config import Hbm
from stepc.sim.hbm.table import memory_model
from stepc.sim.hbm.window import Burst, MemoryModel


@memory_model("fluid")
def from_config(kernel, hw) -> FluidHbm:
    return FluidHbm(kernel, hw.hbm)


class FluidHbm(MemoryModel):
    """A fluid FIFO server: bursts offer `par_dispatch` requests per cycle while they issue;
    the pool drains `channels / request_interval` requests per cycle. The backlog W(t) is
    piecewise linear between burst starts and ends, and a burst's last request completes at
    `t_last + 1 + W(t_last) / rate` plus the reference's unloaded latency. O(active bursts)
    per burst start or end; no per-request work."""

    def __init__(self, kernel, cfg: Hbm):
        super().__init__(kernel, 0)
        self.cfg = cfg
        self.rate = cfg.channels / cfg.request_interval
        if cfg.arbiter_grants:  # the arbiter passes at most this many requests per cycle
            self.rate = min(self.rate, cfg.arbiter_grants * cfg.par_dispatch)
        self.backlog = 0.0
        self.offered = 0.0  # requests per cycle offered by the bursts issuing now
        self.clock = 0
        self.waiting: list[Burst] = []  # posted, not started
        self.issuing: list[Burst] = []  # started, last message not yet picked up
        self.port_free: dict[tuple[int, int], int] = {}  # first cycle after a port's bursts

    def issue(self, ctx, port, requests: int, per_message: int, write: bool,
              addr=None, wait: bool = True) -> Burst:
        b = self._burst(ctx, port, requests, per_message, write, addr, wait)
        if not b.done:  # a port issues its bursts one after another
            b.next_cycle = max(b.next_cycle, self.port_free.get(port, 0))
            self.port_free[port] = b.next_cycle + b.messages
            self.waiting.append(b)
            self._schedule(b.next_cycle)
        return b

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
            b.first = t + 1 + math.ceil(self.backlog / self.rate) + self.cfg.startup + \
                self.cfg.latency + 1
            self.issuing.append(b)
            self.offered += b.requests / b.messages
            self.stats.note(t)
        for b in [b for b in self.issuing if b.completion == t]:
            self.issuing.remove(b)
            self.offered -= b.requests / b.messages
            done = t + 1 + math.ceil(self.backlog / self.rate) + cfg.startup + cfg.latency + 1
            if b.write:
                self.stats.write_requests += b.requests
            else:
                self.stats.read_requests += b.requests
            self.stats.note(done)
            self._complete(b, done)
        events = [b.next_cycle for b in self.waiting] + [b.completion for b in self.issuing]
        if events:
            self._schedule(min(events))
