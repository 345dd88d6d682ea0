"""`stepc from-torch` on transformers decode attention variants the decode-attention family
lowers by their parts: Phi-3's fused `qkv_proj` and partial rotary, Gemma 2's logit
soft-capping and `query_pre_attn_scalar`, Gemma 3's (1 + w) q/k norms. Each emitted program
checks clean and its functional simulation equals the module's forward (f32 within 1e-5 of
the output's scale) under every schedule; what differs is refused naming the part. Skipped
without torch or transformers."""

from __future__ import annotations

import copy
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="transformers is not installed (the "
                                   "torch extra plus `pip install transformers`)")

from transformers.cache_utils import DynamicCache

from stepc.frontend import compile_source
from stepc.hw import load_config
from stepc.sim.run import simulate
from stepc.source import SourceFile
from stepc.torch import InputRefused, from_torch

SIZES = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "intermediate_size": 128, "num_hidden_layers": 1}
SCHEDULES = {"interleaved": {"R": 2}, "coarse": {"R": 2, "NB": 2}, "dynamic": {"R": 2}}
LENS = [7, 17, 20, 0, 10, 13, 3, 5]
P = 20


def build(kind: str, impl: str = "eager", **extra):
    """A tiny attention module of `kind` (a transformers model type) with random weights,
    norm scales and biases included."""
    from transformers import AutoConfig
    torch.manual_seed(0)
    cfg = AutoConfig.for_model(kind, **{**SIZES, **extra})
    cfg = getattr(cfg, "text_config", cfg)
    cfg._attn_implementation = impl
    m = ATTENTION[kind](cfg, 0)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name or "bias" in name:
                p.normal_()
    return m.eval()


def _attention(package: str, name: str):
    import importlib
    return getattr(importlib.import_module(f"transformers.models.{package}.modeling_{package}"),
                   name)


ATTENTION = {"phi3": _attention("phi3", "Phi3Attention"),
             "gemma": _attention("gemma", "GemmaAttention"),
             "gemma2": _attention("gemma2", "Gemma2Attention"),
             "gemma3_text": _attention("gemma3", "Gemma3Attention")}


def rotary(m, hs, positions):
    """(cos, sin) from the model's own rotary embedding class (Gemma 3's for the layer's
    type)."""
    modeling = sys.modules[type(m).__module__]
    cls = next(c for n, c in vars(modeling).items() if n.endswith("RotaryEmbedding"))
    kwargs = {"layer_type": m.layer_type} if "gemma3" in type(m).__module__ else {}
    with torch.no_grad():
        return cls(m.config)(hs, positions, **kwargs)


def decode_inputs(m, lens=LENS, window=None):
    """hidden_states, (cos, sin) at each request's position, an additive mask over a cache
    padded to P (right padding; a sliding window hides all but the last window - 1 cached
    positions), a DynamicCache."""
    g = torch.Generator().manual_seed(1)
    b = len(lens)
    hs = torch.randn(b, 1, m.config.hidden_size, generator=g)
    pe = rotary(m, hs, torch.tensor(lens)[:, None])
    pos = torch.arange(P + 1)[None]
    n = torch.tensor(lens)[:, None]
    valid = pos < n
    if window is not None:
        valid &= pos >= n - (window - 1)
    valid[:, -1] = True
    mask = torch.zeros(valid.shape).masked_fill(~valid, torch.finfo(torch.float32).min)
    cache = DynamicCache()
    shape = (b, m.config.num_key_value_heads, P, m.head_dim)
    cache.update(torch.randn(shape, generator=g), torch.randn(shape, generator=g), 0)
    return hs, pe, mask[:, None, None, :], cache


def compiled(text: str):
    r = compile_source(SourceFile("emitted.step", text))
    errors = [d for d in r.diagnostics.items if d.severity.value == "error"]
    assert r.ok and not errors, "\n".join(str(d) for d in r.diagnostics.items)
    return r


def assert_matches(m, args, tiling):
    """The simulated output and cache rows equal the module's forward; the program."""
    prog = from_torch(m, args, schedule={"tiling": tiling, "TILE_N": 8, **SCHEDULES[tiling]},
                      verify=False)  # compared here
    values, traces = prog.values(*args), prog.traces(*args)  # before the forward appends
    run = simulate(compiled(prog.text).typed, load_config(None, ()), traces, values=values)
    assert run.deadlock is None
    cache = copy.deepcopy(args[3])
    with torch.no_grad():
        out = m(*args[:3], cache)[0][:, 0].numpy()
    for name, new in (("K_NEW", cache.layers[0].keys), ("V_NEW", cache.layers[0].values)):
        want = new[:, :, -1].numpy().reshape(-1, new.shape[-1])
        np.testing.assert_allclose(run.outputs[name], want, rtol=1e-5,
                                   atol=1e-5 * np.abs(want).max())
    got = run.outputs["O"]
    assert np.abs(got - out).max() <= 1e-5 * np.abs(out).max()
    return prog


PHI3 = {"partial_rotary_factor": 0.5}


@pytest.mark.parametrize("tiling", [
    "coarse", pytest.param("interleaved", marks=pytest.mark.slow),
    pytest.param("dynamic", marks=pytest.mark.slow)])
def test_phi3_fused_qkv_matches_the_module(tiling):
    m = build("phi3")
    prog = assert_matches(m, decode_inputs(m), tiling)
    assert prog.tensors["WK"] == "qkv_proj.weight[64:96]"
    assert "fused qkv_proj" in prog.text


@pytest.mark.parametrize("tiling", [
    "dynamic", pytest.param("interleaved", marks=pytest.mark.slow),
    pytest.param("coarse", marks=pytest.mark.slow)])
def test_phi3_partial_rotary_matches_the_module(tiling):
    """RoPE over the first half of each head; the rest passes through (COS 1, SIN 0)."""
    m = build("phi3", **PHI3)
    args = decode_inputs(m)
    assert args[1][0].shape[-1] == 8
    prog = assert_matches(m, args, tiling)
    assert "Partial rotary: RoPE over the first 8 dims" in prog.text


def _capped(m, args, cap):
    """The module's output with its soft-capping set to `cap`."""
    m.attn_logit_softcapping = cap
    with torch.no_grad():
        return m(*args[:3], copy.deepcopy(args[3]))[0].numpy()


@pytest.mark.parametrize("tiling", [
    "interleaved", pytest.param("coarse", marks=pytest.mark.slow),
    pytest.param("dynamic", marks=pytest.mark.slow)])
def test_gemma2_soft_capping_and_query_pre_attn_scalar(tiling):
    """tanh(s / cap) cap on the scores and the scale query_pre_attn_scalar ** -0.5 (not
    head_dim's): each moves the module's output, and the program follows."""
    m = build("gemma2", attn_logit_softcapping=0.05, query_pre_attn_scalar=4)
    args = decode_inputs(m)
    capped = _capped(m, args, 0.05)
    assert np.abs(_capped(m, args, None) - capped).max() > 0.1 * np.abs(capped).max()
    m.attn_logit_softcapping = 0.05
    assert m.scaling == 0.5
    prog = assert_matches(m, args, tiling)
    assert "tanh(s / 0.05) 0.05" in prog.text and 'affine(scale="20.0")' in prog.text


def test_gemma2_sliding_window_layer_through_its_mask():
    m = build("gemma2", sliding_window=8, layer_types=["sliding_attention"])
    assert m.sliding_window == 8
    args = decode_inputs(m, window=8)
    prog = assert_matches(m, args, "dynamic")
    np.testing.assert_array_equal(prog.traces(*args)["kv_lens"], np.minimum(LENS, 7))


@pytest.mark.parametrize("kind", ["gemma3_text", "gemma"])
def test_gemma3_one_plus_w_norms_and_gemma(kind):
    """Gemma 3's q/k norms scale by 1 + w (QN holds it); Gemma's attention is Llama's."""
    m = build(kind)
    prog = assert_matches(m, decode_inputs(m), "coarse")
    assert ("q_norm.weight + 1" in prog.tensors.get("QN", "")) == (kind == "gemma3_text")


def test_soft_capping_under_sdpa_is_refused():
    m = build("gemma2", "sdpa")
    with pytest.raises(InputRefused, match=r"soft-capping under the `sdpa`.*Gemma2Attention"):
        from_torch(m, decode_inputs(m))


BY_PARTS = {  # no class name registered: recognised by their parts
    "granite": ("GraniteAttention", {"attention_multiplier": 0.3}),  # scaling 0.3
    "olmo": ("OlmoAttention", {}),
    "cohere": ("CohereAttention", {}),         # rotate_half on interleaved pairs
    "glm": ("GlmAttention", {"partial_rotary_factor": 0.5}),  # interleaved, partial
    "helium": ("HeliumAttention", {}),         # cos/sin tables repeated pairwise
}


@pytest.mark.parametrize("kind", [
    "granite", "glm", *(pytest.param(k, marks=pytest.mark.slow) for k in BY_PARTS
                        if k not in ("granite", "glm"))])
def test_attention_classes_by_their_parts(kind):
    from stepc.torch.families import HF_ATTENTION, match
    name, extra = BY_PARTS[kind]
    ATTENTION[kind] = _attention(kind, name)
    m = build(kind, **extra)
    assert name not in HF_ATTENTION.classes and match(m).family is HF_ATTENTION
    assert_matches(m, decode_inputs(m), "coarse")
    if kind == "granite":
        assert m.scaling == 0.3


@pytest.mark.parametrize("kind,name,what", [
    ("olmo2", "Olmo2Attention", r"q_norm \(Olmo2RMSNorm\) normalises 64 features: a q/k norm "
                                r"over the whole projection"),
    ("bitnet", "BitNetAttention", r"submodule attn_sub_norm \(not a projection"),
    ("hunyuan_v1_dense", "HunYuanDenseV1Attention", r"submodules key_layernorm, "
                                                   r"query_layernorm"),
    ("flint", "FlintAttention", r"the module's own tensor sinks .*attention sinks"),
    ("cohere", "CohereAttention", r"q_norm \(CohereLayerNorm\) has a scale \[4, 16\], one per "
                                  r"head"),
    ("qwen3_next", "Qwen3NextAttention", r"q_proj.weight is \[128, 64\], not \[64, 64\] .*a "
                                         r"gate in the projection"),
])
def test_parts_the_family_does_not_lower_are_refused(kind, name, what):
    ATTENTION[kind] = _attention(kind, name)
    m = build(kind, **({"use_qk_norm": True} if kind == "cohere" else {}))
    with pytest.raises(InputRefused, match=rf"{what}.*{name}\.forward \(modeling_{kind}\.py:"):
        from_torch(m, decode_inputs(m))


def test_a_rotary_embedding_of_another_form_is_refused(monkeypatch):
    """An apply_rotary_pos_emb that is not x cos + rotate_half(x) sin (here: x (cos + sin),
    no rotation) is refused naming it, not lowered as the usual form."""
    m = build("phi3")
    modeling = sys.modules[type(m).__module__]
    monkeypatch.setattr(modeling, "apply_rotary_pos_emb", lambda q, k, cos, sin: tuple(
        x * cos.unsqueeze(1) + x * sin.unsqueeze(1) for x in (q, k)))
    with pytest.raises(InputRefused, match=r"apply_rotary_pos_emb is not x cos \+ "
                                           r"rotate_half\(x\) sin.*Phi3Attention"):
        from_torch(m, decode_inputs(m))


def test_cli_refuses_a_mismatched_rotary_width_as_a_usage_error(tmp_path):
    """GLM's rotary covers half a head; position_embeddings given over the whole head lower,
    and the verification's seeded inputs say which shape to give (exit 2, no traceback)."""
    import json

    from click.testing import CliRunner

    from stepc.cli import main
    config = tmp_path / "glm.json"
    config.write_text(json.dumps({**SIZES, "partial_rotary_factor": 0.5}))
    factory = tmp_path / "factory.py"
    factory.write_text(
        "import json\nimport transformers\n"
        "from transformers.models.glm.modeling_glm import GlmAttention\n\n\n"
        "def make_model():\n"
        f"    data = json.loads(open({str(config)!r}).read())\n"
        "    return GlmAttention(transformers.AutoConfig.for_model('glm', **data), 0)\n")
    args = ["from-torch", f"{factory}:make_model", "--input", "hidden_states=f32[2,1,64]",
            "--input", "position_embeddings=f32[2,2,1,16]", "--input",
            "attention_mask=f32[2,1,1,9]", "-o", str(tmp_path / "a.step")]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output
    assert "covers 8 dims of a head" in r.output and "[2, B, 1, 8]" in r.output
    assert "Traceback" not in r.output and not (tmp_path / "a.step").exists()
    args[5] = "position_embeddings=f32[2,2,1,8]"
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output


class _OwnCacheAttention(torch.nn.Module):
    """An attention of the user's over a cache object of its own: no lowering applies."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(64, 192)

    def forward(self, hidden_states, past_key_values=None):
        q, k, v = self.qkv(hidden_states).chunk(3, dim=-1)
        k = torch.cat([past_key_values[0], k], dim=1)
        v = torch.cat([past_key_values[1], v], dim=1)
        return torch.softmax(q @ k.transpose(1, 2), dim=-1) @ v


def test_a_block_over_a_cache_no_lowering_applies_to_is_refused_naming_what_is_lowered():
    with pytest.raises(InputRefused) as e:
        from_torch(_OwnCacheAttention(), (torch.randn(2, 1, 64),))
    text = str(e.value)
    assert text.startswith("_OwnCacheAttention.forward(hidden_states, past_key_values) takes a "
                           "KV cache (`past_key_values`)"), text
    assert "the `hf-decode-attention` family, called as forward(hidden_states, " in text
    assert "--input" not in text
