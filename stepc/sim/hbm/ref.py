"""`ref`: the reference simulator's HBM node, request by request: one message of
`par_dispatch` requests per port per cycle (readers, then writers, in registration order),
the triangular round-robin channel choice, per-channel FIFO service every
`request_interval` cycles, `startup + latency` per request, +1 per hop."""

from __future__ import annotations

import numpy as np

from stepc.hw.config import Hbm
from stepc.sim.hbm.window import WindowedMemory


class RefHbm(WindowedMemory):
    """Exact emulation of the reference simulator's channel-pool HBM node."""

    def __init__(self, kernel, cfg: Hbm):
        super().__init__(kernel, cfg.channels, cfg.arbiter_grants, cfg.outstanding)
        self.cfg = cfg
        self.free = [0] * cfg.channels
        self.offset = 0
        self.min_latency = cfg.startup + cfg.latency + 1  # service start -> visible

    def _serve(self, cycles, burst, request, bursts):
        """Request i of a cycle with offset o goes to channel o + i(i+1)/2 (mod N), the next
        cycle's offset grows by L(L+1)/2 for L requests, and a channel serving requests that
        arrive at a_j starts them at j*II + max(free, cummax(a_l - l*II))."""
        n, ii = self.cfg.channels, self.cfg.request_interval
        _, first, per_cycle = np.unique(cycles, return_index=True, return_counts=True)
        i = np.arange(len(cycles)) - np.repeat(first, per_cycle)  # index within its cycle
        jumps = per_cycle * (per_cycle + 1) // 2
        offsets = (self.offset + np.concatenate(([0], np.cumsum(jumps)[:-1]))) % n
        chan = (np.repeat(offsets, per_cycle) + i * (i + 1) // 2) % n
        self.offset = int((self.offset + int(jumps.sum())) % n)
        arrive = cycles + 1
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
            done[idx] = start + self.min_latency
            self.stats.per_channel[ch] += len(idx)
        return done
