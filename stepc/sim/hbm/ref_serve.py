"""The `ref` model's service, request by request, straight from a window's bursts (each
issuing one message per cycle from its first cycle): the reference simulator's HBM node
as a plain loop. Small windows run it as Python (cheaper than numpy's set-up); long runs
run it compiled by numba when numba is installed (`ref_compiled.py`)."""

from __future__ import annotations

import numpy as np


def serve_ranges(start, msgs, per_msg, last, ended, n, ii, lat, offset, free, per_channel,
                 completion, first):
    """Cycle by cycle, bursts in port order: request i of a cycle goes to channel
    offset + i(i+1)/2 (mod n), starts at max(arrival, channel free) and is visible
    `lat` later; the offset then grows by L(L+1)/2. Updates `free`, `per_channel`,
    `completion` and `first` (per burst); returns the new offset."""
    k_all = len(start)
    c0 = min(start)
    c1 = max([start[k] + msgs[k] for k in range(k_all)])
    for c in range(c0, c1):
        i = 0
        for k in range(k_all):
            s = start[k]
            if c < s or c >= s + msgs[k]:
                continue
            count = last[k] if ended[k] and c == s + msgs[k] - 1 else per_msg[k]
            for _ in range(count):
                ch = (offset + i * (i + 1) // 2) % n
                t = free[ch] if free[ch] > c + 1 else c + 1
                free[ch] = t + ii
                t += lat
                if t > completion[k]:
                    completion[k] = t
                if t < first[k]:
                    first[k] = t
                per_channel[ch] += 1
                i += 1
        offset = (offset + i * (i + 1) // 2) % n
    return offset


def serve_window(model, picked, ended, compiled=None):
    """`RefHbm._requests` for bursts whose messages are ranges of cycles, with the
    compiled loop if given, else in Python."""
    k = len(picked)
    rows = [(c.start, len(c), b.per_message, b.last_requests) for b, c in picked]
    cfg = model.cfg
    if compiled is not None:
        start, msgs, per_msg, last = np.array(rows, dtype=np.int64).T.copy()
        completion = np.full(k, -1, dtype=np.int64)
        first = np.full(k, np.iinfo(np.int64).max, dtype=np.int64)
        model.offset = int(compiled(start, msgs, per_msg, last, np.array(ended, np.bool_),
                                    cfg.channels, cfg.request_interval, model.min_latency,
                                    model.offset, model.free, model.stats.per_channel,
                                    completion, first))
    else:
        start, msgs, per_msg, last = (list(x) for x in zip(*rows))
        completion, first = [-1] * k, [1 << 62] * k
        free, per_channel = model.free.tolist(), [0] * cfg.channels
        model.offset = serve_ranges(start, msgs, per_msg, last, ended, cfg.channels,
                                    cfg.request_interval, model.min_latency, model.offset,
                                    free, per_channel, completion, first)
        model.free[:] = free
        model.stats.per_channel += np.array(per_channel, dtype=np.int64)
    n_req = [msgs[i] * per_msg[i] - (per_msg[i] - last[i] if ended[i] else 0)
             for i in range(k)]
    model.stats.note(int(min(start)))
    model.stats.note(int(max(start[i] + msgs[i] for i in range(k))) - 1)
    return n_req, completion, first
