"""`stepc from-torch` on hostile modules and inputs: a data-dependent size, a module that
contains itself, zero-size dims, more inputs than the forward takes are usage errors (exit 2,
never exit 70 or a traceback). Skipped when torch is not installed."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from stepc.cli import main  # noqa: E402

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
'''

@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hostile.py").write_text(HOSTILE)
    return tmp_path


def from_torch(*args):
    r = CliRunner().invoke(main, ["from-torch", *args])
    assert r.exit_code in (0, 1, 2), r.output
    assert "Traceback" not in r.output and "internal error" not in r.output, r.output
    return r


@pytest.mark.parametrize("target,inputs,words", [
    ("NonZero", ["x=f32[4,8]"], ["aten.nonzero", "hostile.py:7", "size depends on the values"]),
    ("ContainsItself", ["x=f32[4,8]"], ["`me`", "the module itself"]),
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
