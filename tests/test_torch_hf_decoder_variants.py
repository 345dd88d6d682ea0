"""Decoder layers beyond Llama's two blocks: the structure read from the layer's own
forward (which norms sit where, the residual adds), the Qwen2-MoE layer (a sparse MoE with
a shared expert, or a dense MLP on `mlp_only_layers`), a Gemma2-style layer of four norms
(one after the attention, before its residual add), and `--layers` for them. Each program
checks and its functional simulation equals the layer's forward (f32 within 1e-5 of the
output's scale); a layer no lowering covers is refused naming its class and the part.
Skipped without torch or transformers."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="transformers is not installed (the torch extra "
                    "plus `pip install transformers`)")

from click.testing import CliRunner
from transformers import Gemma2Config, LlamaConfig, Phi3Config, PhiConfig, Qwen2MoeConfig
from transformers.cache_utils import DynamicCache
from transformers.models.gemma2.modeling_gemma2 import Gemma2DecoderLayer, Gemma2RMSNorm
from transformers.models.llama.modeling_llama import LlamaDecoderLayer
from transformers.models.phi.modeling_phi import PhiDecoderLayer
from transformers.models.phi3.modeling_phi3 import Phi3DecoderLayer
from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeDecoderLayer

from stepc.cli import main
from stepc.frontend import compile_source
from stepc.hw import load_config
from stepc.sim.run import simulate
from stepc.source import SourceFile
from stepc.torch import InputRefused, LoweringError, from_hf_config, from_torch
from stepc.torch.build import seed_transformers_weights
from stepc.torch.hf_decoder_structure import read_structure
from stepc.torch.hf_model import build_stack, example_inputs

SIZES = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "intermediate_size": 128, "num_hidden_layers": 2, "vocab_size": 64}
QWEN2_MOE = {"model_type": "qwen2_moe", **SIZES, "moe_intermediate_size": 32,
             "num_experts": 4, "num_experts_per_tok": 2, "shared_expert_intermediate_size": 48}
SMALL = {"attn_R": 2, "attn_TILE_N": 8}  # two attention regions, KV tiles of 8 rows
B, P = 8, 20


def seeded(m, cfg):
    """`m` in eval mode with seeded weights, norm scales too (so that they count)."""
    torch.manual_seed(0)
    m.eval()
    seed_transformers_weights(m, cfg)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name:
                p.normal_(1.0, 0.2)
    return m


def qwen2_moe_layer(**overrides):
    cfg = Qwen2MoeConfig(**{k: v for k, v in QWEN2_MOE.items() if k != "model_type"},
                         **overrides)
    cfg._attn_implementation = "eager"
    return seeded(Qwen2MoeDecoderLayer(cfg, 0), cfg)


class SandwichLayer(LlamaDecoderLayer):
    """Gemma2's arrangement on Llama's parts: a norm after the attention and after the MLP,
    before their residual adds, Gemma's `(1 + weight)` RMSNorm, dropout between."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        d = config.hidden_size
        self.input_layernorm, self.post_attention_layernorm = Gemma2RMSNorm(d), Gemma2RMSNorm(d)
        self.pre_feedforward_layernorm = Gemma2RMSNorm(d)
        self.post_feedforward_layernorm = Gemma2RMSNorm(d)
        self.dropout = torch.nn.Dropout(0.1)

    def forward(self, hidden_states, attention_mask=None, cache=None,
                position_embeddings=None, **kwargs):
        residual = hidden_states
        h, _ = self.self_attn(hidden_states=self.input_layernorm(hidden_states),
                              attention_mask=attention_mask, cache=cache,
                              position_embeddings=position_embeddings)
        h = residual + self.dropout(self.post_attention_layernorm(h))
        mlp = self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(h)))
        return h + mlp


class ParallelLayer(LlamaDecoderLayer):
    """GPT-J's arrangement: attention and MLP both read the layer's input."""

    def forward(self, hidden_states, attention_mask=None, cache=None,
                position_embeddings=None, **kwargs):
        x = self.input_layernorm(hidden_states)
        h, _ = self.self_attn(hidden_states=x, attention_mask=attention_mask, cache=cache,
                              position_embeddings=position_embeddings)
        return hidden_states + h + self.mlp(x)


class ScaledLayer(LlamaDecoderLayer):
    """A residual scaled between the parts: not a residual block."""

    def forward(self, hidden_states, attention_mask=None, cache=None,
                position_embeddings=None, **kwargs):
        h, _ = self.self_attn(hidden_states=self.input_layernorm(hidden_states),
                              attention_mask=attention_mask, cache=cache,
                              position_embeddings=position_embeddings)
        h = 2 * hidden_states + h
        return h + self.mlp(self.post_attention_layernorm(h))


class AlwaysDropLayer(LlamaDecoderLayer):
    """`F.dropout` whose `training` defaults to True: it drops in eval mode too."""

    def forward(self, hidden_states, attention_mask=None, cache=None,
                position_embeddings=None, **kwargs):
        h, _ = self.self_attn(hidden_states=self.input_layernorm(hidden_states),
                              attention_mask=attention_mask, cache=cache,
                              position_embeddings=position_embeddings)
        h = hidden_states + torch.nn.functional.dropout(h, 0.1, self.training)  # identity
        return h + torch.nn.functional.dropout(self.mlp(self.post_attention_layernorm(h)), 0.1)


def llama_like(cls):
    cfg = LlamaConfig(**SIZES)
    cfg._attn_implementation = "eager"
    return seeded(cls(cfg, 0), cfg)


def meta_example(dtype=torch.float32) -> tuple:
    """Shapes only: hidden_states, (cos, sin), mask, a DynamicCache of layer 0's past."""
    with torch.device("meta"):
        cache = DynamicCache()
        shape = (B, SIZES["num_key_value_heads"], P, SIZES["head_dim"])
        cache.update(torch.empty(shape, dtype=dtype), torch.empty(shape, dtype=dtype), 0)
        pe = (torch.empty(B, 1, SIZES["head_dim"], dtype=dtype),) * 2
        return (torch.empty(B, 1, SIZES["hidden_size"], dtype=dtype), pe,
                torch.empty(B, 1, 1, P + 1, dtype=dtype), cache)


def simulated_and_reference(prog, module, args):
    """The program's Y and the module's forward [B, hidden] for the same inputs."""
    values, traces = prog.values(*args), prog.traces(*args)
    r = compile_source(SourceFile("emitted.step", prog.text))
    assert r.ok and not r.diagnostics.items, "\n".join(str(d) for d in r.diagnostics.items)
    run = simulate(r.typed, load_config(None, ()), traces, values=values)
    assert run.deadlock is None
    with torch.no_grad():
        out = module(args[0], attention_mask=args[2], cache=copy.deepcopy(args[3]),
                     position_embeddings=args[1])
    out = out[0] if isinstance(out, tuple) else out
    return run.outputs["Y"], out[:, 0].float().numpy()


def assert_equal_to_forward(module, tiling="static"):
    prog = from_torch(module, meta_example(), verify=False,
                      schedule={"tiling": tiling, **SMALL})
    args = prog.seeded_inputs(meta_example(), seed=1)
    got, ref = simulated_and_reference(prog, module, args)
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()
    return prog, args


@pytest.mark.parametrize("make,expected", [
    (lambda: llama_like(LlamaDecoderLayer),
     "input_layernorm -> self_attn -> + residual -> post_attention_layernorm -> mlp -> "
     "+ residual"),
    (lambda: llama_like(SandwichLayer),
     "input_layernorm -> self_attn -> post_attention_layernorm -> + residual -> "
     "pre_feedforward_layernorm -> mlp -> post_feedforward_layernorm -> + residual"),
    (lambda: qwen2_moe_layer(),
     "input_layernorm -> self_attn -> + residual -> post_attention_layernorm -> mlp -> "
     "+ residual"),
])
def test_structure_is_read_from_the_forward(make, expected):
    assert read_structure(make(), "", 64, torch.float32).describe() == expected


@pytest.mark.parametrize("overrides,kind", [({}, "moe"), ({"mlp_only_layers": [0]}, "mlp")])
def test_qwen2_moe_layer_simulates_equal_to_its_forward(overrides, kind):
    """The sparse MoE with its gated shared expert, or the dense MLP of an
    `mlp_only_layers` layer ("cannot unpack non-iterable NoneType" before)."""
    m = qwen2_moe_layer(**overrides)
    prog, args = assert_equal_to_forward(m)
    assert ("routing" in prog.traces(*args)) == (kind == "moe")
    assert f"the {'sparse MoE' if kind == 'moe' else 'dense MLP'} Qwen2Moe" in \
        prog.text.replace("\n# ", " ")


def test_sandwich_norms_simulate_equal_to_the_forward():
    """Four (1 + weight) norms, two of them after a part and before its residual add, in a
    subclass overriding a registered layer's forward: lowered as its own forward."""
    m = llama_like(SandwichLayer)
    prog, _ = assert_equal_to_forward(m)
    assert "l0_norm4_" in prog.text and "l0_norm5_" not in prog.text


@pytest.mark.parametrize("cls,words", [
    (ParallelLayer, ["ParallelLayer", "parallel attention and MLP"]),
    (ScaledLayer, ["ScaledLayer", "`mul`"]),
    (AlwaysDropLayer, ["AlwaysDropLayer", "`dropout`"]),
])
def test_other_forwards_are_refused_naming_what_differs(cls, words):
    with pytest.raises(InputRefused) as e:
        from_torch(llama_like(cls), meta_example(), verify=False)
    for w in words:
        assert w in str(e.value)


def test_a_layer_whose_attention_is_not_lowered_is_a_usage_error():
    cfg = PhiConfig(**SIZES)
    with pytest.raises(InputRefused, match=r"PhiDecoderLayer.*`self_attn` \(PhiAttention\)"):
        from_torch(PhiDecoderLayer(cfg, 0).eval(), meta_example(), verify=False)


class CumsumMLP(torch.nn.Module):
    """An MLP of an operator stepc does not lower (aten.cumsum)."""

    def __init__(self, d):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)

    def forward(self, x):
        return self.proj(x).cumsum(-1)


def test_a_layer_whose_mlp_is_not_lowered_is_a_usage_error_naming_it():
    m = llama_like(LlamaDecoderLayer)
    m.mlp = CumsumMLP(SIZES["hidden_size"])
    with pytest.raises(InputRefused, match=r"(?s)LlamaDecoderLayer\.mlp \(CumsumMLP.*aten\.cumsum"):
        from_torch(m, meta_example(), verify=False)


@pytest.mark.parametrize("config_cls,layer_cls", [(Phi3Config, Phi3DecoderLayer),
                                                  (Gemma2Config, Gemma2DecoderLayer)])
def test_phi3_and_gemma2_layers_simulate_equal_to_their_forward(config_cls, layer_cls):
    """Phi-3: fused qkv_proj and gate_up_proj, dropouts as identity. Gemma2: four (1 +
    weight) norms, one after each part before its residual add, a gelu-tanh MLP, the
    attention's logits soft-capped."""
    cfg = config_cls(**SIZES, pad_token_id=0)
    cfg._attn_implementation = "eager"
    prog, _ = assert_equal_to_forward(seeded(layer_cls(cfg, 0), cfg))
    gemma = config_cls is Gemma2Config
    assert ("l0_norm4_" in prog.text) == gemma and ("fn=tanh" in prog.text) == gemma


@pytest.mark.parametrize("model_type", ["phi3", "gemma2", "olmo"])  # olmo: norms w/o scale
def test_layers_from_phi3_gemma2_and_olmo_configs_verify(model_type):
    """`from_hf_config(..., layers=2)` verifies the program against the two layers' forward
    (seeded weights): refused before (no registered decoder layer)."""
    prog = from_hf_config({"model_type": model_type, **SIZES, "pad_token_id": 0}, layers=2,
                          batch=B, past=P, schedule=SMALL)
    assert prog.verification.verified, prog.verification.summary


def test_two_qwen2_moe_layers_from_a_config_one_dense():
    """--layers over a Qwen2-MoE config whose second layer is dense (decoder_sparse_step
    2): one routing trace, for layer 0."""
    config = {**QWEN2_MOE, "decoder_sparse_step": 1, "mlp_only_layers": [1]}
    prog = from_hf_config(config, layers=2, batch=B, past=P, verify=False,
                          schedule={"tiling": "static", **SMALL})
    stack = build_stack(prog.module.config, 2, "cpu", seed=0)
    prog = prog.on_module(stack)
    args = prog.seeded_inputs(example_inputs(stack, B, P, "f32", "cpu"), seed=3)
    assert sorted(prog.traces(*args)) == ["kv_lens", "routing_0"]
    got, ref = simulated_and_reference(prog, stack, args)
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()


def test_cli_layers_round_trip_qwen2_moe(tmp_path, monkeypatch):
    """`--hf-config qwen2_moe.json --layers 2` (refused before), verified against the two
    layers' forward, then `stepc sim --weights --trace`: the layers' output."""
    monkeypatch.chdir(tmp_path)
    Path("qwen2_moe.json").write_text(json.dumps(QWEN2_MOE))
    runner = CliRunner()
    r = runner.invoke(main, ["from-torch", "--hf-config", "qwen2_moe.json", "--layers", "2",
                             "--batch", str(B), "--past", str(P), "--param", "attn_R=2",
                             "--param", "attn_TILE_N=8", "-o", "m.step", "--weights-out",
                             "m.safetensors", "--external-out", "kv_lens=lens.npy",
                             "--external-out", "routing_0=r0.npy", "--external-out",
                             "routing_1=r1.npy"])
    assert r.exit_code == 0, r.output
    assert "the functional simulation equals" in Path("m.step").read_text().replace("\n# ", " ")
    r = runner.invoke(main, ["sim", "m.step", "--weights", "m.safetensors", "--trace",
                             "kv_lens=lens.npy", "--trace", "routing_0=r0.npy", "--trace",
                             "routing_1=r1.npy", "--out", "out"])
    assert r.exit_code == 0, r.output
    prog = from_hf_config(QWEN2_MOE, 2, B, P, SMALL, verify=False)
    stack = build_stack(prog.module.config, 2, "cpu", seed=0)
    prog = prog.on_module(stack)
    args = prog.seeded_inputs(example_inputs(stack, B, P, "f32", "cpu"), seed=0)
    with torch.no_grad():
        ref = stack(args[0], attention_mask=args[2], cache=args[3],
                    position_embeddings=args[1])[:, 0].numpy()
    got = np.load("out/Y.npy")
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.parametrize("config,words", [
    ({"model_type": "stablelm"}, ["StableLmDecoderLayer", "`self_attn` (StableLmAttention)"]),
    ({"model_type": "olmo2"}, ["Olmo2DecoderLayer.self_attn", "whole projection"]),
    ({"model_type": "granite"}, ["GraniteDecoderLayer", "`mul`"]),  # residual_multiplier
])
def test_cli_layers_refusals_are_usage_errors(tmp_path, monkeypatch, config, words):
    monkeypatch.chdir(tmp_path)
    Path("c.json").write_text(json.dumps({**SIZES, "pad_token_id": 0, **config}))
    r = CliRunner().invoke(main, ["from-torch", "--hf-config", "c.json", "--layers", "1"])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    for w in words:
        assert w in r.output


class CudaOnlyLayer(LlamaDecoderLayer):
    """A layer whose forward runs only off the CPU (as code written for one device): its
    structure is read on the meta device, its verification runs on the CPU."""

    def forward(self, hidden_states, *args, **kwargs):
        if hidden_states.device.type == "cpu":
            raise RuntimeError("this layer runs on CUDA only")
        return super().forward(hidden_states, *args, **kwargs)


def test_a_forward_failing_on_the_seeded_inputs_fails_verification():
    """Verification says the module's forward failed (exit 1), not an internal error."""
    cfg = LlamaConfig(**SIZES)
    m = seeded(CudaOnlyLayer(cfg, 0), cfg)
    with pytest.raises(LoweringError, match="running the module on these inputs failed: "
                                            "RuntimeError: this layer runs on CUDA only"):
        from_torch(m, meta_example(), schedule=SMALL)


def test_the_verified_header_names_the_inputs_as_the_layer_is_called():
    """Phi3DecoderLayer.forward takes attention_mask before position_embeddings; the layer
    is called with the attention's arguments as keywords, and the header names them so
    (it read `attention_mask f32[8, 1, 16]` from the forward's order before)."""
    cfg = Phi3Config(**SIZES, pad_token_id=0)
    prog = from_torch(seeded(Phi3DecoderLayer(cfg, 0), cfg), meta_example(), schedule=SMALL)
    header = " ".join(line.lstrip("# ") for line in prog.text.splitlines()
                      if line.startswith("#"))
    assert "hidden_states f32[8, 1, 64], position_embeddings f32[8, 1, 16]" in header, header
    assert "attention_mask f32[8, 1, 1, 21]" in header, header
