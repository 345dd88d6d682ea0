"""`stepc from-torch` on transformers' own decode attention classes (LlamaAttention,
Qwen3Attention) with a DynamicCache: the emitted program checks clean and its functional
simulation equals the module's forward under every schedule; refusals name the feature and
the module's forward. Skipped without torch or transformers."""

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
from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config
from transformers.cache_utils import DynamicCache
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding
from transformers.models.mistral.modeling_mistral import MistralAttention
from transformers.models.qwen2.modeling_qwen2 import Qwen2Attention
from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention

from stepc.analyze import analyze, trace_bindings
from stepc.cli import main
from stepc.frontend import compile_source
from stepc.hw import load_config
from stepc.sim.run import simulate
from stepc.source import SourceFile
from stepc.torch import LoweringError, from_torch

ROOT = Path(__file__).resolve().parent.parent
SIZES = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "intermediate_size": 128, "num_hidden_layers": 1}
SCHEDULES = {"interleaved": {"R": 2}, "coarse": {"R": 2, "NB": 2}, "dynamic": {"R": 2}}
B, P = 8, 20


def build(kind: str, impl: str = "eager", **extra):
    """A module with random weights (norm scales and biases too, so they count)."""
    torch.manual_seed(0)
    sizes = {**SIZES, **extra}
    if kind == "qwen3":
        cfg = Qwen3Config(**sizes)
        cfg._attn_implementation = impl
        m = Qwen3Attention(cfg, 0)
    elif kind == "qwen2":  # biases on q, k, v, none on o
        sizes.pop("head_dim")
        cfg = Qwen2Config(**sizes)
        cfg._attn_implementation = impl
        m = Qwen2Attention(cfg, 0)
    elif kind == "mistral":
        cfg = MistralConfig(**sizes)
        cfg._attn_implementation = impl
        m = MistralAttention(cfg, 0)
    else:
        cfg = LlamaConfig(**sizes, attention_bias=kind == "llama-bias")
        cfg._attn_implementation = impl
        m = LlamaAttention(cfg, 0)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name or "bias" in name:
                p.normal_()
    return m.eval()


def decode_inputs(m, lens, left_pad=False, dtype=torch.float32, window=None):
    """hidden_states, (cos, sin) at each request's position, an additive mask over a cache
    padded to P (right padding, or left padding with a hole in request 0; a sliding window
    hides all but the last window - 1 cached positions), a DynamicCache."""
    g = torch.Generator().manual_seed(1)
    b = len(lens)
    hs = torch.randn(b, 1, SIZES["hidden_size"], generator=g).to(dtype)
    pe = LlamaRotaryEmbedding(m.config)(hs, torch.tensor(lens)[:, None])
    pos = torch.arange(P + 1)[None]
    n = torch.tensor(lens)[:, None]
    valid = (pos >= P - n) if left_pad else (pos < n)
    if left_pad:
        valid[0, P - lens[0]] = False  # a hole: one cached position masked out
    if window is not None:
        valid &= pos >= n - (window - 1)
    valid[:, -1] = True
    mask = torch.zeros(valid.shape, dtype=dtype).masked_fill(~valid, torch.finfo(dtype).min)
    cache = DynamicCache()
    shape = (b, m.config.num_key_value_heads, P, SIZES["head_dim"])
    cache.update(torch.randn(shape, generator=g).to(dtype), torch.randn(shape, generator=g)
                 .to(dtype), 0)
    return hs, pe, mask[:, None, None, :], cache


def compiled(text: str):
    r = compile_source(SourceFile("emitted.step", text))
    errors = [d for d in r.diagnostics.items if d.severity.value == "error"]
    assert r.ok and not errors, "\n".join(str(d) for d in r.diagnostics.items)
    return r


def run_both(m, args, tiling, **sched):
    """The simulated output O and the module's output [B, hidden], and the program; the
    new cache entries the program writes equal those the module appends."""
    prog = from_torch(m, args, schedule={"tiling": tiling, "TILE_N": 8, **SCHEDULES[tiling],
                                         **sched}, verify=False)  # compared here
    values, traces = prog.values(*args), prog.traces(*args)  # before the forward appends
    run = simulate(compiled(prog.text).typed, load_config(None, ()), traces, values=values)
    assert run.deadlock is None
    cache = copy.deepcopy(args[3])
    with torch.no_grad():
        out, _ = m(*args[:3], cache)
    for name, new in (("K_NEW", cache.layers[0].keys), ("V_NEW", cache.layers[0].values)):
        want = new[:, :, -1].float().numpy().reshape(-1, new.shape[-1])  # appended at P
        np.testing.assert_allclose(run.outputs[name], want, rtol=1e-5,
                                   atol=2e-2 if new.dtype == torch.bfloat16 else 1e-5)
    return run.outputs["O"], out[:, 0].float().numpy(), prog


LENS = [7, 17, 20, 0, 10, 13, 3, 5]


@pytest.mark.parametrize("kind,tiling", [
    pytest.param(k, s, marks=[pytest.mark.slow] * ((k, s) not in {("llama", "interleaved"),
                                                                  ("qwen3", "coarse"),
                                                                  ("llama", "dynamic")}))
    for k in ("llama", "qwen3") for s in SCHEDULES])
def test_matches_the_module_under_every_schedule(kind, tiling):
    """Each schedule by default (qwen3's q/k norms under one); every pair under -m slow."""
    m = build(kind)
    got, ref, prog = run_both(m, decode_inputs(m, LENS), tiling)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    assert ("QN" in prog.tensors) == (kind == "qwen3")


@pytest.mark.parametrize("kind,impl,tiling", [
    ("llama-bias", "sdpa", "dynamic"), ("qwen2", "eager", "coarse"),
    pytest.param("qwen3", "sdpa", "interleaved", marks=pytest.mark.slow),
    pytest.param("mistral", "sdpa", "dynamic", marks=pytest.mark.slow)])
def test_bias_sdpa_and_left_padding_with_holes(kind, impl, tiling):
    """Biases, SDPA and left padding each by default; the other families under -m slow."""
    m = build(kind, impl)
    args = decode_inputs(m, LENS, left_pad=True)
    got, ref, prog = run_both(m, args, tiling)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    want = np.array(LENS) - np.eye(len(LENS), dtype=int)[0]  # the hole is not a KV row
    np.testing.assert_array_equal(prog.traces(*args)["kv_lens"], want)


def test_a_sliding_window_layer_through_its_mask():
    """transformers encodes the window in the mask (eager and SDPA ignore the layer's
    window): the lengths are the positions inside it."""
    m = build("qwen3", use_sliding_window=True, sliding_window=8,
              layer_types=["sliding_attention"])
    args = decode_inputs(m, LENS, window=8)
    got, ref, prog = run_both(m, args, "dynamic")
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    np.testing.assert_array_equal(prog.traces(*args)["kv_lens"], np.minimum(LENS, 7))


@pytest.mark.parametrize("kv_heads", [1, pytest.param(4, marks=pytest.mark.slow)])
def test_one_kv_head_and_multi_head(kv_heads):
    """QPK = 4 query heads on one KV head; QPK = 1 (no grouping)."""
    m = build("llama", num_key_value_heads=kv_heads)
    got, ref, prog = run_both(m, decode_inputs(m, LENS), "coarse")
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    assert f"param QPK = {4 // kv_heads} " in prog.text


def test_bf16_within_bf16_rounding():
    m = build("qwen3").to(torch.bfloat16)
    got, ref, _ = run_both(m, decode_inputs(m, LENS, dtype=torch.bfloat16), "interleaved")
    np.testing.assert_allclose(got, ref, rtol=3e-2, atol=3e-2 * np.abs(ref).max())


def test_schedule_knobs_move_the_result():
    m = build("qwen3")
    args = decode_inputs(m, LENS)

    def measure(**sched):
        prog = from_torch(m, args, verify=False, schedule={"tiling": "interleaved", **sched})
        run = simulate(compiled(prog.text).typed, load_config(None, ()), prog.traces(*args),
                       functional=False)
        return run.cycles, run.useful_bytes

    base = measure(R=2, TILE_N=8)
    assert measure(R=4, TILE_N=8)[0] < base[0]          # more regions: fewer cycles
    assert measure(R=2, TILE_N=16)[1] > base[1]         # bigger KV tiles: more padding read
    assert measure(R=2, TILE_N=8, BW=64)[0] > base[0]   # less compute: more cycles


@pytest.mark.parametrize("tiling,on_chip", [
    pytest.param("interleaved", 0, marks=pytest.mark.slow), ("coarse", 0), ("dynamic", 0),
    ("coarse", 1)])
def test_off_chip_bytes_equal_the_closed_form(tiling, on_chip):
    """Per request: its hidden row, cos, sin, its output row and (WEIGHTS_ON_CHIP=0) every
    projection weight, the norm scales and ROT per head and SCALE per query head; with
    WEIGHTS_ON_CHIP=1 those constants once per region instead. Per KV head: its
    ceil((len + 1) / TILE_N) K, V and MASK tiles, the K and V last tiles written back, and
    the new K and V rows."""
    m = build("qwen3")
    args = decode_inputs(m, LENS)
    prog = from_torch(m, args, schedule={"tiling": tiling, "TILE_N": 8, **SCHEDULES[tiling],
                                         "WEIGHTS_ON_CHIP": on_chip}, verify=False)
    typed = compiled(prog.text).typed
    run = simulate(typed, load_config(None, ()), prog.traces(*args), functional=False)
    hid, h, kv, d, tn, regions = 64, 4, 2, 16, 8, 2
    consts = (h * d * hid + 2 * kv * d * hid + hid * h * d + h * d + kv * d + (h + kv) * d * d
              + h)
    per_request = hid + 2 * d + hid + (0 if on_chip else consts)
    per_kv = sum(2 * ntiles * tn * d + 2 * tn * d + ntiles * tn + 2 * d
                 for ntiles in (-(-(n + 1) // tn) for n in LENS))
    closed = 4 * (len(LENS) * per_request + kv * per_kv + (regions * consts if on_chip else 0))
    assert run.useful_bytes == closed
    if tiling != "dynamic":  # the dynamic dispatch leaves the per-region counts symbolic
        bound = analyze(typed).bind(trace_bindings(typed, prog.traces(*args)))
        assert bound.totals["off_chip_bytes"] == closed


def test_weights_on_chip_trade_traffic_for_memory_and_compute_the_same():
    m = build("llama-bias")
    args = decode_inputs(m, LENS)
    got, ref, _ = run_both(m, args, "dynamic", WEIGHTS_ON_CHIP=1)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    on_chip = []
    for flag in (0, 1):
        prog = from_torch(m, args, schedule={"TILE_N": 8, "R": 2, "WEIGHTS_ON_CHIP": flag},
                          verify=False)
        total = analyze(compiled(prog.text).typed).totals["on_chip_bytes"]
        on_chip.append(total.subs({s: 3 for s in total.free_symbols}))
    assert on_chip[1] > on_chip[0] + 2 * 4 * 4 * 64 * 64  # at least WQ and WO, per region
    with pytest.raises(LoweringError, match="WEIGHTS_ON_CHIP is 0"):
        from_torch(m, args, schedule={"WEIGHTS_ON_CHIP": 2})


def test_refusals_name_the_feature_and_the_forward():
    m = build("qwen3")
    args = decode_inputs(m, LENS)
    prefill = (torch.randn(B, 3, 64),) + args[1:]
    with pytest.raises(LoweringError, match=r"prefill.*3 new tokens.*Qwen3Attention\.forward "
                                            r"\(modeling_qwen3\.py:\d+\)"):
        from_torch(m, prefill)
    mixed = build("llama-bias")
    mixed.k_proj.bias = None
    with pytest.raises(LoweringError, match="with and without biases"):
        from_torch(mixed, args)
    with pytest.raises(LoweringError, match="attention implementation `flash_attention_2`"):
        m.config._attn_implementation = "flash_attention_2"
        from_torch(m, args)
    m.config._attn_implementation = "eager"
    half = (args[0], (args[1][0][..., :8], args[1][1][..., :8])) + args[2:]
    with pytest.raises(LoweringError, match="partial rotary"):
        from_torch(m, half)
    with pytest.raises(LoweringError, match="unknown tiling `static`.*interleaved, coarse"):
        from_torch(m, args, schedule="static")
    with pytest.raises(LoweringError, match="unknown schedule setting TILE_F"):
        from_torch(m, args, schedule={"TILE_F": 8})
    with pytest.raises(LoweringError, match="coarse tiling needs B = 8 a multiple of NB = 3"):
        from_torch(m, args, schedule={"tiling": "coarse", "NB": 3})
    prog = from_torch(m, args, verify=False, schedule={"TILE_N": 8, "R": 2})
    hidden = args[2].clone()
    hidden[0, 0, 0, -1] = torch.finfo(torch.float32).min
    with pytest.raises(LoweringError, match="hides a request's new token"):
        prog.traces(args[0], args[1], hidden, args[3])


SPEC = str(ROOT / "examples/torch/hf_attention.py:SmallQwen3Attention")
INPUTS = ["hidden_states=f32[8,1,64]", "position_embeddings=f32[2,8,1,16]",
          "attention_mask=f32[8,1,1,33]"]


def test_cli_weights_and_kv_lens_then_sim_compute_the_module(tmp_path):
    """from-torch --weights-out --external-out, then sim --weights --trace: the module's
    output for the seeded inputs (a DynamicCache built by --weights-out)."""
    step, w, lens = tmp_path / "a.step", tmp_path / "a.safetensors", tmp_path / "lens.npy"
    args = ["from-torch", SPEC, *(a for i in INPUTS for a in ("--input", i)), "--schedule",
            "coarse", "--param", "R=2", "--param", "NB=2", "--param", "TILE_N=8", "--seed", "3",
            "-o", str(step), "--weights-out", str(w), "--external-out", f"kv_lens={lens}"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["sim", str(step), "--weights", str(w), "--trace",
                                  f"kv_lens={lens}", "--out", str(out)])
    assert r.exit_code == 0, r.output
    sys.path.insert(0, str(ROOT / "examples" / "torch"))
    from hf_attention import SmallQwen3Attention
    torch.manual_seed(3)
    m = SmallQwen3Attention().eval()
    example = (torch.empty(8, 1, 64), torch.empty(2, 8, 1, 16), torch.empty(8, 1, 1, 33))
    prog = from_torch(m, example, schedule={"tiling": "coarse", "R": 2, "NB": 2, "TILE_N": 8})
    real = prog.seeded_inputs(example, 3)
    np.testing.assert_array_equal(np.load(lens), prog.traces(*real)["kv_lens"])
    with torch.no_grad():
        ref = m(*real)[0][:, 0].numpy()
    np.testing.assert_allclose(np.load(out / "O.npy"), ref, rtol=1e-5,
                               atol=1e-5 * np.abs(ref).max())


def test_cli_refuses_prefill_without_a_traceback(tmp_path):
    inputs = ["hidden_states=f32[8,4,64]", INPUTS[1], INPUTS[2]]
    r = CliRunner().invoke(main, ["from-torch", SPEC, *(a for i in inputs for a in ("--input", i)),
                                  "-o", str(tmp_path / "a.step")])
    assert r.exit_code == 1, r.output
    assert "prefill" in r.output and "modeling_qwen3.py:" in r.output
    assert "Traceback" not in r.output and not (tmp_path / "a.step").exists()
