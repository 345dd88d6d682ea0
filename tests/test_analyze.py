"""Cost formulas: per operator, the SwiGLU closed form over the paper's sweep, MoE bindings."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import sympy
from click.testing import CliRunner

from stepc.analyze import analyze, roofline, trace_bindings
from stepc.cli import main
from stepc.frontend import compile_file, compile_source
from stepc.grammar.parse import decode_source
from stepc.hw import load_config

REPO = Path(__file__).resolve().parent.parent


def compiled(text: str, **overrides):
    result = compile_source(decode_source("t.step", text.encode()), overrides)
    assert result.ok, [d.message for d in result.diagnostics.errors]
    return result.typed


def costs(text: str, mode: str = "artifact") -> dict:
    a = analyze(compiled(text), mode)
    return {o.node: o for o in a.ops}


def sym(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, integer=True, nonnegative=True)


# ---------------------------------------------------------------- SwiGLU closed form
@pytest.mark.parametrize("tb", [16, 32, 64])
@pytest.mark.parametrize("ti", [16, 32, 64, 128, 256])
def test_swiglu_traffic_closed_form(tb, ti):
    """semantics.md 5.3: T = 33,554,432/TI + 100,663,296/TB + 65,536 bytes (f32)."""
    result = compile_file("programs/swiglu.step", {"TB": tb, "TI": ti})
    assert result.ok
    a = analyze(result.typed, "artifact")
    expected = 33_554_432 // ti + 100_663_296 // tb + 65_536
    assert a.totals["off_chip_bytes"] == expected
    # artifact on-chip accounting (semantics.md 5.4): 4*(3*256*tb + 3*256*ti + 2*tb*ti)
    assert a.totals["on_chip_bytes"] == 4 * (3 * 256 * tb + 3 * 256 * ti + 2 * tb * ti)


def test_swiglu_paper_examples():
    """experiments.md 3: (16, 256, 16) = 8.454144 MB and (64, 256, 256) = 1.769472 MB."""
    for tb, ti, mb in ((16, 16, 8.454144), (64, 256, 1.769472)):
        a = analyze(compile_file("programs/swiglu.step", {"TB": tb, "TI": ti}).typed)
        assert a.totals["off_chip_bytes"] == round(mb * 1e6)


def test_swiglu_flops_and_roofline():
    a = analyze(compile_file("programs/swiglu.step").typed, "artifact",
                load_config("hdl-validation"))
    b, h, i = 64, 256, 512
    assert a.totals["flops"] == 3 * 2 * b * h * i + 8 * b * i + b * i
    roof = roofline(a, load_config("hdl-validation"))
    assert roof.bound == "memory"
    assert roof.memory_cycles == sympy.Rational(a.totals["off_chip_bytes"], 256)
    assert a.allocated_compute == 5 * 4096


# ---------------------------------------------------------------- per-operator formulas
LOAD = """
tensor X : bf16[64, 256] input
tensor Y : f32[64, 256] output
x = LinearOffChipLoad(X, tile=[16, 64])
y = Map(x, fn=exp, dtype=f32)
LinearOffChipStore(y, Y)
"""


def test_load_store_traffic_uses_element_types():
    c = costs(LOAD)
    assert c["x"].off_chip == 64 * 256 * 2  # bf16
    assert c["LinearOffChipStore@6"].off_chip == 64 * 256 * 4  # f32
    assert c["y"].flops == 4 * 64 * 256


@pytest.mark.parametrize("mode,load,store", [("artifact", 1, 1), ("paper", 2, 2)])
def test_offchip_onchip_modes(mode, load, store):
    c = costs(LOAD, mode)
    assert c["x"].on_chip == load * 16 * 64 * 2
    assert c["LinearOffChipStore@6"].on_chip == store * 16 * 64 * 4


MATMUL = """
tensor A : bf16[32, 64] input
tensor W : bf16[64, 128] weight
tensor Y : f32[32, 128] output
a = LinearOffChipLoad(A, tile=[32, 64], stride=[0, 0], shape=[1, 2])
w = LinearOffChipLoad(W, tile=[64, 64], stride=[0, 1], shape=[1, 2])
m = Map(a, w, fn=matmul, dtype=f32)
acc = Accum(m, fn=retile_col, rank=1)
LinearOffChipStore(acc, Y)
"""


def test_matmul_map_paper_and_artifact():
    paper = costs(MATMUL, "paper")
    # paper 4.2: 16 x in_tile_col (an element count, as printed) + |weight tile|
    assert paper["m"].on_chip == 16 * 64 + 64 * 64 * 2
    assert costs(MATMUL, "artifact")["m"].on_chip == 0
    assert paper["m"].flops == 2 * 2 * 32 * 64 * 64
    assert paper["acc"].on_chip == 32 * 128 * 4  # |out dtype| of the accumulator


ACCUM_MM = """
tensor A : f32[16, 256] input
tensor W : f32[256, 64] weight
tensor Y : f32[16, 64] output
a = LinearOffChipLoad(A, tile=[16, 64])
w = LinearOffChipLoad(W, tile=[64, 64], stride=[1, 1], shape=[1, 4])
d = Accum(a, w, fn=matmul, rank=1)
LinearOffChipStore(d, Y)
"""


@pytest.mark.parametrize("mode", ["paper", "artifact"])
def test_matmul_accum(mode):
    c = costs(ACCUM_MM, mode)
    out = 16 * 64 * 4
    if mode == "paper":
        assert c["d"].on_chip == 16 * 64 + 64 * 64 * 4 + out
    else:
        assert c["d"].on_chip == out
    assert c["d"].flops == 4 * 2 * 16 * 64 * 64


BUF = """
tensor X : bf16[64, 64] input
tensor Y : bf16[64, 64] output
x = LinearOffChipLoad(X, tile=[16, 16])
b = Bufferize(x, rank=1)
s = Streamify(b)
LinearOffChipStore(s, Y)
"""


@pytest.mark.parametrize("mode", ["paper", "artifact"])
def test_bufferize_streamify(mode):
    c = costs(BUF, mode)
    tile = 16 * 16 * 2
    assert c["b"].on_chip == tile + 2 * 4 * tile
    assert c["s"].on_chip == (0 if mode == "paper" else 4 * tile + tile)


def test_expand_repeat_scan_elem():
    text = """
tensor X : f32[4, 64] input
tensor Y : f32[4, 192] output
x = LinearOffChipLoad(X, tile=[1, 64])
r = Repeat(x, count=3)
s = Scan(r, fn=add, rank=1)
f = Flatten(s, min=0, max=1)
packed = Accum(Reshape(f, chunk=3), fn=retile_col, rank=1)
LinearOffChipStore(packed, Y)
"""
    for mode in ("paper", "artifact"):
        c = costs(text, mode)
        assert c["r"].on_chip == 64 * 4
        assert c["s"].on_chip == 64 * 4
        assert c["s"].flops == 4 * 3 * 64


def test_random_store_traffic_and_buffer_depth():
    text = """
tensor Y : f32[64, 64] output
tensor IDX : u64[8, 1] input
tensor X : f32[64, 64] input
addr = MetadataGen(IDX)
x = LinearOffChipLoad(X, tile=[8, 64])
ack = RandomOffChipStore(addr, x, Y, buffer_depth=4)
Sink(ack)
"""
    c = costs(text, "artifact")
    assert c["ack"].off_chip == 8 * 8 * 64 * 4
    assert c["ack"].on_chip == 4 * 8 * 64 * 4
    assert costs(text, "paper")["ack"].on_chip == 2 * 8 * 64 * 4


# ---------------------------------------------------------------- MoE: symbols, bindings
def test_moe_simple_symbolic_then_bound():
    typed = compile_file("programs/moe_simple.step").typed
    a = analyze(typed)
    d0, d1 = sym("D_0"), sym("D_1")
    traffic = a.totals["off_chip_bytes"]
    assert traffic.free_symbols == {d0, d1}
    assert sympy.simplify(traffic - (10 * 64 * 2 + 10 * 256 * 2 + 64 * 256 * 2 * (
        sympy.ceiling(d0 / 4) + sympy.ceiling(d1 / 4)))) == 0
    bound = a.bind({"D_0": 4, "D_1": 6})
    assert bound.totals["off_chip_bytes"] == 1280 + 5120 + 32768 * (1 + 2)
    assert all(sympy.sympify(v).is_number for v in bound.totals.values())


def test_moe_simple_trace_binding_and_on_demand():
    typed = compile_file("programs/moe_simple.step").typed
    routing = np.array([[0]] * 10)  # every row to expert 0: expert 1 idles
    values = trace_bindings(typed, {"routing": routing})
    assert values["D_0"] == 10 and values["D_1"] == 0
    a = analyze(typed).bind(values)
    t = a.totals
    assert t["off_chip_bytes"] == 1280 + 5120 + 32768 * 3
    idle_expert = sum(o.on_chip for o in a.ops if o.node.endswith("[1]"))
    assert idle_expert > 0
    assert t["on_chip_bytes"] - t["on_chip_bytes_on_demand"] == idle_expert


def test_cli_analyze_json_schema():
    r = CliRunner().invoke(main, ["analyze", "programs/moe_simple.step", "--format", "json",
                                  "--bind", "D_0=4", "--bind", "D_1=6", "--hw", "paper-eval"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert set(doc) >= {"program", "params", "ops", "totals", "symbols", "roofline"}
    assert set(doc["totals"]) == {"off_chip_bytes", "on_chip_bytes", "on_chip_bytes_on_demand",
                                  "flops", "operational_intensity"}
    assert isinstance(doc["totals"]["off_chip_bytes"], int)
    symbolic = json.loads(CliRunner().invoke(main, ["analyze", "programs/moe_simple.step",
                                                    "--format", "json"]).stdout)
    assert isinstance(symbolic["totals"]["off_chip_bytes"], str)
    assert set(symbolic["symbols"]) == {"D_0", "D_1"}


@pytest.mark.parametrize("args,message", [
    (["--bind", "D_9=3"], "no symbol `D_9`"),
    (["--bind", "D_0=x"], "expected an integer"),
    (["--trace", "routes=x.npy"], "no such trace file"),
    (["--hw", "paper-evl"], 'did you mean "paper-eval"'),
    (["--set", "hbm.chanels=16"], 'did you mean "channels"'),
])
def test_cli_analyze_usage_errors(args, message, tmp_path):
    r = CliRunner().invoke(main, ["analyze", "programs/moe_simple.step", *args])
    assert r.exit_code == 2
    assert message in r.stderr


def test_cli_analyze_trace_name_checked(tmp_path):
    p = tmp_path / "r.npy"
    np.save(p, np.zeros((10, 1), dtype=np.int64))
    r = CliRunner().invoke(main, ["analyze", "programs/moe_simple.step", "--trace",
                                  f"routs={p}"])
    assert r.exit_code == 2 and "did you mean `routing`" in r.stderr
    np.save(p, np.full((10, 1), 5, dtype=np.int64))
    r = CliRunner().invoke(main, ["analyze", "programs/moe_simple.step", "--trace",
                                  f"routing={p}"])
    assert r.exit_code == 2 and "out of range" in r.stderr


@pytest.mark.parametrize("program", ["programs/attention_interleaved.step",
                                     "programs/attention_coarse.step"])
def test_kv_lens_trace_binds_the_lengths(program, tmp_path, monkeypatch):
    """`--trace kv_lens=...` binds the ragged KV-tile counts as a routing trace binds the
    token counts: the traffic analyze then reports is the simulator's, exactly (at the
    program's small size, tests/bundled.py)."""
    from bundled import SMALL

    from stepc.sim.run import simulate

    monkeypatch.chdir(REPO)
    params = SMALL[Path(program).stem]
    lens = np.random.default_rng(3).integers(0, 3000, size=params["B"])
    path = tmp_path / "lens.npy"
    np.save(path, lens)
    defines = [a for k, v in params.items() for a in ("-D", f"{k}={v}")]
    r = CliRunner().invoke(main, ["analyze", program, *defines, "--trace",
                                  f"kv_lens={path}", "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert isinstance(doc["totals"]["off_chip_bytes"], int), doc["totals"]["off_chip_bytes"]
    typed = compile_file(program, params).typed
    run = simulate(typed, load_config("paper-eval"), {"kv_lens": lens}, functional=False)
    assert doc["totals"]["off_chip_bytes"] == run.useful_bytes
    assert doc["totals"]["flops"] == run.flops
