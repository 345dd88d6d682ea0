"""Higher-order operators: Map, Accum, Scan, FlatMap on the roofline-timed fabric."""

from __future__ import annotations

from stepc.ops.functions import FUNCTIONS
from stepc.sim.behaviors.table import behavior
from stepc.sim.kernel import PEEK_ALL, POP_ALL, SEND, SimError
from stepc.sim.tokens import TileVal
from stepc.sim.values import ACCUMULATE, FLATMAP, MAP, accum_init

# address and selector generators emit one element per cycle (the reference's
# CacheReadAddrGen); retiling sends all its pieces at once
ONE_PER_CYCLE = ("cache_read_addr", "filter_last_tile", "expert_addr")


def _inputs(ins) -> list:
    return ins["ins"]


def _checked(heads, node):
    """Every input's head from a PEEK_ALL (the clock jumped to the latest arrival), or None
    when all ended; inputs ending apart or on different stop levels are an error."""
    if heads and heads[0] is not None:
        s = heads[0][2]
        for h in heads:
            if h is None or h[2] != s:
                break
        else:
            return heads
    if all(h is None for h in heads):
        return None
    if any(h is None for h in heads):
        raise SimError(f"{node.op} inputs end at different elements (lockstep streams must "
                       "have equal shapes)", node.name)
    stops = {h[2] for h in heads}
    raise SimError(f"{node.op} inputs disagree on stop levels {sorted(stops)} "
                   "(their shapes differ at run time)", node.name)


def _args(heads) -> list:
    if len(heads) == 1:
        v = heads[0][1]
        if isinstance(v, tuple) and v and not isinstance(v[0], int):
            return list(v)  # Map over Zip
        return [v]
    return [h[1] for h in heads]


def _dtype(node, info, args) -> str:
    elem = info["out"][0].elem
    return getattr(elem, "dtype", None) or args[0].dtype


@behavior("Map")
def map_(ctx, node, ins, outs, env, info):
    """Hold-the-input: peek, compute, send, then release (reference ordering)."""
    chans, out = _inputs(ins), outs[0]
    peek, pop = (PEEK_ALL, chans), (POP_ALL, chans)
    fn = node.attrs["fn"]
    apply, name = MAP[fn.name], fn.name
    cost = env.element_cost(node, fn)
    dtype = _dtype(node, info, None) if info["out"] else None
    wb = node.attrs.get("write_back", False)
    while True:
        free = ctx.t
        heads = _checked((yield peek), node)
        if heads is None:
            return
        args = _args(heads)
        res = apply(args, fn, dtype)
        tile = isinstance(res, TileVal)
        if tile and wb:
            res.in_mu = True
        first = env.run_element(ctx, free, heads, cost(args, res), name)
        if tile:
            res.first = first
        if out is not None:
            yield (SEND, out, res, heads[0][2])
        yield pop


@behavior("Accum")
def accum(ctx, node, ins, outs, env, info):
    """Per element: roofline, release, accumulate; on a stop >= rank: emit and reset."""
    chans, out = _inputs(ins), outs[0]
    peek, pop = (PEEK_ALL, chans), (POP_ALL, chans)
    fn, b = node.attrs["fn"], node.attrs["rank"]
    name, init = fn.name, node.attrs.get("init")
    init_name = init.name if init is not None else None
    cost, update = env.element_cost(node, fn), ACCUMULATE[name][1]
    dtype = _dtype(node, info, None)
    functional = env.functional
    wb = node.attrs.get("write_back", False)
    packs = FUNCTIONS[name].init == "empty"  # grows by concatenation (retiling)
    acc = None
    fresh = True
    bw = env.hw.fabric.onchip_bw
    while True:
        free = ctx.t
        heads = _checked((yield peek), node)
        if heads is None:
            if not fresh:
                raise SimError("Accum: the stream ended inside a reduction group", node.name)
            return
        args = _args(heads)
        s = heads[0][2]
        if fresh:
            acc = accum_init(name, args, fn, init_name, dtype, functional)
            fresh = False
        cycles = cost(args, None)
        if s >= b and wb and acc is not None and not packs:
            # the reference sizes the store by the re-initialised accumulator: the declared
            # tile for a zero-initialised one, nothing for an empty (retiling) one
            cycles = max(cycles, -(-acc.nbytes // bw))
        first = env.run_element(ctx, free, heads, cycles, name)
        yield pop
        acc = update(acc, args, fn, dtype, functional)
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
    peek, pop = (PEEK_ALL, chans), (POP_ALL, chans)
    fn, b = node.attrs["fn"], node.attrs["rank"]
    name, init = fn.name, node.attrs.get("init")
    cost, update = env.element_cost(node, fn), ACCUMULATE[name][1]
    dtype = _dtype(node, info, None)
    acc = None
    fresh = True
    while True:
        free = ctx.t
        heads = _checked((yield peek), node)
        if heads is None:
            return
        args = _args(heads)
        s = heads[0][2]
        if fresh:
            acc = accum_init(name, args, fn, init.name if init else None, dtype,
                             env.functional)
            fresh = False
        first = env.run_element(ctx, free, heads, cost(args, acc), name)
        acc = update(acc, args, fn, dtype, env.functional)
        emitted = TileVal(acc.rows, acc.cols, acc.dtype, acc.valid, False,
                          None if acc.data is None else acc.data.copy(), first)
        if out is not None:
            yield (SEND, out, emitted, s)
        yield pop
        if s >= b:
            acc, fresh = None, True


@behavior("FlatMap")
def flatmap(ctx, node, ins, outs, env, info):
    """Expand each element into an inner stream; its stop lands on the last piece (one
    piece of lookahead: the next is taken before the previous is sent)."""
    chans, out = _inputs(ins), outs[0]
    peek, pop = (PEEK_ALL, chans), (POP_ALL, chans)
    fn = node.attrs["fn"]
    expand = FLATMAP[fn.name]
    spaced = fn.name in ONE_PER_CYCLE
    while True:
        heads = _checked((yield peek), node)
        if heads is None:
            return
        args = _args(heads)
        payload = args[0] if len(args) == 1 else tuple(args)
        s = heads[0][2]
        pieces = iter(expand(payload, fn, env.functional))
        held = next(pieces, None)  # a piece is a (payload, stop) pair, never None
        if held is None:
            if s:
                raise SimError(f"FlatMap `{fn.name}` produced nothing for an element that "
                               f"closes level {s}; the fused stop encoding cannot represent "
                               "an empty sub-tensor", node.name)
        else:
            for piece in pieces:
                if out is not None:
                    yield (SEND, out, held[0], held[1])
                if spaced:
                    ctx.t += 1
                held = piece
            if out is not None:
                yield (SEND, out, held[0], held[1] + s)
            if spaced:
                ctx.t += 1
        yield pop
