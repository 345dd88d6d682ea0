"""The `ref` model's service in closed form while every channel is backlogged: the cost
grows with the bursts starting and ending in a window, not with its requests.

When every channel is still busy at the window's last pickup, a request starts when its
channel frees up, whatever its arrival: a channel's r-th request of the window starts at
`free + r * II`. Between two cycles at which a burst starts or ends, the same L ports each
issue one request per cycle; request i of a cycle goes to channel `o + i(i+1)/2 (mod n)`
and the offset `o` grows by `J = L(L+1)/2` per cycle, so the channel pattern repeats every
`P = n / gcd(J, n)` cycles. Counting one period (cached per L and offset) gives each
channel's requests over the whole stretch, and each port's latest response is that of its
last visit to each channel (the last P cycles), its earliest that of its first visits (the
first P cycles). In the paper's MoE layers the queues run tens of thousands of cycles deep,
so nearly every window is served this way."""

from __future__ import annotations

from functools import lru_cache
from math import gcd

import numpy as np


@lru_cache(maxsize=None)
def _distinct_in_a_cycle(n: int) -> bool:
    """Whether requests 0..n-1 of a cycle go to n different channels (i(i+1)/2 mod n is
    one-to-one on 0..n-1: true when n is a power of two)."""
    return len({i * (i + 1) // 2 % n for i in range(n)}) == n


@lru_cache(maxsize=4096)
def _period(n: int, ports: int, offset: int):
    """One period of the channel pattern of `ports` requests per cycle from `offset`:
    (P, J, channel[t, i], requests per channel in cycles < t for t = 0..P, the rank of
    request (t, i) on its channel within the period, and its channel's requests per
    period)."""
    i = np.arange(ports, dtype=np.int64)
    step = ports * (ports + 1) // 2 % n
    p = n // gcd(step, n)
    t = np.arange(p, dtype=np.int64)[:, None]
    chan = (offset + step * t + i * (i + 1) // 2) % n
    per_row = np.zeros((p + 1, n), dtype=np.int64)
    np.add.at(per_row, (np.repeat(np.arange(1, p + 1), ports), chan.ravel()), 1)
    before = np.cumsum(per_row, axis=0)  # before[t]: requests in rows < t
    rank = np.take_along_axis(before[:-1], chan, axis=1)
    per_period = before[-1]
    return p, step, chan, before, rank, per_period[chan]


def serve_backlogged(model, picked, ended):
    """`RefHbm._requests` for bursts (in port order) issuing one single-request message
    per cycle over ranges of cycles, when every channel stays busy past the window's last
    pickup; None when that does not hold (the caller serves the window request by
    request)."""
    n, ii = model.cfg.channels, model.cfg.request_interval
    k = len(picked)
    starts = [c.start for _, c in picked]
    stops = [c.stop for _, c in picked]
    c0, c_end = min(starts), max(stops)
    free = model.free
    if int(free.min()) < c_end or k > n or not _distinct_in_a_cycle(n) or \
            any(b.per_message != 1 for b, _ in picked):
        return None
    ready = free + model.min_latency  # the completion of a request starting now
    total = np.zeros(n, dtype=np.int64)
    latest, earliest = [-1] * k, [1 << 62] * k
    offset = model.offset
    bounds = sorted(set(starts) | set(stops))
    for a, b in zip(bounds, bounds[1:]):
        ports = [j for j in range(k) if starts[j] <= a and stops[j] >= b]
        if not ports:
            continue
        length = b - a
        p, step, chan, before, rank, per_period = _period(n, len(ports), offset)
        head = min(p, length)
        first = (ready[chan[:head]] + ii * rank[:head]).min(0)
        if length <= p:
            last = (ready[chan[:length]] + ii * rank[:length]).max(0)
        else:  # row t of the last P cycles is cycle m_t of the stretch, after m_t // P periods
            m = length - p + (np.arange(p) - (length - p)) % p
            last = (ready[chan] + ii * ((m // p)[:, None] * per_period + rank)).max(0)
        for j, lo, hi in zip(ports, first.tolist(), last.tolist()):
            if hi > latest[j]:
                latest[j] = hi
            if lo < earliest[j]:
                earliest[j] = lo
        q, r = divmod(length, p)
        counts = q * before[-1] + before[r]
        ready += ii * counts
        total += counts
        offset = (offset + length * step) % n
    model.offset = offset
    free += ii * total
    model.stats.per_channel += total
    model.stats.note(c0)
    model.stats.note(c_end - 1)
    return ([stops[j] - starts[j] for j in range(k)], latest, earliest)
