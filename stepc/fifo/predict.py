"""Predicting FIFO depths from the occupancy log of the run with unbounded FIFOs.

The simulator logs, per FIFO, the cycle of each send (`+1`) and the cycle its slot frees
(`-1`, the cycle after the consumer took the element), in element order, and per element
the cycle its consumer first wanted it (`looks`: its first peek, which for a memory load
reading its next address comes well before the take; else the take). Replaying a FIFO's
log at depth `d`: the `k`-th send waits for the slot of element `k - d`, a send held back
holds back the producer's later sends, and a consumer that wanted an element before it is
visible (`fabric.hop_latency` after the send) waits for it, its later takes shifted by
what it waited. The predicted depth is the smallest at which
the consumer never waits longer than it did with unbounded FIFOs and, when the producer
has several outputs (a fork: holding it back delays its other consumers), the producer is
never held back.

The replay sees one FIFO at a time and not the memory system, so the prediction is a
candidate: the search runs it and keeps it only when that run is within the tolerance
(`stepc.fifo.search`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from stepc.fifo.static import EdgeKey

Log = list[tuple[int, int]]  # (cycle, +1 | -1), as the simulator's Channel.log


def replay(log: Log, depth: int, hop: int, looks: list[int] | None = None
           ) -> tuple[int, int]:
    """The most cycles the consumer takes an element later than with unbounded FIFOs, and
    the producer's shift at its last send, with the FIFO `depth` deep (every element
    taken: `edge_depth` checks); `looks`: when the consumer first wanted each element
    (None: when it took it)."""
    sends = [t for t, step in log if step > 0]
    freed = [t for t, step in log if step < 0]
    wanted = looks if looks is not None else [t - 1 for t in freed]
    held_back = delayed = worst = 0
    slots: list[int] = []  # each element's slot frees at this cycle, at `depth`
    for k, sent in enumerate(sends):
        at = sent + held_back
        if k >= depth and slots[k - depth] > at:
            at = slots[k - depth]
            held_back = at - sent
        if at + hop > wanted[k] + delayed:
            delayed = at + hop - wanted[k]
        worst = max(worst, delayed)
        slots.append(freed[k] + delayed)
    return worst, held_back


def occupancy(log: Log) -> int:
    """The most elements the FIFO held at once, by cycle (a slot freed at a cycle is free
    for a send at that cycle): the depth at which the replay changes nothing."""
    now = most = 0
    for _t, step in sorted(log):
        now += step
        most = max(most, now)
    return most


def edge_depth(log: Log, hop: int, fork: bool, looks: list[int] | None = None) -> int:
    """The smallest depth at which the replay delays neither the consumer nor, for a
    fork's output, the producer (bisected: a deeper FIFO never waits longer)."""
    def holds(depth: int) -> bool:
        late, held_back = replay(log, depth, hop, looks)
        return late == 0 and (not fork or held_back == 0)
    low, high = 1, max(1, occupancy(log))
    if sum(step for _t, step in log) > 0:  # elements left in it at the end
        return high
    while low < high:
        mid = (low + high) // 2
        if holds(mid):
            high = mid
        else:
            low = mid + 1
    return low


def predicted_depths(edges: list[EdgeKey], logs: Mapping[EdgeKey, Log],
                     looks: Mapping[EdgeKey, list[int]], hop: int) -> dict[EdgeKey, int]:
    """Each FIFO's predicted depth from its log and its consumer's looks (1 for a FIFO that
    carried nothing)."""
    outputs = Counter(k[0] for k in edges)
    return {k: edge_depth(logs[k], hop, outputs[k[0]] > 1, looks.get(k)) if logs.get(k)
            else 1 for k in edges}
