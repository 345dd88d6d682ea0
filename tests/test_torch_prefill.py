"""`stepc from-torch` on transformers attention in prefill: S new tokens per request over a
DynamicCache with ragged past lengths, under a causal mask. The emitted program checks clean,
its functional simulation equals the module's forward and the rows it appends to the cache
equal the module's, under every schedule; refusals name what differs. Skipped without torch
or transformers."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="transformers is not installed (the torch extra "
                    "plus `pip install transformers`)")

from click.testing import CliRunner
from test_torch_hf_attention import SCHEDULES, build, compiled
from test_torch_hf_attention_variants import PHI3, rotary
from test_torch_hf_attention_variants import build as build_variant
from transformers.cache_utils import DynamicCache

from stepc.cli import main
from stepc.hw import load_config
from stepc.sim.run import simulate
from stepc.torch import LoweringError, from_torch

ROOT = Path(__file__).resolve().parent.parent
P, HID, KV, D = 20, 64, 2, 16
LENS = [7, 17, 20, 0, 10, 13, 3, 5]


def prefill_inputs(m, s: int, left_pad=False, dtype=torch.float32):
    """hidden_states [B, s, HID], (cos, sin) at each new token's position, an additive mask
    over a cache padded to P (right padding, or left padding with a hole in request 0) and
    causal over the s new tokens, a DynamicCache."""
    g = torch.Generator().manual_seed(1)
    b, lens = len(LENS), torch.tensor(LENS)
    hs = torch.randn(b, s, HID, generator=g).to(dtype)
    pe = rotary(m, hs, lens[:, None] + torch.arange(s)[None])
    pos = torch.arange(P)[None]
    cached = (pos >= P - lens[:, None]) if left_pad else (pos < lens[:, None])
    if left_pad:
        cached[0, P - LENS[0]] = False  # a hole: one cached position masked out
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    valid = torch.cat([cached[:, None].expand(-1, s, -1), causal.expand(b, -1, -1)], dim=-1)
    mask = torch.zeros(valid.shape, dtype=dtype).masked_fill(~valid, torch.finfo(dtype).min)
    cache = DynamicCache()
    shape = (b, KV, P, D)
    cache.update(torch.randn(shape, generator=g).to(dtype),
                 torch.randn(shape, generator=g).to(dtype), 0)
    return hs, pe, mask[:, None], cache


def run_both(m, args, tiling, **sched):
    """The simulated output O and the module's output, both [B S, HID], and the program;
    the rows the program appends to the cache equal those the module appends."""
    prog = from_torch(m, args, verify=False,  # compared here
                      schedule={"tiling": tiling, "TILE_N": 8, **SCHEDULES[tiling], **sched})
    values, traces = prog.values(*args), prog.traces(*args)  # before the forward appends
    run = simulate(compiled(prog.text).typed, load_config(None, ()), traces, values=values)
    assert run.deadlock is None
    cache = copy.deepcopy(args[3])
    with torch.no_grad():
        out, _ = m(*args[:3], cache)
    s = args[0].shape[1]
    for name, after in (("K_NEW", cache.layers[0].keys), ("V_NEW", cache.layers[0].values)):
        assert after.shape[2] == P + s
        before = args[3].layers[0].keys if name == "K_NEW" else args[3].layers[0].values
        assert torch.equal(after[:, :, :P], before)
        want = after[:, :, P:].float().numpy().reshape(-1, D)  # appended at P .. P + s - 1
        tol = 2e-2 if after.dtype == torch.bfloat16 else 1e-5  # bf16: within its rounding
        np.testing.assert_allclose(run.outputs[name], want, rtol=tol, atol=tol)
    return run.outputs["O"], out.reshape(-1, HID).float().numpy(), prog


def close(got, ref):
    """f32 within 1e-5 of the output's scale."""
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.parametrize("kind,s,tiling", [
    pytest.param(k, s, t, marks=[pytest.mark.slow] * ((k, s, t) not in {
        ("llama", 3, "interleaved"), ("qwen3", 8, "coarse"), ("llama", 12, "dynamic")}))
    for k in ("llama", "qwen3") for s in (3, 8, 12) for t in SCHEDULES])
def test_prefill_matches_the_module_under_every_schedule(kind, s, tiling):
    """S = 3, 8 and 12 new tokens (KV tiles of 8 rows) under each schedule by default;
    every combination under -m slow."""
    m = build(kind)
    got, ref, prog = run_both(m, prefill_inputs(m, s), tiling)
    close(got, ref)
    assert f"param S = {s} " in prog.text and "in prefill" in prog.text.split("\n")[0]


@pytest.mark.parametrize("kind,impl,tiling", [
    ("qwen3", "sdpa", "dynamic"),
    pytest.param("llama-bias", "eager", "coarse", marks=pytest.mark.slow),
    pytest.param("qwen2", "sdpa", "interleaved", marks=pytest.mark.slow)])
def test_left_padding_with_holes_biases_and_sdpa(kind, impl, tiling):
    m = build(kind, impl)
    args = prefill_inputs(m, 3, left_pad=True)
    got, ref, prog = run_both(m, args, tiling)
    close(got, ref)
    want = np.array(LENS) - np.eye(len(LENS), dtype=int)[0]  # the hole is not a KV row
    np.testing.assert_array_equal(prog.traces(*args)["kv_lens"], want)


def test_bf16_within_bf16_rounding():
    m = build("qwen3").to(torch.bfloat16)
    got, ref, _ = run_both(m, prefill_inputs(m, 8, dtype=torch.bfloat16), "interleaved")
    np.testing.assert_allclose(got, ref, rtol=3e-2, atol=3e-2 * np.abs(ref).max())


@pytest.mark.parametrize("tiling,on_chip", [("interleaved", 0), ("dynamic", 1),
                                             pytest.param("coarse", 0, marks=pytest.mark.slow)])
def test_off_chip_bytes_equal_the_closed_form(tiling, on_chip):
    """Per request: its S hidden rows, cos and sin rows and output rows, and (WEIGHTS_ON_CHIP=0)
    every projection weight, the norm scales and ROT per head, SCALE per query head and
    CAUSAL per KV head once, not once per new token; with WEIGHTS_ON_CHIP=1 those constants
    once per region instead. Per KV head: its ceil((len + 1) / TILE_N) K, V and MASK tiles,
    and its S new K and V rows written twice (into the cache slot and to K_NEW, V_NEW)."""
    from stepc.analyze import analyze, trace_bindings
    m = build("qwen3")
    s, h, tn, regions = 3, 4, 8, 2
    args = prefill_inputs(m, s)
    prog = from_torch(m, args, verify=False, schedule={
        "tiling": tiling, "TILE_N": tn, **SCHEDULES[tiling], "WEIGHTS_ON_CHIP": on_chip})
    typed = compiled(prog.text).typed
    run = simulate(typed, load_config(None, ()), prog.traces(*args), functional=False)
    consts = (h * D * HID + 2 * KV * D * HID + HID * h * D + h * D + KV * D + (h + KV) * D * D
              + h + KV * (h // KV) * s * s)
    per_request = s * (2 * HID + 2 * D) + (0 if on_chip else consts)
    per_kv = sum(ntiles * (2 * tn * D + tn) + 4 * s * D
                 for ntiles in (-(-(n + 1) // tn) for n in LENS))
    closed = 4 * (len(LENS) * per_request + KV * per_kv + (regions * consts if on_chip else 0))
    assert run.useful_bytes == closed
    if tiling != "dynamic":  # the dynamic dispatch leaves the per-region counts symbolic
        bound = analyze(typed).bind(trace_bindings(typed, prog.traces(*args)))
        assert bound.totals["off_chip_bytes"] == closed


def test_the_shape_of_hidden_states_chooses_decode_or_prefill():
    """[B, 1, HID] lowers the decode program, [B, 3, HID] the prefill one."""
    from stepc.torch.hf_attention import lower_hf_attention
    m = build("llama")
    sched = {"TILE_N": 8, "R": 2}
    one = prefill_inputs(m, 1)
    decode = lower_hf_attention(m, one, "interleaved", sched)

    def code(text):
        return [line for line in text.split("\n") if not line.startswith("#")]
    assert code(from_torch(m, one, verify=False, schedule=sched).text) == code(decode.text)
    assert "param S =" not in decode.text
    assert "param S = 3 " in from_torch(m, prefill_inputs(m, 3), verify=False,
                                        schedule=sched).text


def test_verified_by_default_and_a_wrong_operator_is_caught():
    """from_torch verifies the prefill program against the module on seeded inputs; a
    program that subtracts the softmax scale from q instead of multiplying fails it."""
    from dataclasses import replace

    from stepc.torch.verify import VerificationError, verify
    m = build("qwen3")
    args = prefill_inputs(m, 3)
    prog = from_torch(m, args, schedule={"tiling": "dynamic", "TILE_N": 8, "R": 2})
    assert prog.verification.verified and "Verified on seeded inputs" in prog.text
    broken = replace(prog, text=prog.text.replace("qs = Map(qh, sc, fn=mul",
                                                  "qs = Map(qh, sc, fn=sub"))
    assert broken.text != prog.text
    with pytest.raises(VerificationError, match="does not compute the module"):
        verify(broken)


def test_refusals_name_what_differs():
    m = build("qwen3")
    args = prefill_inputs(m, 8)
    prog = from_torch(m, args, verify=False, schedule={"TILE_N": 8, "R": 2})
    window = args[2].clone()
    window[1, 0, 5, 0] = torch.finfo(torch.float32).min  # token 5 no longer sees position 0
    with pytest.raises(LoweringError, match="request 1 attends different cached positions"):
        prog.traces(args[0], args[1], window, args[3])
    peek = args[2].clone()
    peek[2, 0, 0, P + 1] = 0.0  # token 0 sees token 1
    with pytest.raises(LoweringError, match="request 2 is not causal over its new tokens"):
        prog.values(args[0], args[1], peek, args[3])
    with pytest.raises(LoweringError, match=r"attention_mask is \[8, 1, 1, 28\], expected "
                                            r"\[8, 1, 8, 28\]"):
        from_torch(m, args[:2] + (args[2][:, :, :1],) + args[3:])
    with pytest.raises(LoweringError, match="prefill without an attention_mask"):
        prog.traces(args[0], args[1], None, args[3])
    with pytest.raises(LoweringError, match=r"position_embeddings .* expected \[8, 8, 16\]"):
        from_torch(m, (args[0], (args[1][0][:, :1], args[1][1][:, :1])) + args[2:])
    m.config._attn_implementation = "flash_attention_2"
    with pytest.raises(LoweringError, match=r"`flash_attention_2` is not lowered.*"
                                            r"Qwen3Attention\.forward.* or prefill \(S new"):
        from_torch(m, args)


@pytest.mark.parametrize("kind,tiling,s", [
    ("llama", "static", 3), pytest.param("qwen3_moe", "dynamic", 8, marks=pytest.mark.slow),
    pytest.param("mixtral", "timemux", 3, marks=pytest.mark.slow)])
def test_a_decoder_layer_in_prefill(kind, tiling, s):
    """The norms, residuals and MLP or MoE over the B S rows, the attention over B requests
    of S rows: the layer's forward, f32 within 1e-5 of its scale."""
    from test_torch_hf_decoder import SMALL, layer
    m = layer(kind)
    with torch.device("meta"):
        cache = DynamicCache()
        cache.update(torch.empty(len(LENS), KV, P, D), torch.empty(len(LENS), KV, P, D), 0)
        example = (torch.empty(len(LENS), s, HID), (torch.empty(len(LENS), s, D),) * 2,
                   torch.empty(len(LENS), 1, s, P + s), cache)
    prog = from_torch(m, example, verify=False, schedule={"tiling": tiling, **SMALL})
    assert f"param attn_S = {s} " in prog.text and "A decoder layer in prefill" in prog.text
    args = prog.seeded_inputs(example, seed=1)
    run = simulate(compiled(prog.text).typed, load_config(None, ()), prog.traces(*args),
                   values=prog.values(*args))
    with torch.no_grad():
        out = m(args[0], attention_mask=args[2], cache=copy.deepcopy(args[3]),
                position_embeddings=args[1])
    close(run.outputs["Y"], out.reshape(-1, HID).numpy())


@pytest.mark.parametrize("extra,tiling", [
    pytest.param(PHI3, "dynamic", id="partial-dynamic"),
    pytest.param({}, "coarse", marks=pytest.mark.slow, id="whole-coarse"),
    pytest.param(PHI3, "interleaved", marks=pytest.mark.slow, id="partial-interleaved")])
def test_phi3_fused_qkv_and_partial_rotary_in_prefill(extra, tiling):
    """Phi-3's q, k, v rows of one qkv_proj, and RoPE over the first half of each head
    (position_embeddings [B, S, 8]; refused before as not [B, S, 16])."""
    m = build_variant("phi3", **extra)
    args = prefill_inputs(m, 3)
    got, ref, prog = run_both(m, args, tiling)
    close(got, ref)
    assert prog.tensors["WK"] == "qkv_proj.weight[64:96]"
    assert ("Partial rotary: RoPE over the first 8 dims" in prog.text) == bool(extra)


@pytest.mark.parametrize("kind,extra", [
    pytest.param("gemma2", {"attn_logit_softcapping": 0.05, "query_pre_attn_scalar": 4},
                 id="gemma2"),
    pytest.param("gemma3_text", {}, marks=pytest.mark.slow, id="gemma3")])
def test_gemma_soft_capping_and_one_plus_w_norms_in_prefill(kind, extra):
    """Gemma 2: tanh(s / cap) cap on the scores over the cached rows and over the new ones
    (missing on the new ones before), the scale query_pre_attn_scalar ** -0.5. Gemma 3:
    (1 + w) q/k norms."""
    m = build_variant(kind, **extra)
    args = prefill_inputs(m, 3)
    got, ref, prog = run_both(m, args, "interleaved")
    close(got, ref)
    if kind == "gemma2":
        m.attn_logit_softcapping = None
        with torch.no_grad():
            uncapped = m(*args[:3], copy.deepcopy(args[3]))[0].reshape(-1, HID).numpy()
        assert np.abs(uncapped - ref).max() > 0.1 * np.abs(ref).max()  # the capping counts
        assert prog.text.count("fn=tanh") == 2 and m.scaling == 0.5
    else:
        assert prog.tensors["QN"] == "q_norm.weight + 1"


@pytest.mark.parametrize("kind", ["glm", pytest.param("helium", marks=pytest.mark.slow)])
def test_rotary_tables_of_classes_by_their_parts_in_prefill(kind):
    """GLM (interleaved pairs over half a head), Helium (cos/sin repeated pairwise): COS
    and SIN are the tables the module's apply_rotary_pos_emb makes of the given cos and sin,
    not cos and sin as given."""
    from test_torch_hf_attention_variants import ATTENTION, BY_PARTS, _attention
    name, extra = BY_PARTS[kind]
    ATTENTION[kind] = _attention(kind, name)
    m = build_variant(kind, **extra)
    got, ref, _ = run_both(m, prefill_inputs(m, 4), "coarse")
    close(got, ref)


@pytest.mark.parametrize("kind,impl,what", [
    ("olmo2", "eager", r"q_norm \(Olmo2RMSNorm\) normalises 64 features"),
    ("gemma2", "sdpa", r"soft-capping under the `sdpa`")], ids=["olmo2", "gemma2-sdpa"])
def test_parts_refused_in_prefill_are_usage_errors(kind, impl, what):
    """What the module's form refuses is refused in prefill as in decode: a usage error
    (InputRefused) naming the part, and that prefill is lowered too."""
    from test_torch_hf_attention_variants import ATTENTION, _attention

    from stepc.torch import InputRefused
    if kind == "olmo2":
        ATTENTION[kind] = _attention(kind, "Olmo2Attention")
    m = build_variant(kind, impl)
    with pytest.raises(InputRefused, match=rf"{what}.*or prefill \(S new tokens"):
        from_torch(m, prefill_inputs(m, 3))


def test_a_rotary_width_other_than_the_models_is_refused_in_prefill():
    """Phi-3 at partial_rotary_factor 0.5 given cos/sin over whole heads: lowered as given,
    the verification's seeded inputs say which shape to give (a usage error)."""
    from stepc.torch import InputRefused
    m = build_variant("phi3", **PHI3)
    hs, _, mask, cache = prefill_inputs(m, 3)
    whole = (torch.ones(len(LENS), 3, D), torch.zeros(len(LENS), 3, D))
    with pytest.raises(InputRefused, match=r"covers 8 dims of a head.*\[B, 3, 8\] each"):
        from_torch(m, (hs, whole, mask, cache), schedule={"TILE_N": 8, "R": 2})


@pytest.mark.parametrize("model,extra", [
    pytest.param("phi3", PHI3, id="phi3"),
    pytest.param("gemma2", {"attn_logit_softcapping": 0.05}, marks=pytest.mark.slow,
                 id="gemma2")])
def test_phi3_and_gemma2_decoder_layers_in_prefill(model, extra):
    """Phi-3's layer (fused qkv and gate_up, partial rotary) and Gemma 2's (four (1 + w)
    norms, soft-capped logits) in prefill through the structural composition, verified
    against the layer's forward."""
    from test_torch_hf_decoder_variants import SIZES, SMALL, seeded
    from transformers import AutoConfig
    from transformers.models.gemma2.modeling_gemma2 import Gemma2DecoderLayer
    from transformers.models.phi3.modeling_phi3 import Phi3DecoderLayer
    cfg = AutoConfig.for_model(model, **SIZES, pad_token_id=0, **extra)
    cfg._attn_implementation = "eager"
    layer_cls = {"phi3": Phi3DecoderLayer, "gemma2": Gemma2DecoderLayer}[model]
    m = seeded(layer_cls(cfg, 0), cfg)
    rot = 8 if extra is PHI3 else D
    s, b = 3, len(LENS)
    with torch.device("meta"):
        cache = DynamicCache()
        cache.update(torch.empty(b, KV, P, D), torch.empty(b, KV, P, D), 0)
        example = (torch.empty(b, s, HID), (torch.empty(b, s, rot),) * 2,
                   torch.empty(b, 1, s, P + s), cache)
    prog = from_torch(m, example, schedule={"tiling": "static", **SMALL})
    assert prog.verification.verified and f"param attn_S = {s} " in prog.text


SPEC = str(ROOT / "examples/torch/hf_attention.py:SmallQwen3Attention")


def test_cli_prefill_verifies_and_round_trips_through_sim(tmp_path):
    """from-torch with hidden_states [8, 4, 64] (S = 4 over P = 32 cached positions: the
    mask's last dim is P + S) writes a verified program; sim with --weights-out and the
    kv_lens trace computes the module's output on those seeded inputs."""
    step, w, lens = tmp_path / "a.step", tmp_path / "a.safetensors", tmp_path / "lens.npy"
    inputs = ["hidden_states=f32[8,4,64]", "position_embeddings=f32[2,8,4,16]",
              "attention_mask=f32[8,1,4,36]"]
    r = CliRunner().invoke(main, ["from-torch", SPEC, *(a for i in inputs for a in ("--input", i)),
                                  "--schedule", "dynamic", "--param", "R=2", "--param",
                                  "TILE_N=8", "-o", str(step), "--weights-out", str(w),
                                  "--external-out", f"kv_lens={lens}"])
    assert r.exit_code == 0, r.output
    assert "Verified on seeded inputs" in step.read_text()
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["sim", str(step), "--weights", str(w), "--trace",
                                  f"kv_lens={lens}", "--out", str(out)])
    assert r.exit_code == 0, r.output
    sys.path.insert(0, str(ROOT / "examples" / "torch"))
    from hf_attention import SmallQwen3Attention
    torch.manual_seed(0)  # as from-torch builds it (--seed 0)
    m = SmallQwen3Attention().eval()
    example = (torch.empty(8, 4, 64), torch.empty(2, 8, 4, 16), torch.empty(8, 1, 4, 36))
    prog = from_torch(m, example, verify=False, schedule={"tiling": "dynamic", "R": 2,
                                                          "TILE_N": 8})
    real = prog.seeded_inputs(example, 0)
    np.testing.assert_array_equal(np.load(lens), prog.traces(*real)["kv_lens"])
    with torch.no_grad():
        ref = m(*real)[0].reshape(-1, 64).numpy()
    close(np.load(out / "O.npy"), ref)
