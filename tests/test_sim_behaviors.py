"""Token-by-token tests of every simulator behavior (one per operator in `stepc.ops.OPS`).

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
records what each Sink receives.

Where stepc disagrees with the references the test is kept as written and marked
`xfail(strict=True)` with a "BUG:" reason (none are open).
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import sympy

from stepc.frontend import compile_source
from stepc.graph.program import OpNode
from stepc.hw import load_config
from stepc.ops import OPS
from stepc.ops.base import STREAMS, VARSTREAMS, FnValue, TensorRef, stream
from stepc.sim.behaviors import BEHAVIORS
from stepc.sim.fabric import SimEnv
from stepc.sim.harness import run_operator
from stepc.sim.hbm import make_memory
from stepc.sim.kernel import RECV, Ctx, Kernel, SimError
from stepc.sim.run import simulate
from stepc.sim.tokens import BufferVal, TileVal, int_tile
from stepc.source import SourceFile, Span
from stepc.types import Buffer, Tile

# =====================================================================================
# Token notation
# =====================================================================================


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
    kernel = Kernel()
    hw = hw or load_config()
    kernel.memory = make_memory(kernel, hw)
    env = SimEnv(hw, True)
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
    ctx = Ctx(node.name, op)
    ctx.outs = outs
    info = {"in": info_in or {}, "out": info_out or [None] * len(outputs)}
    kernel.add(ctx, BEHAVIORS[op](ctx, node, ins, outs, env, info))
    logs = {}
    for i, make in (consumers or {}).items():
        c = Ctx(f"c{i}", "consumer")
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


def _recording(real):
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


@pytest.fixture
def recorded(monkeypatch):
    RECORDED.clear()
    monkeypatch.setitem(BEHAVIORS, "Sink", _recording(BEHAVIORS["Sink"]))
    return RECORDED


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


# =====================================================================================
# Coverage: every operator has tests here
# =====================================================================================


COVERED = {
    "LinearOffChipLoad", "LinearOffChipStore", "RandomOffChipLoad", "RandomOffChipStore",
    "Bufferize", "Streamify", "Partition", "Reassemble", "EagerMerge", "Parallelize",
    "Broadcast", "Map", "Accum", "Scan", "FlatMap", "Flatten", "Reshape", "Promote", "Expand",
    "Repeat", "Zip", "External", "SelectGen", "MetadataGen", "Sink",
}


def test_every_operator_is_covered():
    assert set(OPS) == COVERED
    assert set(BEHAVIORS) == set(OPS)


def test_notation_round_trip():
    seq = paper("1 2 S1 3 S2 4 S1 5 6 7 S2 D")
    assert seq == [("1", 0), ("2", 1), ("3", 2), ("4", 1), ("5", 0), ("6", 0), ("7", 2)]
    assert show(seq) == "1 2 S1 3 S2 4 S1 5 6 7 S2 D"
    assert paper("{0,1} {} {2} S1") == [((0, 1), 0), ((), 0), ((2,), 1)]


# =====================================================================================
# Shape operators: Flatten, Reshape, Promote, Expand, Repeat, Zip
# =====================================================================================


def test_flatten_paper_2_2_D0_example():
    """Paper 3.1 / semantics 0.2: `1 2 S1 3 S2 4 S1 5 6 7 S2 D` has shape [2, 2, D0];
    Flatten(min=0, max=1) gives [2, D0']: the inner S1s vanish, S2 becomes S1."""
    outs, _ = run_operator("Flatten", {"min": 0, "max": 1},
                           {"in": paper("1 2 S1 3 S2 4 S1 5 6 7 S2 D")})
    assert show(outs[0]) == "1 2 3 S1 4 5 6 7 S1 D"


def test_flatten_2_19_example():
    outs, _ = run_operator("Flatten", {"min": 0, "max": 1},
                           {"in": paper("a b c S1 d e f S2 D")})
    assert show(outs[0]) == "a b c d e f S1 D"


def test_flatten_stop_rule_above_and_inside_the_range():
    """s <= min unchanged; min < s <= max -> min; s > max -> s - (max - min)."""
    outs, _ = run_operator("Flatten", {"min": 1, "max": 2},
                           {"in": paper("a S1 b S2 c S1 d S3 e S1 f S3 D")})
    assert show(outs[0]) == "a S1 b S1 c S1 d S2 e S1 f S2 D"


def test_flatten_to_rank0_drops_every_stop():
    """min = 0: stops inside the range become plain values."""
    outs, _ = run_operator("Flatten", {"min": 0, "max": 2},
                           {"in": paper("a S1 b S2 c S1 d S2 D")})
    assert show(outs[0]) == "a b c d D"


def test_flatten_adds_no_cycles():
    """2.19: 0 cycles (one channel hop)."""
    outs, _ = run_operator("Flatten", {"min": 0, "max": 1}, {"in": paper("a b S1 c S1")},
                           times={"in": [0, 4, 9]})
    assert times(outs[0]) == [1, 5, 10]


def _reshape(seq, chunk, rank=0, pad=True, names=None, t=None):
    attrs = {"chunk": chunk, "rank": rank, "pad": fn("zero") if pad else None}
    outs, _ = run_operator("Reshape", attrs, {"in": paper(seq, names)},
                           times={"in": t} if t else None)
    return outs


def test_reshape_b0_with_padding_2_20_example():
    """2.20: b=0, S=2, pad p: `a b c d e S1 D` -> `a b S1 c d S1 e p S2 D`; the pad output
    marks the padding element."""
    names = Names()
    names.tiles("a b c d e", rows=4, cols=8)
    data, pad = _reshape("a b c d e S1 D", 2, names=names)
    assert [s for _, _, s in data] == [0, 1, 0, 1, 0, 2]
    assert show(data[:5], names) == "a b S1 c d S1 e D"
    p = data[5][1]
    assert isinstance(p, TileVal) and (p.rows, p.cols) == (4, 8)
    assert p.valid == 0  # a pad tile has no valid rows (the tile `offset`)
    assert show(pad) == "F F S1 F F S1 F T S2 D"


def test_reshape_rank0_input_is_padded_at_end_of_stream():
    """2.20: a rank-0 input that ends mid-chunk is padded and closed with S1."""
    names = Names()
    names.tiles("a b c")
    data, pad = _reshape("a b c D", 2, names=names)
    assert [s for _, _, s in data] == [0, 1, 0, 1]
    assert show(data[:3], names) == "a b S1 c D"
    assert data[3][1].valid == 0
    assert show(pad) == "F F S1 F T S1 D"


def test_reshape_rank0_moe_pack_to_tile():
    """Paper 3.3: [D_i] -> [ceil(D_i/4), 4] for D_i = 6 (two pad rows)."""
    names = Names()
    names.tiles("r0 r1 r2 r3 r4 r5", cols=64)
    data, pad = _reshape("r0 r1 r2 r3 r4 r5 D", 4, names=names)
    assert [s for _, _, s in data] == [0, 0, 0, 1, 0, 0, 0, 1]
    assert [p.valid for _, p, _ in data] == [1, 1, 1, 1, 1, 1, 0, 0]
    assert show(pad) == "F F F F S1 F F T T S1 D"


def test_reshape_b0_exact_chunks_need_no_padding():
    data, pad = _reshape("a b S1 c d S1 D", 2, pad=False)
    assert show(data) == "a b S2 c d S2 D"
    assert show(pad) == "F F S2 F F S2 D"
    data, _ = _reshape("a b c d D", 2, pad=False)
    assert show(data) == "a b S1 c d S1 D"


def test_reshape_b0_pads_a_chunk_cut_by_a_higher_stop():
    """2.20: an element carrying S_s in the middle of a chunk is followed by S - count pad
    elements, the last pad carrying S_(s+1); a full chunk's stop S_s becomes S_(s+1)."""
    names = Names()
    names.tiles("a b c d e f")
    data, pad = _reshape("a S1 b c S2 d e f S2 D", 2, names=names)
    assert show(pad) == "F T S2 F F S3 F F S1 F T S3 D"
    assert [s for _, _, s in data] == [0, 2, 0, 3, 0, 1, 0, 3]
    real = [x for x, (_, is_pad, _) in zip(data, pad) if not is_pad]
    assert show(real, names) == "a b c S3 d e S1 f D"
    assert [p.valid for (_, p, _), (_, is_pad, _) in zip(data, pad) if is_pad] == [0, 0]


def test_reshape_b1_2_20_example():
    data, _ = _reshape("a0 a1 S1 b0 b1 S1 c0 c1 S1 d0 d1 S2 D", 2, rank=1, pad=False)
    assert show(data) == "a0 a1 S1 b0 b1 S2 c0 c1 S1 d0 d1 S3 D"


def test_reshape_chunk_1_adds_a_size_1_dim():
    """Paper 3.3 Broadcast step: [T] -> [T, 1]."""
    data, _ = _reshape("x y z D", 1, pad=False)
    assert show(data) == "x S1 y S1 z S1 D"


def test_reshape_adds_no_cycles():
    data, _ = _reshape("a b c d D", 2, pad=False, t=[0, 3, 5, 8])
    assert times(data) == [1, 4, 6, 9]


def _promote(seq, shape, rank=None, t=None):
    outs, _ = run_operator("Promote", {"rank": rank}, {"in": paper(seq)},
                           info_in={"in": st(shape)}, times={"in": t} if t else None)
    return outs[0]


def test_promote_outermost_raises_only_the_last_stop():
    """Paper shape table / errata 1: Promote adds a new outermost dim; the last element's
    S_N becomes S_(N+1), every other stop is unchanged."""
    D0 = sympy.Symbol("D0")
    assert show(_promote("a b S1 c S1 D", (2, D0))) == "a b S1 c S2 D"
    assert show(_promote("a S1 b S2 c S1 d S2 D", (2, 2, D0))) == "a S1 b S2 c S1 d S3 D"


def test_promote_outermost_of_rank0_gives_S1_on_the_last_value():
    """Errata 1: a rank-0 input's last value gets S1."""
    assert show(_promote("a b c D", (3,))) == "a b c S1 D"
    assert show(_promote("a D", (1,))) == "a S1 D"


def test_promote_outermost_keeps_an_empty_stream_empty():
    """D_(a+1) = 1 if D_a > 0 else 0: an empty stream stays empty (no element, no stop)."""
    assert _promote("D", (sympy.Symbol("D0"),)) == []
    assert _promote("D", (sympy.Symbol("D0"), 4)) == []


def test_promote_rank0_adds_a_new_innermost_dim():
    """2.21 (p = 0): `a b S1 D` (1,2) -> `a S1 b S2 D` (1,2,1)."""
    assert show(_promote("a b S1 D", (1, 2), rank=0)) == "a S1 b S2 D"
    assert show(_promote("a b D", (2,), rank=0)) == "a S1 b S1 D"


def test_promote_at_rank_p_raises_stops_at_or_above_p():
    """2.21: a stop s stays s if s < p, else becomes s + 1 (p = 1: [2,3] -> [2,1,3])."""
    assert show(_promote("a b c S1 d e f S1 D", (2, 3), rank=1)) == \
        "a b c S2 d e f S2 D"
    assert show(_promote("a S1 b S2 c S1 d S2 D", (2, 2, 1), rank=2)) == \
        "a S1 b S3 c S1 d S3 D"


def test_promote_outermost_needs_a_lookahead():
    """The last stop can only be decided once the next element (or the close) is seen, so
    an element is not emitted before its successor is visible."""
    out = _promote("a b c D", (3,), t=[0, 10, 20])
    assert show(out) == "a b c S1 D"
    assert out[0][0] >= 10 and out[1][0] >= 20


def _expand(seq, attrs, ref=None, t_ref=None):
    inputs = {"in": paper(seq)}
    if ref is not None:
        inputs["ref"] = paper(ref)
    outs, _ = run_operator("Expand", attrs, inputs,
                           times={"ref": t_ref} if t_ref else None)
    return outs[0]


def test_expand_with_ref_2_22_example():
    """2.22 (e = 1): in `x S1 y S2` (1,2,1), ref `r r r S1 r r r S2` -> `x x x S1 y y y S2`."""
    out = _expand("x S1 y S2 D", {"rank": 0}, ref="r r r S1 r r r S2 D")
    assert show(out) == "x x x S1 y y y S2 D"


def test_expand_with_ref_paper_form_and_ragged_ref():
    """Paper form: in [2, 1], ref [2, D_ragged] (rank 1): each element fills its group."""
    out = _expand("x S1 y S1 D", {"rank": 0}, ref="r r S1 r r r S1 D")
    assert show(out) == "x x S1 y y y S1 D"


def test_expand_with_ref_two_repeated_dims():
    """rank b = 1: the two innermost size-1 dims are expanded ([2,1,1] -> [2,2,3])."""
    out = _expand("x S2 y S2 D", {"rank": 1},
                  ref="r r r S1 r r r S2 r r r S1 r r r S2 D")
    assert show(out) == "x x x S1 x x x S2 y y y S1 y y y S2 D"


def test_expand_static_sizes_keep_the_rank():
    """Errata 4: the static Expand replaces the trailing size-1 dims by static sizes."""
    assert show(_expand("x S1 y S1 D", {"sizes": [3]})) == "x x x S1 y y y S1 D"
    assert show(_expand("x S2 y S2 D", {"sizes": [2, 3]})) == \
        "x x x S1 x x x S2 y y y S1 y y y S2 D"
    # the input's own stop survives on its last copy
    assert show(_expand("x S1 y S2 D", {"sizes": [2]})) == "x x S1 y y S2 D"


def test_expand_holds_its_element_until_the_last_copy():
    """Like Repeat, Expand releases an input element only after its last copy is sent: the
    upstream credit returns one cycle after the reference's last element of the group (the
    interleaved attention's round-robin dealer cannot run ahead of the KV tiles)."""
    _, _, ins, _ = run_net("Expand", {"rank": 0}, {"in": paper("x S1 y S1 D"),
                                                   "ref": paper("r r r S1 r S1 D")},
                           times_in={"ref": [0, 5, 9, 12]})
    assert list(ins["in"].credits) == [9 + 1, 12 + 1]  # released at 9 and 12 (was 0, 9)


def test_expand_output_is_timed_by_the_reference():
    """2.22: 0 cycles; the output is timed by the ref's arrival."""
    out = _expand("x S1 D", {"rank": 0}, ref="r r r S1 D", t_ref=[0, 5, 9])
    assert times(out) == [1, 6, 10]


def test_repeat_2_23_example():
    outs, _ = run_operator("Repeat", {"count": 3}, {"in": paper("a b S1 D")})
    assert show(outs[0]) == "a a a S1 b b b S2 D"
    outs, _ = run_operator("Repeat", {"count": 2}, {"in": paper("a b D")})
    assert show(outs[0]) == "a a S1 b b S1 D"


@pytest.mark.parametrize("x", [0, 5])
def test_repeat_timing_without_back_pressure(x):
    """simulation-errata 4: input visible at x, copies visible at x+1, x+1, x+2, ...,
    x+y-1; the clock then advances by y and the input is released."""
    outs, logs, ins, ctx = run_net("Repeat", {"count": 8}, {"in": paper("a")},
                                   times_in={"in": [x]})
    assert times(outs[0]) == [x + 1, x + 1, x + 2, x + 3, x + 4, x + 5, x + 6, x + 7]
    assert ctx.t == x + 8
    assert list(ins["in"].credits) == [x + 8 + 1]  # dequeued at x + 8


def test_repeat_timing_under_back_pressure():
    """simulation-errata 4: depth-1 output whose consumer releases on arrival: copies
    visible at 1, 3, 5, 7, 10, 13, 17, 21; the input is released at 26."""
    outs, logs, ins, ctx = run_net("Repeat", {"count": 8}, {"in": paper("a")},
                                   out_caps={0: 1}, consumers={0: consumer()})
    assert [t for t, _, _ in logs[0]] == [1, 3, 5, 7, 10, 13, 17, 21]
    assert list(ins["in"].credits) == [26 + 1]


def test_repeat_second_element_follows_the_clock_advance():
    outs, _ = run_operator("Repeat", {"count": 2}, {"in": paper("a b D")})
    assert times(outs[0]) == [1, 1, 3, 3]


def test_zip_2_24_example():
    outs, _ = run_operator("Zip", {}, {"a": paper("a b S1 D"), "b": paper("p q S1 D")})
    assert show(outs[0]) == "(a,p) (b,q) S1 D"


def test_zip_mismatch_is_an_error():
    with pytest.raises(SimError, match="stop levels differ"):
        run_operator("Zip", {}, {"a": paper("a b S1 D"), "b": paper("p S1 q S1 D")})
    with pytest.raises(SimError, match="end at different"):
        run_operator("Zip", {}, {"a": paper("a b S1 D"), "b": paper("p q S1 r S1 D")})


# =====================================================================================
# Higher-order operators: Map, Accum, Scan, FlatMap
# =====================================================================================


F32 = Tile("f32", 1, 1)


def _map(ins, f, out_elem=F32, times_in=None, **attrs):
    return run_operator("Map", {"fn": f, **attrs}, {"ins": ins},
                        info_out=[st((1,), out_elem)],
                        times={"ins": times_in} if times_in else None)[0][0]


def test_map_unary_preserves_stops_2_14_example():
    """2.14: `a b S1 c S2 D` -> `f(a) f(b) S1 f(c) S2 D`."""
    seq = [(val_tile(0.0), 0), (val_tile(1.0), 1), (val_tile(2.0), 2)]
    out = _map([seq], fn("exp"))
    assert [s for _, _, s in out] == [0, 1, 2]
    assert [float(p.data[0, 0]) for _, p, _ in out] == pytest.approx([1.0, np.e, np.e ** 2])


def test_map_binary_lockstep():
    a = [(val_tile(1.0), 0), (val_tile(2.0), 1), (val_tile(3.0), 2)]
    b = [(val_tile(10.0), 0), (val_tile(20.0), 1), (val_tile(30.0), 2)]
    assert values(_map([a, b], fn("add"))) == [(11.0, 0), (22.0, 1), (33.0, 2)]


def test_map_over_zip():
    pairs = [((val_tile(2.0), val_tile(5.0)), 0), ((val_tile(3.0), val_tile(4.0)), 1)]
    assert values(_map([pairs], fn("mul"))) == [(10.0, 0), (12.0, 1)]


def test_map_stops_must_match():
    """2.14: both elements Val, or both ValStop with the same level; else an error."""
    a = [(val_tile(1.0), 0), (val_tile(2.0), 1)]
    b = [(val_tile(1.0), 1), (val_tile(2.0), 1)]
    with pytest.raises(SimError, match="stop levels"):
        _map([a, b], fn("add"))


def test_map_one_input_ending_early_is_an_error():
    a = [(val_tile(1.0), 0), (val_tile(2.0), 0)]
    b = [(val_tile(1.0), 0), (val_tile(2.0), 0), (val_tile(3.0), 0)]
    with pytest.raises(SimError, match="end at different"):
        _map([a, b], fn("add"))


def _mm_inputs(n=1, a_mu=False, w_mu=False):
    a = [(TileVal(16, 64, "f32", in_mu=a_mu), 0) for _ in range(n)]
    w = [(TileVal(64, 64, "f32", in_mu=w_mu), 0) for _ in range(n)]
    return [a, w]


def test_map_matmul_roofline():
    """Paper 4.3 / semantics 2.0: a [16,64]x[64,64] matmul at compute_bw 1024 takes
    ceil(2*16*64*64/1024) = 128 cycles; the output is visible one cycle later. The node is
    not pipelined: the second element starts when the first is done."""
    out = _map(_mm_inputs(2), fn("matmul"), Tile("f32", 16, 64), compute_bw=1024)
    assert times(out) == [129, 257]
    assert [(p.rows, p.cols) for _, p, _ in out] == [(16, 64), (16, 64)]


def test_map_load_term_of_tiles_in_memory_units():
    """2.0: load = sum over inputs flagged read_from_mu of ceil(bytes / onchip_bw)
    (64 B/cycle): [16,64] f32 = 4096 B -> 64 cycles, [64,64] f32 -> 256 cycles."""
    bw = 1 << 20  # compute is 1 cycle
    out = _map(_mm_inputs(a_mu=True), fn("matmul"), Tile("f32", 16, 64), compute_bw=bw)
    assert times(out) == [64 + 1]
    out = _map(_mm_inputs(a_mu=True, w_mu=True), fn("matmul"), Tile("f32", 16, 64),
               compute_bw=bw)
    assert times(out) == [64 + 256 + 1]
    out = _map(_mm_inputs(a_mu=True), fn("matmul"), Tile("f32", 16, 64), compute_bw=1024)
    assert times(out) == [128 + 1]  # max(load 64, compute 128)


def test_map_store_term_and_output_flag():
    """2.0: store = ceil(output bytes / onchip_bw) with write_back; the output tile then
    sits in a memory unit (read_from_mu = write_back_mu), and not otherwise."""
    out = _map(_mm_inputs(a_mu=True), fn("matmul"), Tile("f32", 16, 64),
               compute_bw=1 << 20, write_back=True)
    assert times(out) == [64 + 1]
    assert out[0][1].in_mu is True
    out = _map(_mm_inputs(a_mu=True), fn("matmul"), Tile("f32", 16, 64), compute_bw=1 << 20)
    assert out[0][1].in_mu is False


@pytest.mark.parametrize("f,rows,cols,bw,cycles", [
    ("silu", 16, 64, 1024, 8),      # 8 FLOPs per element
    ("exp", 16, 64, 1024, 4),       # 4 FLOPs per element
    ("row_sum", 16, 64, 1024, 1),   # R*C
    ("silu", 16, 64, 100, 82),      # ceil(8192 / 100)
])
def test_map_unary_roofline(f, rows, cols, bw, cycles):
    """Section 3 function table: cycles = ceil(FLOPs / compute_bw)."""
    out = _map([[(TileVal(rows, cols, "f32"), 0)]], fn(f), Tile("f32", rows, cols),
               compute_bw=bw)
    assert times(out) == [cycles + 1]


def test_map_fixed_cycle_function():
    """cache_write_addr: idx * row_offset + len, a fixed 1 cycle."""
    out = _map([[(int_tile(3), 0), (int_tile(4), 0)], [(int_tile(5), 0), (int_tile(6), 0)]],
               fn("cache_write_addr", row_offset=16), Tile("u64", 1, 1))
    assert show(out) == "53 70 D"
    assert times(out) == [2, 3]


@pytest.mark.parametrize("f,attrs,values,expect", [
    ("mod_int", {"by": 32}, [0, 31, 32, 1000], "0 31 0 8 D"),
    ("mod_int", {"by": 32, "plus": 1}, [31, 1000], "0 9 D"),
    ("ceildiv_int", {"by": 32, "plus": 1}, [0, 31, 1000], "1 1 32 D"),
])
def test_map_integer_functions(f, attrs, values, expect):
    """The integer functions on [1,1] tiles: `(x + plus) mod by`, `ceil((x + plus) / by)`,
    one cycle each."""
    out = _map([[(int_tile(v), 0) for v in values]], fn(f, **attrs), Tile("u64", 1, 1))
    assert show(out) == expect
    assert times(out) == list(range(2, 2 + len(values)))


def test_map_holds_its_input_until_the_output_is_sent():
    """Errata 1 / 5.3: UnaryMap/BinaryMap peek, add roofline, send, release at the
    post-send clock (credit = that clock + 1)."""
    outs, _, ins, ctx = run_net("Map", {"fn": fn("matmul"), "compute_bw": 1024},
                                {"ins": _mm_inputs(1)},
                                info_out=[st((1,), Tile("f32", 16, 64))])
    assert times(outs[0]) == [129]
    assert [list(ch.credits) for ch in ins["ins"]] == [[129], [129]]


def _accum(seqs, f, rank, out_elem=F32, **attrs):
    outs, _ = run_operator("Accum", {"fn": f, "rank": rank, **attrs}, {"ins": seqs},
                           info_out=[st((1,), out_elem)])
    return outs[0]


def _vals(text):
    """`1 2 S1 3 4 S2` -> value tiles with those stops."""
    return [(val_tile(float(v)), s) for v, s in paper(text)]


def test_accum_rank1_2_15_example():
    """2.15 (r = 1): `a b S1 c d S2 D` -> `acc(a,b) acc(c,d) S1 D`."""
    assert values(_accum([_vals("1 2 S1 3 4 S2 D")], fn("add"), 1)) == [(3.0, 0), (7.0, 1)]


def test_accum_rank2_2_15_example():
    """2.15 (r = 2): `a b S1 c d S2 D` -> `acc(a,b,c,d) D`."""
    assert values(_accum([_vals("1 2 S1 3 4 S2 D")], fn("add"), 2)) == [(10.0, 0)]


def test_accum_paper_form_and_ragged_groups():
    """[2, D_ragged] (rank 1) -> [2] (rank 0): one plain value per group."""
    assert values(_accum([_vals("1 S1 2 3 4 S1 D")], fn("add"), 1)) == [(1.0, 0), (9.0, 0)]
    assert values(_accum([_vals("2 3 S1 4 S1 D")], fn("mul"), 1)) == [(6.0, 0), (4.0, 0)]


def test_accum_with_matmul_2_16_example():
    """2.16: A = `a0 a1 S1 a2 a3 S2`, W = `w0 w1 S1 w2 w3 S2` ->
    `(a0 w0 + a1 w1) (a2 w2 + a3 w3) S1 D`."""
    rng = np.random.default_rng(0)
    a = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(4)]
    w = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(4)]
    stops = [0, 1, 0, 2]
    A = [(TileVal(2, 3, "f32", data=x), s) for x, s in zip(a, stops)]
    W = [(TileVal(3, 4, "f32", data=x), s) for x, s in zip(w, stops)]
    out = _accum([A, W], fn("matmul"), 1, Tile("f32", 2, 4))
    assert [s for _, _, s in out] == [0, 1]
    np.testing.assert_allclose(out[0][1].data, a[0] @ w[0] + a[1] @ w[1], rtol=1e-5)
    np.testing.assert_allclose(out[1][1].data, a[2] @ w[2] + a[3] @ w[3], rtol=1e-5)


def test_accum_retile_row_packs_rows_and_adds_valid_rows():
    """Paper 3.3 Pack to Tile: four [1,64] rows -> one [4,64] tile; the valid-row counts
    (offsets) add up, so a chunk with two pad rows has 2 valid rows."""
    rows = [TileVal(1, 64, "f32", valid=v, data=np.full((1, 64), i, np.float32))
            for i, v in enumerate([1, 1, 1, 1, 1, 1, 0, 0])]
    seq = [(r, 1 if i % 4 == 3 else 0) for i, r in enumerate(rows)]
    out = _accum([seq], fn("retile_row"), 1, Tile("f32", 4, 64))
    assert [(p.rows, p.cols, p.valid, s) for _, p, s in out] == [(4, 64, 4, 0), (4, 64, 2, 0)]
    np.testing.assert_array_equal(out[1][1].data[:, 0], [4, 5, 6, 7])


def test_accum_timing_store_term_on_the_emitting_element():
    """Errata 1: per element max(load, compute); on the emitting element also the store
    term ceil(accumulator bytes / onchip_bw) with write_back. [16,64] f32 add: compute
    ceil(1024/1024) = 1, store 4096/64 = 64."""
    seq = [(TileVal(16, 64, "f32"), s) for s in (0, 1, 0, 1)]
    out = _accum([seq], fn("add"), 1, Tile("f32", 16, 64), compute_bw=1024)
    assert times(out) == [3, 5]
    out = _accum([seq], fn("add"), 1, Tile("f32", 16, 64), compute_bw=1024, write_back=True)
    assert times(out) == [1 + 64 + 1, 66 + 64 + 1]
    assert out[0][1].in_mu is True


def test_accum_with_matmul_timing():
    """2.16: per pair max(load(in1) + load(in2), 2*M*K*N / compute_bw)."""
    outs, _ = run_operator("Accum", {"fn": fn("matmul"), "rank": 1, "compute_bw": 1024},
                           {"ins": [[(x, s) for (x, _), s in zip(pair, (0, 1))]
                                    for pair in _mm_inputs(2)]},
                           info_out=[st((1,), Tile("f32", 16, 64))])
    assert times(outs[0]) == [2 * 128 + 1]
    outs, _ = run_operator("Accum", {"fn": fn("matmul"), "rank": 1, "compute_bw": 1024},
                           {"ins": [[(x, s) for (x, _), s in zip(pair, (0, 1))]
                                    for pair in _mm_inputs(2, w_mu=True)]},
                           info_out=[st((1,), Tile("f32", 16, 64))])
    assert times(outs[0]) == [2 * 256 + 1]


def test_accum_retile_with_empty_init_has_no_store_term():
    """Errata 1: the store term is sized from the re-initialised accumulator; an Accum
    with an Empty init (retiling) has a zero dimension, so its store term is 0 (and
    retile_row itself takes 0 cycles)."""
    seq = [(TileVal(1, 64, "f32"), s) for s in (0, 0, 0, 1)]
    out = _accum([seq], fn("retile_row"), 1, Tile("f32", 4, 64), write_back=True)
    assert times(out) == [1]


def test_accum_releases_inputs_before_sending():
    """Errata 1: Accum dequeues its input after the roofline and only then sends, so an
    input slot is freed even while the output send stalls. Output depth 1, no consumer:
    the second emission blocks, but its input element has already been dequeued."""
    seq = [(TileVal(16, 64, "f32"), 1) for _ in range(3)]
    outs, _, ins, ctx = run_net("Accum", {"fn": fn("add"), "rank": 1, "compute_bw": 1024},
                                {"ins": [seq]}, info_out=[st((3,), Tile("f32", 16, 64))],
                                out_caps={0: 1})
    assert len(outs[0]) == 1  # the first result; the second send is blocked
    assert len(ins["ins"][0].q) == 1  # elements 0 and 1 dequeued, element 2 not yet read
    assert list(ins["ins"][0].credits) == [2, 3]


def test_scan_2_17_example():
    """2.17 (r = 1, add): `a b c S1 d e S2 D` -> `a a+b a+b+c S1 d d+e S2 D`."""
    outs, _ = run_operator("Scan", {"fn": fn("add"), "rank": 1},
                           {"ins": [_vals("1 2 4 S1 8 16 S2 D")]}, info_out=[st((1,), F32)])
    assert values(outs[0]) == [(1.0, 0), (3.0, 0), (7.0, 1), (8.0, 0), (24.0, 2)]


def test_scan_rank2_resets_only_at_S2():
    outs, _ = run_operator("Scan", {"fn": fn("add"), "rank": 2},
                           {"ins": [_vals("1 2 S1 4 S2 8 S1 16 S2 D")]},
                           info_out=[st((1,), F32)])
    assert values(outs[0]) == [(1.0, 0), (3.0, 1), (7.0, 2), (8.0, 1), (24.0, 2)]


def test_scan_max_starts_from_minus_infinity():
    outs, _ = run_operator("Scan", {"fn": fn("max"), "rank": 1},
                           {"ins": [_vals("-5 -7 -1 S1 -9 S1 D")]}, info_out=[st((1,), F32)])
    assert values(outs[0]) == [(-5.0, 0), (-5.0, 0), (-1.0, 1), (-9.0, 1)]


def _split_tiles(valid1=None):
    t0 = TileVal(2, 4, "f32", data=np.array([[0] * 4, [1] * 4], np.float32))
    t1 = TileVal(2, 4, "f32", valid=valid1, data=np.array([[10] * 4, [11] * 4], np.float32))
    return [(t0, 0), (t1, 1)]


def test_flatmap_retile_streamify_2_18_example():
    """2.18: `T0 T1 S1 D` of [2,4] tiles -> `T0r0 T0r1 T1r0 T1r1 S1 D` of [1,4] rows; the
    input element's stop lands on its last piece."""
    outs, _ = run_operator("FlatMap", {"fn": fn("retile_streamify")}, {"ins": [_split_tiles()]})
    out = outs[0]
    assert [(first_value(p), s) for _, p, s in out] == [(0, 0), (1, 0), (10, 0), (11, 1)]
    assert all((p.rows, p.cols) == (1, 4) for _, p, _ in out)


def test_flatmap_retile_streamify_with_filter_drops_padding_rows():
    """2.18: with filter_mask and T1 having 1 valid row -> `T0r0 T0r1 T1r0 S1 D`."""
    outs, _ = run_operator("FlatMap", {"fn": fn("retile_streamify", filter=True)},
                           {"ins": [_split_tiles(valid1=1)]})
    assert [(first_value(p), s) for _, p, s in outs[0]] == [(0, 0), (1, 0), (10, 1)]
    # without the filter the pad row is kept
    outs, _ = run_operator("FlatMap", {"fn": fn("retile_streamify")},
                           {"ins": [_split_tiles(valid1=1)]})
    assert [(first_value(p), s) for _, p, s in outs[0]] == [(0, 0), (1, 0), (10, 0), (11, 1)]


def test_flatmap_input_stop_adds_to_the_inner_streams_last_stop():
    """Paper FlatMap: the input element's S_k becomes S_(k+b) on the inner stream's last
    element. expert_addr (b = 2): n addresses base + e*n + i, each S1, the last S2."""
    outs, _ = run_operator("FlatMap", {"fn": fn("expert_addr", tiles=3, base=100)},
                           {"ins": [paper("{2} {0} S1 D")]})
    assert show(outs[0]) == "106 S1 107 S1 108 S2 100 S1 101 S1 102 S3 D"


def test_flatmap_cache_read_addr_over_zip():
    """2.18 CacheReadAddrGen: for (idx, L) emit idx*row_offset + i, i < L, the last S1."""
    pairs = [((int_tile(2), int_tile(3)), 0), ((int_tile(5), int_tile(1)), 0)]
    outs, _ = run_operator("FlatMap", {"fn": fn("cache_read_addr", row_offset=16)},
                           {"ins": [pairs]})
    assert show(outs[0]) == "32 33 34 S1 80 S1 D"


def test_flatmap_filter_last_tile():
    """2.18 FilterLastTile: L-1 selectors {1} then {0} carrying S1 (S_(s+1))."""
    outs, _ = run_operator("FlatMap", {"fn": fn("filter_last_tile")},
                           {"ins": [[(int_tile(3), 0), (int_tile(1), 1)]]})
    assert show(outs[0]) == "{1} {1} {0} S1 {0} S2 D"


def test_flatmap_retile_streamify_pieces_are_sent_at_once():
    """2.18: all pieces are enqueued at the current tick (only the FIFO limits them)."""
    outs, _ = run_operator("FlatMap", {"fn": fn("retile_streamify")}, {"ins": [_split_tiles()]},
                           times={"ins": [[0, 7]]})
    assert times(outs[0]) == [1, 1, 8, 8]


def test_flatmap_cache_read_addr_one_address_per_cycle():
    pairs = [((int_tile(2), int_tile(3)), 0)]
    outs, _ = run_operator("FlatMap", {"fn": fn("cache_read_addr", row_offset=16)},
                           {"ins": [pairs]})
    assert show(outs[0]) == "32 33 34 S1 D"
    assert times(outs[0]) == [1, 2, 3]


# =====================================================================================
# On-chip memory: Bufferize, Streamify
# =====================================================================================


def _bufferize(seq, rank, names, t=None):
    outs, _ = run_operator("Bufferize", {"rank": rank}, {"in": paper(seq, names)},
                           times={"in": t} if t else None)
    return outs[0]


def test_bufferize_2_6_examples():
    """2.6: b = 1: `a b c S1 d e f S2 D` -> `B[a b c] B[d e f] S1 D`; b = 2:
    `B[[a b c],[d e f]] D`."""
    names = Names()
    names.tiles("a b c d e f")
    out = _bufferize("a b c S1 d e f S2 D", 1, names)
    assert show(out, names) == "B[a b c S1 D] B[d e f S1 D] S1 D"
    assert [p.shape for _, p, _ in out] == [(3,), (3,)]
    out = _bufferize("a b c S1 d e f S2 D", 2, names)
    assert show(out, names) == "B[a b c S1 d e f S2 D] D"
    assert out[0][1].shape == (2, 3)


def test_bufferize_ragged_outermost_buffered_dim():
    """The Bufferize/Streamify figure: [2, D_ragged, 2] bufferized at rank 2 -> [2] of
    buffers with 2 and 3 rows."""
    names = Names()
    names.tiles("a b c d e f g h i j")
    out = _bufferize("a b S1 c d S2 e f S1 g h S1 i j S2 D", 2, names)
    assert show(out, names) == "B[a b S1 c d S2 D] B[e f S1 g h S1 i j S2 D] D"
    assert [p.shape for _, p, _ in out] == [(2, 2), (3, 2)]


def test_bufferize_takes_one_cycle_per_element():
    """2.6: one input element per cycle; the buffer is sent at completion."""
    names = Names()
    names.tiles("a b c d e f")
    out = _bufferize("a b c S1 d e f S1 D", 1, names)
    assert times(out) == [4, 7]


def _streamify(buffers, attrs, ref=None, info_in=None, t=None):
    inputs = {"in": buffers}
    if ref is not None:
        inputs["ref"] = paper(ref)
    outs, _ = run_operator("Streamify", attrs, inputs, info_in=info_in,
                           times={"in": t} if t else None)
    return outs[0]


def _buffers(seq, rank, names):
    return toks(_bufferize(seq, rank, names))


def test_bufferize_then_streamify_static_repeat_2_7_example():
    """2.7: the buffers of 2.6 (b = 1), R = [2]:
    `a b c S1 a b c S2 d e f S1 d e f S3 D`."""
    names = Names()
    names.tiles("a b c d e f")
    bufs = _buffers("a b c S1 d e f S2 D", 1, names)
    out = _streamify(bufs, {"repeat": [2]})
    assert show(out, names) == "a b c S1 a b c S2 d e f S1 d e f S3 D"


def test_streamify_nested_repeat_list():
    """Errata 5: R = [R_1..R_k] nests prod(R) copies; copy (i_1..i_k) ends with
    S_(rank+t), t = trailing repeat indices at their last value."""
    names = Names()
    names.tiles("x y")
    bufs = _buffers("x y S1 D", 1, names)
    out = _streamify(bufs, {"repeat": [2, 2]})
    assert show(out, names) == "x y S1 x y S2 x y S1 x y S3 D"


def test_streamify_empty_repeat_streams_once():
    """2.7: with an empty repeat list the buffer is streamed once, final stop rank + s."""
    names = Names()
    names.tiles("a b c d")
    bufs = _buffers("a b S1 c d S1 D", 1, names)
    assert show(_streamify(bufs, {}), names) == "a b S1 c d S1 D"
    bufs = _buffers("a b S1 c d S2 D", 1, names)
    assert show(_streamify(bufs, {}), names) == "a b S1 c d S2 D"


def test_streamify_affine_view_of_a_static_buffer():
    """2.7 (StaticStreamify): buffer element index = sum(idx * stride), stops of 2.1."""
    names = Names()
    names.tiles("a b c d")
    bufs = _buffers("a b c d S1 D", 1, names)
    out = _streamify(bufs, {"repeat": [2], "stride": [1], "shape": [2]})
    assert show(out, names) == "a b S1 a b S2 D"
    out = _streamify(bufs, {"repeat": [2], "stride": [2], "shape": [2]})
    assert show(out, names) == "a c S1 a c S2 D"


def test_streamify_with_ref_2_8_example():
    """2.8 in the paper form (errata 7): one buffer `B[x y]` (a rank-0 buffer stream [1]),
    ref [1, 3] (c = 1 more dim) -> `x y S1 x y S1 x y S2 D` of shape [1, 3, 2]."""
    names = Names()
    names.tiles("x y")
    bufs = _buffers("x y S1 D", 1, names)
    out = _streamify(bufs, {}, ref="r r r S1 D",
                     info_in={"in": st((1,), Buffer(F32, (2,))), "ref": st((1, 3))})
    assert show(out, names) == "x y S1 x y S1 x y S2 D"


def test_bufferize_then_streamify_with_ref_paper_figure():
    """The Bufferize/Streamify figure: [2, D_ragged, 2] bufferized at rank 2 is a rank-0
    stream [2] of buffers; a ref [2, D'] (c = 1) reads buffer 0 twice and buffer 1 three
    times: output [2, D', D_ragged, 2] (rank 3)."""
    names = Names()
    names.tiles("a b c d e f g h i j")
    bufs = _buffers("a b S1 c d S2 e f S1 g h S1 i j S2 D", 2, names)
    D, E = sympy.Symbol("D"), sympy.Symbol("E")
    out = _streamify(bufs, {}, ref="r r S1 r r r S1 D",
                     info_in={"in": st((2,), Buffer(F32, (D, 2))), "ref": st((2, E))})
    assert show(out, names) == (
        "a b S1 c d S2 a b S1 c d S3 "
        "e f S1 g h S1 i j S2 e f S1 g h S1 i j S2 e f S1 g h S1 i j S3 D")


def test_streamify_with_ref_two_extra_dims():
    """Errata 7 with c = 2: a group ends at a ref stop >= 2; a ref S1 inside the group
    closes one read of the buffer one level higher."""
    names = Names()
    names.tiles("x y u v")
    bufs = _buffers("x y S1 u v S1 D", 1, names)  # [2] of Buffer[2]
    out = _streamify(bufs, {}, ref="r S1 r S2 r r S2 D",
                     info_in={"in": st((2,), Buffer(F32, (2,))),
                              "ref": st((2, 2, sympy.Symbol("E")))})
    assert show(out, names) == "x y S2 x y S3 u v S1 u v S3 D"


def test_streamify_emits_one_element_per_cycle():
    """2.7/2.8: 1 output element per cycle (no PMU cost)."""
    names = Names()
    names.tiles("x y")
    bufs = _buffers("x y S1 D", 1, names)
    out = _streamify(bufs, {"repeat": [3]})
    ts = times(out)
    assert [b - a for a, b in zip(ts, ts[1:])] == [1] * 5


# =====================================================================================
# Routing and merging: Partition, Reassemble, EagerMerge, Parallelize, Broadcast
# =====================================================================================


def _partition(data, sel, rank=1, consumers=2, t=None, **attrs):
    outs, _ = run_operator("Partition", {"rank": rank, "consumers": consumers, **attrs},
                           {"in": data if isinstance(data, list) else paper(data),
                            "sel": paper(sel)}, times=t)
    return outs


def test_partition_2_9_example_two_consumers():
    """2.9 (p = 1, 2 consumers): in `x0 x1 S1 y0 y1 S1 z0 z1 S2 D` (1,3,2), sel
    `{0} {1} {0} S1 D` -> out0 `x0 x1 S1 z0 z1 S1 D`, out1 `y0 y1 S1 D`."""
    out0, out1 = _partition("x0 x1 S1 y0 y1 S1 z0 z1 S2 D", "{0} {1} {0} S1 D")
    assert show(out0) == "x0 x1 S1 z0 z1 S1 D"
    assert show(out1) == "y0 y1 S1 D"


def test_partition_paper_form_rank0_selector():
    """Paper 3.3 Route: [3, 2] (rank 1) with a rank-0 selector [3]."""
    out0, out1 = _partition("x0 x1 S1 y0 y1 S1 z0 z1 S1 D", "{0} {1} {0} D")
    assert show(out0) == "x0 x1 S1 z0 z1 S1 D"
    assert show(out1) == "y0 y1 S1 D"


def test_partition_multicast_and_drop():
    """2.9: several bits -> multicast; no bit -> the chunk is dropped."""
    out0, out1 = _partition("x0 S1 y0 y1 S1 z0 S1 D", "{0,1} {} {1} D")
    assert show(out0) == "x0 S1 D"
    assert show(out1) == "x0 S1 z0 S1 D"


def test_partition_rank0_routes_single_elements():
    out0, out1, out2 = _partition("a b c d D", "{2} {0} {2} {1} D", rank=0, consumers=3)
    assert (show(out0), show(out1), show(out2)) == ("b D", "d D", "a c D")


def test_partition_cuts_higher_stops_down_to_p():
    """2.9: inside a chunk stops below p pass; the chunk end carries S_p on every output
    (S_(s+p) on the input when the selector carries S_s)."""
    out0, out1 = _partition("a S1 b S2 c S1 d S3 D", "{0} {1} S1 D", rank=2)
    assert show(out0) == "a S1 b S2 D"
    assert show(out1) == "c S1 d S2 D"


def test_partition_selector_stop_check():
    """2.9: if the selector element carries S_s the chunk's input end must carry S_(s+p)
    (else "expected stop level does not match"); a Val selector with an input stop > p
    is an error too."""
    with pytest.raises(SimError):  # sel rank 0, chunk end carries S2
        _partition("x0 x1 S1 y0 y1 S2 D", "{0} {1} D")
    with pytest.raises(SimError):  # sel carries S1, the chunk end only S1 (needs S2)
        _partition("x0 x1 S1 y0 y1 S1 D", "{0} {1} S1 D")
    # the data ends before the selector: the Partition is done (in a feedback loop the
    # selector stream only ends after the Partition does)
    out0, out1 = _partition("x0 x1 S1 D", "{0} {1} D")
    assert [v for _, v, _ in out0] == ["x0", "x1"] and out1 == []


def test_partition_timing():
    """2.9 / errata 1: per data element load (if in a memory unit), release, then
    switch_cycles plus write-back, then the sends."""
    data = [(TileVal(16, 64, "f32"), 0), (TileVal(16, 64, "f32"), 1)]
    out0, _ = _partition(data, "{0} D")
    assert times(out0) == [2, 3]  # switch 1 each
    data = [(TileVal(16, 64, "f32", in_mu=True), 1)]
    out0, _ = _partition(data, "{0} D", switch_cycles=3)
    assert times(out0) == [64 + 3 + 1]
    assert out0[0][1].in_mu is False  # read_from_mu = write_back_mu
    out0, _ = _partition(data, "{0} D", write_back=True)
    assert times(out0) == [64 + 1 + 64 + 1]
    assert out0[0][1].in_mu is True


def _reassemble(ins, sel, rank, t=None, t_sel=None, **attrs):
    tt = {}
    if t is not None:
        tt["ins"] = t
    if t_sel is not None:
        tt["sel"] = t_sel
    outs, _ = run_operator("Reassemble", {"rank": rank, **attrs},
                           {"ins": [paper(x) if isinstance(x, str) else x for x in ins],
                            "sel": paper(sel)}, times=tt or None)
    return outs[0]


def test_reassemble_2_10_example_input0_first():
    """2.10 (q = 1): sel `{0,1} {1} S1 D`, in0 `a0 a1 S1 D`, in1 `b0 b1 S1 c0 c1 S1 D`,
    in0 arriving first: `a0 a1 S1 b0 b1 S2 c0 c1 S3 D`."""
    out = _reassemble(["a0 a1 S1 D", "b0 b1 S1 c0 c1 S1 D"], "{0,1} {1} S1 D", 1,
                      t=[[1, 2], [5, 6, 7, 8]])
    assert show(out) == "a0 a1 S1 b0 b1 S2 c0 c1 S3 D"


def test_reassemble_multi_hot_orders_by_arrival():
    """Same, with input 1 arriving first: its chunk is copied first."""
    out = _reassemble(["a0 a1 S1 D", "b0 b1 S1 c0 c1 S1 D"], "{0,1} {1} S1 D", 1,
                      t=[[5, 6], [1, 2, 7, 8]])
    assert show(out) == "b0 b1 S1 a0 a1 S2 c0 c1 S3 D"


def test_reassemble_does_not_interleave_chunks():
    """Errata 10: the chunk that started is copied whole, even if the other selected
    input has data earlier than the chunk's later elements."""
    out = _reassemble(["a0 a1 S1 D", "b0 b1 S1 D"], "{0,1} D", 1, t=[[1, 20], [2, 3]])
    assert show(out) == "a0 a1 S1 b0 b1 S2 D"


def test_reassemble_rank0_chunks():
    """2.10 for q = 0: every non-last element is a plain value, the last gets S_(1+s)."""
    out = _reassemble(["a0 a1 D", "b0 b1 b2 D"], "{0,1} {1} {0,1} D", 0,
                      t=[[0, 0], [1, 1, 1]])
    assert show(out) == "a0 b0 S1 b1 S1 a1 b2 S1 D"


def test_reassemble_keeps_stops_inside_chunks():
    """q = 2: a chunk's inner S1 is kept; its end S2 becomes S_(q+1+s) = S3 on the last
    chunk of the group."""
    out = _reassemble(["a S1 b S2 D", "c S1 d S2 D"], "{0,1} D", 2, t=[[0, 0], [1, 1]])
    assert show(out) == "a S1 b S2 c S1 d S3 D"


def test_reassemble_starts_with_the_first_input_that_has_data():
    """Errata 10: routing starts with the first selected input that has data, without
    waiting for the other selected inputs (input 1 at t=3, input 0 only at t=10)."""
    out = _reassemble(["a0 D", "b0 D"], "{0,1} D", 0, t=[[10], [3]])
    assert show(out) == "b0 a0 S1 D"
    assert out[0][0] < 10
    assert out[0][0] == 3 + 1 + 1  # arrival + switch_cycles, then the hop


def test_reassemble_timing_and_output_flag():
    """2.10: released no earlier than arrival + switch (+ load of a tile in a memory
    unit), plus write-back; outputs get read_from_mu = write_back_mu."""
    tile = TileVal(16, 64, "f32", in_mu=True)
    out = _reassemble([[(tile, 0)]], "{0} D", 0, switch_cycles=2)
    assert times(out) == [2 + 64 + 1]
    assert out[0][1].in_mu is False
    out = _reassemble([[(tile, 0)]], "{0} D", 0, switch_cycles=2, write_back=True)
    assert times(out) == [2 + 64 + 64 + 1]
    assert out[0][1].in_mu is True


def _eager(ins, rank, t=None, info=None):
    outs, _ = run_operator("EagerMerge", {"rank": rank},
                           {"ins": [paper(x) for x in ins]}, times={"ins": t} if t else None,
                           info_in=info)
    return outs


def test_eager_merge_2_11_example():
    """2.11 (a = 1): in0 `a0 a1 S1 D` (arrives at t=10), in1 `b0 b1 S1 D` (t=3):
    data `b0 b1 S1 a0 a1 S1 D`, sel `{1} {0} D`."""
    data, sel = _eager(["a0 a1 S1 D", "b0 b1 S1 D"], 1, t=[[10, 10], [3, 3]])
    assert show(data) == "b0 b1 S1 a0 a1 S1 D"
    assert show(sel) == "{1} {0} D"


def test_eager_merge_timing():
    """2.11 / errata 7: the selector is sent at the decision time; each forwarded element
    adds 1 cycle."""
    data, sel = _eager(["a0 a1 S1 D", "b0 b1 S1 D"], 1, t=[[10, 10], [3, 3]])
    assert times(sel) == [4, 11]
    assert times(data) == [4, 5, 11, 12]


def test_eager_merge_ties_go_to_the_lower_index():
    data, sel = _eager(["a0 S1 D", "b0 S1 D", "c0 S1 D"], 1, t=[[5], [5], [5]])
    assert show(sel) == "{0} {1} {2} D"
    data, sel = _eager(["a0 S1 D", "b0 S1 D", "c0 S1 D"], 1, t=[[6], [5], [5]])
    assert show(sel) == "{1} {2} {0} D"


def test_eager_merge_never_commits_before_an_earlier_arrival_is_ruled_out():
    """2.11: input 1's chunk arrives at 4, input 0's at 7, although input 0 is listed
    first and input 1 is still empty at the start."""
    data, sel = _eager(["a0 a1 S1 D", "b0 b1 S1 D"], 1, t=[[7, 8], [4, 30]])
    assert show(sel) == "{1} {0} D"
    assert show(data) == "b0 b1 S1 a0 a1 S1 D"


def test_eager_merge_picks_the_earliest_pending_chunk_each_time():
    """After forwarding input 0's first chunk (until t=2), input 1's chunk (arrived at 2)
    goes before input 0's second chunk (arrived at 3)."""
    data, sel = _eager(["a0 a1 S1 c0 S1 D", "b0 S1 D"], 1, t=[[0, 0, 3], [2]])
    assert show(sel) == "{0} {1} {0} D"
    assert show(data) == "a0 a1 S1 b0 S1 c0 S1 D"


def test_eager_merge_rank0_and_default_rank():
    data, sel = _eager(["a b D", "c D"], None, t=[[0, 2], [1]],
                       info={"ins": [st((2,)), st((1,))]})
    assert show(data) == "a c b D"
    assert show(sel) == "{0} {1} {0} D"


def test_eager_merge_input_stop_above_the_chunk_rank_is_an_error():
    with pytest.raises(SimError):
        _eager(["a S2 D", "b S1 D"], 1)


def test_parallelize_2_12_example():
    """2.12 (rank 1, P = 2): chunks dealt round-robin."""
    outs, _ = run_operator("Parallelize", {"consumers": 2, "rank": 1},
                           {"in": paper("x0 x1 S1 y0 y1 S1 z0 z1 S1 w0 w1 S1 D")})
    assert show(outs[0]) == "x0 x1 S1 z0 z1 S1 D"
    assert show(outs[1]) == "y0 y1 S1 w0 w1 S1 D"


def test_parallelize_rank0_and_default_rank():
    outs, _ = run_operator("Parallelize", {"consumers": 3}, {"in": paper("a b c d e D")},
                           info_in={"in": st((5,))})
    assert [show(o) for o in outs] == ["a d D", "b e D", "c D"]


def test_parallelize_timing():
    """2.12: 0 cycles, outputs stamped t + switch_cycles."""
    outs, _ = run_operator("Parallelize", {"consumers": 2, "rank": 0, "switch_cycles": 3},
                           {"in": paper("a b c D")}, times={"in": [0, 5, 6]})
    assert times(outs[0]) == [3, 9]
    assert times(outs[1]) == [8]


def test_broadcast_2_13_example():
    outs, _ = run_operator("Broadcast", {"consumers": 3}, {"in": paper("a b S1 D")})
    assert [show(o) for o in outs] == ["a b S1 D"] * 3
    assert [times(o) for o in outs] == [[1, 1]] * 3


def test_broadcast_copies_share_one_stamp_under_back_pressure():
    """Errata 6: Broadcast dequeues, waits for a credit on every target (its clock becomes
    the max of their credit times), then sends all copies with that one stamp. Output 0
    is deep, output 1 has depth 1 and a consumer that first reads at t=10 (credit 11): the
    second element is visible at 12 on BOTH outputs."""
    outs, logs, _, _ = run_net("Broadcast", {"consumers": 2}, {"in": paper("a b D")},
                               out_caps={1: 1}, consumers={1: consumer(start=10)})
    assert times(outs[0]) == [1, 12]
    assert [t for t, _, _ in logs[1]] == [10, 12]


def test_broadcast_slowest_consumer_back_pressures_all():
    """The slowest consumer back-pressures all: with output 0 full, output 1's copy is not
    sent earlier than output 0's."""
    outs, logs, _, _ = run_net("Broadcast", {"consumers": 2}, {"in": paper("a b D")},
                               out_caps={0: 1}, consumers={0: consumer(start=10)})
    assert [t for t, _, _ in logs[0]] == [10, 12]
    assert times(outs[1]) == [1, 12]


# =====================================================================================
# Sink (harness) and the sources, through tiny compiled programs
# =====================================================================================


def test_sink_consumes_one_element_per_cycle():
    """2.25: a sink consumes one element per cycle."""
    outs, ctx = run_operator("Sink", {}, {"in": paper("a b S1 c S1 D")})
    assert outs == [] and ctx.t == 3
    outs, ctx = run_operator("Sink", {}, {"in": paper("a b D")}, times={"in": [5, 5]})
    assert ctx.t == 7


def test_sink_in_a_program_drains_everything(recorded):
    typed, r = run_program("""
        tensor X : f32[4, 64] input = arange
        x = LinearOffChipLoad(X, tile=[1, 64])
        Sink(x)
    """)
    got = sunk(recorded, typed, "x")
    assert [first_value(p) for _, p, _ in got] == [0, 64, 128, 192]
    assert r.deadlock is None


EXTERNAL = """
    stream route : Strm<MultiHot<3>, 0>[5] = external("routing")
    stream lens  : Strm<Tile<u64, [1, 1]>, 1>[2, 3] = external("lens")
    Sink(route)
    Sink(lens)
"""
EXTERNAL_TRACES = {"routing": np.array([2, 0, 1, 1, 0]),
                   "lens": np.array([[4, 5, 6], [7, 8, 9]])}


def test_external_values_and_timing(recorded):
    """2.25 (generator source): one element per cycle, the first visible at t = 1."""
    typed, _ = run_program(EXTERNAL, traces=EXTERNAL_TRACES)
    route = sunk(recorded, typed, "route")
    assert [p for _, p, _ in route] == [(2,), (0,), (1,), (1,), (0,)]
    assert times(route) == [1, 2, 3, 4, 5]
    lens = sunk(recorded, typed, "lens")
    assert [first_value(p) for _, p, _ in lens] == [4, 5, 6, 7, 8, 9]


def test_external_stops_follow_the_declared_rank(recorded):
    """Semantics 0.2: a rank-0 stream carries no stops; a rank-1 [2, 3] stream ends with S1
    (the outermost dim is closed by Done, not by a stop)."""
    typed, _ = run_program(EXTERNAL, traces=EXTERNAL_TRACES)
    assert show(sunk(recorded, typed, "route")) == "{2} {0} {1} {1} {0} D"
    assert show(sunk(recorded, typed, "lens")) == "4 5 6 S1 7 8 9 S1 D"


SELECTGEN = """
    tensor TOPK : i32[3, 2] input = arange
    sel = SelectGen(TOPK, n=6)
    each = SelectGen(TOPK, n=6, onehot=true)
    Sink(sel)
    Sink(each)
"""


def test_selectgen_values_and_timing(recorded):
    """2.25: one multi-hot selector per row of ids (one one-hot per id with onehot);
    one element per cycle, the first visible at t = 1."""
    typed, _ = run_program(SELECTGEN)
    sel = sunk(recorded, typed, "sel")
    assert [p for _, p, _ in sel] == [(0, 1), (2, 3), (4, 5)]
    assert times(sel) == [1, 2, 3]
    each = sunk(recorded, typed, "each")
    assert [p for _, p, _ in each] == [(0,), (1,), (2,), (3,), (4,), (5,)]


def test_selectgen_stops_follow_the_declared_rank(recorded):
    """2.25: element stop = highest dim ending there, below the outermost (paper shapes:
    [3] is rank 0, [3, 2] is rank 1)."""
    typed, _ = run_program(SELECTGEN)
    assert show(sunk(recorded, typed, "sel")) == "{0,1} {2,3} {4,5} D"
    assert show(sunk(recorded, typed, "each")) == "{0} {1} S1 {2} {3} S1 {4} {5} S1 D"


METADATAGEN = """
    tensor LEN : u64[4] input = arange
    tensor PAGES : u64[2, 3] input = arange
    len = MetadataGen(LEN)
    pages = MetadataGen(PAGES)
    Sink(len)
    Sink(pages)
"""


def test_metadatagen_values_and_timing(recorded):
    """2.25: [1,1] u64 tiles, one per tensor entry, one per cycle from t = 1."""
    typed, _ = run_program(METADATAGEN)
    got = sunk(recorded, typed, "len")
    assert [first_value(p) for _, p, _ in got] == [0, 1, 2, 3]
    assert all((p.rows, p.cols, p.dtype) == (1, 1, "u64") for _, p, _ in got)
    assert times(got) == [1, 2, 3, 4]
    assert [first_value(p) for _, p, _ in sunk(recorded, typed, "pages")] == list(range(6))


def test_metadatagen_stops_follow_the_declared_rank(recorded):
    typed, _ = run_program(METADATAGEN)
    assert show(sunk(recorded, typed, "len")) == "0 1 2 3 D"
    assert show(sunk(recorded, typed, "pages")) == "0 1 2 S1 3 4 5 S1 D"


# =====================================================================================
# Off-chip memory: LinearOffChipLoad / Store, RandomOffChipLoad / Store
# =====================================================================================


# X [2, 48] in [1, 16] tiles is a 2 x 3 tiled tensor; with `arange` data tile k starts
# with the value 16 * k, so `tile_id` recovers k.
LOADS = """
    tensor X : f32[2, 48] input = arange
    plain = LinearOffChipLoad(X, tile=[1, 16], shape=[2, 3], stride=[3, 1])
    twice = LinearOffChipLoad(X, tile=[1, 16], shape=[2, 2, 3], stride=[0, 3, 1])
    cols = LinearOffChipLoad(X, tile=[1, 16], shape=[3, 2], stride=[1, 3])
    Sink(plain)
    Sink(twice)
    Sink(cols)
"""


def tile_id(p) -> str:
    return f"t{first_value(p) // 16}"


def _tile_tokens(got):
    return [(tile_id(p), s) for _, p, s in got]


def test_linear_load_values_and_view_order(recorded):
    """2.1: the view's multi-index in row-major order, tile index = sum(idx * stride);
    stride 0 re-reads; the tiles hold the tensor's data."""
    typed, _ = run_program(LOADS)
    assert [tile_id(p) for _, p, _ in sunk(recorded, typed, "plain")] == \
        ["t0", "t1", "t2", "t3", "t4", "t5"]
    assert [tile_id(p) for _, p, _ in sunk(recorded, typed, "twice")] == \
        ["t0", "t1", "t2", "t3", "t4", "t5"] * 2
    assert [tile_id(p) for _, p, _ in sunk(recorded, typed, "cols")] == \
        ["t0", "t3", "t1", "t4", "t2", "t5"]
    got = sunk(recorded, typed, "plain")
    np.testing.assert_array_equal(got[4][1].data, np.arange(64, 80).reshape(1, 16))
    assert all(p.in_mu for _, p, _ in got)  # loaded tiles sit in a memory unit


def test_linear_load_stops_2_1_example(recorded):
    """2.1 with stepc's paper shapes: stride (3,1), out (2,3) is the rank-1 stream
    `t0 t1 t2 S1 t3 t4 t5 S1 D`; stride (0,3,1), out (2,2,3) (rank 2) reads the tensor
    twice: `t0 t1 t2 S1 t3 t4 t5 S2 t0 t1 t2 S1 t3 t4 t5 S2 D`."""
    typed, _ = run_program(LOADS)
    assert show(_tile_tokens(sunk(recorded, typed, "plain"))) == "t0 t1 t2 S1 t3 t4 t5 S1 D"
    assert show(_tile_tokens(sunk(recorded, typed, "twice"))) == \
        "t0 t1 t2 S1 t3 t4 t5 S2 t0 t1 t2 S1 t3 t4 t5 S2 D"
    assert show(_tile_tokens(sunk(recorded, typed, "cols"))) == "t0 t3 S1 t1 t4 S1 t2 t5 S1 D"


def test_load_and_merged_stream_of_equal_shape_zip_at_run_time():
    """Both Map inputs have type [4, 1] (rank 1): their elements must agree stop by stop
    (2.14), so the program runs."""
    _, r = run_program("""
        tensor X : f32[4, 64] input = arange
        tensor Y : f32[4, 64] input = arange
        tensor Z : f32[4, 64] output
        x = LinearOffChipLoad(X, tile=[1, 64])        # [4, 1]
        y = LinearOffChipLoad(Y, tile=[1, 64])        # [4, 1]
        part = Parallelize(y, consumers=2, rank=1)    # [2, 1] each
        m, _ = EagerMerge(part, rank=1)               # [4, 1]
        s = Map(x, m, fn=add)
        LinearOffChipStore(s, Z)
    """)
    X = np.arange(4 * 64, dtype=np.float32).reshape(4, 64)
    assert sorted(r.outputs["Z"][:, 0].tolist()) == sorted((2 * X[:, 0]).tolist())


def _tref(name="X", dtype="f32", shape=(2, 48)):
    return TensorRef(name, dtype, tuple(shape), (), None)


def test_linear_load_with_ref_2_2_example():
    """2.2: for each ref element the whole view; the view's last tile gets S_L, or
    S_(L+s) when the ref element carried S_s. Frontend example: ref `r0 r1 S1` (1,2), view
    (1,2): `t0 t1 S2 t0 t1 S3 D`; paper form (ref rank 0): `t0 t1 S2 t0 t1 S2 D`."""
    attrs = {"tensor": _tref(), "tile": [1, 16], "shape": [1, 2], "stride": [2, 1]}
    for ref, want in (("r0 r1 S1 D", [0, 2, 0, 3]), ("r0 r1 D", [0, 2, 0, 2]),
                      ("r0 S1 r1 r2 S1 D", [0, 3, 0, 2, 0, 3])):
        outs, _ = run_operator("LinearOffChipLoad", attrs, {"ref": paper(ref)})
        assert [s for _, _, s in outs[0]] == want, ref


def test_linear_load_with_ref_waits_for_the_ref():
    attrs = {"tensor": _tref(), "tile": [1, 16], "shape": [1]}
    outs, _ = run_operator("LinearOffChipLoad", attrs, {"ref": paper("r0 r1 D")},
                           times={"ref": [0, 500]})
    t0, t1 = times(outs[0])
    assert t0 == 1 + 19 and t1 == 500 + 1 + 19


def test_linear_load_tile_timing():
    """Simulation-errata 3.6.4 / 12: a K-request tile issued at t completes at t + K + 18
    and is visible downstream at t + K + 19; tiles do not overlap, and start-up applies to
    every request. [1,16] f32 = 64 B = 1 request; [16,64] bf16 = 16 rows x 128 B = 32."""
    outs, _ = run_operator("LinearOffChipLoad",
                           {"tensor": _tref(), "tile": [1, 16], "shape": [3], "stride": [1]},
                           {})
    assert times(outs[0]) == [20, 39, 58]
    outs, _ = run_operator("LinearOffChipLoad",
                           {"tensor": _tref("K", "bf16", (32, 64)), "tile": [16, 64]}, {})
    assert times(outs[0]) == [32 + 19, 2 * (32 + 18) + 1]


def test_linear_store_writes_tiles_row_major():
    """2.3: the tiles are written linearly in row-major tile order: `t0 t2 S1 t1 t3 S1`
    (a column-major view of the 2x2 tiled X) fills Y's first tile row with t0 t2."""
    typed, r = run_program("""
        tensor X : f32[32, 32] input = arange
        tensor Y : f32[32, 32] output
        tensor Z : f32[32, 32] output
        x = LinearOffChipLoad(X, tile=[16, 16], shape=[2, 2], stride=[1, 2])
        LinearOffChipStore(x, Y)
        z = LinearOffChipLoad(X, tile=[16, 16])
        LinearOffChipStore(z, Z)
    """)
    X = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    np.testing.assert_array_equal(r.outputs["Z"], X)
    t = [X[:16, :16], X[:16, 16:], X[16:, :16], X[16:, 16:]]
    want = np.block([[t[0], t[2]], [t[1], t[3]]])
    np.testing.assert_array_equal(r.outputs["Y"], want)


def test_random_load_2_4_example():
    """2.4: `5 2 S1 7 S1 D` -> `T5 T2 S1 T7 S1 D`: the output has the address stream's
    stops."""
    seq = [(int_tile(5), 0), (int_tile(2), 1), (int_tile(7), 1)]
    outs, _ = run_operator("RandomOffChipLoad",
                           {"tensor": _tref("K", "f32", (128, 16)), "tile": [16, 16]},
                           {"raddr": seq})
    assert [s for _, _, s in outs[0]] == [0, 1, 1]
    assert all((p.rows, p.cols, p.in_mu) == (16, 16, True) for _, p, _ in outs[0])


def test_random_load_gathers_tiles_in_a_program(recorded, tmp_path):
    """2.4: each address is a row-major tile index into the tiled tensor."""
    np.save(tmp_path / "addr.npy", np.array([[5, 2, 7]], dtype=np.uint64))
    typed, _ = run_program(f"""
        tensor K : f32[128, 16] input = arange
        tensor A : u64[1, 3] input = file(path="{(tmp_path / 'addr.npy').as_posix()}")
        addr = MetadataGen(A)
        k = RandomOffChipLoad(addr, K, tile=[16, 16])
        Sink(k)
    """)
    got = sunk(recorded, typed, "k")
    assert [first_value(p) // 256 for _, p, _ in got] == [5, 2, 7]
    np.testing.assert_array_equal(got[0][1].data,
                                  np.arange(128 * 16, dtype=np.float32).reshape(128, 16)[80:96])


def test_random_load_address_out_of_range_is_an_error():
    with pytest.raises(SimError, match="outside"):
        run_operator("RandomOffChipLoad",
                     {"tensor": _tref("K", "f32", (32, 16)), "tile": [16, 16]},
                     {"raddr": [(int_tile(2), 0)]})


def test_random_store_acks_follow_waddr_2_5():
    """2.5: one bool ack per (waddr, wdata) pair after the write, with waddr's stops."""
    waddr = [(int_tile(5), 0), (int_tile(2), 1), (int_tile(7), 1)]
    wdata = [(TileVal(16, 16, "f32"), s) for s in (0, 1, 1)]
    outs, _ = run_operator("RandomOffChipStore", {"tensor": _tref("K", "f32", (128, 16))},
                           {"waddr": waddr, "wdata": wdata})
    assert show(outs[0]) == "T T S1 T S1 D"


def test_random_store_scatters_tiles_in_a_program(recorded, tmp_path):
    np.save(tmp_path / "slots.npy", np.array([[3], [0]], dtype=np.uint64))
    typed, r = run_program(f"""
        tensor KNEW : f32[32, 16] input = arange
        tensor S : u64[2, 1] input = file(path="{(tmp_path / 'slots.npy').as_posix()}")
        tensor K : f32[64, 16] output
        waddr = MetadataGen(S)
        knew = LinearOffChipLoad(KNEW, tile=[16, 16])
        ack = RandomOffChipStore(waddr, knew, K)
        Sink(ack)
    """)
    knew = np.arange(32 * 16, dtype=np.float32).reshape(32, 16)
    want = np.zeros((64, 16), np.float32)
    want[48:64] = knew[:16]
    want[0:16] = knew[16:]
    np.testing.assert_array_equal(r.outputs["K"], want)
    assert [p for _, p, _ in sunk(recorded, typed, "ack")] == [True, True]
