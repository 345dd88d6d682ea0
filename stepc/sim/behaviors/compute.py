"""Higher-order operators: Map, Accum, Scan, FlatMap on the roofline-timed fabric."""

from __future__ import annotations

from stepc.ops.functions import FUNCTIONS
from stepc.sim.behaviors.table import behavior
from stepc.sim.fabric import fn_flops
from stepc.sim.kernel import PEEK_ALL, POP_ALL, SEND, SimError
from stepc.sim.tokens import TileVal, with_last
from stepc.sim.values import FLATMAP, MAP, accum_init, accum_update

# address and selector generators emit one element per cycle (the reference's
# CacheReadAddrGen); retiling sends all its pieces at once
ONE_PER_CYCLE = ("cache_read_addr", "filter_last_tile", "expert_addr")


def _inputs(ins) -> list:
    return ins["ins"]


def _peek_all(chans, node):
    """Peek every input (clock jumps to the latest arrival); None when all ended."""
    heads = yield (PEEK_ALL, chans)
    if all(h is None for h in heads):
        return None
    if any(h is None for h in heads):
        raise SimError(f"{node.op} inputs end at different elements (lockstep streams must "
                       "have equal shapes)", node.name)
    stops = {h[2] for h in heads}
    if len(stops) > 1:
        raise SimError(f"{node.op} inputs disagree on stop levels {sorted(stops)} "
                       "(their shapes differ at run time)", node.name)
    return heads


def _args(heads) -> list:
    vals = [h[1] for h in heads]
    if len(vals) == 1 and isinstance(vals[0], tuple) and vals[0] and \
            not isinstance(vals[0][0], int):
        return list(vals[0])  # Map over Zip
    return vals


def _dtype(node, info, args) -> str:
    elem = info["out"][0].elem
    return getattr(elem, "dtype", None) or args[0].dtype


@behavior("Map")
def map_(ctx, node, ins, outs, env, info):
    """Hold-the-input: peek, compute, send, then release (reference ordering)."""
    chans, out = _inputs(ins), outs[0]
    fn = node.attrs["fn"]
    apply, name = MAP[fn.name], fn.name
    dtype = _dtype(node, info, None) if info["out"] else None
    wb = node.attrs.get("write_back", False)
    while True:
        free = ctx.t
        heads = yield from _peek_all(chans, node)
        if heads is None:
            return
        args = _args(heads)
        res = apply(args, fn, dtype)
        if isinstance(res, TileVal) and wb:
            res.in_mu = True
        flops, fixed = fn_flops(name, fn, args)
        first = env.run_element(ctx, free, heads, env.cost(node, args, res, flops, fixed), name)
        if isinstance(res, TileVal):
            res.first = first
        if out is not None:
            yield (SEND, out, res, heads[0][2])
        yield (POP_ALL, chans)


@behavior("Accum")
def accum(ctx, node, ins, outs, env, info):
    """Per element: roofline, release, accumulate; on a stop >= rank: emit and reset."""
    chans, out = _inputs(ins), outs[0]
    fn, b = node.attrs["fn"], node.attrs["rank"]
    name, init = fn.name, node.attrs.get("init")
    init_name = init.name if init is not None else None
    dtype = _dtype(node, info, None)
    wb = node.attrs.get("write_back", False)
    packs = FUNCTIONS[name].init == "empty"  # grows by concatenation (retiling)
    acc = None
    fresh = True
    bw = env.hw.fabric.onchip_bw
    while True:
        free = ctx.t
        heads = yield from _peek_all(chans, node)
        if heads is None:
            if not fresh:
                raise SimError("Accum: the stream ended inside a reduction group", node.name)
            return
        args = _args(heads)
        s = heads[0][2]
        if fresh:
            acc = accum_init(name, args, fn, init_name, dtype, env.functional)
            fresh = False
        flops, fixed = fn_flops(name, fn, args)
        cycles = env.cost(node, args, None, flops, fixed)
        if s >= b and wb and acc is not None and not packs:
            # the reference sizes the store by the re-initialised accumulator: the declared
            # tile for a zero-initialised one, nothing for an empty (retiling) one
            cycles = max(cycles, -(-acc.nbytes // bw))
        first = env.run_element(ctx, free, heads, cycles, name)
        yield (POP_ALL, chans)
        acc = accum_update(name, acc, args, fn, dtype, env.functional)
        if s >= b:
            if isinstance(acc, TileVal):
                acc.first = first
                acc.in_mu = wb or (acc.in_mu if packs else False)
                env.peak_onchip = max(env.peak_onchip, acc.nbytes)
            if out is not None:
                yield (SEND, out, acc, s - b)
            acc, fresh = None, True


@behavior("Scan")
def scan(ctx, node, ins, outs, env, info):
    """Like Accum, but emits the accumulator after every element."""
    chans, out = _inputs(ins), outs[0]
    fn, b = node.attrs["fn"], node.attrs["rank"]
    name, init = fn.name, node.attrs.get("init")
    dtype = _dtype(node, info, None)
    acc = None
    fresh = True
    while True:
        free = ctx.t
        heads = yield from _peek_all(chans, node)
        if heads is None:
            return
        args = _args(heads)
        s = heads[0][2]
        if fresh:
            acc = accum_init(name, args, fn, init.name if init else None, dtype,
                             env.functional)
            fresh = False
        flops, fixed = fn_flops(name, fn, args)
        first = env.run_element(ctx, free, heads, env.cost(node, args, acc, flops, fixed),
                                name)
        acc = accum_update(name, acc, args, fn, dtype, env.functional)
        emitted = TileVal(acc.rows, acc.cols, acc.dtype, acc.valid, False,
                          None if acc.data is None else acc.data.copy(), first)
        if out is not None:
            yield (SEND, out, emitted, s)
        yield (POP_ALL, chans)
        if s >= b:
            acc, fresh = None, True


@behavior("FlatMap")
def flatmap(ctx, node, ins, outs, env, info):
    """Expand each element into an inner stream; its stop lands on the last piece."""
    chans, out = _inputs(ins), outs[0]
    fn = node.attrs["fn"]
    expand = FLATMAP[fn.name]
    while True:
        heads = yield from _peek_all(chans, node)
        if heads is None:
            return
        args = _args(heads)
        payload = args[0] if len(args) == 1 else tuple(args)
        s = heads[0][2]
        spaced = fn.name in ONE_PER_CYCLE
        empty = True
        for (p, ps), last in with_last(expand(payload, fn, env.functional)):
            empty = False
            if out is not None:
                yield (SEND, out, p, ps + s if last else ps)
            if spaced:
                ctx.t += 1
        if empty and s:
            raise SimError(f"FlatMap `{fn.name}` produced nothing for an element that closes "
                           f"level {s}; the fused stop encoding cannot represent an empty "
                           "sub-tensor", node.name)
        yield (POP_ALL, chans)
