"""`stepc from-torch` and `stepc sim --weights` from the command line, as a new user meets
them with transformers classes: building a module from a config or a factory, every refusal
a clear message with exit 1 or 2 (never a traceback or exit 70), checkpoint-style weight
keys mapped by prefix, missing / extra / misshaped tensors refused. Skipped when torch or
transformers is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the transformers blocks need the "
                                   "`transformers` package (the torch extra installs it)")

from click.testing import CliRunner  # noqa: E402

from stepc.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIG = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
          "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 1,
          "rms_norm_eps": 1e-5, "vocab_size": 32}
MODELS = '''
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaMLP

def make_model():
    return LlamaMLP(LlamaConfig(hidden_size=64, intermediate_size=128))

class NeedsWidth(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.proj = torch.nn.Linear(width, width)

    def forward(self, x):
        return self.proj(x)

class Raises(torch.nn.Module):
    def __init__(self):
        raise ValueError("no weights here")
'''
PLAIN = '''
import torch

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(64, 64)

    def forward(self, x):
        return self.proj(x)
'''


@pytest.fixture
def work(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "models.py").write_text(MODELS)
    (tmp_path / "plain.py").write_text(PLAIN)  # torch alone: a process that starts sooner
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(3)\n")
    return tmp_path


def stepc(*args, cwd):
    """The CLI in a subprocess, as a user runs it (torch's output would reach stderr)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "stepc", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args,code,words", [
    (["transformers:LlamaMLP", "--input", "x=f32[16,64]"], 2,
     ["needs the argument config", "--hf-config", "make_model"]),
    (["models.py:NeedsWidth", "--input", "x=f32[16,64]"], 2, ["width", "--hf-config"]),
    (["models.py:Raises", "--input", "x=f32[16,64]"], 2, ["ValueError: no weights here"]),
    (["exits.py:Block", "--input", "x=f32[16,64]"], 1, ["sys.exit(3) at import"]),
    (["models.py:make_model", "--input", "x=f32[16,32]"], 1,
     ["modeling_llama.py:", "same reduction dim", "--input shapes"]),
    (["models.py:make_model", "--input", "x=f32[100000000000000000000,64]"], 2, ["2^63"]),
    (["models.py:make_model", "--input", "x=f32[1000000000000000000,64]"], 2,
     ["cannot make such a tensor"]),
    (["models.py:make_model", "--input", "x=f32[16,64]", "--param", "TILE_F=0"], 2,
     ["POSITIVE_INTEGER"]),
    (["transformers:LlamaRMSNorm", "--hf-config", "config.json", "--input", "x=f32[16,64]",
      "--param", "TILE_F=16"], 1, ["no linear layer"]),
])
def test_refusals_are_one_clear_message(work, args, code, words, monkeypatch):
    monkeypatch.chdir(work)
    r = CliRunner().invoke(main, ["from-torch", *args, "-o", "out.step"])
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output and len(r.output.splitlines()) <= 6, r.output
    for w in words:
        assert w in r.output
    assert not (work / "out.step").exists()


def test_torchs_own_output_is_silenced(work):
    """In a real process: a wrong --input shape used to print hundreds of lines of torch
    tracebacks before stepc's message (a transformers block does the same, under
    `-m slow` below)."""
    quiet = stepc("from-torch", "plain.py:Block", "--input", "x=f32[16,32]", cwd=work)
    assert quiet.returncode == 1 and len(quiet.stderr.splitlines()) == 1, quiet.stderr


@pytest.mark.slow
def test_debug_shows_torchs_own_output(work):
    quiet = stepc("from-torch", "models.py:make_model", "--input", "x=f32[16,32]", cwd=work)
    assert quiet.returncode == 1 and len(quiet.stderr.splitlines()) == 1, quiet.stderr
    loud = stepc("--debug", "from-torch", "models.py:make_model", "--input", "x=f32[16,32]",
                 cwd=work)
    assert loud.returncode == 1 and "Traceback" in loud.stderr


def test_hf_config_and_factory_lower_the_same_program(work, monkeypatch):
    monkeypatch.chdir(work)
    run = CliRunner().invoke
    a = run(main, ["from-torch", "transformers:LlamaMLP", "--hf-config", "config.json",
                   "--input", "x=f32[2,8,64]"])
    b = run(main, ["from-torch", "models.py:make_model", "--input", "x=f32[2,8,64]"])
    assert a.exit_code == b.exit_code == 0, a.output + b.output
    assert a.stdout == b.stdout and "gate_proj_weight" in a.stdout
    n = run(main, ["from-torch", "transformers:LlamaRMSNorm", "--hf-config", "config.json",
                   "--input", "x=bf16[2,8,64]"])
    assert n.exit_code == 0 and 'shift="1e-05"' in n.stdout  # eps from rms_norm_eps


def test_checkpoint_keys_map_by_prefix_and_misfits_are_refused(work):
    from safetensors.torch import save_file
    from transformers.models.llama.modeling_llama import LlamaConfig, LlamaMLP
    step = work / "mlp.step"
    r = CliRunner().invoke(main, ["from-torch", str(work / "models.py:make_model"),
                                  "--input", "x=f32[16,64]", "-o", str(step)])
    assert r.exit_code == 0, r.output
    torch.manual_seed(0)
    mlp = LlamaMLP(LlamaConfig(hidden_size=64, intermediate_size=128))
    x = torch.randn(16, 64)
    state = mlp.state_dict()
    other = {f"model.layers.1.mlp.{k}": torch.zeros_like(v) for k, v in state.items()}
    ckpt = {**{f"model.layers.0.mlp.{k}": v for k, v in state.items()},
            "model.embed_tokens.weight": torch.randn(32, 64)}

    def sim(tensors, *flags):
        path = work / "w.safetensors"
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))
        out = work / "out"
        r = CliRunner().invoke(main, ["sim", str(step), "--weights", str(path),
                                      "--out", str(out), *flags])
        return r, (np.load(out / "Y.npy") if r.exit_code == 0 else None)

    r, y = sim({**state, "X": x})  # the module's state dict and input: its forward
    ref = mlp(x).detach().numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5 * abs(ref).max())
    r, y_flat = sim(state)  # the input keeps its declared initialiser
    r, y_ckpt = sim(ckpt)  # a model checkpoint: the layer's prefix found, the rest ignored
    assert r.exit_code == 0 and "model.layers.0.mlp." in r.output
    np.testing.assert_array_equal(y_ckpt, y_flat)
    # two layers name the same tensors: ambiguous until a prefix is chosen
    r, _ = sim({**ckpt, **other})
    assert r.exit_code == 2 and "--weights-prefix" in r.output
    r, y = sim({**ckpt, **other}, "--weights-prefix", "model.layers.1.mlp")
    assert r.exit_code == 0 and not y.any()
    # missing, extra, misshaped: exit 2 naming them; random only when asked
    del ckpt["model.layers.0.mlp.up_proj.weight"]
    r, _ = sim(ckpt)
    assert r.exit_code == 2 and "`up_proj_weight`" in r.output
    r, _ = sim(ckpt, "--allow-missing-weights")
    assert r.exit_code == 0 and "up_proj_weight" in r.output
    r, _ = sim({**ckpt, "model.layers.0.mlp.up_proj.weight": torch.randn(128, 64),
                "model.layers.0.mlp.gate_proj.bias": torch.randn(128)})
    assert r.exit_code == 2 and "gate_proj.bias" in r.output
    r, _ = sim({**ckpt, "model.layers.0.mlp.up_proj.weight": torch.randn(64, 128)})
    assert r.exit_code == 2 and "[64, 128]" in r.output


def test_weights_out_of_a_bare_transformers_block_are_seeded_values(work, monkeypatch):
    """transformers leaves a bare MoE block's fused experts and router as `torch.empty`: the
    written weights must be real, seeded draws, and the simulation must compute the block."""
    from safetensors.numpy import load_file
    from transformers import Qwen3MoeConfig

    monkeypatch.chdir(work)
    Qwen3MoeConfig(hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                   num_experts=4, num_experts_per_tok=2, num_attention_heads=2,
                   num_key_value_heads=1, head_dim=16, num_hidden_layers=1,
                   vocab_size=64).to_json_file("moe.json")
    run = CliRunner().invoke
    args = ["from-torch", "transformers:Qwen3MoeSparseMoeBlock", "--hf-config", "moe.json",
            "--input", "x=f32[1,8,32]", "--schedule", "dynamic", "-o", "moe.step",
            "--weights-out", "w.safetensors", "--external-out", "routing=ids.npy"]
    r = run(main, args)
    assert r.exit_code == 0, r.output
    weights = load_file("w.safetensors")
    for name in ("experts_gate_proj", "experts_up_proj", "experts_down_proj"):
        w = weights[name]
        assert np.isfinite(w).all() and 0.01 < w.std() < 0.03, (name, w.std())
    assert weights["RW"].std() > 0  # the router's weights differ from token to token
    again = run(main, [*args[:-6], "-o", "moe2.step", "--weights-out", "w2.safetensors"])
    assert again.exit_code == 0, again.output
    assert np.array_equal(load_file("w2.safetensors")["experts_up_proj"],
                          weights["experts_up_proj"])  # seeded: the same draws
    sim = run(main, ["sim", "moe.step", "--weights", "w.safetensors", "--trace",
                     "routing=ids.npy", "--format", "json"])
    assert sim.exit_code == 0, sim.output


def test_a_config_its_class_rejects_is_a_usage_error(work, monkeypatch):
    """A config class's own validation (transformers' strict dataclass validators raise
    their own error type) was an internal error; it is exit 2 naming the field."""
    pytest.importorskip("transformers")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    if "cohere2" not in CONFIG_MAPPING:
        pytest.skip("this transformers has no Cohere2")
    data = {**CONFIG_MAPPING["cohere2"]().to_dict(), "num_hidden_layers": 2}
    (work / "c2.json").write_text(json.dumps(data, default=str))
    monkeypatch.chdir(work)
    r = CliRunner().invoke(main, ["from-torch", "transformers:Cohere2MLP", "--hf-config",
                                  "c2.json", "--input", "x=f32[4,64]", "-o", "out.step"])
    assert r.exit_code == 2, r.output
    assert "num_hidden_layers" in r.output and "layer_types" in r.output, r.output
