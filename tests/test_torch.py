"""`stepc from-torch` (stepc.torch): emitted programs check clean, simulate to the module's
numbers, move the off-chip bytes of their schedule's closed form, and a Qwen3 MoE block
analyzes exactly like the bundled MoE programs. Skipped when torch is not installed."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from stepc.analyze import analyze, trace_bindings  # noqa: E402
from stepc.cli import main  # noqa: E402
from stepc.frontend import compile_source  # noqa: E402
from stepc.hw import load_config  # noqa: E402
from stepc.sim.run import simulate  # noqa: E402
from stepc.source import SourceFile  # noqa: E402
from stepc.torch import LoweringError, from_torch  # noqa: E402
from stepc.torch.capture import Node, Site  # noqa: E402
from stepc.torch.dense import DenseLowering  # noqa: E402
from stepc.torch.emit import StepWriter  # noqa: E402
from stepc.traces import synthetic_routing  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "torch"))
from qwen_moe import MoEBlock  # noqa: E402
from swiglu_mlp import GeluMLP, SwiGLUMLP  # noqa: E402

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
BYTES = {"f32": 4, "bf16": 2}


def compiled(prog):
    r = compile_source(SourceFile("emitted.step", prog.text))
    errors = [d for d in r.diagnostics.items if d.severity.value == "error"]
    assert r.ok and not errors, "\n".join(str(d) for d in r.diagnostics.items)
    return r


def simulated(prog, x):
    r = compiled(prog)
    run = simulate(r.typed, load_config(None, ()), prog.traces(x), values=prog.values(x))
    assert run.deadlock is None
    return r, run.outputs["Y"]


def assert_matches(out: np.ndarray, ref: torch.Tensor, dtype: str):
    ref = ref.detach().float().numpy()
    tol = {"f32": 1e-4, "bf16": 2e-2}[dtype]  # bf16: ~2 ulps of its 8-bit mantissa
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * float(np.abs(ref).max()))


def closed_form_check(r, expected: int):
    a = analyze(r.typed, "artifact")
    assert int(a.totals["off_chip_bytes"]) == expected


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_swiglu_mlp(dtype):
    torch.manual_seed(0)
    b, h, i, tb, tf = 32, 64, 128, 8, 32
    m = SwiGLUMLP(h, i, dtype=DTYPES[dtype])
    x = torch.randn(b, h, dtype=DTYPES[dtype])
    prog = from_torch(m, (x,), schedule={"TB": tb, "TILE_F": tf})
    assert "rms_inv" in prog.text and "gate_proj_weight" in prog.text
    r, out = simulated(prog, x)
    assert_matches(out, m(x), dtype)
    mt, e = b // tb, BYTES[dtype]
    # input once, the norm scale and the three weights once per row tile, output once
    closed_form_check(r, e * (b * h + mt * h + mt * 3 * h * i + b * h))


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_gelu_mlp_with_bias_and_softmax(dtype):
    torch.manual_seed(1)
    b, h, i, tb, tf = 16, 32, 64, 8, 16
    m = GeluMLP(h, i, dtype=DTYPES[dtype])
    x = torch.randn(b, h, dtype=DTYPES[dtype])
    prog = from_torch(m, (x,), schedule={"TB": tb, "TILE_F": tf})
    r, out = simulated(prog, x)
    assert_matches(out, m(x), dtype)
    mt, e = b // tb, BYTES[dtype]
    closed_form_check(r, e * (b * h + mt * (i * h + i) + mt * (h * i + h) + b * h))


class Addmm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(32, 48))
        self.b = torch.nn.Parameter(torch.randn(48))

    def forward(self, x):
        return torch.addmm(self.b, x, self.w) * torch.sigmoid(x @ self.w)


def test_addmm_and_matmul():
    torch.manual_seed(2)
    m, x = Addmm(), torch.randn(16, 32)
    prog = from_torch(m, (x,), schedule={"TB": 16, "TILE_F": 16})
    _, out = simulated(prog, x)
    assert_matches(out, m(x), "f32")


@pytest.mark.parametrize("tiling", ["static", "dynamic", "timemux"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_moe_block_matches_module(tiling, dtype):
    torch.manual_seed(3)
    m = MoEBlock(64, 32, 8, 2, dtype=DTYPES[dtype])
    x = torch.randn(16, 64, dtype=DTYPES[dtype])
    sched = {"tiling": tiling, **({"R": 4} if tiling == "timemux" else {})}
    prog = from_torch(m, (x,), verify=False, schedule=sched)
    r, out = simulated(prog, x)
    assert_matches(out, m(x), dtype)
    if tiling == "dynamic":  # every active expert's weights once: tokens, weights, output
        ids = prog.traces(x)["routing"]
        active = len(np.unique(ids))
        a = analyze(r.typed, "artifact").bind(trace_bindings(r.typed, {"routing": ids}))
        e = BYTES[dtype]
        assert int(a.totals["off_chip_bytes"]) == (active * 3 * 64 * 32 * e + 16 * 64 * e
                                                  + 16 * 2 * e + 16 * 64 * 4)


@pytest.mark.parametrize("tiling,program", [("static", "moe_static"),
                                            ("dynamic", "moe_dynamic")])
def test_qwen3_moe_analyzes_like_the_bundled_program(tiling, program, bundled):
    with torch.device("meta"):
        m = MoEBlock()  # Qwen3-30B-A3B: D 2048, F 768, E 128, top-8
        x = torch.empty(64, 2048, dtype=torch.bfloat16)
    prog = from_torch(m, (x,), schedule=tiling, verify=False)  # on the meta device
    ids = synthetic_routing(64, 128, 8, seed=7)
    mine = compiled(prog)
    a = analyze(mine.typed).bind(trace_bindings(mine.typed, {"routing": ids}))
    b = bundled.analysis(program).bind(trace_bindings(bundled.typed(program), {"routing": ids}))
    assert a.totals == b.totals
    assert a.allocated_compute == b.allocated_compute


class Cumsum(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.cumsum(self.proj(x), dim=-1)


def test_unsupported_operator_names_op_module_and_line():
    with pytest.raises(LoweringError) as e:
        from_torch(Cumsum(), (torch.randn(4, 8),))
    msg = str(e.value)
    assert "aten.cumsum" in msg and "test_torch.py:" in msg


def _dense_lowering(nodes=()):
    return DenseLowering(list(nodes), StepWriter(), 4, 4, 4)


def test_dense_dispatch_table_sends_each_operator_to_a_handler_of_one_part():
    """Every entry of the dense lowering's table is a method of exactly one of its parts,
    and lowering a node of that operator runs it: operands that are no activation are
    refused under the operator's own name."""
    lw = _dense_lowering()
    parts = (lw.linear, lw.layout, lw.rowwise)
    tables = [part.handlers() for part in parts]
    assert sum(len(t) for t in tables) == len(lw.handlers)  # no part shadows another
    stranger = Node("stranger", "param_view_of_nothing", shape=(4, 4))
    for part, table in zip(parts, tables):
        for op, handler in table.items():
            assert lw.handlers[op] == handler
            assert handler.__self__ is part
            assert getattr(type(part), handler.__name__) is handler.__func__
            node = Node(f"n_{op}", op, (stranger,) * 3, (4, 4),
                        site=Site("m", "f.py:3"))
            with pytest.raises(LoweringError, match=rf"^unsupported: aten\.{op} in "):
                lw.handlers[op](node)


@pytest.mark.parametrize("op", ["cumsum", "handlers", "swiglu_parts"])
def test_dense_operator_outside_the_table_is_refused_by_name(op):
    x = Node("x", "input", shape=(4, 4))
    y = Node("y", op, (x,), (4, 4), site=Site("m", "f.py:3"))
    lw = _dense_lowering([x, y, Node("out", "output", (y,))])
    assert op not in lw.handlers
    with pytest.raises(LoweringError) as e:
        lw.run()
    assert str(e.value) == (f"cannot lower the module: 1 unsupported operator kind:\n"
                            f"  aten.{op} in module `m` (f.py:3)\n"
                            "(docs/torch.md lists what stepc lowers)")


def test_cli_from_torch_then_sim_with_weights(tmp_path):
    step = tmp_path / "mlp.step"
    spec = str(ROOT / "examples/torch/swiglu_mlp.py:SwiGLUMLP")
    r = CliRunner().invoke(main, ["from-torch", spec, "--input", "x=f32[16,256]",
                                  "--param", "TB=8", "-o", str(step)])
    assert r.exit_code == 0, r.output
    again = CliRunner().invoke(main, ["from-torch", spec, "--input", "x=f32[16,256]",
                                      "-o", str(step)])
    assert again.exit_code == 2 and "exists" in again.output  # nothing overwritten silently
    torch.manual_seed(0)  # the module the command verified against, with --seed 0
    m, x = SwiGLUMLP(), torch.randn(16, 256)
    prog = from_torch(m, (x,), schedule={"TB": 8})
    assert prog.text == step.read_text() and "# Verified on seeded inputs " in prog.text
    weights = tmp_path / "w.safetensors"
    prog.save_weights(str(weights), x)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["sim", str(step), "--weights", str(weights), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert_matches(np.load(out / "Y.npy"), m(x), "f32")
    state = tmp_path / "state.pt"
    torch.save(m.state_dict(), state)  # a state dict alone: weights from it, input random
    r = CliRunner().invoke(main, ["sim", str(step), "--weights", str(state)])
    assert r.exit_code == 0, r.output


def test_fx_fallback_when_export_fails(monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("export unavailable")

    monkeypatch.setattr(torch.export, "export", refuse)
    torch.manual_seed(5)
    m, x = GeluMLP(32, 64), torch.randn(16, 32)
    prog = from_torch(m, (x,), schedule={"TB": 8, "TILE_F": 16})
    _, out = simulated(prog, x)
    assert_matches(out, m(x), "f32")


def test_from_torch_is_public():
    import stepc
    from stepc.torch import from_torch
    assert stepc.from_torch is from_torch and "from_torch" in stepc.__all__


def test_docs_support_table_is_generated_from_the_registries():
    from stepc.torch import support_table
    from stepc.torch.support import documented
    assert documented() == support_table(), \
        "docs/torch.md's support table is stale: run `python -m stepc.torch.support`"
    assert "| rms_norm" in support_table() and "| static | dense blocks" in support_table()
