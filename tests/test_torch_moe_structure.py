"""Sparse MoE blocks recognised by their parts rather than their class name: transformers
blocks no family registers (GraniteMoe, PhiMoE, Jamba, DBRX) and hand-written top-k
loops lower, check, and simulate equal to their module's forward; blocks whose experts
or weights differ from what stepc lowers are refused with what differs. Skipped when
torch or transformers is not installed."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="the transformers MoE blocks need transformers")

from click.testing import CliRunner  # noqa: E402
from test_torch_hf_moe import TILINGS, _hf, assert_forward, rotation, simulated  # noqa: E402
from transformers import DbrxConfig, GraniteMoeConfig, JambaConfig, PhimoeConfig  # noqa: E402
from transformers.models.dbrx.modeling_dbrx import DbrxFFN  # noqa: E402
from transformers.models.granitemoe.modeling_granitemoe import GraniteMoeMoE  # noqa: E402
from transformers.models.jamba.modeling_jamba import JambaSparseMoeBlock  # noqa: E402
from transformers.models.phimoe.modeling_phimoe import PhimoeSparseMoeBlock  # noqa: E402

from stepc.cli import main  # noqa: E402
from stepc.torch import LoweringError, families, from_torch  # noqa: E402
from stepc.torch.moe_structure import find  # noqa: E402

H, FE, E, K = 64, 32, 4, 2  # hidden, expert intermediate, experts, top-k


def _dbrx(norm) -> torch.nn.Module:
    return DbrxFFN(DbrxConfig(d_model=H, ffn_config={
        "ffn_hidden_size": FE, "moe_num_experts": E, "moe_top_k": K,
        "moe_normalize_expert_weights": norm}))


BLOCKS = {
    "granite": lambda: GraniteMoeMoE(GraniteMoeConfig(
        hidden_size=H, intermediate_size=FE, num_local_experts=E, num_experts_per_tok=K)),
    "phimoe": lambda: PhimoeSparseMoeBlock(PhimoeConfig(
        hidden_size=H, intermediate_size=FE, num_local_experts=E, num_experts_per_tok=K)),
    "jamba": lambda: JambaSparseMoeBlock(JambaConfig(
        hidden_size=H, intermediate_size=FE, num_experts=E, num_experts_per_tok=K)),
    "dbrx": lambda: _dbrx(1.0),  # routing weights L1-normalised (DBRX's default)
    "dbrx_l2": lambda: _dbrx(2.0),
}

# hand-written blocks, in a file of their own so that messages name their lines
HAND = '''
import torch
import torch.nn.functional as F
from torch import nn


class SwiGLU(nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.gate_proj = nn.Linear(d, f, bias=False)
        self.up_proj = nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class TopTwo(nn.Module):
    """The usual loop: Linear router, softmax, topk, torch.where per expert, index_add_."""

    def __init__(self, d=64, f=32, e=4, k=2, expert=SwiGLU):
        super().__init__()
        self.k = k
        self.router = nn.Linear(d, e, bias=False)
        self.experts = nn.ModuleList(expert(d, f) for _ in range(e))

    def forward(self, x):
        probs = torch.softmax(self.router(x), dim=-1)
        weights, ids = torch.topk(probs, self.k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            tok, slot = torch.where(ids == e)
            out.index_add_(0, tok, expert(x[tok]) * weights[tok, slot, None])
        return out


class W132(nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.w1 = nn.Linear(d, f, bias=False)
        self.w2 = nn.Linear(f, d, bias=False)
        self.w3 = nn.Linear(d, f, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MixtralStyle(nn.Module):
    """Mixtral's original loop over `[batch, seq, hidden]`: a one-hot expert mask, experts
    w1/w3/w2 under another name."""

    def __init__(self, d=64, f=32, e=4, k=2):
        super().__init__()
        self.k = k
        self.gate = nn.Linear(d, e, bias=False)
        self.mlps = nn.ModuleList(W132(d, f) for _ in range(e))

    def forward(self, hidden_states):
        b, s, d = hidden_states.shape
        x = hidden_states.view(-1, d)
        w = F.softmax(self.gate(x), dim=1, dtype=torch.float)
        w, sel = torch.topk(w, self.k, dim=-1)
        w = (w / w.sum(dim=-1, keepdim=True)).to(x.dtype)
        out = torch.zeros((b * s, d), dtype=x.dtype)
        mask = F.one_hot(sel, num_classes=len(self.mlps)).permute(2, 1, 0)
        for e in range(len(self.mlps)):
            idx, top = torch.where(mask[e])
            out.index_add_(0, top, self.mlps[e](x[top]) * w[top, idx, None])
        return out.reshape(b, s, d)


class Gelu(nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.fc1 = nn.Linear(d, f)
        self.fc2 = nn.Linear(f, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class GeluTopTwo(TopTwo):
    def __init__(self):
        super().__init__(expert=Gelu)


class BiasedSwiGLU(SwiGLU):
    def __init__(self, d, f):
        super().__init__(d, f)
        self.up_proj = nn.Linear(d, f)


class BiasedTopTwo(TopTwo):
    def __init__(self):
        super().__init__(expert=BiasedSwiGLU)


class WithShared(TopTwo):
    def __init__(self):
        super().__init__()
        self.shared = nn.Linear(64, 64, bias=False)

    def forward(self, x):
        return super().forward(x) + self.shared(x)


class SharedTopTwo(TopTwo):
    """TopTwo plus a SwiGLU every token goes through (`shared_experts`), or one scaled by
    its sigmoid gate (`shared_expert`, `shared_expert_gate`)."""

    def __init__(self, gated=False):
        super().__init__()
        self.gated = gated
        if gated:
            self.shared_expert = SwiGLU(64, 48)
            self.shared_expert_gate = nn.Linear(64, 1, bias=False)
        else:
            self.shared_experts = SwiGLU(64, 48)

    def forward(self, x):
        if self.gated:
            shared = torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        else:
            shared = self.shared_experts(x)
        return super().forward(x) + shared


class Stack(nn.Module):
    """No MoE: a ModuleList of layers and a two-way head."""

    def __init__(self, d=64):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(d, d) for _ in range(2))
        self.head = nn.Linear(d, 2)

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)
'''


@pytest.fixture(scope="module")
def hand(tmp_path_factory):
    path = tmp_path_factory.mktemp("hand") / "hand_moe.py"
    path.write_text(HAND)
    spec = importlib.util.spec_from_file_location("hand_moe", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.path = path
    return mod


def seeded(m: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """`m` in eval mode with N(0, 0.2) weights (transformers leaves its own to the model)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return m.eval()


def tokens(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name,tiling", rotation(BLOCKS, TILINGS))
def test_transformers_block_simulates_its_forward(name, tiling):
    m = seeded(BLOCKS[name]())
    assert families.find(m) is None  # no family names its class: recognised by its parts
    x = tokens(2, 3, H)
    prog = from_torch(m, (x,), schedule={"tiling": tiling, **TILINGS[tiling]})
    assert "param E = 4" in prog.text and "param K = 2" in prog.text
    _, out = simulated(prog, x)
    assert_forward(out, m, x)


@pytest.mark.parametrize("make", [
    # experts whose act_fn is torch's `F.silu` function, not a module
    lambda: _hf("lfm2_moe", "Lfm2MoeSparseMoeBlock", "Lfm2MoeConfig", hidden_size=H,
                moe_intermediate_size=FE, num_experts=E, num_experts_per_tok=K),
    # a router bias held by the block itself (`e_score_correction_bias`), read before the
    # experts are called
    lambda: _hf("minimax_m2", "MiniMaxM2SparseMoeBlock", "MiniMaxM2Config", hidden_size=H,
                intermediate_size=FE, num_local_experts=E, num_experts_per_tok=K),
], ids=["lfm2_moe", "minimax_m2"])
def test_more_blocks_by_their_parts(make):
    m = seeded(make())
    x = tokens(2, 3, H)
    _, out = simulated(from_torch(m, (x,), schedule="dynamic"), x)
    assert_forward(out, m, x)


def test_phimoe_routing_is_what_its_sparsemixer_returns():
    """The router runs ahead of the program: PhiMoE's sparsemixer top-2 (unnormalised
    weights of two masked softmaxes) is what the program's routing holds."""
    m = seeded(BLOCKS["phimoe"]())
    x = tokens(1, 6, H)
    prog = from_torch(m, (x,))
    assert "Router: module `router` (PhimoeTopKRouter" in prog.text
    with torch.no_grad():
        _, weights, ids = m.router(x.reshape(-1, H))
    np.testing.assert_array_equal(prog.traces(x)["routing"], ids.numpy())
    np.testing.assert_array_equal(prog.values(x)["RW"], weights.numpy())
    assert not np.allclose(weights.sum(-1).numpy(), 1)


def test_transposed_fused_experts():
    """Fused experts stored [E, D, 2F] / [E, F, D] (`is_transposed`, read by batched_mm)."""
    m = seeded(BLOCKS["granite"]())
    ex = m.experts
    ex.gate_up_proj = torch.nn.Parameter(ex.gate_up_proj.detach().transpose(1, 2).contiguous())
    ex.down_proj = torch.nn.Parameter(ex.down_proj.detach().transpose(1, 2).contiguous())
    ex.is_transposed, ex.config._experts_implementation = True, "batched_mm"
    x = tokens(2, 4, H)
    _, out = simulated(from_torch(m, (x,), schedule="dynamic"), x)
    assert_forward(out, m, x)


@pytest.mark.parametrize("name,shape", [("TopTwo", (6, H)), ("MixtralStyle", (2, 3, H))])
def test_hand_written_top2_loop_simulates_its_forward(hand, name, shape):
    m = seeded(getattr(hand, name)())
    x = tokens(*shape)
    prog = from_torch(m, (x,), schedule="dynamic")
    assert "found as what feeds the top-k" in prog.text
    _, out = simulated(prog, x)
    assert_forward(out, m, x)
    stack = hand.Stack()
    assert find(stack, (tokens(4, H),)) is None  # a ModuleList of layers is no MoE block


@pytest.mark.parametrize("make", [
    lambda hand: hand.SharedTopTwo(), lambda hand: hand.SharedTopTwo(gated=True),
    lambda hand: _hf("deepseek_v32", "DeepseekV32MoE", "DeepseekV32Config", hidden_size=H,
                     moe_intermediate_size=FE, n_routed_experts=E, num_experts_per_tok=K,
                     n_group=1, topk_group=1, n_shared_experts=1),
    lambda hand: _hf("flint", "FlintSparseMoeBlock", "FlintConfig", hidden_size=H,
                     moe_intermediate_size=FE, num_experts=E, num_experts_per_tok=K,
                     shared_expert_intermediate_size=FE),
], ids=["shared", "gated-shared", "deepseek_v32", "flint"])
def test_shared_experts_by_their_parts(hand, make):
    m = seeded(make(hand))
    assert families.find(m) is None
    x = tokens(6, H) if isinstance(m, hand.TopTwo) else tokens(2, 3, H)
    prog = from_torch(m, (x,), schedule="dynamic", verify=False)  # compared here
    assert "param FS = " in prog.text and "Shared expert: module `shared_expert" in prog.text
    _, out = simulated(prog, x)
    assert_forward(out, m, x)


def test_cli_hand_written_block_then_sim_computes_the_forward(hand, tmp_path):
    """From the command line: lowered on the meta device (the run stops at its first
    data-dependent operator, after the router), valued on the CPU."""
    files = {n: tmp_path / n for n in ("moe.step", "w.safetensors", "ids.npy")}
    r = CliRunner().invoke(main, [
        "from-torch", f"{hand.path}:TopTwo", "--input", "x=f32[8,64]", "--schedule", "static",
        "--param", "TILE_N=4", "-o", str(files["moe.step"]),
        "--weights-out", str(files["w.safetensors"]),
        "--external-out", f"routing={files['ids.npy']}"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["sim", str(files["moe.step"]), "--weights",
                                  str(files["w.safetensors"]), "--trace",
                                  f"routing={files['ids.npy']}", "--out", str(out)])
    assert r.exit_code == 0, r.output
    torch.manual_seed(0)  # as `from-torch --seed 0` built it
    m = hand.TopTwo().eval()
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(0))
    assert_forward(np.load(out / "Y.npy"), m, x)


def test_cli_gelu_experts_are_refused_as_a_usage_error(hand, tmp_path):
    r = CliRunner().invoke(main, ["from-torch", f"{hand.path}:GeluTopTwo", "--input",
                                  "x=f32[6,64]", "-o", str(tmp_path / "m.step")])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "GeluTopTwo (hand_moe.py:" in r.output
    assert "module `experts[0]` (Gelu, hand_moe.py:" in r.output
    assert "computes fc2(gelu(fc1(x) + bias)) + bias" in r.output
    assert "down(silu(gate(x)) * up(x))" in r.output and "mixtral-moe" in r.output
    assert "shape" not in r.output and not (tmp_path / "m.step").exists()


def _dbrx_gelu():
    m = DbrxFFN(DbrxConfig(d_model=H, ffn_config={
        "ffn_hidden_size": FE, "moe_num_experts": E, "moe_top_k": K,
        "ffn_act_fn": {"name": "gelu"}}))
    return m


def _granite_biased():
    m = BLOCKS["granite"]()
    m.experts.has_bias = True
    return m


def _switch():
    """Switch Transformers: top-1 by argmax, experts a dict of `wi` / `wo` MLPs called
    with a one-hot [T, 1, E] selection."""
    return _hf("switch_transformers", "SwitchTransformersSparseMLP", "SwitchTransformersConfig",
               d_model=H, d_ff=FE, num_experts=E)


@pytest.mark.parametrize("make,shape,differs", [
    ("BiasedTopTwo", (6, H), "down_proj(silu(gate_proj(x)) * (up_proj(x) + bias))"),
    ("WithShared", (6, H), "its weights shared.weight are neither its router's, its "
                           "experts' nor a shared SwiGLU expert's"),
    (_dbrx_gelu, (2, 3, H), "module `experts.mlp` (DbrxExpertGLU"),
    (_granite_biased, (2, 3, H), "has_bias=True is not lowered"),
    (_switch, (2, 3, H), "holding expert_0.wi.weight [32, 64], expert_0.wo.weight [64, 32]"),
])
def test_refusals_name_the_class_and_what_differs(hand, make, shape, differs):
    m = seeded(getattr(hand, make)() if isinstance(make, str) else make())
    with pytest.raises(LoweringError) as e:
        from_torch(m, (tokens(*shape),))
    text = str(e.value)
    assert text.startswith(f"{type(m).__name__} (") and differs in text, text
    assert "stepc lowers the MoE families registered by class" in text
    assert "fused `gate_up_proj [E, 2F, D]`" in text and "--input" not in text


def test_example_inputs_the_forward_rejects_are_named_where_it_fails(tmp_path):
    """GraniteMoE takes [batch, seq, hidden]: given [tokens, hidden] its forward fails,
    and the error says where (it said GuardOnDataDependentSymNode before)."""
    cfg = tmp_path / "config.json"
    cfg.write_text('{"model_type": "granitemoe", "hidden_size": 64, "intermediate_size": 32,'
                   ' "num_local_experts": 4, "num_experts_per_tok": 2}')
    r = CliRunner().invoke(main, ["from-torch", "transformers:GraniteMoeMoE", "--hf-config",
                                  str(cfg), "--input", "hidden_states=f32[6,64]"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "on example inputs [6, 64] failed before it called its experts" in r.output
    assert "modeling_granitemoe.py:" in r.output and "GuardOnDataDependent" not in r.output
