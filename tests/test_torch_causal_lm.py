"""Whole transformers causal LMs in decode (the hf-causal-lm family): the token embedding
gathered by id, the decoder layers, the final RMSNorm and the LM head lowered as one
program; it checks, simulates equal to the model's logits (f32 within 1e-5 of their scale),
moves the off-chip bytes of its closed form (docs/torch.md, "Whole models"), and refusals
say what stepc lowers of whole models. Skipped without torch or transformers."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="transformers is not installed "
                                   "(the torch extra plus `pip install transformers`)")

from click.testing import CliRunner
from transformers import LlamaConfig, LlamaForCausalLM

from stepc.analyze import analyze, trace_bindings
from stepc.cli import main
from stepc.frontend import compile_source
from stepc.hw import load_config
from stepc.sim.run import simulate
from stepc.source import SourceFile
from stepc.torch import LoweringError, VerificationError, from_torch
from stepc.torch.hf_causal_lm import seeded_decode_inputs
from stepc.torch.hf_causal_lm_config import build_causal_lm, from_hf_causal_lm

SIZES = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "intermediate_size": 128, "num_hidden_layers": 2, "vocab_size": 96}
QWEN3_MOE = {"model_type": "qwen3_moe", **SIZES, "moe_intermediate_size": 32,
             "num_experts": 4, "num_experts_per_tok": 2}
SMALL = {"attn_R": 2, "attn_TILE_N": 8}  # two attention regions, KV tiles of 8 rows
B, P = 8, 20


def scaled_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| as a fraction of max |want| (the issue's criterion)."""
    return float(np.abs(got - want).max() / np.abs(want).max())


def llama(**extra) -> LlamaForCausalLM:
    """A two-layer LlamaForCausalLM with seeded weights (norm scales too, so that they
    count)."""
    torch.manual_seed(0)
    m = LlamaForCausalLM(LlamaConfig(**SIZES, pad_token_id=0, **extra)).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name:
                p.normal_(1.0, 0.2)
    return m


def generate_decode_step(m, batch: int = 4, prompt: int = 7) -> dict:
    """The keyword arguments `generate` passes to the model's forward for its first decode
    step (left-padded prompts: the mask has holes at the front), its cache copied."""
    calls = []
    hook = m.register_forward_pre_hook(
        lambda mod, args, kwargs: calls.append({**kwargs, "cache": copy.deepcopy(
            kwargs["cache"])}), with_kwargs=True)
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(1, SIZES["vocab_size"], (batch, prompt), generator=g)
    mask = torch.ones(batch, prompt, dtype=torch.long)
    mask[1, :3] = 0
    mask[3, :5] = 0
    ids[mask == 0] = 0
    try:
        with torch.no_grad():
            m.generate(ids, attention_mask=mask, max_new_tokens=2, do_sample=False)
    finally:
        hook.remove()
    return calls[1]


def simulated(prog, args) -> dict:
    r = compile_source(SourceFile("lm.step", prog.text))
    assert r.ok, [str(d) for d in r.diagnostics.items]
    run = simulate(r.typed, load_config(None, ()), prog.traces(*args),
                   values=prog.values(*args))
    assert run.deadlock is None
    return run.outputs


@pytest.fixture(scope="module")
def generated():
    """A two-layer LlamaForCausalLM, the arguments generate passes for its first decode
    step, and the program lowered from them (verified by the tests that use it)."""
    m = llama()
    step = generate_decode_step(m)
    args = (step["input_ids"], step["attention_mask"], step["position_ids"], step["cache"])
    return m, step, args, from_torch(m, args, schedule=SMALL, verify=False)


def test_llama_decode_step_as_generate_calls_it_equals_its_logits(generated):
    """Lowered from the arguments generate passes for a decode step (left padding: holes
    at the front of the mask) and simulated on them: the logits equal the model's within
    1e-5 of their scale."""
    m, step, args, prog = generated
    with torch.no_grad():
        want = m(**{**step, "cache": copy.deepcopy(step["cache"])}).logits[:, -1].numpy()
    got = simulated(prog, args)["LOGITS"]
    assert got.shape == (4, SIZES["vocab_size"])
    assert scaled_error(got, want) <= 1e-5
    assert "RandomOffChipLoad(ids, EMBED, tile=[1, D])" in prog.text


def test_verified_and_a_flipped_sign_in_the_head_is_caught(generated):
    """The verification compares the logits on seeded inputs: the program matches, and
    one whose final norm subtracts its scale instead of multiplying is refused."""
    from dataclasses import replace
    _, _, _, prog = generated
    v = prog.verify(0).verification
    assert v.verified and v.max_error <= 1e-5 * v.scale
    line = "fnorm_mul_1 = Map(fnorm_weight_rows, fnorm_mul, fn=mul)"
    assert line in prog.text
    broken = replace(prog, text=prog.text.replace(line, line.replace("fn=mul", "fn=sub")))
    with pytest.raises(VerificationError, match="LOGITS"):
        broken.verify(0)


@pytest.mark.slow  # a MoE model lowers and simulates for about 6 s
def test_qwen3_moe_causal_lm_from_its_config_with_tied_embeddings():
    """A two-layer Qwen3-MoE causal LM from its config (dynamic schedule), tied
    embeddings: the LM head reads the embedding table, each layer its own routing."""
    prog = from_hf_causal_lm({**QWEN3_MOE, "tie_word_embeddings": True}, batch=B, past=P,
                             schedule={"tiling": "dynamic", **SMALL})
    v = prog.verification
    assert v.verified and v.max_error <= 1e-5 * v.scale
    assert "head_weight" not in prog.text and "tensor EMBED" in prog.text
    assert "head_linear_w = LinearOffChipLoad(EMBED" in prog.text
    real = build_causal_lm(prog.module.config, None, "cpu", seed=0)
    traces = prog.on_module(real).traces(*seeded_decode_inputs(real, B, P, 1))
    assert sorted(traces) == ["kv_lens", "routing_0", "routing_1"]


def test_a_config_lowers_the_first_layers_of_the_whole_model():
    """--layers 1 of a 3-layer config: one decoder layer between the embedding and the
    head, verified against that truncated model."""
    prog = from_hf_causal_lm({"model_type": "llama", **SIZES, "num_hidden_layers": 3},
                             layers=1, batch=B, past=P, schedule=SMALL)
    assert prog.verification.verified
    assert "l0_attn_WQ" in prog.text and "l1_" not in prog.text
    assert prog.module.config.num_hidden_layers == 1


# Llama-3-8B's published config values (its config.json), written here: no download
LLAMA3_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
             "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
             "vocab_size": 128256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
             "max_position_embeddings": 8192, "tie_word_embeddings": False}


def test_real_dims_build_on_the_meta_device():
    """Two Llama-3-8B layers with the embedding and the LM head: no memory, the header
    says why it was not verified, the dims are the config's."""
    with pytest.warns(UserWarning, match="parameter elements"):
        prog = from_hf_causal_lm(LLAMA3_8B, layers=2, batch=64, past=1023, dtype="bf16")
    assert not prog.verification.verified
    assert "tensor EMBED" in prog.text and "bf16[128256, D] weight" in prog.text
    assert "param head_TB = 64" in prog.text  # the LM head read once per step
    assert next(prog.module.parameters()).is_meta


def closed_form_bytes(cfg: dict, e: int, lens: np.ndarray, tile_n: int, mlp_tb: int,
                      head_tb: int) -> int:
    """Off-chip bytes of one decode step of a dense Llama causal LM under the static
    schedule (docs/torch.md, "Whole models": each term explained there). `e`: bytes of the
    model's dtype; SCALE and MASK are f32."""
    b, d, v = len(lens), cfg["hidden_size"], cfg["vocab_size"]
    h, g, hd, f = (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"],
                   cfg["intermediate_size"])
    layers = cfg["num_hidden_layers"]
    tiles = sum(math.ceil((int(n) + 1) / tile_n) for n in lens)  # KV tiles per KV head
    embedding = 2 * b * d * e                         # gather the rows, store them
    per_request = (e * (h + 2 * g) * hd * d            # q, k, v projections
                   + e * d * h * hd                    # o projection
                   + e * (h + g) * hd * hd             # ROT, per q and k head
                   + 4 * h                             # SCALE, per q head
                   + 2 * e * g * tile_n * hd           # last K and V tile written back
                   + 2 * e * g * hd                    # K_NEW, V_NEW
                   + e * d)                            # the attention output row
    per_layer = (8 * b * d * e                         # activation rows, norm scales
                 + 2 * b * hd * e                      # cos, sin
                 + b * per_request
                 + g * tiles * (2 * tile_n * hd * e + 4 * tile_n)  # K, V and MASK tiles
                 + (b // mlp_tb) * 3 * f * d * e)      # MLP weights per row tile
    between = (layers - 1) * b * d * e                 # a layer's output, stored
    head = b * d * e + (b // head_tb) * v * d * e + b * v * e  # norm, LM head, logits
    return embedding + layers * per_layer + between + head


@pytest.mark.parametrize("dtype,sched", [
    pytest.param("f32", {}, marks=pytest.mark.slow),  # each lowers and analyzes: 2.5 s
    ("bf16", {"mlp_TB": 4, "head_TB": 4}),
])
def test_traffic_equals_the_closed_form(dtype, sched):
    """`stepc analyze`'s off-chip bytes, bound to the KV lengths, and the timing
    simulation's equal the closed form, under the default and under smaller MLP and
    LM-head row tiles."""
    config = {"model_type": "llama", **SIZES}
    prog = from_hf_causal_lm(config, batch=B, past=P, dtype=dtype,
                             schedule={**SMALL, **sched}, verify=False)
    lens = np.array([19, 17, 10, 18, 7, 6, 9, 0])
    r = compile_source(SourceFile("lm.step", prog.text))
    a = analyze(r.typed, "artifact").bind(trace_bindings(r.typed, {"kv_lens": lens}))
    e = {"f32": 4, "bf16": 2}[dtype]
    want = closed_form_bytes(SIZES, e, lens, SMALL["attn_TILE_N"], sched.get("mlp_TB", B),
                             sched.get("head_TB", B))
    assert int(a.totals["off_chip_bytes"]) == want
    # the simulator moves the same bytes, on token ids the program draws itself
    run = simulate(r.typed, load_config(None, ()), {"kv_lens": lens}, functional=False)
    assert run.deadlock is None and run.useful_bytes == want


def test_a_subclass_overriding_forward_is_refused_naming_it():
    class Scaled(LlamaForCausalLM):
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.logits = out.logits * 2
            return out

    with pytest.raises(LoweringError, match=r"Scaled.forward.*overrides"):
        from_hf_causal_lm({"model_type": "llama", **SIZES}, batch=B, past=P, cls=Scaled)


@pytest.mark.slow  # lowers, verifies, writes and simulates a model: about 8 s
def test_cli_whole_model_round_trip(tmp_path, monkeypatch):
    """--whole-model with --weights-out and --external-out kv_lens, then `stepc sim`: the
    logits of the model built with the same seed."""
    monkeypatch.chdir(tmp_path)
    config = {"model_type": "llama", **SIZES}
    Path("config.json").write_text(json.dumps(config))
    runner = CliRunner()
    r = runner.invoke(main, ["from-torch", "--hf-config", "config.json", "--whole-model",
                             "--batch", str(B), "--past", str(P), "--param", "attn_R=2",
                             "--param", "attn_TILE_N=8", "-o", "m.step", "--weights-out",
                             "m.safetensors", "--external-out", "kv_lens=lens.npy"])
    assert r.exit_code == 0, r.output
    assert "# Verified on seeded inputs" in Path("m.step").read_text()
    r = runner.invoke(main, ["sim", "m.step", "--weights", "m.safetensors", "--trace",
                             "kv_lens=lens.npy", "--out", "out"])
    assert r.exit_code == 0, r.output
    real = build_causal_lm(transformers.AutoConfig.for_model(**config), None, "cpu", seed=0)
    ids, mask, pos, cache = seeded_decode_inputs(real, B, P, 0)
    with torch.no_grad():
        want = real(ids, mask, pos, cache).logits[:, 0].numpy()
    assert scaled_error(np.load("out/LOGITS.npy"), want) <= 1e-5


@pytest.mark.parametrize("args,code,words", [
    # a causal LM class with its config and no --input: the whole model
    (["transformers:LlamaForCausalLM", "--batch", "2"], 2, ["--hf-config"]),
    (["transformers:LlamaForCausalLM", "--hf-config", "llama.json", "--input",
      "x=i64[8,1]"], 2, ["decode step", "--whole-model", "--layers N"]),
    (["transformers:GemmaForCausalLM", "--hf-config", "gemma.json"], 2,
     ["--input", "--layers N", "--whole-model"]),
    (["transformers:GemmaForCausalLM", "--hf-config", "gemma.json", "--input",
      "x=i64[8,1]"], 1, ["GemmaForCausalLM is a whole model", "--layers N"]),
    (["--hf-config", "gemma.json", "--whole-model"], 1,
     ["GemmaForCausalLM", "no registered causal-LM family", "--layers N"]),
    (["--whole-model"], 2, ["--hf-config"]),
    (["--hf-config", "llama.json", "--whole-model", "--input", "x=i64[8,1]"], 2, ["--input"]),
    (["--hf-config", "llama.json", "--whole-model", "--layers", "3"], 2, ["choose 1 to 2"]),
    (["--hf-config", "llama.json", "--whole-model", "--past", "0"], 2, ["past 0"]),
    (["transformers:LlamaMLP", "--hf-config", "llama.json", "--whole-model"], 2,
     ["--whole-model", "not a causal LM class"]),
    (["--hf-config", "llama.json"], 2, ["--layers N", "--whole-model"]),
    (["--hf-config", "bare.json", "--whole-model"], 2, ["no `model_type`"]),
    # a config transformers' constructors reject (a padding id past the vocabulary)
    (["--hf-config", "badpad.json", "--whole-model"], 2, ["AssertionError", "Padding_idx"]),
    (["--hf-config", "badpad.json", "--layers", "1"], 2, ["AssertionError", "Padding_idx"]),
])
def test_cli_refusals_say_what_is_lowered(tmp_path, monkeypatch, args, code, words):
    monkeypatch.chdir(tmp_path)
    Path("llama.json").write_text(json.dumps({"model_type": "llama", **SIZES}))
    Path("gemma.json").write_text(json.dumps({"model_type": "gemma", **SIZES}))
    Path("bare.json").write_text(json.dumps(SIZES))
    Path("badpad.json").write_text(json.dumps({"model_type": "llama", **SIZES,
                                               "pad_token_id": 1000}))
    r = CliRunner().invoke(main, ["from-torch", *args])
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    for w in words:
        assert w in r.output


def test_layers_help_names_the_whole_model():
    r = CliRunner().invoke(main, ["from-torch", "--help"])
    assert "--whole-model" in r.output and "LlamaForCausalLM" in r.output


@pytest.mark.slow  # about two minutes: every causal LM of the library
def test_no_causal_lm_config_is_an_internal_error(tmp_path):
    """`--whole-model --layers 1` on the small config of every model type transformers
    builds a causal LM for: lowered and verified, or refused naming the class or the config
    (exit 1 or 2), never an internal error; the counts are printed (`-s` shows them)."""
    from collections import Counter

    from torch_walk import INTERNAL, _small_config
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    counts: Counter = Counter()
    internal, lowered = [], []
    for model_type in sorted(set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) & set(CONFIG_MAPPING)):
        config = _small_config(CONFIG_MAPPING[model_type])
        if config is None:
            continue
        path = tmp_path / f"{model_type}.json"
        path.write_text(json.dumps({**config, "model_type": model_type}, default=str))
        r = CliRunner().invoke(main, ["from-torch", "--hf-config", str(path), "--whole-model",
                                      "--layers", "1", "--batch", "2", "--past", "8", "-o",
                                      str(tmp_path / f"{model_type}.step")])
        crashed = r.exception is not None and not isinstance(r.exception, SystemExit)
        code = INTERNAL if crashed else r.exit_code
        counts[code] += 1
        if code == INTERNAL:
            internal.append(f"{model_type}: {type(r.exception).__name__}: {r.exception}")
        elif code == 0:
            lowered.append(model_type)
    print(f"\ntransformers {transformers.__version__}: whole models, exit codes {dict(counts)}; "
          f"lowered and verified: {', '.join(lowered)}")
    assert sum(counts.values()) > 100, counts  # the walk found the library
    assert {"llama", "qwen3", "qwen3_moe", "mixtral"} <= set(lowered)
    assert not internal, "\n".join(internal)
