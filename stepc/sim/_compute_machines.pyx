"""Compute operators compiled as state machines for the compiled kernel (see `_machines`):
Map, Accum and FlatMap (`stepc/sim/behaviors/compute.py`). The element's function, cost,
roofline and expansion stay the behaviors' (`values`, `SimEnv.element_cost`,
`SimEnv.run_element`); the machine takes the place of the generator around them."""

from stepc.sim._kernel cimport Ctx, Kernel, Machine

from stepc.ops.functions import FUNCTIONS
from stepc.sim.behaviors.compute import ONE_PER_CYCLE, _checked, _dtype
from stepc.sim.kernel import PEEK_ALL, SimError
from stepc.sim.fabric import kind
from stepc.sim.tokens import TileVal
from stepc.sim.values import ACCUMULATE, FLATMAP, MAP, accum_init

# a machine's states: the operation it performs next
cdef enum:
    TAKE, GIVE, RELEASE


cdef list _lockstep(list heads, node):
    """`compute._checked`: the heads when every input has one on the same stop level (checked
    here), else what `_checked` says (None: all ended; or its error)."""
    cdef Py_ssize_t j
    if not heads:
        return _checked(heads, node)
    first = heads[0]
    if first is not None:
        s = first[2]
        for j in range(1, len(heads)):
            h = heads[j]
            if h is None or h[2] != s:
                return _checked(heads, node)
        return heads
    return _checked(heads, node)


cdef list _arguments(list heads):
    """`compute._args`: the element's arguments."""
    if len(heads) == 1:
        v = heads[0][1]
        if isinstance(v, tuple) and v and not isinstance(v[0], int):
            return list(v)  # Map over Zip
        return [v]
    return [h[1] for h in heads]


cdef class Cost:
    """A node's `fabric.ElementCost` called from C: the arguments' kind read here and the
    memoised terms looked up (the `ElementCost` works out what is not memoised yet)."""

    cdef object of, by_kind, totals, name
    cdef bint write_back

    def __init__(self, of):
        self.of, self.by_kind, self.totals, self.name = of, of.by_kind, of.totals, of.name
        self.write_back = of.write_back

    cdef object cycles(self, list args, out):
        """`ElementCost.__call__(args, out)`."""
        cdef Py_ssize_t n = len(args)
        if n == 1 and type(args[0]) is TileVal:
            a = args[0]
            key = (a.rows, a.cols, a.dtype, a.in_mu)
        elif n == 2 and type(args[0]) is TileVal and type(args[1]) is TileVal:
            a, b = args[0], args[1]
            key = (a.rows, a.cols, a.dtype, a.in_mu, b.rows, b.cols, b.dtype, b.in_mu)
        else:
            key = kind(args)
        known = self.by_kind.get(key) if key is not None else None
        if known is None:
            known = self.of.known(key, args)
        if self.write_back and out is not None:
            return self.of.finish(known, out)
        cycles, flops = known
        if flops:
            self.totals[self.name] = self.totals.get(self.name, 0) + flops
        return cycles


cdef object _run_element(Ctx ctx, env, bint streams, long long free, list heads, cycles,
                         str label):
    """`SimEnv.run_element`: without streamed tiles, the unit works from the clock on."""
    if not streams:
        ctx._work(ctx.clock, cycles, label)
        return None
    return env.run_element(ctx, free, heads, cycles, label)


cdef class Map(Machine):
    """`compute.map_`: peek every input, compute, send, then release them."""

    cdef list chans
    cdef object out, node, env, fn, apply, name, dtype, wb, val, stop
    cdef Cost cost
    cdef tuple peek
    cdef int state
    cdef bint fresh  # the element's first attempt to peek (its unit is free from here)
    cdef bint streams  # fabric.stream_tile
    cdef long long free
    cdef str label

    def __init__(self, ctx, node, ins, outs, env, info):
        self.chans, self.out, self.node, self.env = ins["ins"], outs[0], node, env
        self.peek = (PEEK_ALL, self.chans)
        self.fn = node.attrs["fn"]
        self.apply, self.name = MAP[self.fn.name], self.fn.name
        self.cost = Cost(env.element_cost(node, self.fn))
        self.dtype = _dtype(node, info, None) if info["out"] else None
        self.wb = node.attrs.get("write_back", False)
        self.streams, self.label = bool(env.hw.fabric.stream_tile), self.fn.name
        self.state, self.fresh = TAKE, True

    cdef int resume(self, Kernel k, Ctx ctx) except -1:
        while True:
            if self.state == TAKE:
                if self.fresh:
                    self.free, self.fresh = ctx.clock, False
                heads = k.peek_all(ctx, self.chans, self.peek)
                if heads is None:
                    return 0
                heads = _lockstep(heads, self.node)
                if heads is None:
                    return 1
                args = _arguments(heads)
                res = self.apply(args, self.fn, self.dtype)
                tile = isinstance(res, TileVal)
                if tile and self.wb:
                    res.in_mu = True
                first = _run_element(ctx, self.env, self.streams, self.free, heads,
                                     self.cost.cycles(args, res), self.label)
                if tile:
                    res.first = first
                self.val, self.stop = res, heads[0][2]
                self.state = GIVE
            if self.state == GIVE:
                if self.out is not None and not k.send(ctx, self.out, self.val, self.stop):
                    return 0
                self.val = self.stop = None
            k.release_all(ctx, self.chans)
            self.state, self.fresh = TAKE, True


cdef class Accum(Machine):
    """`compute.accum`: per element, roofline, release, accumulate; on a stop >= rank,
    emit the accumulator and start anew."""

    cdef list chans
    cdef object out, node, env, fn, name, init_name, update, dtype, wb, bw, acc, stop
    cdef Cost cost
    cdef bint functional, packs, fresh_group, fresh, streams
    cdef long long rank, free
    cdef str label
    cdef tuple peek
    cdef int state

    def __init__(self, ctx, node, ins, outs, env, info):
        self.chans, self.out, self.node, self.env = ins["ins"], outs[0], node, env
        self.peek = (PEEK_ALL, self.chans)
        self.fn, self.rank = node.attrs["fn"], node.attrs["rank"]
        self.name, init = self.fn.name, node.attrs.get("init")
        self.init_name = init.name if init is not None else None
        self.cost = Cost(env.element_cost(node, self.fn))
        self.update = ACCUMULATE[self.name][1]
        self.dtype = _dtype(node, info, None)
        self.functional = env.functional
        self.wb = node.attrs.get("write_back", False)
        self.packs = FUNCTIONS[self.name].init == "empty"  # grows by concatenation
        self.bw = env.hw.fabric.onchip_bw
        self.streams, self.label = bool(env.hw.fabric.stream_tile), self.name
        self.fresh_group = True
        self.state, self.fresh = TAKE, True

    cdef int resume(self, Kernel k, Ctx ctx) except -1:
        cdef object s
        while True:
            if self.state == TAKE:
                if self.fresh:
                    self.free, self.fresh = ctx.clock, False
                heads = k.peek_all(ctx, self.chans, self.peek)
                if heads is None:
                    return 0
                heads = _lockstep(heads, self.node)
                if heads is None:
                    if not self.fresh_group:
                        raise SimError("Accum: the stream ended inside a reduction group",
                                       self.node.name)
                    return 1
                args = _arguments(heads)
                s = heads[0][2]
                if self.fresh_group:
                    self.acc = accum_init(self.name, args, self.fn, self.init_name,
                                          self.dtype, self.functional)
                    self.fresh_group = False
                cycles = self.cost.cycles(args, None)
                if s >= self.rank and self.wb and self.acc is not None and not self.packs:
                    cycles = max(cycles, -(-self.acc.nbytes // self.bw))
                first = _run_element(ctx, self.env, self.streams, self.free, heads, cycles,
                                     self.label)
                k.release_all(ctx, self.chans)
                self.acc = self.update(self.acc, args, self.fn, self.dtype, self.functional)
                if s < self.rank:
                    self.fresh = True
                    continue
                acc = self.acc
                if isinstance(acc, TileVal):
                    acc.first = first
                    acc.in_mu = self.wb or (acc.in_mu if self.packs else False)
                    self.env.peak_onchip = max(self.env.peak_onchip, acc.nbytes)
                self.stop = s - self.rank
                self.state = GIVE
            if self.out is not None and not k.send(ctx, self.out, self.acc, self.stop):
                return 0
            self.acc, self.stop, self.fresh_group = None, None, True
            self.state, self.fresh = TAKE, True


cdef class FlatMap(Machine):
    """`compute.flatmap`: each element expanded into an inner stream whose last piece
    carries the element's stop; the next piece is taken before the previous is sent."""

    cdef list chans
    cdef object out, node, fn, expand, pieces, held, following, stop
    cdef bint functional, spaced
    cdef tuple peek
    cdef int state

    def __init__(self, ctx, node, ins, outs, env, info):
        self.chans, self.out, self.node = ins["ins"], outs[0], node
        self.peek = (PEEK_ALL, self.chans)
        self.fn = node.attrs["fn"]
        self.expand, self.functional = FLATMAP[self.fn.name], env.functional
        self.spaced = self.fn.name in ONE_PER_CYCLE
        self.state = TAKE

    cdef int resume(self, Kernel k, Ctx ctx) except -1:
        while True:
            if self.state == TAKE:
                heads = k.peek_all(ctx, self.chans, self.peek)
                if heads is None:
                    return 0
                heads = _lockstep(heads, self.node)
                if heads is None:
                    return 1
                args = _arguments(heads)
                payload = args[0] if len(args) == 1 else tuple(args)
                self.stop = heads[0][2]
                self.pieces = iter(self.expand(payload, self.fn, self.functional))
                self.held = next(self.pieces, None)  # a piece: (payload, stop), never None
                if self.held is None:
                    if self.stop:
                        raise SimError(f"FlatMap `{self.fn.name}` produced nothing for an "
                                       f"element that closes level {self.stop}; the fused "
                                       "stop encoding cannot represent an empty sub-tensor",
                                       self.node.name)
                    self.pieces = None
                    k.release_all(ctx, self.chans)
                    continue
                self.following = next(self.pieces, None)
                self.state = GIVE
            last = self.following is None
            if self.out is not None:
                stop = self.held[1] + self.stop if last else self.held[1]
                if not k.send(ctx, self.out, self.held[0], stop):
                    return 0
            if self.spaced:
                ctx.clock += 1
            if last:
                self.pieces = self.held = self.stop = None
                k.release_all(ctx, self.chans)
                self.state = TAKE
            else:
                self.held = self.following
                self.following = next(self.pieces, None)


MACHINES = {"Map": Map, "Accum": Accum, "FlatMap": FlatMap}
"""Operator -> its machine."""
