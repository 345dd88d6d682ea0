"""`ref`: the reference simulator's HBM node, exactly: one message of `par_dispatch`
requests per port per cycle (readers, then writers, in registration order), the
triangular round-robin channel choice, per-channel FIFO service every `request_interval`
cycles, `startup + latency` per request, +1 per hop. Served in closed form per stretch of
constant ports where each message is one request (`ref_periodic.py`), else request by
request. `STRATEGIES` name the ways of serving a window; all give the same cycles."""

from __future__ import annotations

import numpy as np

from stepc.hw.config import Hbm
from stepc.sim.hbm.ref_in_order import serve_in_order
from stepc.sim.hbm.ref_periodic import serve_periodic
from stepc.sim.hbm.ref_serve import serve_window
from stepc.sim.hbm.table import memory_model
from stepc.sim.hbm.window import WindowedMemory
from stepc.sim.native import compiled


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

# How windows whose ports each issue one message per cycle (no arbiter, no credit limit)
# are served; windows with an arbiter or a credit limit always take the generic path.
STRATEGIES = {
    "auto": "the native pool where it applies, else the closed form where it applies, else "
            "the fastest loop for the window's size",
    "native": "the whole window service compiled (stepc's native core; no arbiter or credit "
              "limit)",
    "closed": "the closed form where it applies, else numpy in pickup order",
    "numba": "the request loop compiled by numba (`stepc[fast]`)",
    "python": "the request loop in Python, under windows cut by the pickups alone: the "
              "model's plainest statement",
    "in-order": "numpy in pickup order",
    "generic": "the memory window's numpy path, requests sorted by cycle",
}


@memory_model("ref")
def from_config(kernel, hw, strategy: str = "auto"):
    """The reference pool, serving its windows the way `strategy` says: compiled as a whole
    (`native`) where the native core is built and no arbiter or credit limit applies, under
    `auto`; else `RefHbm`."""
    cfg = hw.hbm
    plain = not cfg.arbiter_grants and not cfg.outstanding
    if strategy in ("auto", "native"):
        pool = compiled("stepc.sim.hbm._ref_pool") if plain else None
        if pool is not None:
            return pool.RefPool(kernel, cfg, hw.fabric.stream_tile)
        if strategy == "native":
            raise ValueError("the native ref strategy needs stepc's compiled core (built with "
                             "the wheel; in a checkout: python hatch_build.py)" if plain else
                             "the native ref strategy serves pools without hbm.arbiter_grants "
                             "or hbm.outstanding")
    return RefHbm(kernel, cfg, want_first=hw.fabric.stream_tile, strategy=strategy)


class RefHbm(WindowedMemory):
    """Exact emulation of the reference simulator's channel-pool HBM node, serving its
    windows the way `strategy` (one of `STRATEGIES`) says."""

    def __init__(self, kernel, cfg: Hbm, want_first: bool = True, strategy: str = "auto"):
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown ref strategy {strategy!r}: one of "
                             f"{', '.join(STRATEGIES)}")
        if strategy == "native":
            raise ValueError("RefHbm serves the Python strategies; ref.from_config builds "
                             "the native pool")
        super().__init__(kernel, cfg.channels, cfg.arbiter_grants, cfg.outstanding)
        self.cfg = cfg
        self.want_first = want_first  # track each burst's first response (streamed tiles)
        self.free = np.zeros(cfg.channels, dtype=np.int64)  # next free cycle per channel
        self.offset = 0
        self.min_latency = cfg.startup + cfg.latency + 1  # service start -> visible
        self.strategy = strategy
        self.compiled = None  # numba's serve_ranges, once loaded (False: not installed)
        if strategy == "numba":
            self.compiled = _load_compiled()
            if not self.compiled:
                raise ValueError("the numba ref strategy needs numba: "
                                 "pip install 'stepc[fast]'")
        self.served = 0  # requests served request by request (the numba threshold's count)

    def _requests(self, picked, ended, c1: int):
        """Serve a window the strategy's way; count its requests in `stats.served_by`."""
        if self.strategy != "generic" and not self.grants and not self.outstanding and \
                all(type(c) is range for _, c in picked):
            served, path = None, "closed"
            if self.strategy in ("auto", "closed"):
                served = serve_periodic(self, picked, ended)
            if served is None:
                path = self._loop(sum(len(c) * b.per_message for b, c in picked))
                served = serve_in_order(self, picked, ended) if path == "in-order" else \
                    serve_window(self, picked, ended, self.compiled if path == "numba" else None)
        else:
            served, path = super()._requests(picked, ended, c1), "generic"
            self.served += int(served[0].sum())
        by = self.stats.served_by
        by[path] = by.get(path, 0) + int(sum(served[0]))
        return served

    def _loop(self, size: int) -> str:
        """The request-by-request path of a window of `size` requests. `auto`: numba once
        a run has served `COMPILE_AFTER` requests this way (when installed), a Python loop
        for windows below `PYTHON_BELOW`, else numpy in pickup order."""
        if self.strategy == "auto" and self.compiled is None and self.served > COMPILE_AFTER:
            self.compiled = _load_compiled()
        self.served += size
        if self.strategy != "auto":
            return "in-order" if self.strategy == "closed" else self.strategy
        if self.compiled:
            return "numba"
        return "python" if size < PYTHON_BELOW else "in-order"

    def _done_floor(self) -> int:
        """No request starts before the first channel frees up (the `python` strategy
        keeps to the pickups)."""
        if self.strategy == "python":
            return super()._done_floor()
        return int(np.minimum.reduce(self.free)) + self.min_latency

    def _earliest_done(self, b, cycle: int) -> int:
        """Besides the pickups still to come: a burst ends no earlier than the responses
        it already has (the `python` strategy keeps to the pickups)."""
        if self.strategy == "python":
            return super()._earliest_done(b, cycle)
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
