"""Token notation and harness shared by the token-by-token tests of the simulator behaviors
(tests/test_sim_*.py: one behavior per operator in `stepc.ops.OPS`, grouped by family).

Each test replays a worked token sequence of the semantic reference (semantics.md sections
2.1-2.25 with semantics-errata.md; simulation-errata.md items 1, 4, 6, 7 for timing) and
compares the output token by token: payload and stop level, and, where the references
state a simple rule, the visible time.

Token notation (as in the references): `a b S1 c S2 D` is written paper-style and converted
to the simulator's fused encoding, where a stop token S_k is attached to the value before
it (stop 0 = plain value) and Done is the channel closing. stepc follows the paper's shape
conventions: a stream of shape [D_N, .., D_0] has rank N, its last element carries S_N (no
stop at all for rank 0), and the outermost dim is never closed by a stop token.

Single operators run through `stepc.sim.harness.run_operator` (pre-filled input FIFOs,
deep output FIFOs) or through `run_net` below (the same, plus bounded outputs and consumer
contexts, for back-pressure). Sources, sinks and the off-chip operators run as tiny
compiled programs through `stepc.sim.run.simulate`; a wrapper around the Sink behavior
(`recording_sink`, installed by the `recorded` fixture of tests/conftest.py) records what
each Sink receives.

Where stepc disagrees with the references the test is kept as written and marked
`xfail(strict=True)` with a "BUG:" reason (none are open).
"""

from __future__ import annotations

import textwrap

import numpy as np

from stepc.frontend import compile_source
from stepc.graph.program import OpNode
from stepc.hw import load_config
from stepc.ops import OPS
from stepc.ops.base import STREAMS, VARSTREAMS, FnValue, stream
from stepc.sim.behaviors import BEHAVIORS
from stepc.sim.fabric import SimEnv
from stepc.sim.hbm import make_memory
from stepc.sim.kernel import RECV, core
from stepc.sim.run import simulate
from stepc.sim.tokens import BufferVal, TileVal
from stepc.source import SourceFile, Span
from stepc.types import Tile

# =====================================================================================
# Token notation
# =====================================================================================


F32 = Tile("f32", 1, 1)


class Names:
    """Payload objects (tiles) named for the paper-style notation."""

    def __init__(self):
        self.by_name: dict[str, object] = {}
        self.by_id: dict[int, str] = {}

    def add(self, name: str, obj) -> object:
        self.by_name[name] = obj
        self.by_id[id(obj)] = name
        return obj

    def tiles(self, names: str, rows: int = 1, cols: int = 1, dtype: str = "f32",
              **kw) -> list[TileVal]:
        return [self.add(n, TileVal(rows, cols, dtype, **kw)) for n in names.split()]


def paper(text: str, names: Names | None = None) -> list[tuple[object, int]]:
    """`a b S1 c S2 D` -> [(a, 0), (b, 1), (c, 2)] (fused encoding; `D` is optional).
    `{0,1}` is a selector (a tuple of selected indices), `T`/`F` are bools."""
    out: list[list] = []
    done = False
    for tok in text.split():
        assert not done, f"token {tok!r} after D in {text!r}"
        if tok == "D":
            done = True
        elif tok[0] == "S" and tok[1:].isdigit():
            assert out and out[-1][1] == 0, f"stop {tok} without a value before it in {text!r}"
            out[-1][1] = int(tok[1:])
        elif tok.startswith("{"):
            inner = tok.strip("{}")
            out.append([tuple(int(x) for x in inner.split(",")) if inner else (), 0])
        elif tok in ("T", "F"):
            out.append([tok == "T", 0])
        elif names is not None and tok in names.by_name:
            out.append([names.by_name[tok], 0])
        else:
            out.append([tok, 0])
    return [(v, s) for v, s in out]


def name_of(p, names: Names | None = None) -> str:
    if names is not None and id(p) in names.by_id:
        return names.by_id[id(p)]
    if isinstance(p, bool):
        return "T" if p else "F"
    if isinstance(p, tuple) and all(isinstance(x, int) for x in p):
        return "{" + ",".join(map(str, p)) + "}"
    if isinstance(p, tuple):
        return "(" + ",".join(name_of(x, names) for x in p) + ")"
    if isinstance(p, BufferVal):
        return "B[" + show(p.elements, names) + "]"
    if isinstance(p, TileVal) and p.data is not None and p.data.size == 1:
        return str(int(p.data.reshape(-1)[0]))
    return str(p)


def show(tokens, names: Names | None = None) -> str:
    """The paper-style rendering of fused tokens [(payload, stop)] or [(t, payload, stop)]."""
    parts = []
    for tok in tokens:
        p, s = tok[-2], tok[-1]
        parts.append(name_of(p, names))
        if s:
            parts.append(f"S{s}")
    return " ".join(parts + ["D"])


def toks(out) -> list[tuple[object, int]]:
    return [(p, s) for _, p, s in out]


def times(out) -> list[int]:
    return [t for t, _, _ in out]


def st(shape, elem=None):
    """A stream type (for the `info` the behaviors read: ranks, output element types)."""
    return stream(elem if elem is not None else Tile("f32", 1, 1), tuple(shape))


def fn(name: str, **kw) -> FnValue:
    return FnValue(name, tuple(kw.items()), None)


def val_tile(v: float, rows: int = 1, cols: int = 1, dtype: str = "f32", **kw) -> TileVal:
    return TileVal(rows, cols, dtype, data=np.full((rows, cols), v, dtype=np.float32), **kw)


def values(out) -> list[tuple[float, int]]:
    """(first element of each output tile, stop)."""
    return [(float(p.data.reshape(-1)[0]), s) for _, p, s in out]


# =====================================================================================
# A harness with bounded outputs and consumer contexts (back-pressure)
# =====================================================================================


def run_net(op: str, attrs: dict, inputs: dict, *, info_in=None, info_out=None,
            out_caps: dict | None = None, consumers: dict | None = None, times_in=None,
            hw=None):
    """Like `run_operator`, but output i may be bounded (`out_caps[i]`) and drained by a
    consumer context (`consumers[i](ctx, channel, log)` generator). Returns
    (outputs as lists of (visible, payload, stop), consumer logs, input channels, ctx)."""
    spec = OPS[op]
    full = {p.name: p.default for p in spec.all_params if not p.is_stream}
    full.update(attrs)
    outputs = spec.outputs(full)
    node = OpNode(op.lower(), op, full, [], outputs, Span("<test>", 1, 1, 1, 1), {})
    kernel = core().Kernel()
    hw = hw or load_config()
    kernel.memory = make_memory(kernel, hw)
    env = SimEnv(hw, True, kernel.memory)
    env.ports[node.name] = (0, 0)
    ins, in_chans = {}, {}
    for p in spec.stream_params:
        if p.name not in inputs:
            continue
        many = p.kind in (STREAMS, VARSTREAMS)
        seqs = inputs[p.name] if many else [inputs[p.name]]
        chans = []
        for k, seq in enumerate(seqs):
            ch = kernel.channel(f"{p.name}{k}", 1 << 30, "test", node.name)
            tt = (times_in or {}).get(p.name)
            if tt is not None and many:
                tt = tt[k]
            for i, (v, s) in enumerate(seq):
                ch.q.append((tt[i] if tt is not None else 0, v, s))
                ch.outstanding += 1
            ch.closed = True
            chans.append(ch)
        ins[p.name] = chans if many else chans[0]
        in_chans[p.name] = chans if many else chans[0]
    out_caps = out_caps or {}
    outs = [kernel.channel(f"out{i}", out_caps.get(i, 1 << 30), node.name, f"c{i}")
            for i in range(len(outputs))]
    ctx = kernel.context(node.name, op)
    ctx.outs = outs
    info = {"in": info_in or {}, "out": info_out or [None] * len(outputs)}
    kernel.add(ctx, BEHAVIORS[op](ctx, node, ins, outs, env, info))
    logs = {}
    for i, make in (consumers or {}).items():
        c = kernel.context(f"c{i}", "consumer")
        logs[i] = []
        kernel.add(c, make(c, outs[i], logs[i]))
    kernel.run()
    return [list(ch.q) for ch in outs], logs, in_chans, ctx


def consumer(start: int = 0, every: int = 0):
    """A consumer that first waits until `start`, then dequeues each element on arrival
    (plus `every` cycles of its own per element); it logs (dequeue time, payload, stop)."""
    def make(ctx, ch, log):
        ctx.t = start
        while True:
            h = yield (RECV, ch)
            if h is None:
                return
            log.append((ctx.t, h[1], h[2]))
            ctx.t += every
    return make


# =====================================================================================
# Tiny compiled programs, with a recording Sink
# =====================================================================================


RECORDED: dict[str, list] = {}


def recording_sink(real):
    """Wrap a Sink behavior: log every element it receives, keep its timing."""
    def behavior(ctx, node, ins, outs, env, info):
        log = RECORDED.setdefault(node.name, [])
        gen = real(ctx, node, ins, outs, env, info)
        value = None
        while True:
            try:
                op = gen.send(value)
            except StopIteration:
                return
            value = yield op
            if op[0] == RECV and value is not None:
                log.append(value)
    return behavior


def compile_program(text: str):
    c = compile_source(SourceFile("t.step", textwrap.dedent(text)), {})
    errors = [f"{d.code} {d.message}" for d in c.diagnostics.items
              if d.severity.value == "error"]
    assert c.typed is not None and not errors, errors
    return c.typed


def run_program(text: str, traces=None, hw=None):
    typed = compile_program(text)
    r = simulate(typed, hw or load_config(), traces=traces, functional=True)
    assert r.deadlock is None, r.deadlock
    return typed, r


def sunk(recorded, typed, label: str) -> list:
    """What the Sink consuming the stream bound to `label` received."""
    prog = typed.program
    src = None
    for node in prog.nodes.values():
        for port in range(len(node.outputs)):
            if node.port_label(port) == label:
                src = (node.name, port)
    assert src is not None, label
    for e in prog.edges:
        if (e.src, e.port) == src and prog.nodes[e.dst].op == "Sink":
            return recorded[e.dst]
    raise AssertionError(f"`{label}` does not feed a Sink")


def first_value(p) -> int:
    return int(p.data.reshape(-1)[0])
