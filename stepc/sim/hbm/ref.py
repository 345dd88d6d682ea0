"""`ref`: the reference simulator's HBM node, exactly: one message of `par_dispatch`
requests per port per cycle (readers, then writers, in registration order), the
triangular round-robin channel choice, per-channel FIFO service every `request_interval`
cycles, `startup + latency` per request, +1 per hop. Served in closed form per stretch of
constant ports where each message is one request (`ref_periodic.py`), else request by
request."""

from __future__ import annotations

import numpy as np

from stepc.hw.config import Hbm
from stepc.sim.hbm.ref_in_order import serve_in_order
from stepc.sim.hbm.ref_periodic import serve_periodic
from stepc.sim.hbm.ref_serve import serve_window
from stepc.sim.hbm.window import WindowedMemory


def _load_compiled():
    """numba's compiled `serve_ranges`, or False when numba is not installed."""
    try:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. a read-only cache directory
            from stepc.sim.hbm.ref_compiled import serve_ranges_compiled
    except ImportError:
        return False
    return serve_ranges_compiled


# Requests served request by request before trying numba: loading it costs about 0.75 s
# (and ~120 MiB) against ~35 ns a request saved over numpy, so it repays after ~20 M.
COMPILE_AFTER = 20_000_000
PYTHON_BELOW = 1_000  # requests of a window below which a Python loop beats numpy


class RefHbm(WindowedMemory):
    """Exact emulation of the reference simulator's channel-pool HBM node."""

    def __init__(self, kernel, cfg: Hbm, want_first: bool = True):
        super().__init__(kernel, cfg.channels, cfg.arbiter_grants, cfg.outstanding)
        self.cfg = cfg
        self.want_first = want_first  # track each burst's first response (streamed tiles)
        self.free = np.zeros(cfg.channels, dtype=np.int64)  # next free cycle per channel
        self.offset = 0
        self.min_latency = cfg.startup + cfg.latency + 1  # service start -> visible
        self.compiled = None  # numba's serve_ranges, once loaded (False: not installed)
        self.served = 0

    def _requests(self, picked, ended, c1: int):
        """Windows whose ports each issue one message per cycle (no arbiter, no credit
        limit), at most one request per channel in a cycle: in closed form; otherwise
        request by request, compiled by numba once a long run has loaded it (when installed), in
        Python while small, else in numpy in pickup order. Other windows in numpy. All
        give the same cycles."""
        if not self.grants and not self.outstanding and \
                all(type(c) is range for _, c in picked):
            served = serve_periodic(self, picked, ended)
            if served is not None:
                return served
            if self.compiled is None and self.served > COMPILE_AFTER:
                self.compiled = _load_compiled()
            size = sum(len(c) * b.per_message for b, c in picked)
            self.served += size
            if self.compiled or size < PYTHON_BELOW:
                return serve_window(self, picked, ended, self.compiled or None)
            return serve_in_order(self, picked, ended)
        n_req, completion, first = super()._requests(picked, ended, c1)
        self.served += int(n_req.sum())
        return n_req, completion, first

    def _done_floor(self) -> int:
        """No request starts before the first channel frees up."""
        return int(np.minimum.reduce(self.free)) + self.min_latency

    def _earliest_done(self, b, cycle: int) -> int:
        """Besides the pickups still to come: a burst ends no earlier than the responses
        it already has."""
        return max(super()._earliest_done(b, cycle), b.completion)

    def _serve(self, cycles, burst, request, bursts):
        """Request i of a cycle with offset o goes to channel o + i(i+1)/2 (mod N), the next
        cycle's offset grows by L(L+1)/2 for L requests, and a channel serving requests that
        arrive at a_j starts them at j*II + max(free, cummax(a_l - l*II)). Vectorised over
        all channels: a stable radix sort groups the requests by channel, and one running
        maximum, offset per channel, serves every channel's queue."""
        n, ii = self.cfg.channels, self.cfg.request_interval
        total = len(cycles)
        new = np.empty(total, dtype=bool)
        new[0] = True
        np.not_equal(cycles[1:], cycles[:-1], out=new[1:])
        first = np.flatnonzero(new)
        per_cycle = np.diff(np.append(first, total))
        i = np.arange(total, dtype=np.int64) - np.repeat(first, per_cycle)
        jumps = per_cycle * (per_cycle + 1) // 2
        offsets = (self.offset + np.cumsum(jumps) - jumps) % n
        chan = (np.repeat(offsets, per_cycle) + i * (i + 1) // 2) % n
        self.offset = int((self.offset + int(jumps.sum())) % n)
        by_chan = np.argsort(chan.astype(np.uint16) if n <= 1 << 16 else chan, kind="stable")
        ch = chan[by_chan]
        counts = np.bincount(chan, minlength=n)
        starts = np.cumsum(counts) - counts
        j = np.arange(total, dtype=np.int64) - np.repeat(starts, counts)
        base = cycles[by_chan] + 1 - j * ii  # arrival minus the queue ahead of it
        lift = ch * (int(base.max()) - int(base.min()) + 1)  # keeps channels apart
        ahead = np.maximum.accumulate(base + lift) - lift
        free = self.free
        start = j * ii + np.maximum(ahead, free[ch])
        done = np.empty(total, dtype=np.int64)
        done[by_chan] = start + self.min_latency
        busy = np.flatnonzero(counts)
        free[busy] = start[(starts + counts - 1)[busy]] + ii
        self.stats.per_channel += counts
        return done
