"""`stepc from-torch` checks what it wrote: the program's functional simulation on seeded
inputs equals the module's forward (a broken lowering is refused with the largest error and
the first differing element, and nothing is written); the header says what was compared, or
that nothing was. Skipped when torch or transformers is not installed."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="--layers builds transformers' decoder layers")

from click.testing import CliRunner  # noqa: E402

from stepc.cli import main  # noqa: E402
from stepc.torch import VerificationError, from_torch, verify  # noqa: E402
from stepc.torch.emit import StepWriter  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "torch"))
from swiglu_mlp import GeluMLP  # noqa: E402

LINEAR = '''
import torch


def make_linear():
    return torch.nn.Linear(16, 8)
'''


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "linear.py").write_text(LINEAR)
    return tmp_path


def run(*args):
    r = CliRunner().invoke(main, ["from-torch", *args])
    assert "Traceback" not in r.output and r.exit_code in (0, 1, 2), r.output
    return r


def flip_bias_sign(monkeypatch):
    """A broken lowering: every emitted bias add becomes a subtraction."""
    stmt = StepWriter.stmt
    monkeypatch.setattr(StepWriter, "stmt", lambda self, code, comment="": stmt(
        self, code.replace("fn=add)", "fn=sub)"), comment))


def test_a_broken_lowering_is_caught(work, monkeypatch):
    flip_bias_sign(monkeypatch)
    r = run("linear.py:make_linear", "--input", "x=f32[4,16]", "-o", "y.step")
    assert r.exit_code == 1, r.output
    for words in ("does not compute the module", "differs from the module's output by up to",
                  "first at Y[", "seed 0", "nothing was written"):
        assert words in r.output
    assert not (work / "y.step").exists()
    r = run("linear.py:make_linear", "--input", "x=f32[4,16]", "-o", "y.step", "--no-verify")
    assert r.exit_code == 0, r.output  # unchecked, as asked, and saying so
    assert "# Not verified against the module: --no-verify." in (work / "y.step").read_text()


def test_the_header_records_what_was_verified(work):
    r = run("linear.py:make_linear", "--input", "x=f32[4,16]", "--seed", "3")
    assert r.exit_code == 0, r.output
    header = [ln for ln in r.stdout.splitlines() if ln.startswith("#")]
    text = " ".join(ln.lstrip("# ") for ln in header)
    assert "the functional simulation equals the module's forward" in text
    assert "seed 3" in text and "input f32[4, 16]" in text and "max |error|" in text


def test_the_api_verifies_and_says_when_it_cannot():
    torch.manual_seed(0)
    m, x = GeluMLP(32, 64), torch.randn(16, 32)
    prog = from_torch(m, (x,), schedule={"TB": 8, "TILE_F": 16})
    v = prog.verification
    assert v.verified and v.max_error <= 1e-5 * v.scale
    assert "# Verified on seeded inputs " in prog.text
    assert "verify=False" in from_torch(m, (x,), verify=False).text
    with torch.device("meta"):
        meta, shape = GeluMLP(32, 64), torch.empty(16, 32)
    with pytest.warns(UserWarning, match="meta device"):
        prog = from_torch(meta, (shape,))
    assert not prog.verification.verified and "# Not verified" in prog.text
    checked = prog.on_module(m).verify(seed=1)
    assert checked.verification.verified and checked.text.count("erified") == 1


def test_a_broken_lowering_is_a_verification_error(monkeypatch):
    flip_bias_sign(monkeypatch)
    torch.manual_seed(0)
    with pytest.raises(VerificationError, match=r"first at Y\[\d+, \d+\]"):
        from_torch(GeluMLP(32, 64), (torch.randn(16, 32),))


def test_too_many_rows_verify_at_fewer(monkeypatch):
    """Beyond the budget, the same program is simulated at fewer rows (B overridden)."""
    monkeypatch.setattr(verify, "MAX_WORK", 2**16)
    torch.manual_seed(0)
    m = torch.nn.Linear(64, 64)
    prog = from_torch(m, (torch.randn(4, 64, 64),))
    assert prog.verification.verified and "param B = 256" in prog.text
    assert "(reduced rows: B = 64 of the program's 256)" in prog.verification.summary
    assert "# Verified on seeded inputs" in prog.text and "(reduced rows: B = 64" in prog.text


def test_a_module_too_large_is_written_unverified_with_a_warning(work, monkeypatch):
    monkeypatch.setattr(verify, "MAX_PARAMETERS", 100)
    r = run("linear.py:make_linear", "--input", "x=f32[4,16]", "-o", "y.step")
    assert r.exit_code == 0, r.output
    assert "warning: Not verified against the module: the module holds 136" in r.output
    assert "# Not verified against the module" in (work / "y.step").read_text()


def test_hf_config_layers_are_verified(work):
    """`--layers` builds the layers on the CPU with seeded weights and verifies them."""
    config = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
              "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
              "num_hidden_layers": 1, "vocab_size": 32}
    Path("config.json").write_text(json.dumps(config))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # verified, so nothing to warn about
        r = run("--hf-config", "config.json", "--layers", "1", "--batch", "4", "--past", "7",
                "--param", "attn_R=2", "--param", "attn_TILE_N=8", "-o", "m.step")
    assert r.exit_code == 0, r.output
    assert "# Verified on seeded inputs " in Path("m.step").read_text()
