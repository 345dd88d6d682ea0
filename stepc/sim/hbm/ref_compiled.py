"""The `ref` model's service compiled with numba, when numba is installed
(`pip install 'stepc[fast]'`): the same arithmetic as `RefHbm._serve`, request by
request, straight from the window's bursts (each issuing one message per cycle from its
first cycle), with no per-request arrays. Imported only once a run has served enough
requests to repay numba's start-up."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def serve_ranges(start, msgs, per_msg, last, ended, n, ii, lat, offset, free, per_channel,
                 completion, first):  # pragma: no cover - compiled
    """Cycle by cycle, bursts in port order: request i of a cycle goes to channel
    offset + i(i+1)/2 (mod n), starts at max(arrival, channel free) and is visible
    `lat` later; the offset then grows by L(L+1)/2. Updates `free`, `per_channel`,
    `completion` and `first` (per burst); returns the new offset."""
    k_all = len(start)
    c0 = start.min()
    c1 = (start + msgs).max()
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


def serve_window(model, picked, ended):
    """`RefHbm._requests` for bursts whose messages are ranges of cycles."""
    k = len(picked)
    start, msgs, per_msg, last = np.array(
        [(c.start, len(c), b.per_message, b.last_requests) for b, c in picked],
        dtype=np.int64).T.copy()
    done = np.array(ended, dtype=np.bool_)
    completion = np.full(k, -1, dtype=np.int64)
    first = np.full(k, np.iinfo(np.int64).max, dtype=np.int64)
    cfg = model.cfg
    model.offset = int(serve_ranges(start, msgs, per_msg, last, done, cfg.channels,
                                    cfg.request_interval, model.min_latency, model.offset,
                                    model.free, model.stats.per_channel, completion, first))
    n_req = msgs * per_msg - np.where(done, per_msg - last, 0)
    model.stats.note(int(start.min()))
    model.stats.note(int((start + msgs).max()) - 1)
    return n_req, completion, first
