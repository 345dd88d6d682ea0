"""`stepc from-torch` checks what it wrote: the program's functional simulation on seeded
inputs equals the module's forward (a broken lowering is refused with the largest error and
the first differing element, and nothing is written); the header says what was compared, or
that nothing was; a registered block family lowers only the forward it was registered for,
so a subclass overriding it is captured as written (and refused, naming the override).
Skipped when torch or transformers is not installed."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="the overriding subclasses are transformers'")

from click.testing import CliRunner  # noqa: E402
from transformers import MistralConfig, OlmoeConfig  # noqa: E402
from transformers.cache_utils import DynamicCache  # noqa: E402
from transformers.models.mistral.modeling_mistral import MistralAttention  # noqa: E402
from transformers.models.olmoe.modeling_olmoe import OlmoeSparseMoeBlock  # noqa: E402

from stepc.cli import main  # noqa: E402
from stepc.torch import LoweringError, VerificationError, from_torch, verify  # noqa: E402
from stepc.torch.build import seed_transformers_weights  # noqa: E402
from stepc.torch.emit import StepWriter  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "torch"))
from decode_attention import DecodeAttention  # noqa: E402
from swiglu_mlp import GeluMLP  # noqa: E402

LINEAR = '''
import torch


def make_linear():
    return torch.nn.Linear(16, 8)
'''
OLMOE = {"hidden_size": 64, "intermediate_size": 32, "num_experts": 4,
         "num_experts_per_tok": 2, "num_attention_heads": 4, "num_key_value_heads": 2}


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
    monkeypatch.setattr(verify, "MAX_WORK", 2**18)  # 63 rows of a 64 x 64 linear layer
    torch.manual_seed(0)
    m = torch.nn.Linear(64, 64)
    prog = from_torch(m, (torch.randn(16, 16, 64),))
    assert prog.verification.verified and "param B = 256" in prog.text
    assert "(reduced rows: B = 48 of the program's 256)" in prog.verification.summary
    assert "# Verified on seeded inputs" in prog.text and "(reduced rows: B = 48" in prog.text
    monkeypatch.setattr(verify, "MAX_INPUT_ELEMENTS", 16)  # decode attention: no fewer rows
    with pytest.warns(UserWarning, match="the program takes no fewer rows"):
        prog = from_torch(DecodeAttention(), (torch.randn(2, 4, 8),) + tuple(
            torch.randn(s) for s in ((2, 8), (2, 8), (2, 16, 8), (2, 16, 8))) + (
            torch.tensor([7, 15]),), schedule={"TILE_N": 8, "R": 1})
    assert "# Not verified against the module: simulating it" in prog.text


def test_a_module_too_large_is_written_unverified_with_a_warning(work, monkeypatch):
    monkeypatch.setattr(verify, "MAX_PARAMETERS", 100)
    r = run("linear.py:make_linear", "--input", "x=f32[4,16]", "-o", "y.step")
    assert r.exit_code == 0, r.output
    assert "warning: Not verified against the module: the module holds 136" in r.output
    assert "# Not verified against the module" in (work / "y.step").read_text()


class TwiceTheMoE(OlmoeSparseMoeBlock):
    """A user's block: the MoE's output doubled, plus a residual."""

    def forward(self, hidden_states):
        return 2 * super().forward(hidden_states) + hidden_states


class HalfTheAttention(MistralAttention):
    """A user's attention: the output scaled by 0.5."""

    def forward(self, *args, **kwargs):
        out, weights = super().forward(*args, **kwargs)
        return 0.5 * out, weights


def test_a_family_subclass_overriding_forward_is_captured_as_written():
    cfg = OlmoeConfig(**OLMOE)
    torch.manual_seed(0)
    m = TwiceTheMoE(cfg)
    seed_transformers_weights(m, cfg)
    with pytest.raises(LoweringError) as e:
        from_torch(m, (torch.randn(1, 8, 64),))
    assert "`TwiceTheMoE.forward` (test_torch_verify.py:" in str(e.value)
    assert "overrides `OlmoeSparseMoeBlock.forward`" in str(e.value)


def test_an_attention_subclass_overriding_forward_is_captured_as_written():
    cfg = MistralConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                        head_dim=16, num_hidden_layers=1)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    m = HalfTheAttention(cfg, 0)
    b, past = 4, 8
    with torch.device("meta"):
        cache = DynamicCache()
        cache.update(torch.empty(b, 2, past, 16), torch.empty(b, 2, past, 16), 0)
        example = (torch.empty(b, 1, 64), (torch.empty(b, 1, 16),) * 2,
                   torch.empty(b, 1, 1, past + 1), cache)
    with pytest.raises(LoweringError, match=r"`HalfTheAttention.forward` \(test_torch_verify"
                       r".py:\d+\) overrides `MistralAttention.forward`"):
        from_torch(m, example, schedule={"tiling": "dynamic", "R": 2, "TILE_N": 8})


def test_a_part_the_family_reads_must_run_library_code():
    """Experts whose forward is the user's: the family would read their weights and
    ignore that forward, so it does not apply."""
    cfg = OlmoeConfig(**OLMOE)
    m = OlmoeSparseMoeBlock(cfg)
    experts = type(m.experts)

    class Halved(experts):
        def forward(self, *args):
            return 0.5 * super().forward(*args)

    m.experts.__class__ = Halved
    with pytest.raises(LoweringError, match="module `experts` .* runs `.*Halved.forward`"):
        from_torch(m, (torch.randn(1, 8, 64),), verify=False)
    m.experts.__class__ = experts
    m.experts.register_forward_hook(lambda mod, args, out: 2 * out)
    with pytest.raises(LoweringError, match="module `experts` has a forward hook"):
        from_torch(m, (torch.randn(1, 8, 64),), verify=False)


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


class _ReluMLP(torch.nn.Module):
    """Falcon-style relu and Primer-style relu squared: `aten.relu` was unsupported."""

    def __init__(self, squared: bool):
        super().__init__()
        self.up, self.down = torch.nn.Linear(32, 64), torch.nn.Linear(64, 32)
        self.squared = squared

    def forward(self, x):
        h = torch.relu(self.up(x))
        return self.down(h ** 2 if self.squared else h)


@pytest.mark.parametrize("squared", [False, True])
def test_relu_lowers_and_verifies(squared):
    torch.manual_seed(1)
    prog = from_torch(_ReluMLP(squared), (torch.randn(16, 32),), schedule={"TB": 8})
    assert "fn=relu" in prog.text and prog.verification.verified
