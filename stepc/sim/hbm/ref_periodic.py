"""The `ref` model's service in closed form: the cost grows with the bursts starting and
ending in a window, not with its requests.

Between two cycles at which a burst starts or ends, the same L ports each issue one
request per cycle; request i of a cycle goes to channel `o + i(i+1)/2 (mod n)` and the
offset `o` grows by `J = L(L+1)/2` per cycle, so the channel pattern repeats every
`P = n / gcd(J, n)` cycles (cached per L and offset). A channel serving arrivals a_l starts
its l-th request at `l * II + max(free, max over l' <= l of (a_l' + 1 - l' * II))`; with
arrivals repeating every period (q per period, a_{l+q} = a_l + P) that running maximum
is a per-period table plus `(P - q * II)` per period (or the first period's maximum when
that is negative). Each port's latest response is that of its last visit to each channel
(the last P cycles of the stretch), its earliest that of its first visits (the first P)."""

from __future__ import annotations

from functools import lru_cache
from math import gcd

import numpy as np


@lru_cache(maxsize=None)
def _distinct_in_a_cycle(n: int) -> bool:
    """Whether requests 0..n-1 of a cycle go to n different channels (i(i+1)/2 mod n is
    one-to-one on 0..n-1: true when n is a power of two)."""
    return len({i * (i + 1) // 2 % n for i in range(n)}) == n


NONE = -(1 << 60)  # below any running maximum


@lru_cache(maxsize=4096)
def _period(n: int, ii: int, ports: int, offset: int):
    """One period of the channel pattern of `ports` requests per cycle from `offset`, with
    what the service needs of it: (P, J, channel[t, i], requests per channel in rows < t
    for t = 0..P, the rank of request (t, i) on its channel within the period, and per
    channel its requests per period q, D = P - q * II, and the prefix and suffix maxima of
    t_r + 1 - r * II over its r-th visit's row t_r)."""
    i = np.arange(ports, dtype=np.int64)
    step = ports * (ports + 1) // 2 % n
    p = n // gcd(step, n)
    t = np.arange(p, dtype=np.int64)[:, None]
    chan = (offset + step * t + i * (i + 1) // 2) % n
    per_row = np.zeros((p + 1, n), dtype=np.int64)
    np.add.at(per_row, (np.repeat(np.arange(1, p + 1), ports), chan.ravel()), 1)
    before = np.cumsum(per_row, axis=0)  # before[t]: requests in rows < t
    rank = np.take_along_axis(before[:-1], chan, axis=1)
    q = before[-1]
    width = int(q.max()) + 1
    prefix = np.full((n, width), NONE, dtype=np.int64)
    suffix = np.full((n, width), NONE, dtype=np.int64)
    rows = np.broadcast_to(t, chan.shape)
    for ch in range(n):
        visits = np.sort(rows[chan == ch])  # at most one per row
        if len(visits):
            term = visits + 1 - ii * np.arange(len(visits), dtype=np.int64)
            prefix[ch, :len(visits)] = np.maximum.accumulate(term)
            suffix[ch, :len(visits)] = np.maximum.accumulate(term[::-1])[::-1]
    return p, step, chan, before, rank, q, p - q * ii, prefix, suffix


def _starts(free_rel, chan, rank, periods, backlogged, q, d, prefix, suffix, ii):
    """Start cycles (relative to the stretch) of requests by channel, rank within their
    period and whole periods before them. `backlogged`: every channel is busy past the
    stretch's last arrival, so each request starts when its channel frees up."""
    qc = q[chan]
    if backlogged:
        return (periods * qc + rank) * ii + free_rel[chan]
    dc = d[chan]
    pre = prefix[chan, rank]
    later = suffix[chan, rank + 1]  # visits after it in the period before
    grows = np.maximum(pre + periods * dc, np.where(periods > 0, later + (periods - 1) * dc,
                                                    NONE))
    first_max = np.where(periods > 0, prefix[chan, qc - 1], pre)
    ahead = np.where(dc >= 0, grows, first_max)
    return (periods * qc + rank) * ii + np.maximum(free_rel[chan], ahead)


def serve_periodic(model, picked, ended):
    """`RefHbm._requests` for bursts (in port order) issuing one single-request message
    per cycle over ranges of cycles, at most `channels` of them at once; None for other
    windows (the caller serves them request by request). The earliest completions are
    None unless `model.want_first`."""
    n, ii = model.cfg.channels, model.cfg.request_interval
    k = len(picked)
    if any(b.per_message != 1 for b, _ in picked) or not _distinct_in_a_cycle(n):
        return None
    starts = [c.start for _, c in picked]
    stops = [c.stop for _, c in picked]
    bounds = sorted(set(starts) | set(stops))
    stretches = [(a, b, [j for j in range(k) if starts[j] <= a and stops[j] >= b])
                 for a, b in zip(bounds, bounds[1:])]
    if any(len(ports) > n for _, _, ports in stretches):
        return None
    free = model.free
    total = np.zeros(n, dtype=np.int64)
    latest, earliest = [-1] * k, [1 << 62] * k
    offset = model.offset
    for a, b, ports in stretches:
        if not ports:
            continue
        width, length = len(ports), b - a
        p, step, chan, before, rank, q, d, prefix, suffix = _period(n, ii, width, offset)
        whole, rest = divmod(length, p)
        counts = whole * before[-1] + before[rest]
        used = np.flatnonzero(counts)
        final = counts[used] - 1  # each channel's last request of the stretch
        qu = q[used]
        # one query: the last P cycles (each port's last visit to each channel), the
        # first P cycles if wanted (first visits) and each channel's last request
        rows = min(p, length)
        tail = rows * width
        chans, ranks = [chan[:rows].ravel()], [rank[:rows].ravel()]
        if length > p:  # row t of the last P cycles is cycle m_t, after m_t // P periods
            m = length - p + (np.arange(p) - (length - p)) % p
            periods = [np.repeat(m // p, width)]
            if model.want_first:
                chans.append(chans[0])
                ranks.append(ranks[0])
                periods.append(np.zeros(tail, dtype=np.int64))
        else:
            periods = [np.zeros(tail, dtype=np.int64)]
        free_rel = free - a
        start = _starts(free_rel, np.concatenate(chans + [used]),
                        np.concatenate(ranks + [final % qu]),
                        np.concatenate(periods + [final // qu]),
                        int(free_rel.min()) >= length, q, d, prefix, suffix, ii)
        done = a + model.min_latency
        for j, hi in zip(ports, start[:tail].reshape(rows, width).max(0).tolist()):
            if hi + done > latest[j]:
                latest[j] = hi + done
        if model.want_first:
            head = start[tail:2 * tail] if length > p else start[:tail]
            for j, lo in zip(ports, head.reshape(rows, width).min(0).tolist()):
                if lo + done < earliest[j]:
                    earliest[j] = lo + done
        free[used] = a + ii + start[len(start) - len(used):]
        total += counts
        offset = (offset + length * step) % n
    model.offset = offset
    model.stats.per_channel += total
    model.stats.note(min(starts))
    model.stats.note(max(stops) - 1)
    return ([stops[j] - starts[j] for j in range(k)], latest,
            earliest if model.want_first else None)
