"""Simulator timing: FIFO credit rules, the HBM models' closed forms, determinism, the
analyze/sim traffic contract, functional outputs against numpy, and the `sim` command."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import numpy as np
import pytest
from bundled import LARGE, PROGRAMS, SMALL
from click.testing import CliRunner

from stepc.analyze import analyze, trace_bindings
from stepc.cli import main
from stepc.frontend import compile_file, compile_source
from stepc.grammar.parse import decode_source
from stepc.hw import load_config
from stepc.hw.config import Hbm
from stepc.sim.data import tensor_values
from stepc.sim.hbm.fluid import FluidHbm
from stepc.sim.hbm.ref import RefHbm
from stepc.sim.kernel import MEM, PEEK, POP, SEND, Ctx, Kernel
from stepc.sim.run import simulate


def compiled(text: str, **overrides):
    r = compile_source(decode_source("t.step", text.encode()), overrides)
    assert r.ok, [d.message for d in r.diagnostics.errors]
    return r.typed


# ---------------------------------------------------------------- FIFO rules
def chain(depth: int, cost: int, n: int = 40) -> list[int]:
    """A source, one hold-the-input stage of `cost` cycles, a sink: arrival times at the sink."""
    k = Kernel()
    a = k.channel("a", depth, "src", "stage")
    b = k.channel("b", 1 << 20, "stage", "sink")

    def src(ctx):
        for i in range(n):
            yield (SEND, a, i, 0)

    def stage(ctx):
        while True:
            h = yield (PEEK, a)
            if h is None:
                return
            ctx.t += cost
            yield (SEND, b, h[1], 0)
            yield (POP, a)

    s, m = Ctx("src", "x"), Ctx("stage", "x")
    s.outs, m.outs = [a], [b]
    k.add(s, src(s))
    k.add(m, stage(m))
    k.run()
    return [t for t, _, _ in b.q]


@pytest.mark.parametrize("depth,cost,interval", [
    (1, 0, 2), (1, 1, 3), (1, 2, 4), (1, 5, 7),  # depth 1: R + 2
    (2, 2, 2), (2, 5, 5),  # depth 2: max(R, (R + 2) / 2)
])
def test_hold_the_input_interval(depth, cost, interval):
    """simulation-errata item 3: steady interval max(R, (R + 2) / C)."""
    times = chain(depth, cost)
    steady = [b - a for a, b in zip(times[10:], times[11:])]
    assert sum(steady) / len(steady) == pytest.approx(interval)


def test_latency_through_idle_stage():
    """An element reaches the next stage R + 1 cycles after it arrived."""
    times = chain(4, 5, n=1)
    assert times == [1 + 5 + 1]


# ---------------------------------------------------------------- HBM closed forms
def loads(model, n_ports: int, requests: int, par_dispatch: int = 1, channels: int = 32,
          tiles: int = 1):
    k = Kernel()
    cfg = Hbm(model=model, channels=channels, par_dispatch=par_dispatch)
    k.memory = RefHbm(k, cfg) if model == "ref" else FluidHbm(k, cfg)
    done = {}

    def loader(ctx, i):
        for _ in range(tiles):
            yield (MEM, (0, i), requests, par_dispatch, False)
        done[i] = ctx.t

    for i in range(n_ports):
        c = Ctx(f"l{i}", "load")
        k.add(c, loader(c, i))
    k.run()
    return done


def test_single_tile_uncontended():
    """simulation.md 3.6.4: a K-message tile issued at t completes at t + K + 18."""
    assert loads("ref", 1, 4096)[0] == 4096 + 18
    assert loads("fluid", 1, 4096)[0] == 4096 + 18


def test_startup_applies_to_every_request():
    """simulation-errata item 12: back-to-back tiles each pay start-up + latency."""
    assert loads("ref", 1, 100, tiles=2)[0] == 2 * (100 + 18)


@pytest.mark.parametrize("ports,expected", [(4, 4114), (6, 4114), (7, 4115), (16, 4115),
                                             (17, 4375)])
def test_round_robin_collisions(ports, expected):
    """simulation-errata item 11: the triangular round robin costs one cycle from 7 ports on
    32 channels, and beyond saturation a few cycles over the pure-bandwidth 4370."""
    assert max(loads("ref", ports, 4096).values()) == expected


def test_par_dispatch_on_eight_channels():
    """simulation-errata item 10: one loader, 4 requests per message on 8 channels: K + 19."""
    k_messages = 256
    assert loads("ref", 1, 4 * k_messages, par_dispatch=4, channels=8)[0] == k_messages + 19


@pytest.mark.parametrize("ports", [1, 4, 16, 24, 48])
def test_fluid_agrees_with_ref_when_streaming(ports):
    ref = max(loads("ref", ports, 4096, tiles=2).values())
    fluid = max(loads("fluid", ports, 4096, tiles=2).values())
    assert abs(fluid - ref) / ref < 0.02


# ---------------------------------------------------------------- whole programs
SWIGLU_POINTS = [(16, 16), (16, 256), (32, 64), (64, 16), (64, 256)]


@pytest.mark.parametrize("tb,ti", SWIGLU_POINTS)
def test_swiglu_functional_equals_numpy_and_traffic_equals_analysis(tb, ti):
    r = compile_file("programs/swiglu.step", {"TB": tb, "TI": ti})
    hw = load_config("hdl-validation")
    run = simulate(r.typed, hw, functional=True)
    t = {n: tensor_values(x, True) for n, x in r.typed.program.tensors.items()}
    g = t["X"] @ t["W_gate"]
    ref = ((g / (1 + np.exp(-g))) * (t["X"] @ t["W_up"])) @ t["W_down"]
    np.testing.assert_allclose(run.outputs["Y"], ref, rtol=1e-4, atol=1e-5 * abs(ref).max())
    assert run.useful_bytes == analyze(r.typed).totals["off_chip_bytes"]
    assert run.request_bytes == run.useful_bytes  # every tile row is a multiple of 64 B
    timing = simulate(r.typed, hw, functional=False)
    assert timing.cycles == run.cycles
    assert run.deadlock is None


def test_swiglu_cycles_respect_bandwidth_and_fall_with_tile_size():
    """Figure 8's trend: the layer is memory-bound; larger tiles move less data and run
    faster. No point beats the HBM bandwidth floor."""
    hw = load_config("hdl-validation")
    cycles = {}
    for tb, ti in SWIGLU_POINTS:
        run = simulate(compile_file("programs/swiglu.step", {"TB": tb, "TI": ti}).typed, hw,
                       functional=False)
        assert run.cycles > run.useful_bytes / hw.peak_bw
        cycles[(tb, ti)] = run.cycles
    assert cycles[(64, 256)] < cycles[(32, 64)] < cycles[(16, 16)]


def test_moe_simple_numpy_traffic_and_dims():
    ids = np.array([[0], [1], [1], [0], [0], [1], [1], [1], [0], [1]])
    r = compile_file("programs/moe_simple.step")
    run = simulate(r.typed, load_config(), {"routing": ids}, functional=True)
    t = {n: tensor_values(x, True) for n, x in r.typed.program.tensors.items()}
    ref = np.stack([t["X"][i] @ t["W"][ids[i, 0]] for i in range(10)])
    np.testing.assert_allclose(run.outputs["Y"], ref, rtol=1e-4, atol=1e-3)
    bound = analyze(r.typed).bind(trace_bindings(r.typed, {"routing": ids}))
    assert run.useful_bytes == bound.totals["off_chip_bytes"]
    assert run.bindings["D_0"] == 4 and run.bindings["D_1"] == 6


@pytest.mark.parametrize("pure", ["0", "1"], ids=["chosen-core", "python-core"])
def test_same_inputs_same_cycles_whatever_the_scheduling_order(pure, monkeypatch):
    monkeypatch.setenv("STEPC_PURE_PYTHON", pure)
    r = compile_file("programs/swiglu.step", {"TB": 32, "TI": 32})
    hw = load_config("hdl-validation")
    base = simulate(r.typed, hw, functional=False).cycles
    from stepc.sim import kernel as kmod
    from stepc.sim import run as runmod
    rng = random.Random(7)

    class Shuffled(kmod.core().Kernel):  # the core this run would use, adding in any order
        def add(self, ctx, gen):
            super().add(ctx, gen)
            items = list(self.ready)
            rng.shuffle(items)
            self.ready.clear()
            self.ready.extend(items)
    monkeypatch.setattr(runmod, "core", lambda: SimpleNamespace(Kernel=Shuffled))
    again = simulate(r.typed, hw, functional=False).cycles
    assert again == base


DEADLOCK = """
tensor X : bf16[16, 64] input
tensor Y : bf16[16, 64] output
stream route : Strm<MultiHot<2>, 0>[16] = external("routing")
x = LinearOffChipLoad(X, tile=[1, 64])
p = Partition(x, route, rank=1, consumers=2)
for i in 0..2 {
    rows = Flatten(p[i], min=0, max=1)
    t, _ = Reshape(rows, chunk=8, pad=zero)
    packed = Accum(t, fn=retile_row, rank=1)
    out[i] = FlatMap(packed, fn=retile_streamify(filter=true))
    assume shape(out[i]) == shape(rows)
}
y = Reassemble(out, route, rank=0)
assume shape(y) == shape(x)
LinearOffChipStore(y, Y)
"""


def test_deadlock_is_reported_with_exit_3(tmp_path):
    p = tmp_path / "dead.step"
    p.write_text(DEADLOCK)
    r = CliRunner().invoke(main, ["sim", str(p)])
    assert r.exit_code == 3, r.output
    assert "deadlock" in r.stderr and "wait-for cycle" in r.stderr
    assert "dead.step:" in r.stderr  # blocked operators point at their source lines


def test_sim_cli_outputs(tmp_path):
    out = tmp_path / "o"
    trace = tmp_path / "run.json"
    r = CliRunner().invoke(main, ["sim", "programs/swiglu.step", "--hw", "hdl-validation",
                                  "--out", str(out), "--trace-out", str(trace)])
    assert r.exit_code == 0, r.output
    assert "cycles:" in r.stdout and "busiest operators" in r.stdout
    assert np.load(out / "Y.npy").shape == (64, 256)
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e["ph"] == "X" for e in events)
    doc = json.loads(CliRunner().invoke(main, ["sim", "programs/swiglu.step", "--format",
                                               "json", "--timing-only"]).stdout)
    assert doc["schema"] == "stepc-sim/3" and doc["cycles"] > 0
    assert doc["off_chip"]["useful_bytes"] == doc["analysis"]["off_chip_bytes"]


def test_sim_config_errors_and_print():
    r = CliRunner().invoke(main, ["sim", "programs/swiglu.step", "--set", "hbm.chanels=16"])
    assert r.exit_code == 2 and 'did you mean "channels"' in r.stderr
    r = CliRunner().invoke(main, ["sim", "programs/swiglu.step", "--print-config", "--set",
                                  "hbm.channels=16"])
    assert r.exit_code == 0 and "channels = 16" in r.stdout
    fluid = CliRunner().invoke(main, ["sim", "programs/swiglu.step", "--set",
                                      "hbm.model=fluid", "--timing-only"])
    assert fluid.exit_code == 0 and "hbm model fluid" in fluid.stdout


def test_runtime_errors_are_located():
    text = """
tensor X : f32[4, 64] input
tensor A : u64[4, 1] input = arange()
tensor W : f32[8, 64] weight
a = MetadataGen(A)
w = RandomOffChipLoad(a, W, tile=[4, 64])
Sink(w)
"""
    typed = compiled(text)
    from stepc.sim.kernel import SimError
    with pytest.raises(SimError, match="outside"):
        simulate(typed, load_config(), functional=True)


def sized(program: str, params: dict | None):
    """`program` at `params` (None: its own size; LARGE ones then under `-m slow`)."""
    group = pytest.mark.xdist_group(program if params is None else f"{program}-small")
    slow = [pytest.mark.slow] * (params is None and program in LARGE)
    return pytest.param(program, params, marks=[group, *slow],
                        id=f"{program}.step" + ("" if params is None else "-small"))


@pytest.mark.parametrize("program,params", [sized(p, None) for p in PROGRAMS]
                         + [sized(p, SMALL[p]) for p in LARGE])
def test_every_program_traffic_matches_analysis(program, params, bundled):
    """The contract: measured off-chip bytes == analyze's total at the run's dims (the
    session's run of the program, shared with its cycles record)."""
    run = bundled.run(program, params)
    assert run.deadlock is None
    bound = bundled.analysis(program, params).bind(dict(run.bindings))
    assert run.useful_bytes == bound.totals["off_chip_bytes"]


def test_two_runs_identical_json(tmp_path):
    args = ["sim", "programs/moe_simple.step", "--format", "json"]
    a = CliRunner().invoke(main, args).stdout
    b = CliRunner().invoke(main, args).stdout
    assert a == b and json.loads(a)["cycles"] > 0


def test_dot_annotates_with_sim_result(tmp_path):
    result = tmp_path / "r.json"
    result.write_text(CliRunner().invoke(main, ["sim", "programs/swiglu.step", "--format",
                                                "json"]).stdout)
    r = CliRunner().invoke(main, ["dot", "programs/swiglu.step", "--annotate", str(result)])
    assert r.exit_code == 0 and "busy" in r.stdout


def test_accum_releases_input_before_sending():
    """simulation-errata item 1: Accum dequeues its input before its (blocked) output send,
    so the producer regains the slot while the Accum waits; Map holds its input."""
    from stepc.graph.program import OpNode
    from stepc.ops.base import FnValue
    from stepc.sim.behaviors import BEHAVIORS
    from stepc.sim.fabric import SimEnv
    from stepc.sim.tokens import TileVal
    from stepc.source import Span
    from stepc.types import StreamType, Tile

    def producer_second_send(op: str) -> int:
        k = Kernel()
        a = k.channel("a", 1, "src", "op")
        b = k.channel("b", 1, "op", "never")
        sent = []

        def src(ctx):
            for _i in range(3):
                yield (SEND, a, TileVal(4, 4, "f32"), 1)
                sent.append(ctx.t)

        attrs = {"fn": FnValue("add" if op == "Accum" else "exp", (), None), "rank": 1,
                 "init": None, "compute_bw": 16, "write_back": False, "dtype": None}
        node = OpNode("op", op, attrs, [("ins", 0)], ["out"], Span("t", 1, 1, 1, 1), {})
        s, c = Ctx("src", "x"), Ctx("op", op)
        s.outs, c.outs = [a], [b]
        info = {"in": {}, "out": [StreamType(Tile("f32", 4, 4), ())]}
        k.add(s, src(s))
        env = SimEnv(load_config(), False, k.memory)
        k.add(c, BEHAVIORS[op](c, node, {"ins": [a]}, [b], env, info))
        k.run()
        return sent
    # b (depth 1) is never read: the op can send once, then blocks on its second output
    assert len(producer_second_send("Accum")) == 3  # inputs released before the send
    assert len(producer_second_send("Map")) == 2  # Map holds its input while blocked


def test_every_function_has_a_run_time_behavior():
    """The function library and the simulator's implementations stay complete together."""
    from stepc.ops.functions import FUNCTIONS
    from stepc.sim.values import ACCUMULATE, FLATMAP, MAP
    for name, spec in FUNCTIONS.items():
        for use in spec.uses:
            table = {"map": MAP, "accum": ACCUMULATE, "scan": ACCUMULATE, "flatmap": FLATMAP}[use]
            assert name in table, f"`{name}` has no run-time behavior for {use}"
