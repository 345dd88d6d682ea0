"""The MoE programs: numpy equivalence at small size, the analyze/sim traffic contract, and
the paper's on-chip memory ratios from its real routing traces (skipped without them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stepc.analyze import analyze, trace_bindings
from stepc.frontend import compile_file
from stepc.hw import load_config
from stepc.sim.data import tensor_values
from stepc.sim.run import simulate
from stepc.traces import load_routing, synthetic_routing

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data" / "expert_routing"
SMALL = {"E": 4, "D": 64, "F": 128, "B": 16, "K": 2, "TILE_F": 32}
MIXTRAL = {"D": 4096, "F": 14336, "E": 8, "K": 2}


def moe_reference(t: dict, ids: np.ndarray) -> np.ndarray:
    """y_b = sum_k w_bk * (x_b Wu_e * silu(x_b Wg_e)) Wd_e, e = ids[b, k]."""
    x, w = t["X"], t["RW"]
    out = np.zeros((x.shape[0], x.shape[1]), dtype=np.float64)
    for b in range(x.shape[0]):
        for k in range(ids.shape[1]):
            e = ids[b, k]
            g = x[b] @ t["W_gate"][e]
            out[b] += w[b, k] * ((x[b] @ t["W_up"][e]) * (g / (1 + np.exp(-g)))) @ t["W_down"][e]
    return out


@pytest.mark.parametrize("program,extra", [("moe_static", {"TILE_N": 4}),
                                           ("moe_static", {"TILE_N": 16}),
                                           ("moe_dynamic", {})])
def test_small_moe_equals_numpy(program, extra):
    r = compile_file(f"programs/{program}.step", {**SMALL, **extra})
    assert r.ok
    ids = synthetic_routing(16, 4, 2, seed=11)
    ids[ids == 3] = 2  # expert 3 idles: an empty stream through every operator
    ids[:, 1] = np.where(ids[:, 0] == ids[:, 1], (ids[:, 0] + 1) % 3, ids[:, 1])
    run = simulate(r.typed, load_config(), {"routing": ids}, functional=True)
    assert run.deadlock is None
    t = {n: tensor_values(x, True) for n, x in r.typed.program.tensors.items()}
    ref = moe_reference(t, ids)
    np.testing.assert_allclose(run.outputs["Y"], ref, rtol=1e-4, atol=1e-5 * abs(ref).max())
    bound = analyze(r.typed).bind(trace_bindings(r.typed, {"routing": ids}))
    assert run.useful_bytes == bound.totals["off_chip_bytes"]
    assert run.bindings["n_3"] == 0


def test_dynamic_streams_each_weight_once():
    """Dynamic tiling reads every active expert's weights exactly once."""
    ids = synthetic_routing(16, 4, 2, seed=3)
    r = compile_file("programs/moe_dynamic.step", SMALL)
    a = analyze(r.typed).bind(trace_bindings(r.typed, {"routing": ids}))
    active = len(np.unique(ids))
    weights = active * 3 * 64 * 128 * 2
    io = 16 * 64 * 2 + 16 * 2 * 2 + 16 * 64 * 4  # tokens, routing weights, f32 output
    assert a.totals["off_chip_bytes"] == weights + io


def real_trace(name: str) -> np.ndarray:
    files = sorted((DATA / name).glob("*.npz"))
    if not files:
        pytest.skip(f"real routing traces not available ({name})")
    return load_routing(str(files[0]))


def memory(program: str, ids: np.ndarray, overrides: dict):
    r = compile_file(f"programs/{program}.step", overrides)
    t = analyze(r.typed, "artifact").bind(trace_bindings(r.typed, {"routing": ids})).totals
    return t


# The paper's Figures 9 and 10 plot static tiling's on-chip memory with every expert
# allocated and dynamic tiling's allocated on demand (experiments.md 1.3); the paper quotes
# these ratios. The Qwen3 ones (128 experts) take the longest: `-m slow`.
@pytest.mark.parametrize("model,batch,tile,ratio", [
    pytest.param("qwen", 64, 8, 2.105, marks=pytest.mark.slow),
    pytest.param("qwen", 64, 64, 5.051, marks=pytest.mark.slow),
    ("mixtral", 64, 16, 1.000), ("mixtral", 64, 32, 1.333),
    pytest.param("qwen", 1024, 64, 1.1327, marks=pytest.mark.slow),
    pytest.param("qwen", 1024, 1024, 12.46, marks=pytest.mark.slow),
    ("mixtral", 1024, 128, 1 / 1.7995), ("mixtral", 1024, 256, 1.000),
])
def test_paper_memory_ratios_from_real_traces(model, batch, tile, ratio):
    ids = real_trace(f"{model}_b{batch}")
    dims = {**(MIXTRAL if model == "mixtral" else {}), "B": batch}
    static = memory("moe_static", ids, {**dims, "TILE_N": tile})["on_chip_bytes"]
    dynamic = memory("moe_dynamic", ids, dims)["on_chip_bytes_on_demand"]
    assert float(static / dynamic) == pytest.approx(ratio, abs=5e-4 * ratio + 5e-4)


def test_qwen_static_unit_matches_artifact():
    """experiments-errata: a static Qwen expert at tile 8 holds 983,040 bytes (Accum tile,
    Repeat element, three weight tiles, down accumulator)."""
    r = compile_file("programs/moe_static.step", {"TILE_N": 8})
    a = analyze(r.typed, "artifact")
    unit = sum(o.on_chip for o in a.ops if o.node.startswith(("moe.xt[0]", "moe.ffn[0].")))
    assert unit == 983_040


def test_real_trace_simulates_with_fluid():
    ids = real_trace("mixtral_b64")
    r = compile_file("programs/moe_dynamic.step", MIXTRAL)
    run = simulate(r.typed, load_config(None, ("hbm.model=fluid",)), {"routing": ids},
                   functional=False)
    assert run.deadlock is None
    bound = analyze(r.typed).bind(trace_bindings(r.typed, {"routing": ids}))
    assert run.useful_bytes == bound.totals["off_chip_bytes"]
