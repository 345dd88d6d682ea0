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
