"""transformers' own sparse MoE blocks through `from_torch`: built from small configs (no
downloads), lowered whole as registered families, checked clean, simulated equal to the
module's forward under every MoE schedule; their off-chip traffic equals the closed form
from the routing trace's per-expert counts, and at Qwen3-30B-A3B dims the analysis equals
the bundled MoE programs'. Skipped when torch or transformers is not installed."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="the transformers MoE blocks need transformers")

from click.testing import CliRunner  # noqa: E402
from transformers import (  # noqa: E402
    DeepseekV2Config,
    DeepseekV3Config,
    MixtralConfig,
    Qwen2MoeConfig,
    Qwen3MoeConfig,
)
from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2Moe  # noqa: E402
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE  # noqa: E402
from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock  # noqa: E402
from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock  # noqa: E402
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock  # noqa: E402

from stepc.analyze import analyze, trace_bindings  # noqa: E402
from stepc.cli import main  # noqa: E402
from stepc.frontend import compile_file, compile_source  # noqa: E402
from stepc.hw import load_config  # noqa: E402
from stepc.sim.run import simulate  # noqa: E402
from stepc.source import SourceFile  # noqa: E402
from stepc.torch import LoweringError, families, from_torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ROUTING = ROOT.parent / "shared" / "data" / "expert_routing"
H, FE, E, K = 64, 32, 8, 2  # hidden, expert intermediate, experts, top-k
SMALL = {
    "mixtral": lambda: MixtralSparseMoeBlock(MixtralConfig(
        hidden_size=H, intermediate_size=FE, num_local_experts=E, num_experts_per_tok=K)),
    "qwen3": lambda: Qwen3MoeSparseMoeBlock(Qwen3MoeConfig(
        hidden_size=H, moe_intermediate_size=FE, num_experts=E, num_experts_per_tok=K,
        norm_topk_prob=True)),
    "qwen2": lambda: Qwen2MoeSparseMoeBlock(Qwen2MoeConfig(
        hidden_size=H, moe_intermediate_size=FE, shared_expert_intermediate_size=2 * FE,
        num_experts=E, num_experts_per_tok=K)),
    "deepseek_v3": lambda: DeepseekV3MoE(DeepseekV3Config(
        hidden_size=H, moe_intermediate_size=FE, n_routed_experts=E, num_experts_per_tok=K,
        n_group=4, topk_group=2, n_shared_experts=1, routed_scaling_factor=2.5)),
    "deepseek_v2": lambda: DeepseekV2Moe(DeepseekV2Config(
        hidden_size=H, moe_intermediate_size=FE, n_routed_experts=E, num_experts_per_tok=K,
        n_group=4, topk_group=2, n_shared_experts=2, topk_method="group_limited_greedy",
        routed_scaling_factor=1.5)),
}
# more families of the same parts, simulated under dynamic tiling in the default run
MORE = {
    "olmoe": lambda: _hf("olmoe", "OlmoeSparseMoeBlock", "OlmoeConfig", hidden_size=H,
                         intermediate_size=FE, num_experts=E, num_experts_per_tok=K),
    "minimax": lambda: _hf("minimax", "MiniMaxSparseMoeBlock", "MiniMaxConfig",
                           hidden_size=H, intermediate_size=FE, num_local_experts=E,
                           num_experts_per_tok=K),
    "qwen3_next": lambda: _hf("qwen3_next", "Qwen3NextSparseMoeBlock", "Qwen3NextConfig",
                              hidden_size=H, moe_intermediate_size=FE, num_experts=E,
                              shared_expert_intermediate_size=2 * FE, num_experts_per_tok=K),
    "glm4_moe": lambda: _hf("glm4_moe", "Glm4MoeMoE", "Glm4MoeConfig", hidden_size=H,
                            moe_intermediate_size=FE, n_routed_experts=E, n_group=2,
                            topk_group=1, num_experts_per_tok=K),
    "ernie4_5_moe": lambda: _hf("ernie4_5_moe", "Ernie4_5_MoeSparseMoeBlock",
                                "Ernie4_5_MoeConfig", hidden_size=H, moe_intermediate_size=FE,
                                moe_num_experts=E, moe_k=K),
    "hunyuan_v1_moe": lambda: _hf("hunyuan_v1_moe", "HunYuanMoEV1Moe", "HunYuanMoEV1Config",
                                  hidden_size=H, intermediate_size=FE,
                                  moe_intermediate_size=FE, num_experts=E, moe_topk=K),
}
TILINGS = {"static": {}, "dynamic": {}, "timemux": {"R": 4}}


def _hf(model: str, block_class: str, config_class: str, **config) -> torch.nn.Module:
    import importlib
    base = f"transformers.models.{model}"
    cfg = getattr(importlib.import_module(f"{base}.configuration_{model}"), config_class)
    cls = getattr(importlib.import_module(f"{base}.modeling_{model}"), block_class)
    return cls(cfg(**config))


def block(name: str, seed: int = 0) -> torch.nn.Module:
    """A small block with seeded weights (transformers leaves them to the model's init) and
    a non-zero DeepSeek correction bias, so that it moves the choice."""
    torch.manual_seed(seed)
    m = {**SMALL, **MORE}[name]().eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(std=0.2)
        for b in m.buffers():
            b.normal_(std=0.2)
    return m


def compiled(prog):
    r = compile_source(SourceFile("emitted.step", prog.text))
    assert r.ok and not r.diagnostics.items, "\n".join(str(d) for d in r.diagnostics.items)
    return r


def simulated(prog, x):
    r = compiled(prog)
    run = simulate(r.typed, load_config(None, ()), prog.traces(x), values=prog.values(x))
    assert run.deadlock is None
    return r, run.outputs["Y"]


def assert_forward(out: np.ndarray, m: torch.nn.Module, x: torch.Tensor):
    with torch.no_grad():
        ref = m(x).reshape(-1, x.shape[-1]).float().numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


def test_the_registry_names_each_block():
    for name, make in {**SMALL, **MORE}.items():
        fam = families.find(make())
        assert fam is not None and fam.kind == "moe", name
        assert fam.tilings == ("static", "dynamic", "timemux")


def rotation(names, tilings) -> list:
    """(name, tiling) pairs: by default each block under one tiling and each tiling for
    some block (in turn); every pair under `-m slow`."""
    names, tilings = list(names), list(tilings)
    return [pytest.param(n, t, marks=[pytest.mark.slow] * (tilings.index(t)
                                                           != names.index(n) % len(tilings)))
            for n in names for t in tilings]


@pytest.mark.parametrize("name,tiling", rotation(SMALL, TILINGS))
def test_block_simulates_its_own_forward(name, tiling):
    m = block(name)
    x = torch.randn(2, 8, H, generator=torch.Generator().manual_seed(1))  # [batch, seq, hidden]
    prog = from_torch(m, (x,), verify=False, schedule={"tiling": tiling, **TILINGS[tiling]})
    assert "param B = 16" in prog.text and "external(\"routing\", topk=K)" in prog.text
    _, out = simulated(prog, x)
    assert_forward(out, m, x)


@pytest.mark.parametrize("tiling", [pytest.param("static", marks=pytest.mark.slow), "dynamic",
                                    pytest.param("timemux", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", MORE)
def test_more_families_simulate_their_forward(name, tiling):
    m = block(name, seed=9)
    x = torch.randn(2, 8, H, generator=torch.Generator().manual_seed(10))
    prog = from_torch(m, (x,), verify=False, schedule={"tiling": tiling, **TILINGS[tiling]})
    _, out = simulated(prog, x)
    assert_forward(out, m, x)


def test_two_dimensional_tokens_and_each_experts_implementation():
    """DeepSeek takes [tokens, hidden] too; batched_mm and grouped_mm compute the same
    function of the same weights, so one program serves all three implementations."""
    m = block("deepseek_v3", seed=2)
    x = torch.randn(24, H, generator=torch.Generator().manual_seed(3))
    prog = from_torch(m, (x,), verify=False, schedule="dynamic")
    _, out = simulated(prog, x)
    for impl in ("eager", "batched_mm", "grouped_mm"):
        m.experts.config._experts_implementation = impl
        assert_forward(out, m, x)
    assert "grouped_mm" in from_torch(m, (x,), verify=False).text


def test_transposed_expert_weights():
    """Experts stored [E, D, 2F] / [E, F, D] (`is_transposed`, read by batched_mm)."""
    m = block("qwen3", seed=4)
    ex = m.experts
    x = torch.randn(1, 16, H, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = m(x)
    ex.gate_up_proj = torch.nn.Parameter(ex.gate_up_proj.detach().transpose(1, 2).contiguous())
    ex.down_proj = torch.nn.Parameter(ex.down_proj.detach().transpose(1, 2).contiguous())
    ex.is_transposed, ex.config._experts_implementation = True, "batched_mm"
    with torch.no_grad():
        torch.testing.assert_close(m(x), ref)  # transformers reads them transposed
    _, out = simulated(from_torch(m, (x,), verify=False), x)
    assert_forward(out, m, x)


def closed_form(m: torch.nn.Module, tiling: str, ids: np.ndarray, params: dict,
                elem: int) -> int:
    """Off-chip bytes: the tokens and routing weights once, each expert's weights once per
    token tile (static, timemux: ceil(n_e / TILE_N) tiles; dynamic: one per active expert),
    the shared expert's (and its gate's) once per tile of all B tokens, the f32 output."""
    b = ids.shape[0]
    counts = np.bincount(ids.ravel(), minlength=E)
    if tiling == "dynamic":
        tiles, shared_tiles = int((counts > 0).sum()), 1
    else:
        tiles = sum(math.ceil(n / params["TILE_N"]) for n in counts)
        shared_tiles = math.ceil(b / params["TILE_N"])
    weights = tiles * 3 * H * FE
    shared = getattr(m, "shared_experts", None) or getattr(m, "shared_expert", None)
    if shared is not None:
        weights += shared_tiles * 3 * H * shared.up_proj.out_features
    if hasattr(m, "shared_expert_gate"):
        weights += shared_tiles * H  # the sigmoid gate's [D, 1] weight
    return elem * (b * H + b * K + weights) + 4 * b * H


@pytest.mark.parametrize("tiling,params", [("static", {"TILE_N": 4}), ("dynamic", {}),
                                           ("timemux", {"R": 2, "TILE_N": 8})])
@pytest.mark.parametrize("name", SMALL)
def test_off_chip_traffic_is_the_closed_form(name, tiling, params):
    m = block(name, seed=6).to(torch.bfloat16)
    x = torch.randn(4, 8, H, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)
    prog = from_torch(m, (x,), verify=False, schedule={"tiling": tiling, **params})
    ids = prog.traces(x)["routing"]
    assert ids.shape == (32, K)
    r = compiled(prog)
    a = analyze(r.typed, "artifact").bind(trace_bindings(r.typed, {"routing": ids}))
    assert int(a.totals["off_chip_bytes"]) == closed_form(m, tiling, ids, params, 2)


def test_tile_n_moves_the_traffic():
    """Static tiling at TILE_N 4 and 16: each its own closed form, and they differ."""
    m = block("qwen2", seed=6).to(torch.bfloat16)
    x = torch.randn(4, 8, H, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)
    seen = set()
    for tile in (4, 16):
        prog = from_torch(m, (x,), verify=False, schedule={"tiling": "static", "TILE_N": tile})
        ids = prog.traces(x)["routing"]
        r = compiled(prog)
        a = analyze(r.typed, "artifact").bind(trace_bindings(r.typed, {"routing": ids}))
        moved = int(a.totals["off_chip_bytes"])
        assert moved == closed_form(m, "static", ids, {"TILE_N": tile}, 2)
        seen.add(moved)
    assert len(seen) == 2


@pytest.mark.parametrize("name", ["qwen2", "deepseek_v3"])
def test_bf16_block_within_bf16_rounding(name):
    m = block(name).to(torch.bfloat16)
    x = torch.randn(2, 8, H, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    _, out = simulated(from_torch(m, (x,), verify=False, schedule="dynamic"), x)
    with torch.no_grad():
        ref = m(x).reshape(-1, H).float().numpy()
    # the module rounds each op's result to bf16 (8-bit mantissa); the program accumulates
    # in f32: a few bf16 ulps of the output's scale apart
    np.testing.assert_allclose(out, ref, rtol=2e-2, atol=2e-2 * float(np.abs(ref).max()))


def _trace(folder: str) -> np.ndarray:
    found = sorted((ROUTING / folder).glob("*.npz"))
    if not found:
        pytest.skip(f"the paper's routing trace {folder} is not in ../shared/data")
    return np.load(found[0])["data"].astype(np.int64)


@pytest.mark.parametrize("tiling", ["static", "dynamic",
                                    pytest.param("timemux", marks=pytest.mark.slow)])
def test_qwen3_30b_a3b_analyzes_like_the_bundled_programs(tiling, bundled):
    ids = _trace("qwen_b64")
    config = Qwen3MoeConfig(hidden_size=2048, moe_intermediate_size=768, num_experts=128,
                            num_experts_per_tok=8)
    with torch.device("meta"):
        m = Qwen3MoeSparseMoeBlock(config)
        x = torch.empty(1, 64, 2048, dtype=torch.bfloat16)
    mine = compiled(from_torch(m, (x,), schedule=tiling, verify=False))  # meta device
    ref = f"moe_{tiling}"  # the session's compile and analysis (tests/bundled.py)
    a = analyze(mine.typed).bind(trace_bindings(mine.typed, {"routing": ids}))
    b = bundled.analysis(ref).bind(trace_bindings(bundled.typed(ref), {"routing": ids}))
    assert a.totals == b.totals
    assert a.allocated_compute == b.allocated_compute


@pytest.mark.slow
@pytest.mark.parametrize("tiling", ["static", "dynamic"])
def test_qwen3_30b_a3b_simulates_like_the_bundled_programs(tiling):
    """Timing-only runs on the paper's trace: the same cycles and bytes."""
    ids = _trace("qwen_b64")
    config = Qwen3MoeConfig(hidden_size=2048, moe_intermediate_size=768, num_experts=128,
                            num_experts_per_tok=8)
    with torch.device("meta"):
        m = Qwen3MoeSparseMoeBlock(config)
        x = torch.empty(1, 64, 2048, dtype=torch.bfloat16)
    mine = compiled(from_torch(m, (x,), schedule=tiling, verify=False))  # meta device
    ref = compile_file(str(ROOT / "programs" / f"moe_{tiling}.step"))
    hw = load_config("paper-eval", ())
    a, b = (simulate(r.typed, hw, {"routing": ids}, functional=False) for r in (mine, ref))
    assert (a.cycles, a.useful_bytes) == (b.cycles, b.useful_bytes)


def test_mixtral_8x7b_analyzes_like_the_bundled_program():
    ids = _trace("mixtral_b64")
    config = MixtralConfig(hidden_size=4096, intermediate_size=14336, num_local_experts=8,
                           num_experts_per_tok=2)
    with torch.device("meta"):
        m = MixtralSparseMoeBlock(config)
        x = torch.empty(8, 8, 4096, dtype=torch.bfloat16)
    mine = compiled(from_torch(m, (x,), schedule="static", verify=False))  # meta device
    ref = compile_file(str(ROOT / "programs" / "moe_static.step"),
                       {"D": 4096, "F": 14336, "E": 8, "K": 2})
    a = analyze(mine.typed).bind(trace_bindings(mine.typed, {"routing": ids}))
    b = analyze(ref.typed).bind(trace_bindings(ref.typed, {"routing": ids}))
    assert a.totals == b.totals


def test_lowered_on_meta_then_valued_on_the_cpu():
    """The command line's path: lower on the meta device, take values from a CPU module."""
    with torch.device("meta"):
        meta = SMALL["qwen2"]()
        example = torch.empty(2, 8, H)
    prog = from_torch(meta, (example,), schedule="static", verify=False).on_module(
        block("qwen2", seed=8))
    x, = prog.seeded_inputs((example,), seed=3)
    _, out = simulated(prog, x)
    assert_forward(out, prog.module, x)


SPEC = """
import torch
from transformers import DeepseekV3Config
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE


class Block(DeepseekV3MoE):
    def __init__(self):
        super().__init__(DeepseekV3Config(
            hidden_size=64, moe_intermediate_size=32, n_routed_experts=8,
            num_experts_per_tok=2, n_group=4, topk_group=2, hidden_act="{act}"))
        if not any(p.is_meta for p in self.parameters()):
            with torch.no_grad():
                for p in self.parameters():
                    p.normal_(std=0.2)
"""


def test_cli_from_torch_then_sim_computes_the_forward(tmp_path):
    spec = tmp_path / "dsv3.py"
    spec.write_text(SPEC.format(act="silu"))
    files = {n: tmp_path / n for n in ("moe.step", "w.safetensors", "ids.npy")}
    r = CliRunner().invoke(main, [
        "from-torch", f"{spec}:Block", "--input", "hidden_states=f32[2,8,64]",
        "--schedule", "timemux", "--param", "R=2", "-o", str(files["moe.step"]),
        "--weights-out", str(files["w.safetensors"]),
        "--external-out", f"routing={files['ids.npy']}"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["sim", str(files["moe.step"]), "--weights",
                                  str(files["w.safetensors"]), "--trace",
                                  f"routing={files['ids.npy']}", "--out", str(out)])
    assert r.exit_code == 0, r.output
    import importlib.util
    mod_spec = importlib.util.spec_from_file_location("dsv3_block", spec)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    torch.manual_seed(0)  # as `from-torch --seed 0` built it
    m = mod.Block().eval()
    x = torch.randn(2, 8, 64, generator=torch.Generator().manual_seed(0))
    assert_forward(np.load(out / "Y.npy"), m, x)


def test_cli_refusal_names_module_and_line(tmp_path):
    spec = tmp_path / "gelu.py"
    spec.write_text(SPEC.format(act="gelu"))
    r = CliRunner().invoke(main, ["from-torch", f"{spec}:Block", "--input",
                                  "hidden_states=f32[16,64]", "-o", str(tmp_path / "m.step")])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "module `experts`" in r.output and "modeling_deepseek_v3.py:" in r.output
    assert "GELU" in r.output and not (tmp_path / "m.step").exists()


class WithBias(Qwen3MoeSparseMoeBlock):
    """A block holding a weight the routed SwiGLU form would ignore."""

    def __init__(self):
        super().__init__(Qwen3MoeConfig(hidden_size=H, moe_intermediate_size=FE, num_experts=E,
                                        num_experts_per_tok=K))
        self.out_bias = torch.nn.Parameter(torch.zeros(H))


@pytest.mark.parametrize("make,example,schedule,message", [
    (WithBias, (1, 16, H), None, "out_bias"),
    (SMALL["mixtral"], (1, 16, H + 1), None, "hidden_states [1, 16, 65]"),
    (SMALL["qwen3"], (1, 16, H), {"tiling": "static", "TILE_F": 24},
     "TILE_F = 24 does not divide F = 32"),
    (SMALL["qwen2"], (1, 16, H), {"tiling": "dynamic", "TILE_N": 8},
     "unknown schedule setting TILE_N"),
    (SMALL["qwen3"], (1, 16, H), {"tiling": "timemux", "R": 3}, "R = 3 regions do not divide"),
    (SMALL["qwen3"], (1, 16, H), "interleaved", "unknown tiling `interleaved`"),
])
def test_refusals(make, example, schedule, message):
    with pytest.raises(LoweringError) as e:
        from_torch(make(), (torch.randn(*example),), schedule=schedule)
    assert message in str(e.value)


def test_schedule_params_move_the_program():
    """TILE_F, BW and R reach the program's params and its analysis."""
    m = block("qwen3")
    x = torch.randn(1, 16, H)
    small, large = (compiled(from_torch(m, (x,), schedule={"tiling": "timemux", "R": r, "BW": 512},
                                        verify=False)) for r in (2, 8))
    a, b = analyze(small.typed), analyze(large.typed)
    assert a.allocated_compute < b.allocated_compute
    text = from_torch(m, (x,), verify=False, schedule={"tiling": "static", "TILE_F": 16}).text
    assert "param TILE_F = 16" in text and "param NF = F // TILE_F" in text


def test_bf16_tokens_are_routed_by_an_f32_router_on_their_widened_values():
    m = block("mixtral")  # f32 weights, bf16 tokens: PyTorch alone would refuse the matmul
    x = torch.randn(1, 16, H).to(torch.bfloat16)
    prog = from_torch(m, (x,), verify=False)
    np.testing.assert_array_equal(prog.traces(x)["routing"], prog.traces(x.float())["routing"])


def test_values_refuse_meta_and_uninitialised_weights():
    with torch.device("meta"):
        meta = SMALL["qwen3"]()
        example = torch.empty(1, 16, H)
    prog = from_torch(meta, (example,), verify=False)
    x = torch.randn(1, 16, H)
    with pytest.raises(LoweringError, match="meta device"):
        prog.values(example)
    m = block("qwen3")
    with torch.no_grad():
        m.experts.down_proj[0, 0, 0] = float("nan")
    with pytest.raises(LoweringError, match="experts.down_proj.*non-finite"):
        prog.on_module(m).values(x)


class TwoOutputRouter(torch.nn.Module):
    """A router of another shape: (weights, ids) without logits."""

    top_k = K

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(E, H))

    def forward(self, x):
        return torch.topk(torch.softmax(x @ self.weight.T, -1), K, dim=-1)


def test_a_router_of_another_shape_is_refused():
    m = block("qwen3")
    m.gate = TwoOutputRouter()
    x = torch.randn(1, 16, H)
    with pytest.raises(LoweringError, match="module `gate` .*expected the router to return"):
        from_torch(m, (x,))  # verification runs it
    prog = from_torch(m, (x,), verify=False)
    with pytest.raises(LoweringError, match="module `gate` .*expected the router to return"):
        prog.traces(x)


def test_bf16_activations_get_their_routing_from_the_modules_router(tmp_path):
    """`--input hidden_states=bf16[...] --external-out routing=...` on a module built in f32
    (as from-torch builds one): the router runs on the bf16 values widened to its own dtype
    (it failed with 'BFloat16 != float' before)."""
    cfg = tmp_path / "config.json"
    cfg.write_text('{"model_type": "qwen3_moe", "hidden_size": 64, "moe_intermediate_size": 32,'
                   ' "num_experts": 8, "num_experts_per_tok": 2, "norm_topk_prob": true}')
    ids = tmp_path / "ids.npy"
    r = CliRunner().invoke(main, [
        "from-torch", "transformers:Qwen3MoeSparseMoeBlock", "--hf-config", str(cfg),
        "--input", "hidden_states=bf16[2,8,64]", "-o", str(tmp_path / "moe.step"),
        "--external-out", f"routing={ids}"])
    assert r.exit_code == 0, r.output
    routing = np.load(ids)
    assert routing.shape == (16, 2) and routing.min() >= 0 and routing.max() < 8
