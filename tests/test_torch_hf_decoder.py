"""transformers decoder layers (LlamaDecoderLayer, Qwen3MoeDecoderLayer, MixtralDecoderLayer)
in decode, and the first N layers of a model from its config, lowered as one program: it
checks clean and its functional simulation equals the layer's (or the layers') own forward
under every schedule each takes; refusals name the class or setting. Skipped without torch
or transformers."""

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
from transformers import LlamaConfig, MixtralConfig, Qwen3MoeConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer
from transformers.models.mixtral.modeling_mixtral import MixtralDecoderLayer
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeDecoderLayer

from stepc.cli import main
from stepc.frontend import compile_source
from stepc.hw import load_config
from stepc.sim.run import simulate
from stepc.source import SourceFile
from stepc.torch import InputRefused, LoweringError, from_hf_config, from_torch
from stepc.torch.build import BuildError, seed_transformers_weights
from stepc.torch.hf_model import build_stack, example_inputs

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SIZES = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "intermediate_size": 128, "num_hidden_layers": 2, "vocab_size": 64}
MOE = {"qwen3_moe": {"moe_intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2},
       "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2}, "llama": {}}
CLASSES = {"llama": (LlamaConfig, LlamaDecoderLayer),
           "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeDecoderLayer),
           "mixtral": (MixtralConfig, MixtralDecoderLayer)}
SMALL = {"attn_R": 2, "attn_TILE_N": 8}  # two attention regions, KV tiles of 8 rows
B, P = 8, 20


def layer(kind: str, dtype=torch.float32):
    """One decoder layer with seeded weights (norm scales too, so that they count)."""
    config_cls, layer_cls = CLASSES[kind]
    cfg = config_cls(**SIZES, **MOE[kind])
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    m = layer_cls(cfg, 0).eval()
    seed_transformers_weights(m, cfg)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name:
                p.normal_(1.0, 0.2)
    return m.to(dtype)


def meta_example(m, dtype=torch.float32) -> tuple:
    """Shapes only: hidden_states, (cos, sin), mask, a DynamicCache of layer 0's past."""
    from transformers.cache_utils import DynamicCache
    with torch.device("meta"):
        cache = DynamicCache()
        shape = (B, SIZES["num_key_value_heads"], P, SIZES["head_dim"])
        cache.update(torch.empty(shape, dtype=dtype), torch.empty(shape, dtype=dtype), 0)
        pe = (torch.empty(B, 1, SIZES["head_dim"], dtype=dtype),) * 2
        return (torch.empty(B, 1, SIZES["hidden_size"], dtype=dtype), pe,
                torch.empty(B, 1, 1, P + 1, dtype=dtype), cache)


def compiled(text: str):
    r = compile_source(SourceFile("emitted.step", text))
    problems = [str(d) for d in r.diagnostics.items]
    assert r.ok and not problems, "\n".join(problems)
    return r


def simulated_and_reference(prog, module, args):
    """The program's Y and the module's forward [B, hidden] for the same inputs."""
    values, traces = prog.values(*args), prog.traces(*args)
    run = simulate(compiled(prog.text).typed, load_config(None, ()), traces, values=values)
    assert run.deadlock is None
    with torch.no_grad():
        out = module(args[0], attention_mask=args[2], cache=copy.deepcopy(args[3]),
                     position_embeddings=args[1])
    return run.outputs["Y"], out[:, 0].float().numpy()


SLOW = pytest.mark.slow  # each lowers and simulates a layer: several seconds


@pytest.mark.parametrize("kind,tiling", [
    ("llama", "static"), pytest.param("llama", "dynamic", marks=SLOW),
    pytest.param("qwen3_moe", "static", marks=SLOW), ("qwen3_moe", "dynamic"),
    pytest.param("qwen3_moe", "timemux", marks=SLOW), ("mixtral", "timemux"),
    pytest.param("mixtral", "static", marks=SLOW)])
def test_a_layer_simulates_equal_to_its_forward(kind, tiling):
    m = layer(kind)
    prog = from_torch(m, meta_example(m), verify=False, schedule={"tiling": tiling, **SMALL})
    args = prog.seeded_inputs(meta_example(m), seed=1)
    got, ref = simulated_and_reference(prog, m, args)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    assert ("routing" in prog.traces(*args)) == (kind != "llama")


@SLOW
def test_bf16_within_bf16_rounding():
    m = layer("mixtral", torch.bfloat16)
    example = meta_example(m, torch.bfloat16)
    prog = from_torch(m, example, verify=False, schedule={"tiling": "static", **SMALL})
    got, ref = simulated_and_reference(prog, m, prog.seeded_inputs(example, seed=2))
    np.testing.assert_allclose(got, ref, rtol=3e-2, atol=3e-2 * np.abs(ref).max())


def test_two_layers_from_a_config_with_per_layer_routing():
    """The first two layers of a Qwen3-MoE model: its own forward, each layer's routing
    trace under its own name, the KV lengths shared."""
    config = {"model_type": "qwen3_moe", **SIZES, **MOE["qwen3_moe"]}
    prog = from_hf_config(config, layers=2, batch=B, past=P,
                          schedule={"tiling": "dynamic", **SMALL}, verify=False)
    stack = build_stack(prog.module.config, 2, "cpu", seed=0)
    prog = prog.on_module(stack)
    args = prog.seeded_inputs(example_inputs(stack, B, P, "f32", "cpu"), seed=3)
    traces = prog.traces(*args)
    assert sorted(traces) == ["kv_lens", "routing_0", "routing_1"]
    assert not np.array_equal(traces["routing_0"], traces["routing_1"])
    got, ref = simulated_and_reference(prog, stack, args)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    assert 'external("routing_1"' in prog.text and "param moe_PACK_BW" in prog.text


@SLOW
def test_part_settings_move_the_result():
    """attn_R (regions of the attention) and moe_TILE_N (token rows of a static MoE
    tile) reach their part: more regions, fewer cycles; bigger tiles, more padded rows."""
    m = layer("qwen3_moe")
    example = meta_example(m)
    args = None

    def measure(**sched):
        nonlocal args
        prog = from_torch(m, example, schedule={"tiling": "static", "attn_TILE_N": 8, **sched},
                          verify=False)
        args = args or prog.seeded_inputs(example, seed=4)
        run = simulate(compiled(prog.text).typed, load_config(None, ()), prog.traces(*args),
                       functional=False)
        return run.cycles, run.flops

    base = measure(attn_R=1, moe_TILE_N=4)
    assert measure(attn_R=2, moe_TILE_N=4)[0] < base[0]
    assert measure(attn_R=1, moe_TILE_N=16)[1] > base[1]


@pytest.mark.parametrize("sched,words", [
    ({"tiling": "timemux"}, ["timemux", "dense MLP"]),          # no experts to multiplex
    ({"tiling": "coarse"}, ["coarse", "static, dynamic, timemux"]),
    ({"R": 2}, ["`R`", "attn_R"]),                             # which part's R?
    ({"moe_TILE_N": 8}, ["moe_TILE_N", "no sparse MoE"]),
])
def test_refusals_name_the_setting(sched, words):
    m = layer("llama")
    with pytest.raises(LoweringError) as e:
        from_torch(m, meta_example(m), schedule=sched)
    for w in words:
        assert w in str(e.value)


def test_model_refusals_name_the_class():
    with pytest.raises(InputRefused, match="StableLmDecoderLayer.*`self_attn` .StableLmAtt"):
        from_hf_config({"model_type": "stablelm", **SIZES}, layers=1, batch=B, past=P)
    with pytest.raises(BuildError, match="choose 1 to 2"):
        from_hf_config({"model_type": "llama", **SIZES}, layers=3, batch=B, past=P)


@SLOW
def test_cli_layers_round_trip(tmp_path, monkeypatch):
    """--hf-config --layers 2 with --weights-out and the per-layer --external-out, then
    `stepc sim --weights --trace`: the two layers' output."""
    monkeypatch.chdir(tmp_path)
    config = {"model_type": "llama", **SIZES}
    Path("config.json").write_text(json.dumps(config))
    runner = CliRunner()
    r = runner.invoke(main, ["from-torch", "--hf-config", "config.json", "--layers", "2",
                             "--batch", str(B), "--past", str(P), "--param", "attn_R=2",
                             "--param", "attn_TILE_N=8", "-o", "m.step", "--weights-out",
                             "m.safetensors", "--external-out", "kv_lens=lens.npy"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["sim", "m.step", "--weights", "m.safetensors", "--trace",
                             "kv_lens=lens.npy", "--out", "out"])
    assert r.exit_code == 0, r.output
    stack = build_stack(from_hf_config(config, 2, B, P).module.config, 2, "cpu", seed=0)
    prog = from_hf_config(config, 2, B, P, {"attn_R": 2, "attn_TILE_N": 8}).on_module(stack)
    args = prog.seeded_inputs(example_inputs(stack, B, P, "f32", "cpu"), seed=0)
    with torch.no_grad():
        ref = stack(args[0], attention_mask=args[2], cache=args[3],
                    position_embeddings=args[1])[:, 0].numpy()
    np.testing.assert_allclose(np.load("out/Y.npy"), ref, rtol=1e-5,
                               atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("args,code,words", [
    (["--layers", "2"], 2, ["--hf-config"]),
    (["--hf-config", "config.json", "--layers", "2", "--input", "x=f32[8,64]"], 2,
     ["--input"]),
    (["transformers:LlamaMLP", "--hf-config", "config.json", "--input", "x=f32[8,64]",
      "--batch", "4"], 2, ["--batch", "--layers"]),
    (["--hf-config", "stablelm.json", "--layers", "1"], 2, ["StableLmDecoderLayer",
                                                            "self_attn"]),
    (["--hf-config", "config.json", "--layers", "5"], 2, ["choose 1 to 2"]),
    (["transformers:LlamaDecoderLayer", "--hf-config", "config.json", "--input",
      "x=f32[8,1,64]"], 2, ["layer_idx", "--layers N"]),
    (["--hf-config", "config.json", "--layers", "1", "--schedule", "coarse"], 1,
     ["coarse", "static, dynamic, timemux"]),
])
def test_cli_refusals(tmp_path, monkeypatch, args, code, words):
    monkeypatch.chdir(tmp_path)
    Path("config.json").write_text(json.dumps({"model_type": "llama", **SIZES}))
    Path("stablelm.json").write_text(json.dumps({"model_type": "stablelm", **SIZES}))
    r = CliRunner().invoke(main, ["from-torch", *args])
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    for w in words:
        assert w in r.output


def test_cli_a_config_the_model_rejects_is_a_usage_error(tmp_path, monkeypatch):
    """A config transformers loads but whose model fails to build (an unknown rope type
    raises KeyError in the rotary embedding): exit 2, naming the model type and the error."""
    monkeypatch.chdir(tmp_path)
    Path("rope.json").write_text(json.dumps({"model_type": "llama", **SIZES,
                                             "rope_scaling": {"rope_type": "no-such-rope"}}))
    r = CliRunner().invoke(main, ["from-torch", "--hf-config", "rope.json", "--layers", "1",
                                  "--batch", "2", "--past", "4"])
    assert r.exit_code == 2, r.output
    assert "model_type `llama`" in r.output and "no-such-rope" in r.output, r.output


# Qwen3-30B-A3B's published config values (its config.json), written here: no download
QWEN3_30B_A3B = {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
                 "moe_intermediate_size": 768, "num_attention_heads": 32,
                 "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
                 "num_experts_per_tok": 8, "norm_topk_prob": True, "num_hidden_layers": 48,
                 "rms_norm_eps": 1e-6, "vocab_size": 151936, "max_position_embeddings": 40960,
                 "decoder_sparse_step": 1, "mlp_only_layers": [], "hidden_act": "silu"}


@SLOW
def test_two_qwen3_moe_layers_at_real_dims_with_the_papers_traces():
    """Two Qwen3-30B-A3B layers from the config, on the meta device, simulated timing-only
    on paper-eval with the paper's KV lengths and routing (bound to both layers), against
    programs/decoder_dynamic.step at L = 2 with the same traces. Both run the dynamic MoE
    on the same routing; the traffic differs by the HF attention's per-request reads of
    its projection weights (and ROT, the q/k norm scales and SCALE per head), which the
    bundled program reads once per region: the difference is that closed form."""
    from stepc.frontend import compile_file
    from stepc.traces import load_array, load_routing
    kv = DATA / "azure_kv_trace" / "b64" / "conv_stdev0754_0181_0244.npy"
    ids = DATA / "expert_routing" / "qwen_b64" / "032_012.npz"
    if not (kv.exists() and ids.exists()):
        pytest.skip(f"the paper's traces are not in {DATA}")
    lens, routing = load_array(str(kv)), load_routing(str(ids))
    hw = load_config("paper-eval", ())
    prog = from_hf_config(QWEN3_30B_A3B, layers=2, verify=False, batch=64, past=6463, dtype="bf16",
                          schedule={"tiling": "dynamic", "attn_TILE_N": 32})
    ours = simulate(compiled(prog.text).typed, hw, {"kv_lens": lens, "routing_0": routing,
                                                    "routing_1": routing}, functional=False)
    bundled = simulate(compile_file(str(ROOT / "programs" / "decoder_dynamic.step"),
                                    {"L": 2}).typed, hw,
                       {"kv_lens": lens, "routing": routing}, functional=False)
    assert ours.deadlock is None and bundled.deadlock is None
    d, hq, kv_heads, hd, b, regions = 2048, 32, 4, 128, 64, 4
    weights = (2 * hq + 2 * kv_heads) * hd * d * 2             # q, k, v, o projections
    per_head = hd * hd * 2 + hd * 2                            # ROT and a norm scale
    per_request = weights + (hq + kv_heads) * per_head + hq * 4  # and SCALE per q head
    extra = 2 * (b * per_request - regions * weights)
    assert abs((ours.useful_bytes - bundled.useful_bytes) - extra) < 0.01 * extra
    assert ours.cycles > bundled.cycles
