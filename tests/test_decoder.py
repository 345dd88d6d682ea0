"""The decoder-layer programs of Figure 17 (programs/decoder_*.step): they check, run, and
L chained layers cost L times one layer (the reproduction simulates one layer and scales)."""

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from stepc.cli import main

PROGRAMS = Path(__file__).resolve().parent.parent / "programs"
SMALL = {"B": 8, "R": 2, "D": 64, "HQ": 4, "HKV": 2, "HEAD_DIM": 32, "TILE_P": 32, "F": 64,
         "TILE_F": 32, "E": 4, "TOPK": 2, "MAXN": 256}
VARIANTS = {"static": {}, "dynamic": {}, "timemux": {"MR": 2}}


def _sim(program: str, params: dict, lens: Path) -> tuple[int, str]:
    """`stepc sim --timing-only` in this process: its cycles and allocated on-chip line."""
    args = [a for k, v in params.items() for a in ("-D", f"{k}={v}")]
    out = CliRunner(env={"COLUMNS": "100", "NO_COLOR": "1"}).invoke(
        main, ["sim", "--timing-only", *args, str(PROGRAMS / f"decoder_{program}.step"),
               "--trace", f"kv_lens={lens}"])
    assert out.exit_code == 0, out.output
    cycles = int(re.search(r"cycles:\s+([\d,]+)", out.stdout).group(1).replace(",", ""))
    on_chip = re.search(r"on-chip, allocated:\s+(.+)", out.stdout).group(1)
    return cycles, on_chip


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_layers_scale_with_l(variant, tmp_path):
    """Two chained layers (each waiting for the previous one's MoE) take twice one layer's
    cycles within 2 % and allocate twice its on-chip memory."""
    lens = tmp_path / "lens.npy"
    np.save(lens, np.array([5, 40, 90, 17, 3, 60, 33, 120], dtype=np.int64))
    params = {**SMALL, **VARIANTS[variant]}
    one, mem_one = _sim(variant, {**params, "L": 1}, lens)
    two, mem_two = _sim(variant, {**params, "L": 2}, lens)
    assert abs(two / (2 * one) - 1) < 0.02, (one, two)
    assert int(mem_two.split()[0].replace(",", "")) == \
        2 * int(mem_one.split()[0].replace(",", ""))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("model", [
    pytest.param([], marks=pytest.mark.slow),  # the defaults: test_programs checks them too
    ["-D", "D=4096", "-D", "HKV=8", "-D", "F=14336", "-D", "E=8", "-D", "TOPK=2"]],
    ids=["qwen", "mixtral"])
def test_models_check(variant, model):
    if variant == "timemux" and model:
        pytest.skip("Mixtral runs without time-multiplexing (all experts active at B = 64)")
    out = CliRunner().invoke(main, ["check", "-D", "L=1", *model,
                                    str(PROGRAMS / f"decoder_{variant}.step")])
    assert out.exit_code == 0, out.output
    assert "error" not in out.output


def test_static_moe_allocates_seven_operators_per_expert_at_moe_bw():
    """Figure 17's compute measure re-charges the static MoE at 1024 FLOPs/cycle by
    subtracting (4096 - 1024) x (7 per expert + the final Accum): that is what MOE_BW moves."""
    from stepc.analyze import analyze
    from stepc.frontend import compile_file
    alloc = {}
    for bw in (1024, 4096):
        r = compile_file(str(PROGRAMS / "decoder_static.step"), {**SMALL, "L": 1, "MOE_BW": bw})
        alloc[bw] = analyze(r.typed).allocated_compute
    assert alloc[4096] - alloc[1024] == (4096 - 1024) * (7 * SMALL["E"] + 1)
