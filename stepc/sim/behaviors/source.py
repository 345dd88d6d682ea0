"""Sources and sinks: external streams, tensor-driven generators, Sink."""

from __future__ import annotations

from stepc.sim.behaviors.table import behavior
from stepc.sim.kernel import RECV, SEND
from stepc.sim.tokens import int_tile, stops_for_shape


def _emit(ctx, out, elements):
    """A generator source: one element per cycle, the first visible at cycle 1."""
    for val, s in elements:
        if out is not None:
            yield (SEND, out, val, s)
        ctx.t += 1


@behavior("External")
def external(ctx, node, ins, outs, env, info):
    yield from _emit(ctx, outs[0], env.externals[node.name])


@behavior("SelectGen")
def select_gen(ctx, node, ins, outs, env, info):
    ids = env.tensors[node.attrs["tensor"].name]
    t = node.attrs["tensor"]
    view = ids[tuple(t.index)] if t.index else ids
    n = node.attrs["n"]
    if node.attrs["onehot"]:
        flat = view.reshape(-1)
        shape = list(view.shape)
        elems = [((int(i),), s) for i, s in zip(flat, stops_for_shape(shape))]
    else:
        rows = view.reshape(-1, view.shape[-1])
        shape = list(view.shape[:-1])
        elems = [(tuple(sorted({int(i) for i in r})), s)
                 for r, s in zip(rows, stops_for_shape(shape))]
    for sel, _ in elems:
        for i in sel:
            if not 0 <= i < n:
                from stepc.sim.kernel import SimError
                raise SimError(f"SelectGen: id {i} in `{t}` is out of range for n={n}",
                               node.name)
    yield from _emit(ctx, outs[0], elems)


@behavior("MetadataGen")
def metadata_gen(ctx, node, ins, outs, env, info):
    t = node.attrs["tensor"]
    arr = env.tensors[t.name]
    view = arr[tuple(t.index)] if t.index else arr
    elems = [(int_tile(int(v), t.dtype), s)
             for v, s in zip(view.reshape(-1), stops_for_shape(list(view.shape)))]
    yield from _emit(ctx, outs[0], elems)


@behavior("Sink")
def sink(ctx, node, ins, outs, env, info):
    src = ins["in"]
    while True:
        head = yield (RECV, src)
        if head is None:
            return
        ctx.t += 1
