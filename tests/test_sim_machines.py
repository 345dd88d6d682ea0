"""The compiled machines (`stepc/sim/_machines.pyx` and the modules it gathers) against the
behaviors they stand in for: one operator fed hand-made streams on each core, with every
error its behavior raises and the runs that raise none, gives the same error (message and
operator), the same elements downstream at the same cycles, the same clocks, busy times
and scheduling, and the same deadlock report."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from test_sim_native import BUILT, choose

from stepc.hw import load_config
from stepc.ops.base import FnValue
from stepc.sim import kernel as python_core
from stepc.sim.behaviors import BEHAVIORS
from stepc.sim.fabric import SimEnv
from stepc.sim.kernel import SEND, SimError
from stepc.sim.run import compiled_machines
from stepc.sim.tokens import TileVal

pytestmark = pytest.mark.skipif(not BUILT, reason="the compiled kernel stepc.sim._kernel is "
                                "not built (python hatch_build.py builds it in a checkout)")


def tile(in_mu: bool = False) -> TileVal:
    return TileVal(4, 8, "f32", None, in_mu)


def feed(ctx, ch, elements):
    """A source: one element per cycle."""
    for payload, stop in elements:
        yield (SEND, ch, payload, stop)
        ctx.t += 1


def run_op(op: str, attrs: dict, inputs: dict, outs: int = 1, depth: int = 2) -> dict:
    """Operator `op` on the current core, its inputs (parameter -> [(payload, stop)], or for
    `ins` a list of such streams) fed by sources, each output drained by a sink."""
    core = python_core.core()
    k = core.Kernel()
    env = SimEnv(load_config(None, ()), False, None)
    node = SimpleNamespace(name="op", op=op, attrs=attrs)
    ins = {}
    for param, streams in inputs.items():
        chans = []
        for j, elements in enumerate(streams if param == "ins" else [streams]):
            ch = k.channel(f"{param}{j} -> op", depth, f"{param}{j}", "op")
            src = k.context(f"{param}{j}", "External")
            src.outs = [ch]
            k.add(src, feed(src, ch, elements))
            chans.append(ch)
        ins[param] = chans if param == "ins" else chans[0]
    ctx = k.context("op", op)
    ctx.outs = [k.channel(f"op -> sink{i}", depth, "op", f"sink{i}") for i in range(outs)]
    received: list[list] = [[] for _ in range(outs)]

    def sink(me, ch, got):
        while True:
            head = yield (python_core.RECV, ch)
            if head is None:
                return
            got.append((head[0], repr(head[1]), head[2], me.t))
            me.t += 3  # a slow consumer: the operator waits for slots
    info = {"in": {}, "out": [SimpleNamespace(elem=SimpleNamespace(dtype="f32"))] * outs}
    make = compiled_machines(k).get(op) or BEHAVIORS[op]
    k.add(ctx, make(ctx, node, ins, ctx.outs, env, info))
    for i, ch in enumerate(ctx.outs):
        s = k.context(f"sink{i}", "Sink")
        k.add(s, sink(s, ch, received[i]))
    try:
        k.run()
        error = None
    except SimError as e:
        error = (str(e), e.node)
    return {"core": core.__name__, "machine": ctx.gen is None, "error": error,
            "received": received, "steps": k.steps, "seq": k.seq,
            "contexts": [(c.name, c.t, c.busy, c.done) for c in k.contexts],
            "blocked": k.blocked() if error is None else None}


def same_on_both(monkeypatch, *args, **kwargs) -> dict:
    out = {}
    for core in ("native", "python"):
        choose(monkeypatch, core)
        out[core] = run_op(*args, **kwargs)
    fast, slow = out["native"], out["python"]
    assert fast.pop("core") == "stepc.sim._kernel" and slow.pop("core") == "stepc.sim.kernel"
    assert fast.pop("machine") and not slow.pop("machine")
    assert fast == slow
    return fast


PARTITION = {"rank": 1, "switch_cycles": 2, "write_back": True}
CHUNKS = [(tile(True), s) for s in (0, 1, 0, 1, 0, 1, 0, 1)]


@pytest.mark.parametrize("sel,data,error", [
    ([((0,), 0), ((1,), 0), ((0, 1), 0), ((), 0)], CHUNKS, None),
    ([((2,), 0)], CHUNKS, "Partition selector chooses output 2, but there are 2"),
    ([((0,), 0)], CHUNKS, "Partition: data left over after the selector ended"),
    ([((0,), 0)], [(tile(), 0)], "Partition: the data stream ended before the selector"),
    ([((1,), 1)], CHUNKS, "Partition: a chunk ends with stop level 1, but the selector "
                          "element expects 2"),
])
def test_partition(sel, data, error, monkeypatch):
    got = same_on_both(monkeypatch, "Partition", PARTITION, {"in": data, "sel": sel}, outs=2)
    assert got["error"] == (None if error is None else (error, "op"))


REASSEMBLE = {"rank": 1, "switch_cycles": 3, "write_back": False}


@pytest.mark.parametrize("sel,ins,error", [
    ([((0, 1), 0), ((1,), 1)], [CHUNKS[:2], CHUNKS[:4]], None),
    ([((3,), 0)], [CHUNKS[:2], CHUNKS[:2]], "Reassemble selector chooses input 3, but there "
                                            "are 2"),
    ([((0,), 0), ((0,), 0)], [CHUNKS[:2], []], "Reassemble: selected input 0 ended early"),
    ([((0,), 0)], [CHUNKS[:1], []], "Reassemble: input 0 ended inside a chunk"),
    ([((0,), 0)], [CHUNKS[:4], []], "Reassemble: an input has data left after the selector "
                                    "ended"),
])
def test_reassemble(sel, ins, error, monkeypatch):
    got = same_on_both(monkeypatch, "Reassemble", REASSEMBLE, {"ins": ins, "sel": sel})
    assert got["error"] == (None if error is None else (error, "op"))


def test_flatten_and_broadcast(monkeypatch):
    stream = [(tile(), s) for s in (0, 1, 2, 0, 2, 3)]
    got = same_on_both(monkeypatch, "Flatten", {"min": 0, "max": 2}, {"in": stream})
    assert [s for _, _, s, _ in got["received"][0]] == [0, 0, 0, 0, 0, 1]
    got = same_on_both(monkeypatch, "Broadcast", {}, {"in": stream}, outs=3, depth=1)
    assert got["received"][0] == got["received"][2] and len(got["received"][1]) == 6


ADD = FnValue("add", (), None)


@pytest.mark.parametrize("ins,error", [
    ([[(tile(True), s) for s in (0, 1, 0, 1)]] * 2, None),
    ([[(tile(), 0)] * 3, [(tile(), 0)] * 2], "Map inputs end at different elements "
                                             "(lockstep streams must have equal shapes)"),
    ([[(tile(), 0)], [(tile(), 1)]], "Map inputs disagree on stop levels [0, 1] (their "
                                     "shapes differ at run time)"),
])
def test_map(ins, error, monkeypatch):
    got = same_on_both(monkeypatch, "Map", {"fn": ADD, "write_back": True}, {"ins": ins})
    assert got["error"] == (None if error is None else (error, "op"))


@pytest.mark.parametrize("stops,error", [
    ((0, 1, 0, 2, 1), None),
    ((0, 1, 0), "Accum: the stream ended inside a reduction group"),
])
def test_accum(stops, error, monkeypatch):
    got = same_on_both(monkeypatch, "Accum", {"fn": ADD, "rank": 1, "write_back": True},
                       {"ins": [[(tile(True), s) for s in stops]]})
    assert got["error"] == (None if error is None else (error, "op"))


EXPERT_ADDR = FnValue("expert_addr", (("tiles", 3), ("base", 2)), None)
RETILE = FnValue("retile_streamify", (("filter", True),), None)


@pytest.mark.parametrize("fn,ins,error", [
    (EXPERT_ADDR, [[((1,), 0), ((0,), 1), ((2,), 0)]], None),  # one address per cycle
    (EXPERT_ADDR, [[((0, 1), 0)]], "expert_addr needs a one-hot selector, found [0, 1]"),
    (RETILE, [[(TileVal(4, 8, "f32", 3), 0), (TileVal(2, 8, "f32", 2), 1)]], None),
    (RETILE, [[(TileVal(4, 8, "f32", 0), 0), (TileVal(4, 8, "f32", 0), 1)]],
     "FlatMap `retile_streamify` produced nothing for an element that closes level 1; the "
     "fused stop encoding cannot represent an empty sub-tensor"),
])
def test_flatmap(fn, ins, error, monkeypatch):
    got = same_on_both(monkeypatch, "FlatMap", {"fn": fn}, {"ins": ins})
    assert got["error"] == (None if error is None else (error, "op"))
    assert error is not None or got["received"][0]
