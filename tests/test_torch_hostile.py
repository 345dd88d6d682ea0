"""`stepc from-torch` on hostile modules and inputs: a data-dependent size, a module that
contains itself or nests 3000 deep, zero-size dims, more inputs than the forward takes, a
lowering that writes a program `stepc check` rejects; then torch.nn's building blocks at odd
dims with valid and invalid `--input` shapes. Never exit 70 or a traceback; every exit 0
writes a program that checks and computes the module (its simulation from `--weights-out`
equals the forward). Skipped when torch is not installed."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from stepc.cli import main  # noqa: E402
from stepc.torch.emit import StepWriter  # noqa: E402

HOSTILE = '''
import torch


class NonZero(torch.nn.Module):
    def forward(self, x):
        return torch.nonzero(x)


class ContainsItself(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.me = self

    def forward(self, x):
        return self.proj(x)


class OneArgument(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.proj(x)


def no_outputs():
    return torch.nn.Linear(64, 0)


class Deep(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.chain = torch.nn.Linear(8, 8)
        for _ in range(3000):
            outer = torch.nn.Module()
            outer.inner = self.chain
            self.chain = outer

    def forward(self, x):
        return 2 * x
'''

# torch.nn's building blocks at odd dims (1, 3, 7), each a factory of blocks.py
BLOCKS = '''
import torch
from torch import nn


def linear():
    return nn.Linear(7, 3)


def linear_to_one():
    return nn.Linear(3, 1, bias=False)


def layer_norm():
    return nn.LayerNorm(7)


def rms_norm():
    return nn.RMSNorm(3, eps=1e-6)


def gelu():
    return nn.GELU(approximate="tanh")


def silu():
    return nn.SiLU()


def relu():
    return nn.ReLU()


def softmax():
    return nn.Softmax(dim=-1)


def embedding():
    return nn.Embedding(7, 3)


def attention():
    return nn.MultiheadAttention(8, 2, batch_first=True)


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x)[0]


class MatMul(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(7, 3))

    def forward(self, x):
        return x @ self.w


class BatchedMatMul(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 7, 1))

    def forward(self, x):
        return torch.bmm(x, self.w)


class Transpose(nn.Module):
    def forward(self, x):
        return x.transpose(0, 1)


class Reshape(nn.Module):
    def forward(self, x):
        return x.reshape(1, -1, x.shape[-1])


class Permute(nn.Module):
    def forward(self, x):
        return x.permute(2, 0, 1)


class NormLinearResidual(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(7)
        self.proj = nn.Linear(7, 7)

    def forward(self, x):
        return torch.nn.functional.silu(self.proj(self.norm(x))) + x
'''
NAMES = ["linear", "linear_to_one", "layer_norm", "rms_norm", "gelu", "silu", "relu",
         "softmax", "embedding", "attention", "SelfAttention", "MatMul", "BatchedMatMul",
         "Transpose", "Reshape", "Permute", "NormLinearResidual"]
SHAPES = ["f32[3,7]", "f32[7,3]", "f32[1,3,7]", "f32[3,1,7]", "f32[7,7,3]", "f32[1]",
          "f32[2,4,8]", "bf16[1,7]", "i64[3,7]"]
# by default a sample: valid and invalid shapes of each kind of block (and whether stepc
# lowers it); all of them under -m slow
QUICK = [("linear", "f32[3,7]", True), ("linear", "f32[7,3]", False),
         ("linear_to_one", "f32[7,7,3]", True), ("layer_norm", "f32[3,1,7]", True),
         ("rms_norm", "f32[1]", False), ("gelu", "bf16[1,7]", True),
         ("softmax", "f32[2,4,8]", True), ("relu", "f32[3,7]", True),
         ("embedding", "i64[3,7]", False), ("attention", "f32[2,4,8]", False),
         ("SelfAttention", "f32[2,4,8]", False), ("BatchedMatMul", "f32[3,1,7]", False),
         ("Transpose", "f32[1,3,7]", True), ("Permute", "f32[1,3,7]", False),
         ("NormLinearResidual", "f32[1,3,7]", True)]


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hostile.py").write_text(HOSTILE)
    (tmp_path / "blocks.py").write_text(BLOCKS)
    return tmp_path


def from_torch(*args):
    r = CliRunner().invoke(main, ["from-torch", *args])
    assert r.exit_code in (0, 1, 2), r.output
    assert "Traceback" not in r.output and "internal error" not in r.output, r.output
    return r


@pytest.mark.parametrize("target,inputs,words", [
    ("NonZero", ["x=f32[4,8]"], ["aten.nonzero", "hostile.py:7", "size depends on the values"]),
    ("ContainsItself", ["x=f32[4,8]"], ["`me`", "the module itself"]),
    ("Deep", ["x=f32[4,8]"], ["`chain.inner.inner.", "nested more than 100 modules deep"]),
    ("no_outputs", ["x=f32[4,64]"], ["`weight` is [0, 64]", "zero-size"]),
    ("OneArgument", ["x=f32[4,8]", "y=f32[4,8]"], ["`OneArgument.forward(x)`", "2 example"]),
])
def test_hostile_modules_are_usage_errors(work, target, inputs, words):
    r = from_torch(f"hostile.py:{target}", *(a for i in inputs for a in ("--input", i)),
                   "-o", "out.step")
    assert r.exit_code == 2, r.output
    for w in words:
        assert w in r.output
    assert not (work / "out.step").exists()


def test_a_non_finite_number_is_refused_by_name(work):
    """`x * nan` was written as `affine(scale="nan")`, which `stepc check` rejects."""
    (work / "nan.py").write_text("import torch\n\n\nclass NanScale(torch.nn.Module):\n"
                                 "    def forward(self, x):\n"
                                 "        return x * float('nan')\n")
    r = from_torch("nan.py:NanScale", "--input", "x=f32[2,8]", "-o", "out.step")
    assert r.exit_code == 1 and "aten.mul" in r.output and "the number nan" in r.output
    assert not (work / "out.step").exists()


def test_a_program_check_rejects_is_never_written(work, monkeypatch):
    """A lowering bug that writes a declaration `stepc check` refuses: exit 1, nothing
    written, with or without verification."""
    render = StepWriter.render

    def broken(self, formatted=True):
        self.tensor("BROKEN", "f32[0, 8] input")
        return render(self, formatted)

    monkeypatch.setattr(StepWriter, "render", broken)
    for extra in ([], ["--no-verify"]):
        r = from_torch("hostile.py:OneArgument", "--input", "x=f32[4,8]", "-o", "out.step",
                       *extra)
        assert r.exit_code == 1 and "fails `stepc check`" in r.output, r.output
        assert "lowered.step:" in r.output and "error[E0501]: tensor dims must be positive" \
            in r.output and not (work / "out.step").exists()


def _load(path, name):
    spec = importlib.util.spec_from_file_location("fuzz_blocks", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


def _round_trip(work, name: str, shape: str):
    """from-torch with --weights-out, then `stepc check` and `stepc sim --weights`: on exit
    0 the simulated output equals the forward of the module the command built (--seed 0)."""
    case = work / f"{name}_{shape}"
    step, weights, out = (f"{case}.step", f"{case}.safetensors", case)
    r = from_torch(f"blocks.py:{name}", "--input", f"x={shape}", "-o", step,
                   "--weights-out", weights)
    if r.exit_code != 0:
        assert not any(map(os.path.exists, (step, weights))), r.output
        return r
    with open(step) as f:
        assert "# Verified on seeded inputs " in f.read()
    check = CliRunner().invoke(main, ["check", step])
    assert check.exit_code == 0, check.output
    run = CliRunner().invoke(main, ["sim", step, "--weights", weights, "--out", str(out)])
    assert run.exit_code == 0, run.output
    torch.manual_seed(0)
    module = _load(work / "blocks.py", name)().eval()
    dtype, dims = shape.rstrip("]").split("[")
    x = torch.randn([int(d) for d in dims.split(",")],
                    generator=torch.Generator().manual_seed(0)).to(
        {"f32": torch.float32, "bf16": torch.bfloat16}[dtype])
    with torch.no_grad():
        ref = module(x).float().numpy()
    got = np.load(out / "Y.npy")
    tol = 1e-5 if dtype == "f32" else 3e-2
    np.testing.assert_allclose(got, ref.reshape(got.shape), rtol=0,
                               atol=tol * float(np.abs(ref).max()) + 1e-6)
    return r


def test_building_blocks(work):
    for name, shape, lowers in QUICK:
        r = _round_trip(work, name, shape)
        assert (r.exit_code == 0) == lowers, (name, shape, r.output)


@pytest.mark.slow
def test_every_building_block_at_every_shape(work):
    codes = {}
    for name, shape in itertools.product(NAMES, SHAPES):
        codes[name, shape] = _round_trip(work, name, shape).exit_code
    assert sum(c == 0 for c in codes.values()) >= 30, codes  # a fair share lowers


def test_a_file_of_a_package_imports_as_its_package_so_relative_imports_resolve(work):
    """A transformers source file named by its path (modeling_llama.py imports its siblings
    relatively), and a user's package file: each is imported by its dotted name."""
    import transformers
    llama = Path(transformers.__file__).parent / "models" / "llama" / "modeling_llama.py"
    (work / "cfg.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
        "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 32}))
    r = from_torch(f"{llama}:LlamaMLP", "--hf-config", "cfg.json", "--input", "x=f32[4,32]")
    assert r.exit_code == 0, r.output
    pkg = work / "mypkg_rel" / "blocks"
    pkg.mkdir(parents=True)
    for init in (work / "mypkg_rel" / "__init__.py", pkg / "__init__.py"):
        init.write_text("")
    (pkg / "scale.py").write_text("FACTOR = 3.0\n")
    (pkg / "scaled.py").write_text(
        "import torch\nfrom .scale import FACTOR\n\n\nclass Scaled(torch.nn.Module):\n"
        "    def forward(self, x):\n        return x * FACTOR\n")
    (pkg / "broken.py").write_text("from . import missing_sibling_xyz\n")
    r = from_torch(f"{pkg / 'scaled.py'}:Scaled", "--input", "x=f32[4,8]")
    assert r.exit_code == 0 and 'scale="3.0"' in r.output, r.output
    r = from_torch(f"{pkg / 'broken.py'}:Scaled", "--input", "x=f32[4,8]")
    assert r.exit_code == 1
    assert "importing it as `mypkg_rel.blocks.broken` failed" in r.output
    assert "missing_sibling_xyz" in r.output
