"""Routing and merging: Partition, Reassemble, EagerMerge, Parallelize, Broadcast."""

from __future__ import annotations

from stepc.sim.behaviors.table import behavior
from stepc.sim.kernel import PEEK, POP, RECV, SELECT, SEND, SEND_ALL, SEND_AT, SimError
from stepc.sim.tokens import TileVal


def _load_cycles(bw: int, p) -> int:
    """Cycles reading payload `p` from a memory unit at `bw` bytes per cycle."""
    if isinstance(p, TileVal) and p.in_mu:
        return -(-p.nbytes // bw)
    return 0


def _store_cycles(bw: int, write_back: bool, p) -> int:
    """Cycles writing payload `p` back to a memory unit (when the node writes back)."""
    if write_back and isinstance(p, TileVal):
        return -(-p.nbytes // bw)
    return 0


@behavior("Partition")
def partition(ctx, node, ins, outs, env, info):
    """Per selector element: route the next rank-p chunk to every selected output.
    Timing is additive (reference): load, release, switch + write-back, then the sends."""
    p = node.attrs["rank"]
    src, sel = ins["in"], ins["sel"]
    switch = node.attrs["switch_cycles"]
    wb = node.attrs.get("write_back", False)
    bw, stores = env.hw.fabric.onchip_bw, bool(wb)
    while True:
        # the data decides when the Partition is done: in a feedback loop (the paper's
        # dynamic parallelization) the selector stream only ends after this operator does
        head = yield (PEEK, src)
        if head is None:
            return
        hs = yield (RECV, sel)
        if hs is None:
            raise SimError("Partition: data left over after the selector ended", node.name)
        chosen, sstop = hs[1], hs[2]
        for i in chosen:
            if not 0 <= i < len(outs):
                raise SimError(f"Partition selector chooses output {i}, but there are "
                               f"{len(outs)}", node.name)
        while True:
            head = yield (PEEK, src)
            if head is None:
                raise SimError("Partition: the data stream ended before the selector",
                               node.name)
            _, val, s = head
            start = ctx.t
            ctx.work(start, _load_cycles(bw, val), "load")
            yield (POP, src)
            end = s >= p
            if end and s != sstop + p:
                raise SimError(f"Partition: a chunk ends with stop level {s}, but the selector "
                               f"element expects {sstop + p}", node.name)
            if chosen:
                t0 = ctx.t
                ctx.work(t0, switch + _store_cycles(bw, stores, val), "switch")
                out_val = val.with_mu(wb) if isinstance(val, TileVal) else val
                for i in chosen:
                    o = outs[i]
                    if o is not None:
                        yield (SEND, o, out_val, p if end else s)
            if end:
                break


@behavior("Reassemble")
def reassemble(ctx, node, ins, outs, env, info):
    """Per selector element: copy one chunk from each selected input, earliest available
    first, never interleaving chunks; the group closes one level above the chunks."""
    q = node.attrs["rank"]
    srcs, sel, out = ins["ins"], ins["sel"], outs[0]
    switch = node.attrs["switch_cycles"]
    wb = node.attrs.get("write_back", False)
    bw, stores = env.hw.fabric.onchip_bw, bool(wb)
    while True:
        hs = yield (RECV, sel)
        if hs is None:
            for ch in srcs:
                head = yield (PEEK, ch)
                if head is not None:
                    raise SimError("Reassemble: an input has data left after the selector "
                                   "ended", node.name)
            return
        chosen, sstop = list(hs[1]), hs[2]
        for i in chosen:
            if not 0 <= i < len(srcs):
                raise SimError(f"Reassemble selector chooses input {i}, but there are "
                               f"{len(srcs)}", node.name)
        remaining = list(chosen)
        while remaining:
            k = yield (SELECT, [srcs[i] for i in remaining])
            if k < 0:
                raise SimError(f"Reassemble: selected input {remaining[0]} ended early",
                               node.name)
            i = remaining.pop(k)
            ch = srcs[i]
            first = True
            while True:
                head = yield (PEEK, ch)
                if head is None:
                    raise SimError(f"Reassemble: input {i} ended inside a chunk", node.name)
                t_arr, val, s = head
                if first:
                    ctx.t = max(ctx.t, t_arr) + switch
                    first = False
                ctx.work(ctx.t, _load_cycles(bw, val) + _store_cycles(bw, stores, val),
                         "merge")
                yield (POP, ch)
                end = s >= q
                if out is not None:
                    stop = (q + 1 + sstop if not remaining else q) if end else s
                    yield (SEND, out, val.with_mu(wb) if isinstance(val, TileVal) else val,
                           stop)
                if end:
                    break


@behavior("EagerMerge")
def eager_merge(ctx, node, ins, outs, env, info):
    """Forward whole chunks in arrival order; emit a one-hot selector per chunk."""
    srcs = ins["ins"]
    a = node.attrs["rank"] if node.attrs["rank"] is not None else info["in"]["ins"][0].rank
    data, sel = outs[0], outs[1]
    while True:
        k = yield (SELECT, srcs)
        if k < 0:
            return
        ch = srcs[k]
        head = yield (PEEK, ch)
        if sel is not None:
            yield (SEND, sel, (k,), 0)
        while True:
            head = yield (RECV, ch)
            if head is None:
                raise SimError(f"EagerMerge: input {k} ended inside a chunk", node.name)
            _, val, s = head
            if s > a:
                raise SimError(f"EagerMerge: input {k} has a stop of level {s} above the "
                               f"chunk rank {a}", node.name)
            if data is not None:
                yield (SEND, data, val, s)
            ctx.t += 1
            if s >= a:
                break


@behavior("Parallelize")
def parallelize(ctx, node, ins, outs, env, info):
    """Deal chunks round-robin; blocking sends (a slow consumer stalls the dealer)."""
    src = ins["in"]
    p = node.attrs["rank"] if node.attrs["rank"] is not None else info["in"]["in"].rank
    switch = node.attrs["switch_cycles"]
    j = 0
    while True:
        head = yield (RECV, src)
        if head is None:
            return
        _, val, s = head
        o = outs[j % len(outs)]
        end = s >= p
        if o is not None:
            yield (SEND_AT, o, val, p if end else s, ctx.t + switch)
        if end:
            j += 1


@behavior("Broadcast")
def broadcast(ctx, node, ins, outs, env, info):
    """Release the input on arrival, wait until every output has room, then send every copy
    with one stamp (the slowest consumer back-pressures all)."""
    src = ins["in"]
    targets = [o for o in outs if o is not None]
    while True:
        head = yield (RECV, src)
        if head is None:
            return
        _, val, s = head
        yield (SEND_ALL, targets, val, s)
