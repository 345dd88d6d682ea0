"""`stepc from-torch` on decode attention over a ragged KV cache: the emitted program checks
clean, simulates to the module's numbers, moves the off-chip bytes of its closed form, and
at the paper's sizes analyzes exactly like programs/attention_*.step. Skipped without torch."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from stepc.analyze import analyze, trace_bindings  # noqa: E402
from stepc.cli import main  # noqa: E402
from stepc.frontend import compile_file, compile_source  # noqa: E402
from stepc.hw import load_config  # noqa: E402
from stepc.sim.run import simulate  # noqa: E402
from stepc.source import SourceFile  # noqa: E402
from stepc.torch import LoweringError, from_torch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "torch"))
from decode_attention import DecodeAttention  # noqa: E402

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
BYTES = {"f32": 4, "bf16": 2}
SCHEDULES = {"interleaved": {"R": 2}, "coarse": {"R": 2, "NB": 2}, "dynamic": {"R": 2}}


def compiled(text: str):
    r = compile_source(SourceFile("emitted.step", text))
    errors = [d for d in r.diagnostics.items if d.severity.value == "error"]
    assert r.ok and not errors, "\n".join(str(d) for d in r.diagnostics.items)
    return r


def small_inputs(dtype: str, b=8, qpk=4, d=16, maxn=64, tile_n=8):
    """Lengths with len + 1 a multiple of TILE_N (where the program's math is exact)."""
    g = torch.Generator().manual_seed(0)
    dt = DTYPES[dtype]
    lens = torch.randint(1, maxn // tile_n + 1, (b,), generator=g) * tile_n - 1
    return (0.3 * torch.randn(b, qpk, d, generator=g)).to(dt), \
        torch.randn(b, d, generator=g).to(dt), torch.randn(b, d, generator=g).to(dt), \
        torch.randn(b, maxn, d, generator=g).to(dt), torch.randn(b, maxn, d, generator=g).to(dt), \
        lens


@pytest.mark.parametrize("tiling", list(SCHEDULES))
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_decode_attention_matches_module(tiling, dtype):
    m, x = DecodeAttention(), small_inputs(dtype)
    prog = from_torch(m, x, schedule={"tiling": tiling, "TILE_N": 8, **SCHEDULES[tiling]},
                      verify=False)  # compared below
    assert "kv_lens" in prog.text and "K_CACHE" in prog.text
    r = compiled(prog.text)
    traces = prog.traces(*x)
    run = simulate(r.typed, load_config(None, ()), traces, values=prog.values(*x))
    assert run.deadlock is None
    ref = m(*x).float().numpy().reshape(-1, 16)
    tol = {"f32": 1e-4, "bf16": 2e-2}[dtype]
    np.testing.assert_allclose(run.outputs["O"], ref, rtol=tol, atol=tol * np.abs(ref).max())
    # closed form: each request reads its ceil((len + 1) / TILE_N) K and V tiles, writes its
    # last K and V tile back, reads its queries and new K/V rows, and writes its output
    e, (b, qpk, d), tile_n = BYTES[dtype], x[0].shape, 8
    ntiles = sum(-(-(int(n) + 1) // tile_n) for n in x[5])
    a = analyze(r.typed, "artifact").bind(trace_bindings(r.typed, traces))
    if tiling != "dynamic":  # the dynamic dispatch leaves the per-region counts symbolic
        assert int(a.totals["off_chip_bytes"]) == e * (2 * ntiles * tile_n * d + b * (
            2 * tile_n * d + 2 * qpk * d + 2 * d))


def _as_named_in(expr, others):
    """`expr` with each symbol that a graph instance prefixed (the bundled programs call
    lib graphs: `regs_kraw_0_addr_L`) renamed to the symbol of `others` it ends with."""
    import sympy
    names = {s.name: s for o in others for s in sympy.sympify(o).free_symbols}
    rename = {}
    for s in sympy.sympify(expr).free_symbols:
        match = [n for n in names if s.name == n or s.name.endswith("_" + n)]
        if len(match) == 1:
            rename[s] = names[match[0]]
    return sympy.sympify(expr).xreplace(rename)


@pytest.mark.parametrize("tiling", list(SCHEDULES))
def test_paper_sizes_analyze_like_the_bundled_programs(tiling):
    b, qpk, d, maxn = 64, 8, 64, 6464
    with torch.device("meta"):
        x = tuple(torch.empty(s, dtype=torch.bfloat16) for s in
                  ((b, qpk, d), (b, d), (b, d), (b, maxn, d), (b, maxn, d))) + (
            torch.empty(b, dtype=torch.int64),)
    prog = from_torch(DecodeAttention(), x, schedule=tiling, verify=False)  # shapes only
    lens = np.random.default_rng(1).integers(1, 4000, b)
    mine = compiled(prog.text)
    ref = compile_file(str(ROOT / "programs" / f"attention_{tiling}.step"))
    a = analyze(mine.typed).bind(trace_bindings(mine.typed, {"kv_lens": lens}))
    want = analyze(ref.typed).bind(trace_bindings(ref.typed, {"kv_lens": lens}))
    assert a.totals == {k: _as_named_in(v, a.totals.values()) for k, v in want.totals.items()}
    assert a.allocated_compute == want.allocated_compute


class ScaledAttention(DecodeAttention):
    def forward(self, q, k_new, v_new, k_cache, v_cache, kv_lens):
        return super().forward(q * 0.5, k_new, v_new, k_cache, v_cache, kv_lens)


class NoMask(torch.nn.Module):
    def forward(self, q, k_cache, kv_lens):
        e = torch.exp(torch.einsum("bhd,bnd->bhn", q, k_cache))
        return torch.einsum("bhn,bnd->bhd", e, k_cache) / e.sum(-1, keepdim=True)


def test_attention_errors():
    x = small_inputs("f32")
    with pytest.raises(LoweringError, match="einsum.*fold it into q|q is an input"):
        from_torch(ScaledAttention(), x)
    with pytest.raises(LoweringError, match="masked exp"):
        from_torch(NoMask(), (x[0], x[3], x[5]))
    with pytest.raises(LoweringError, match="unknown tiling `timemux`"):
        from_torch(DecodeAttention(), x, schedule="timemux")
    with pytest.raises(LoweringError, match="unknown schedule setting TILE_F"):
        from_torch(DecodeAttention(), x, schedule={"TILE_F": 8})
    with pytest.raises(LoweringError, match="TILE_N = 48 must divide"):
        from_torch(DecodeAttention(), x, schedule={"TILE_N": 48})
    with pytest.raises(LoweringError, match="coarse tiling needs"):
        from_torch(DecodeAttention(), x, schedule={"tiling": "coarse", "NB": 3})


ATTN_INPUTS = ["q=f32[8,4,16]", "k_new=f32[8,16]", "v_new=f32[8,16]", "k_cache=f32[8,64,16]",
               "v_cache=f32[8,64,16]", "kv_lens=i64[8]"]


def test_cli_writes_weights_and_kv_lens_for_sim(tmp_path):
    """The CLI alone: from-torch --weights-out --external-out, then sim --weights --trace."""
    step, w, lens = tmp_path / "a.step", tmp_path / "a.safetensors", tmp_path / "lens.npy"
    spec = str(ROOT / "examples/torch/decode_attention.py:DecodeAttention")
    args = ["from-torch", spec, *(a for i in ATTN_INPUTS for a in ("--input", i)),
            "--schedule", "dynamic", "--param", "R=2", "--param", "TILE_N=8", "--seed", "3",
            "-o", str(step), "--weights-out", str(w), "--external-out", f"kv_lens={lens}"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 2 and "exists" in again.output  # nothing overwritten silently
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["sim", str(step), "--weights", str(w), "--trace",
                                  f"kv_lens={lens}", "--out", str(out)])
    assert r.exit_code == 0, r.output
    m = DecodeAttention()
    x = small_inputs("f32")
    prog = from_torch(m, x, schedule={"tiling": "dynamic", "R": 2, "TILE_N": 8})
    real = prog.seeded_inputs(x, 3)
    np.testing.assert_array_equal(np.load(lens), real[5].numpy())
    ref = m(*real).numpy().reshape(-1, 16)
    np.testing.assert_allclose(np.load(out / "O.npy"), ref, rtol=1e-4,
                               atol=1e-4 * np.abs(ref).max())


def test_cli_weights_out_of_a_dense_block_and_bad_external(tmp_path):
    from swiglu_mlp import SwiGLUMLP
    step, w = tmp_path / "m.step", tmp_path / "m.safetensors"
    spec = str(ROOT / "examples/torch/swiglu_mlp.py:SwiGLUMLP")
    base = ["from-torch", spec, "--input", "x=f32[16,256]", "--param", "TB=8"]
    r = CliRunner().invoke(main, base + ["-o", str(step), "--weights-out", str(w)])
    assert r.exit_code == 0, r.output
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["sim", str(step), "--weights", str(w), "--out", str(out)])
    assert r.exit_code == 0, r.output
    torch.manual_seed(0)  # the default --seed
    m = SwiGLUMLP()
    x = torch.empty(16, 256)
    prog = from_torch(m, (x,), schedule={"TB": 8})
    (real,) = prog.seeded_inputs((x,), 0)
    ref = m(real).detach().numpy()
    np.testing.assert_allclose(np.load(out / "Y.npy"), ref, rtol=1e-4,
                               atol=1e-4 * np.abs(ref).max())
    r = CliRunner().invoke(main, base + ["--external-out", f"routing={tmp_path / 'r.npy'}"])
    assert r.exit_code == 2 and "no external stream `routing`" in r.output
    r = CliRunner().invoke(main, base + ["--weights-out", str(tmp_path / "w.bin")])
    assert r.exit_code == 2 and ".safetensors" in r.output
