"""The `ref` model's service in closed form: the cost grows with the bursts starting and
ending in a window, not with its requests.

Between two cycles at which a burst starts or ends, the same L ports each issue one
request per cycle; request i of a cycle goes to channel `o + i(i+1)/2 (mod n)` and the
offset `o` grows by `J = L(L+1)/2` per cycle, so the channel pattern repeats every
`P = n / gcd(J, n)` cycles. The pattern from offset `o` is the one from offset 0 with every
channel moved by `o`, so the tables are kept per L only, in the channels of offset 0 (the
free cycles are moved there and back per stretch). A channel serving arrivals a_l starts
its l-th request at `l * II + max(free, max over l' <= l of (a_l' + 1 - l' * II))`; with
arrivals repeating every period (q per period, a_{l+q} = a_l + P) that running maximum
is a per-period table plus `(P - q * II)` per period (or the first period's maximum when
that is negative). Each port's latest response is that of its last visit to each channel
(the last P cycles of the stretch), its earliest that of its first visits (the first P)."""

from __future__ import annotations

from functools import lru_cache
from math import gcd
from typing import NamedTuple

import numpy as np

NONE = -(1 << 60)  # below any running maximum


class Period(NamedTuple):
    """One period of the channel pattern of `ports` requests per cycle from offset 0, per
    request (t, i) of it: its channel, II x its rank on the channel within the period, and
    the running maximum of t_r + 1 - r * II over the visits to that channel up to it; per
    channel its requests in rows < t (t = 0..P), its requests per period q, D = P - q * II,
    and the prefix and suffix maxima of t_r + 1 - r * II over its r-th visit's row t_r."""

    p: int
    step: int
    chan: np.ndarray
    ii_rank: np.ndarray
    ahead: np.ndarray
    before: np.ndarray
    q: np.ndarray
    d: np.ndarray
    prefix: np.ndarray
    suffix: np.ndarray


@lru_cache(maxsize=1024)
def _period(n: int, ii: int, ports: int) -> Period:
    """The channel pattern's period and what the service needs of it."""
    i = np.arange(ports, dtype=np.int64)
    step = ports * (ports + 1) // 2 % n
    p = n // gcd(step, n)
    rows = np.repeat(np.arange(p, dtype=np.int64), ports)  # in service order: cycle, port
    flat = (step * rows + np.tile(i * (i + 1) // 2, p)) % n
    per_row = np.zeros((p + 1, n), dtype=np.int64)
    np.add.at(per_row, (rows + 1, flat), 1)
    before = np.cumsum(per_row, axis=0)  # before[t]: requests in rows < t
    q = before[-1]
    order = np.argsort(flat, kind="stable")  # by channel, then service order
    ahead = np.arange(len(flat), dtype=np.int64) - np.repeat(np.cumsum(q) - q, q)
    flat_rank = np.empty(len(flat), dtype=np.int64)  # requests ahead on its channel
    flat_rank[order] = ahead
    chan_sorted = flat[order]
    term = rows[order] + 1 - ii * ahead
    lift = chan_sorted * (p + ii * len(flat) + 2)  # keeps channels apart
    prefix = np.full((n, int(q.max()) + 1), NONE, dtype=np.int64)
    suffix = np.full_like(prefix, NONE)
    prefix[chan_sorted, ahead] = np.maximum.accumulate(term + lift) - lift
    suffix[chan_sorted, ahead] = (np.maximum.accumulate((term - lift)[::-1]) + lift[::-1])[::-1]
    chan, rank = flat.reshape(p, ports), flat_rank.reshape(p, ports)
    return Period(p, step, chan, ii * rank, prefix[chan, rank], before, q, p - q * ii,
                  prefix, suffix)


@lru_cache(maxsize=1024)
def _moved(n: int, offset: int) -> np.ndarray:
    """The channel that channel j of offset 0 is from `offset` on: (j + offset) mod n."""
    return (np.arange(n) + offset) % n


@lru_cache(maxsize=1024)
def _tail_rows(n: int, ii: int, ports: int):
    """`_tail`'s per-request terms for rows after W periods and for rows after W - 1
    (request (t, i) starts at W * II * q + drift + max(free, lift + W * slope)): (II * q,
    slope, drift after W, after W - 1, lift after W, after W - 1). Over periods the running
    maximum grows by D a period when D >= 0, else stays the first period's."""
    per = _period(n, ii, ports)
    chan, q, d = per.chan, per.q, per.d
    dc = d[chan]
    rank = per.ii_rank // ii
    grows = np.maximum(per.ahead, per.suffix[chan, rank + 1] - dc)
    first_max = per.prefix[chan, q[chan] - 1]
    return (ii * q[chan], np.maximum(d, 0)[chan], per.ii_rank, per.ii_rank - ii * q[chan],
            np.where(dc >= 0, grows, first_max), np.where(dc >= 0, grows - dc, first_max))


def _tail(n: int, ii: int, ports: int, rest: int):
    """The last P cycles of a stretch of W >= 2 whole periods plus `rest` cycles, where
    rows t < rest come after W periods and the others after W - 1: (II * q, drift, lift,
    slope) per request, as `_tail_rows` gives them."""
    ii_q, slope, drift_w, drift_fewer, lift_w, lift_fewer = _tail_rows(n, ii, ports)
    drift = np.concatenate((drift_w[:rest], drift_fewer[rest:]))
    lift = np.concatenate((lift_w[:rest], lift_fewer[rest:]))
    return ii_q, drift, lift, slope


def _starts(free_rel, chan, rank, periods, per: Period, ii: int):
    """Start cycles (relative to the stretch) of requests by channel, rank within their
    period and whole periods before them."""
    qc, dc = per.q[chan], per.d[chan]
    pre = per.prefix[chan, rank]
    later = per.suffix[chan, rank + 1]  # visits after it in the period before
    grows = np.maximum(pre + periods * dc, np.where(periods > 0, later + (periods - 1) * dc,
                                                    NONE))
    first_max = np.where(periods > 0, per.prefix[chan, qc - 1], pre)
    ahead = np.where(dc >= 0, grows, first_max)
    return (periods * qc + rank) * ii + np.maximum(free_rel[chan], ahead)


def serve_periodic(model, picked, ended):
    """`RefHbm._requests` for bursts (in port order) issuing one single-request message
    per cycle over ranges of cycles; None for other windows (the caller serves them
    request by request). The earliest completions are None unless `model.want_first`."""
    n, ii = model.cfg.channels, model.cfg.request_interval
    k = len(picked)
    starts, stops = [], []
    for b, c in picked:
        if b.per_message != 1:
            return None
        starts.append(c.start)
        stops.append(c.stop)
    lo, hi = min(starts), max(stops)
    if starts.count(lo) == k and stops.count(hi) == k:  # every port issues throughout
        stretches = [(lo, hi, None)]
    else:
        bounds = sorted(set(starts) | set(stops))
        stretches = [(a, b, [j for j in range(k) if starts[j] <= a and stops[j] >= b])
                     for a, b in zip(bounds, bounds[1:])]
    free = model.free
    per_channel = model.stats.per_channel
    want_first = model.want_first
    latest, earliest = [-1] * k, [1 << 62] * k
    offset = model.offset
    for a, b, ports in stretches:
        width = k if ports is None else len(ports)
        if not width:
            continue
        length = b - a
        per = _period(n, ii, width)
        p = per.p
        whole, rest = divmod(length, p)
        moved = _moved(n, offset)
        per_channel[moved] += per.before[rest] + whole * per.q
        free_rel = free[moved] - a  # in the channels of offset 0
        rows = min(p, length)
        # the first P cycles (each port's first visit to each channel) and the last P
        # (its last visits; each channel's last request of the stretch is among them)
        early = per.ii_rank[:rows] + np.maximum(free_rel[per.chan[:rows]], per.ahead[:rows])
        if length <= p:
            late = early
        elif whole >= 2:
            ii_q, drift, lift, slope = _tail(n, ii, width, rest)
            late = whole * ii_q + drift + np.maximum(free_rel[per.chan], lift + whole * slope)
        else:  # rows t >= rest come after no whole period
            periods = 1 - (np.arange(p) >= rest)[:, None]
            late = _starts(free_rel, per.chan, per.ii_rank // ii, periods, per, ii)
        np.maximum.at(free_rel, per.chan[:rows].ravel(), (late + ii).ravel())
        free[moved] = free_rel + a
        done = a + model.min_latency
        if ports is None:  # every burst, in order
            latest = (np.maximum.reduce(late) + done).tolist()
            if want_first:
                earliest = (np.minimum.reduce(early) + done).tolist()
        else:
            for j, t in zip(ports, np.maximum.reduce(late).tolist()):
                if t + done > latest[j]:
                    latest[j] = t + done
            if want_first:
                for j, t in zip(ports, np.minimum.reduce(early).tolist()):
                    if t + done < earliest[j]:
                        earliest[j] = t + done
        offset = (offset + length * per.step) % n
    model.offset = offset
    model.stats.note(lo)
    model.stats.note(hi - 1)
    return ([stops[j] - starts[j] for j in range(k)], latest,
            earliest if want_first else None)
