"""The `ref` model's service, request by request in numpy, of a window whose ports each
issue one message per cycle (windows the closed form leaves: several requests per
message), built straight in pickup order (cycle, then port): no sort by cycle. A channel's
j-th request of the window starts at `j * II + max(free, max over l <= j of (arrival_l +
1 - l * II))`; while every channel stays busy past the window's last pickup that is
`free + j * II`, and the running maximum is skipped. A window costs a handful of array
operations on its requests: the channel choice and one stable radix sort by channel."""

from __future__ import annotations

import numpy as np


def serve_in_order(model, picked, ended):
    """`RefHbm._requests` for bursts (in port order) whose messages are ranges of cycles:
    per burst the requests served, its latest completion and its earliest."""
    k = len(picked)
    first_cycle = np.fromiter((c.start for _, c in picked), np.int64, k)
    stop = np.fromiter((c.stop for _, c in picked), np.int64, k)
    c0, c_end = int(first_cycle.min()), int(stop.max())
    free = model.free
    cfg = model.cfg
    n, ii = cfg.channels, cfg.request_interval
    span = c_end - c0
    rows = np.arange(c0, c_end, dtype=np.int64)[:, None]
    active = (rows >= first_cycle) & (rows < stop)  # cycle x burst: a message there
    per_msg = np.fromiter((b.per_message for b, _ in picked), np.int64, k)
    last = np.fromiter((b.last_requests for b, _ in picked), np.int64, k)
    ends = np.flatnonzero(np.asarray(ended, dtype=bool) & (last != per_msg))
    if per_msg.max() == 1 and not len(ends):
        cells = active  # one request per message
        row_total = active.sum(1)
        n_req = active.sum(0)
    else:
        cells = active * per_msg
        cells[stop[ends] - 1 - c0, ends] = last[ends]
        row_total = cells.sum(1)
        n_req = cells.sum(0)
    jumps = row_total * (row_total + 1) // 2
    offsets = (model.offset + np.cumsum(jumps) - jumps) % n
    model.offset = int((model.offset + int(jumps.sum())) % n)
    model.stats.note(c0)
    model.stats.note(c_end - 1)
    total = int(row_total.sum())
    row_start = np.cumsum(row_total) - row_total
    i = np.arange(total, dtype=np.int64) - np.repeat(row_start, row_total)
    chan = (np.repeat(offsets, row_total) + i * (i + 1) // 2) % n
    counts = np.bincount(chan, minlength=n)
    by_chan = np.argsort(chan.astype(np.uint16) if n <= 1 << 16 else chan, kind="stable")
    chan_start = np.cumsum(counts) - counts
    queued = np.arange(0, total * ii, ii, dtype=np.int64) - np.repeat(chan_start * ii, counts)
    if int(free.min()) >= c_end:  # every channel is busy past the last pickup
        start = queued + np.repeat(free, counts)
    else:  # arrival minus the queue ahead of it, its running maximum per channel
        base = np.repeat(rows[:, 0] + 1, row_total)[by_chan] - queued
        lift = np.repeat(np.arange(n, dtype=np.int64) * (int(base.max()) - int(base.min()) + 1),
                         counts)  # keeps channels apart
        ahead = np.maximum.accumulate(base + lift) - lift
        start = queued + np.maximum(ahead, np.repeat(free, counts))
    done = np.empty(total, dtype=np.int64)
    done[by_chan] = start + model.min_latency
    busy = np.flatnonzero(counts)
    free[busy] = start[(chan_start + counts - 1)[busy]] + ii
    model.stats.per_channel += counts
    if cells is active:  # per cell (cycle x burst, cycle-major) its one request
        latest = np.full(span * k, -1, dtype=np.int64)
        earliest = np.full(span * k, np.iinfo(np.int64).max, dtype=np.int64)
        flat = np.flatnonzero(active)
        latest[flat] = done
        earliest[flat] = done
    else:
        flat = np.flatnonzero(cells)
        sizes = cells.ravel()[flat]
        head = np.cumsum(sizes) - sizes
        latest = np.full(span * k, -1, dtype=np.int64)
        earliest = np.full(span * k, np.iinfo(np.int64).max, dtype=np.int64)
        latest[flat] = np.maximum.reduceat(done, head)
        earliest[flat] = np.minimum.reduceat(done, head)
    return (n_req, latest.reshape(span, k).max(0), earliest.reshape(span, k).min(0))

