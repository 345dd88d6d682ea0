"""`from_torch` on the operators the first dense lowering refused, each with the real
transformers class that writes it (or a minimal module where no block uses it alone): a
fused `gate_up_proj` split by `chunk` (Phi-3's MLP), attention's head-splitting views and
transposes, and batched matmuls. The simulation equals the module's forward. Skipped when
torch or transformers is not installed."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the transformers blocks need the "
                                   "`transformers` package (the torch extra installs it)")

from stepc.analyze import analyze  # noqa: E402
from stepc.frontend import compile_source  # noqa: E402
from stepc.hw import load_config  # noqa: E402
from stepc.sim.run import simulate  # noqa: E402
from stepc.source import SourceFile  # noqa: E402
from stepc.torch import LoweringError, from_torch  # noqa: E402
from stepc.weights import WeightsError, match_weights  # noqa: E402

HIDDEN, INTER = 64, 128


def _phi3_mlp():
    from transformers.models.phi3.modeling_phi3 import Phi3MLP
    cfg = transformers.Phi3Config(hidden_size=HIDDEN, intermediate_size=INTER,
                                  num_attention_heads=4, num_hidden_layers=1, vocab_size=32,
                                  pad_token_id=0, eos_token_id=1)
    torch.manual_seed(7)
    return Phi3MLP(cfg).eval()


def _run(prog, *inputs):
    r = compile_source(SourceFile("emitted.step", prog.text))
    errors = [str(d) for d in r.diagnostics.items]
    assert r.ok and not errors, "\n".join(errors)
    run = simulate(r.typed, load_config(None, ()), prog.traces(*inputs),
                   values=prog.values(*inputs))
    assert run.deadlock is None
    return r, run.outputs["Y"]


def _assert_close(out, ref, tol=1e-5):
    ref = ref.detach().float().numpy().reshape(out.shape)
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * float(np.abs(ref).max()))


def _fused_mlp(name: str):
    """Other transformers MLPs with one `gate_up_proj` split by `chunk`."""
    from transformers.models.glm4 import modeling_glm4
    from transformers.models.llama4 import modeling_llama4
    small = dict(hidden_size=HIDDEN, intermediate_size=INTER, num_attention_heads=4,
                 num_key_value_heads=2, num_hidden_layers=1, vocab_size=32, pad_token_id=0,
                 eos_token_id=1, bos_token_id=1)
    torch.manual_seed(8)
    if name == "Glm4MLP":
        return modeling_glm4.Glm4MLP(transformers.Glm4Config(**small)).eval()
    cfg = transformers.Llama4TextConfig(**small, intermediate_size_mlp=INTER)
    return modeling_llama4.Llama4TextMLP(cfg).eval()


@pytest.mark.parametrize("name", ["Glm4MLP", "Llama4TextMLP"])
def test_other_fused_gate_up_mlps_simulate_to_their_forward(name):
    m, x = _fused_mlp(name), torch.randn(2, 8, HIDDEN)
    _, out = _run(from_torch(m, (x,), schedule={"TB": 8}), x)
    _assert_close(out, m(x))


@pytest.mark.parametrize("shape", [(16, HIDDEN), (2, 8, HIDDEN)], ids=["2d", "3d"])
def test_phi3_mlp_fused_gate_up_chunk_lowers_to_the_swiglu(shape):
    m, x = _phi3_mlp(), torch.randn(shape)
    prog = from_torch(m, (x,), schedule={"TB": 8, "TILE_F": 32})
    text = prog.text
    assert f"gate_up_proj_weight : f32[2, {INTER}, {HIDDEN}] weight" in text
    assert "gate_up_proj_weight[0]" in text and "gate_up_proj_weight[1]" in text
    assert "fn=silu" in text and "Accum(h, wd" in text
    _, out = _run(prog, x)
    _assert_close(out, m(x))


def test_a_fused_checkpoint_entry_fills_the_halves():
    """The state dict's [2F, D] `gate_up_proj.weight` fills the program's [2, F, D] tensor
    (the same data); a misshaped one is still refused."""
    m, x = _phi3_mlp(), torch.randn(16, HIDDEN)
    prog = from_torch(m, (x,))
    tensors = compile_source(SourceFile("e.step", prog.text)).typed.program.tensors
    state = {k: v.numpy() for k, v in m.state_dict().items()}
    matched, _ = match_weights(tensors, state)
    np.testing.assert_array_equal(matched["gate_up_proj_weight"][1],
                                  state["gate_up_proj.weight"][INTER:])
    with pytest.raises(WeightsError, match="gate_up_proj.weight"):
        match_weights(tensors, {**state, "gate_up_proj.weight": state["gate_up_proj.weight"].T})


class SplitOnly(torch.nn.Module):
    """A split of the columns that feeds no SwiGLU: still refused, by name and line."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 32)

    def forward(self, x):
        a, b = self.proj(x).chunk(2, dim=-1)
        return a + b


def test_another_split_of_the_columns_is_refused_with_its_line():
    with pytest.raises(LoweringError, match=r"aten.split in .*test_torch_hf_more.py:\d+"):
        from_torch(SplitOnly(), (torch.randn(8, 16),))


class QueryHeads(torch.nn.Module):
    """The query path of transformers' Qwen3Attention up to the scores, and back: q_proj,
    `view(*input_shape, -1, head_dim)`, the per-head `Qwen3RMSNorm`, `transpose(1, 2)`;
    then an element-wise op per head, `transpose(1, 2).reshape(*input_shape, -1)` and
    o_proj (attention's output path)."""

    def __init__(self, dtype=torch.float32, heads=4, head_dim=16):
        super().__init__()
        from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm
        self.head_dim = head_dim
        self.q_proj = torch.nn.Linear(HIDDEN, heads * head_dim, bias=False, dtype=dtype)
        self.q_norm = Qwen3RMSNorm(head_dim, eps=1e-6).to(dtype)
        self.o_proj = torch.nn.Linear(heads * head_dim, HIDDEN, bias=False, dtype=dtype)

    def forward(self, hidden_states):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        q = self.q_norm(self.q_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
        q = torch.nn.functional.silu(q)
        return self.o_proj(q.transpose(1, 2).reshape(*input_shape, -1).contiguous())


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)],
                         ids=["f32", "bf16"])
def test_head_split_view_and_transposes_relabel_the_stream(dtype, tol):
    torch.manual_seed(11)
    m = QueryHeads(dtype).eval()
    with torch.no_grad():
        m.q_norm.weight.normal_(1.0, 0.5)
    x = torch.randn(2, 8, HIDDEN, dtype=dtype)
    prog = from_torch(m, (x,), schedule={"TB": 4})
    text = prog.text
    assert "Reshape(" in text and "[MT, 4] of [TB, 16]" in text  # 4 heads of 16
    assert "stride=[0, 0], shape=[MT, 4]" in text  # the norm's scale, per row tile and head
    _, out = _run(prog, x)
    _assert_close(out, m(x), tol)


class HeadsMoved(torch.nn.Module):
    def forward(self, x):  # [B, S, H, Dh] -> [B, H, S, Dh] -> [B, H, S * Dh]: data moves
        b, s, _ = x.shape
        return x.view(b, s, 4, 2).transpose(1, 2).reshape(b, 4, s * 2) * 2.0


def test_a_reshape_that_moves_heads_into_rows_is_refused():
    with pytest.raises(LoweringError, match="moves data between heads and rows"):
        from_torch(HeadsMoved(), (torch.randn(2, 4, 8),))


class GroupedSwiGLU(torch.nn.Module):
    """Per-batch SwiGLU weights applied with `torch.bmm` to tokens sorted by batch, as
    transformers' batched expert implementations write it (one weight given transposed)."""

    def __init__(self, groups=4, d=32, f=64):
        super().__init__()
        self.groups = groups
        self.gate = torch.nn.Parameter(torch.randn(groups, d, f) * 0.1)
        self.up = torch.nn.Parameter(torch.randn(groups, f, d) * 0.1)  # [G, out, in]
        self.down = torch.nn.Parameter(torch.randn(groups, f, d) * 0.1)

    def forward(self, x):
        h = x.view(self.groups, -1, x.shape[-1])
        a = torch.nn.functional.silu(torch.bmm(h, self.gate)) * torch.bmm(
            h, self.up.transpose(1, 2))
        return torch.bmm(a, self.down).view(-1, x.shape[-1])


def test_bmm_by_a_parameter_tiles_over_the_batch_dim():
    torch.manual_seed(12)
    m, x = GroupedSwiGLU().eval(), torch.randn(32, 32)
    prog = from_torch(m, (x,), schedule={"TB": 4, "TILE_F": 16})
    assert prog.text.count("stride=[64 // TILE_F, 0, 1], shape=[4, 8 // TB, 64 // TILE_F]") == 2
    _, out = _run(prog, x)
    _assert_close(out, m(x))
    for tb in (4, 8):  # input and output once; each row tile reads its batch's 3 matrices
        r = compile_source(SourceFile("e.step", from_torch(m, (x,), schedule={"TB": tb}).text))
        traffic = int(analyze(r.typed, "artifact").totals["off_chip_bytes"])
        assert traffic == 4 * (2 * 32 * 32 + (32 // tb) * 3 * 32 * 64)
    with pytest.raises(LoweringError, match="TB = 16 does not divide the 8 rows of each batch"):
        from_torch(m, (x,), schedule={"TB": 16})


class Scores(torch.nn.Module):
    def forward(self, x):
        return torch.bmm(x, torch.sigmoid(x))


def test_bmm_of_two_activations_is_refused_with_its_line():
    with pytest.raises(LoweringError, match=r"aten.bmm in .*test_torch_hf_more.py:\d+.*not "
                                            "of two activations"):
        from_torch(Scores(), (torch.randn(2, 8, 8),))


def _one_liners():
    """transformers blocks one operator away from what stepc lowered before: Falcon's
    `x @ self.weight.T` (aten.numpy_T), a layer norm whose scale is computed (Nemotron's
    `weight + 1`), Gemma's RMSNorm scaled by `1 + weight`."""
    from transformers.models.falcon.modeling_falcon import FalconLinear
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
    from transformers.models.nemotron.modeling_nemotron import NemotronLayerNorm1P
    return {"FalconLinear": (lambda: FalconLinear(HIDDEN, INTER, bias=True), [4, HIDDEN]),
            "NemotronLayerNorm1P": (lambda: NemotronLayerNorm1P(HIDDEN), [2, 3, HIDDEN]),
            "GemmaRMSNorm": (lambda: GemmaRMSNorm(HIDDEN, eps=1e-6), [4, HIDDEN])}


@pytest.mark.parametrize("name", ["FalconLinear", "NemotronLayerNorm1P", "GemmaRMSNorm"])
def test_transposed_weights_and_computed_norm_scales_simulate_to_their_forward(name):
    make, shape = _one_liners()[name]
    torch.manual_seed(3)
    m = make().eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_()
    x = torch.randn(*shape)
    prog = from_torch(m, (x,), verify=False)  # compared here, not by the lowering's own check
    assert "Node(" not in prog.text
    _, out = _run(prog, x)
    _assert_close(out, m(x))


def test_matrix_transpose_mT_of_a_stacked_weight_reads_it_transposed():
    class Stacked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(2, INTER, HIDDEN))

        def forward(self, x):
            return torch.bmm(x, self.w.mT)

    torch.manual_seed(4)
    m, x = Stacked().eval(), torch.randn(2, 8, HIDDEN)
    prog = from_torch(m, (x,), {"TB": 8}, verify=False)
    assert "transpose=true" in prog.text
    _, out = _run(prog, x)
    _assert_close(out, m(x))
