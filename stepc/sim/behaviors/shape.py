"""Shape operators: rewrite stop levels, add no cycles of their own (the hop still costs 1)."""

from __future__ import annotations

from stepc.sim.behaviors.table import behavior
from stepc.sim.kernel import PEEK, POP, RECV, SEND, SEND_AT, SimError
from stepc.sim.tokens import TileVal, iter_stops, with_last


@behavior("Flatten")
def flatten(ctx, node, ins, outs, env, info):
    lo, hi = node.attrs["min"], node.attrs["max"]
    src, out = ins["in"], outs[0]
    while True:
        head = yield (RECV, src)
        if head is None:
            return
        _, val, s = head
        if s > hi:
            s -= hi - lo
        elif s > lo:
            s = lo
        if out is not None:
            yield (SEND, out, val, s)


def _pad_like(val, functional: bool):
    if isinstance(val, TileVal):
        import numpy as np
        data = np.zeros((val.rows, val.cols), dtype=val.data.dtype) \
            if functional and val.data is not None else None
        return TileVal(val.rows, val.cols, val.dtype, 0, False, data)
    return val


@behavior("Reshape")
def reshape(ctx, node, ins, outs, env, info):
    """Split dim D_b into chunks of `chunk`; at b = 0 a partial last chunk is padded."""
    size, b = node.attrs["chunk"], node.attrs["rank"]
    src = ins["in"]
    data_out = outs[0] if outs else None
    pad_out = outs[1] if len(outs) > 1 else None

    def emit(val, s, is_pad):
        if data_out is not None:
            yield (SEND, data_out, val, s)
        if pad_out is not None:
            yield (SEND, pad_out, is_pad, s)

    count = 0
    last = None
    while True:
        head = yield (RECV, src)
        if head is None:
            if b == 0 and count:  # the stream ended mid-chunk (a rank-0 input)
                for k in range(size - count):
                    yield from emit(_pad_like(last, env.functional), 1 if k == size - count - 1
                                    else 0, True)
            return
        _, val, s = head
        last = val
        if b == 0:
            count += 1
            if count == size:
                count = 0
                yield from emit(val, s + 1, False)
            elif s >= 1:  # a dim ended mid-chunk: pad the chunk out
                yield from emit(val, 0, False)
                for k in range(size - count):
                    yield from emit(_pad_like(val, env.functional),
                                    s + 1 if k == size - count - 1 else 0, True)
                count = 0
            else:
                yield from emit(val, 0, False)
        else:
            if s >= b:
                count += 1
                if count == size:
                    count = 0
                    s += 1
            yield from emit(val, s, False)


@behavior("Promote")
def promote(ctx, node, ins, outs, env, info):
    """Outermost (default): the last element's stop rises by one (needs a lookahead).
    At rank p: stops >= p rise by one."""
    src, out = ins["in"], outs[0]
    rank_in = info["in"]["in"].rank
    p = node.attrs["rank"]
    outer = p is None or p == rank_in + 1
    while True:
        head = yield (RECV, src)
        if head is None:
            return
        _, val, s = head
        if outer:
            nxt = yield (PEEK, src)
            if nxt is None:
                s = rank_in + 1
        elif s >= p:
            s += 1
        if out is not None:
            yield (SEND, out, val, s)


@behavior("Expand")
def expand(ctx, node, ins, outs, env, info):
    """Repeat each element over the reference's inner group (or static sizes), holding the
    element until its last copy is sent (like Repeat: its FIFO slot stays occupied)."""
    src, ref, out = ins["in"], ins.get("ref"), outs[0]
    sizes = node.attrs["sizes"]
    e = len(sizes) if sizes is not None else node.attrs["rank"] + 1
    while True:
        head = yield (PEEK, src)
        if head is None:
            if ref is not None:
                r = yield (PEEK, ref)
                if r is not None:
                    raise SimError("Expand: the reference has elements left over", node.name)
            return
        _, val, s = head
        if ref is None:
            for cs, last in with_last(iter_stops(list(sizes))):
                if out is not None:
                    yield (SEND, out, val, s if last else cs)
            yield (POP, src)
            continue
        while True:
            r = yield (RECV, ref)
            if r is None:
                raise SimError("Expand: the reference ended early", node.name)
            if out is not None:
                yield (SEND, out, val, r[2])
            if r[2] >= e:
                break
        yield (POP, src)


@behavior("Repeat")
def repeat(ctx, node, ins, outs, env, info):
    """Copy i is stamped clock + i; then the clock advances by the count (reference)."""
    n = node.attrs["count"]
    src, out = ins["in"], outs[0]
    while True:
        head = yield (PEEK, src)
        if head is None:
            return
        _, val, s = head
        for i in range(n):
            if out is not None:
                yield (SEND_AT, out, val, s + 1 if i == n - 1 else 0, ctx.t + i)
        ctx.t += n
        yield (POP, src)


@behavior("Zip")
def zip_(ctx, node, ins, outs, env, info):
    a, b, out = ins["a"], ins["b"], outs[0]
    while True:
        ha = yield (RECV, a)
        hb = yield (RECV, b)
        if ha is None or hb is None:
            if (ha is None) != (hb is None):
                raise SimError("Zip: the two streams end at different elements", node.name)
            return
        if ha[2] != hb[2]:
            raise SimError(f"Zip: stop levels differ ({ha[2]} and {hb[2]})", node.name)
        if out is not None:
            yield (SEND, out, (ha[1], hb[1]), ha[2])
