"""`from_torch` on the transformers library's own dense blocks (MLPs and RMSNorm), built from
small configs with random weights (no downloads) and called with 2-D and 3-D activations:
the emitted programs check clean, are in `stepc fmt`'s layout, and simulate to the module's
own forward. Skipped when torch or transformers is not installed."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the transformers blocks need the "
                                   "`transformers` package (the torch extra installs it)")

from stepc.analyze import analyze  # noqa: E402
from stepc.frontend import compile_source  # noqa: E402
from stepc.grammar.format import format_source  # noqa: E402
from stepc.hw import load_config  # noqa: E402
from stepc.sim.run import simulate  # noqa: E402
from stepc.source import SourceFile  # noqa: E402
from stepc.torch import LoweringError, from_torch  # noqa: E402

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
HIDDEN, INTER = 64, 128


def _config(family: str):
    cls = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config,
           "qwen3": transformers.Qwen3Config, "gemma": transformers.GemmaConfig}[family]
    return cls(hidden_size=HIDDEN, intermediate_size=INTER, num_attention_heads=4,
               num_key_value_heads=2, num_hidden_layers=1, vocab_size=32)


def _block(name: str):
    from transformers.models.gemma import modeling_gemma
    from transformers.models.llama import modeling_llama
    from transformers.models.qwen2 import modeling_qwen2
    from transformers.models.qwen3 import modeling_qwen3
    return {
        "LlamaMLP": lambda: modeling_llama.LlamaMLP(_config("llama")),
        "Qwen2MLP": lambda: modeling_qwen2.Qwen2MLP(_config("qwen2")),
        "Qwen3MLP": lambda: modeling_qwen3.Qwen3MLP(_config("qwen3")),
        "LlamaRMSNorm": lambda: modeling_llama.LlamaRMSNorm(HIDDEN, eps=1e-6),
        "Qwen3RMSNorm": lambda: modeling_qwen3.Qwen3RMSNorm(HIDDEN, eps=1e-6),
        "GemmaMLP": lambda: modeling_gemma.GemmaMLP(_config("gemma")),  # GELU (tanh), unfused
        "GemmaRMSNorm": lambda: modeling_gemma.GemmaRMSNorm(HIDDEN, eps=1e-6),  # 1 + weight
    }[name]()


def _built(name: str, dtype: str, seed: int):
    torch.manual_seed(seed)
    m = _block(name).to(DTYPES[dtype]).eval()
    with torch.no_grad():  # a norm's scale starts at ones: make it tell rows apart
        for p in m.parameters():
            p.normal_(1.0 if p.ndim == 1 else 0.0, 0.5 if p.ndim == 1 else 0.1)
    return m


def _run(prog, x):
    r = compile_source(SourceFile("emitted.step", prog.text))
    errors = [str(d) for d in r.diagnostics.items]
    assert r.ok and not errors, "\n".join(errors)
    run = simulate(r.typed, load_config(None, ()), prog.traces(x), values=prog.values(x))
    assert run.deadlock is None
    return r, run.outputs["Y"]


def _assert_close(out, ref, dtype: str):
    ref = ref.detach().float().numpy().reshape(out.shape)
    tol = {"f32": 1e-5, "bf16": 2e-2}[dtype]  # bf16: ~2 ulps of its 8-bit mantissa
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * float(np.abs(ref).max()))


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("shape", [(16, HIDDEN), (2, 8, HIDDEN)], ids=["2d", "3d"])
@pytest.mark.parametrize("name", ["LlamaMLP", "Qwen2MLP", "Qwen3MLP", "GemmaMLP",
                                  "LlamaRMSNorm", "Qwen3RMSNorm", "GemmaRMSNorm"])
def test_transformers_block_simulates_to_its_forward(name, shape, dtype):
    m = _built(name, dtype, seed=len(name))
    x = torch.randn(shape, dtype=DTYPES[dtype])
    prog = from_torch(m, (x,), schedule={"TB": 8})
    assert format_source(prog.text) == prog.text  # already in `stepc fmt`'s layout
    _, out = _run(prog, x)
    assert out.shape == (16, HIDDEN)
    _assert_close(out, m(x), dtype)


def test_mlp_traffic_is_the_closed_form_and_moves_with_the_schedule():
    """Input once, the three weights once per row tile, output once: TB and TILE_F move it
    the way the closed form says (TILE_F only the tiling, not the bytes)."""
    m, x = _built("LlamaMLP", "f32", seed=1), torch.randn(2, 16, HIDDEN)
    totals = {}
    for tb, tf in ((8, 32), (16, 32), (16, 64)):
        prog = from_torch(m, (x,), schedule={"TB": tb, "TILE_F": tf})
        r, _ = _run(prog, x)
        a = analyze(r.typed, "artifact")
        totals[tb, tf] = int(a.totals["off_chip_bytes"])
        assert totals[tb, tf] == 4 * (32 * HIDDEN * 2 + (32 // tb) * 3 * HIDDEN * INTER)
    assert totals[8, 32] > totals[16, 32] == totals[16, 64]


def test_rmsnorm_written_by_hand_lowers_node_by_node():
    m, x = _built("LlamaRMSNorm", "bf16", seed=2), torch.randn(4, 4, HIDDEN).bfloat16()
    text = from_torch(m, (x,)).text
    for piece in ('fn=pow(exponent="2.0"), dtype=f32', "fn=row_mean",
                  'fn=affine(shift="1e-06")', "fn=rsqrt", "tile=[1, 64], stride=[0]"):
        assert piece in text
    assert "TILE_F" not in text  # no linear layer, no weight tiling
    with pytest.raises(LoweringError, match="no linear layer"):
        from_torch(m, (x,), schedule={"TILE_F": 16})


class TwoUnsupported(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = torch.cumsum(self.proj(x), dim=-1)
        return torch.flip(y, dims=[-1]) + torch.cumsum(x, dim=-1)


def test_one_error_lists_every_unsupported_kind_with_its_sites():
    with pytest.raises(LoweringError) as e:
        from_torch(TwoUnsupported(), (torch.randn(4, 8),))
    msg = str(e.value)
    assert "2 unsupported operator kinds" in msg
    assert msg.count("aten.cumsum") == 1 and "aten.flip" in msg
    assert msg.count("test_torch_hf_dense.py:") == 3  # two cumsum sites, one flip


class RowMixer(torch.nn.Module):
    def forward(self, x):
        return x.transpose(0, 1) * 2.0


class RowsIntoColumns(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x.view(2, 16), dim=-1)


@pytest.mark.parametrize("module,why", [(RowMixer(), "reorders its rows"),
                                        (RowsIntoColumns(), "moves data across the last dim")])
def test_layout_changes_that_move_data_are_refused(module, why):
    with pytest.raises(LoweringError, match=why):
        from_torch(module, (torch.randn(4, 8),))


class Scalars(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.randn(8))

    def forward(self, x):
        h = (x - 0.5) / 4 + 1
        r = h.sum(-1, keepdim=True) - h.amax(-1).unsqueeze(-1)
        return torch.sqrt(h * h + 1) * self.scale - 2 * r + (-h).to(torch.float32)


def test_numbers_reductions_and_broadcasts():
    torch.manual_seed(3)
    m, x = Scalars(), torch.randn(2, 8, 8)
    _, out = _run(from_torch(m, (x,)), x)
    _assert_close(out, m(x), "f32")


class UpcastMath(torch.nn.Module):
    """Computes in f32 on bf16 activations and returns bf16, as HF blocks do."""

    def forward(self, x):
        h = x.to(torch.float32)
        return (h * torch.sigmoid(h) / 3).to(torch.bfloat16)


def test_casts_become_dtypes_and_a_final_cast():
    x = torch.randn(2, 8, 16).bfloat16()
    prog = from_torch(UpcastMath(), (x,))
    assert "dtype=f32" in prog.text and "fn=cast, dtype=bf16" in prog.text
    _, out = _run(prog, x)
    _assert_close(out, UpcastMath()(x), "bf16")


class LayerNormMLP(torch.nn.Module):
    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.ln = torch.nn.LayerNorm(HIDDEN, dtype=dtype)
        self.ln_nobias = torch.nn.LayerNorm(HIDDEN, bias=False, dtype=dtype)
        self.fc = torch.nn.Linear(HIDDEN, HIDDEN, dtype=dtype)
        self.drop = torch.nn.Dropout(0.1)

    def forward(self, x):
        return self.ln_nobias(self.drop(self.fc(self.ln(x))) + x)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_layer_norm_and_eval_dropout(dtype):
    torch.manual_seed(4)
    m = LayerNormMLP(DTYPES[dtype]).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0.5, 0.5)
    x = torch.randn(2, 8, HIDDEN, dtype=DTYPES[dtype])
    prog = from_torch(m, (x,))
    assert "dropout" not in prog.text
    _, out = _run(prog, x)
    _assert_close(out, m(x), dtype)
