"""The decode-attention programs (paper Section 5.4; experiments.md 6): interleaved, coarse
and dynamic parallelisation over the shared region graph in programs/lib/attention.step.

Functional runs at a small size equal a numpy reference of the simplified softmax attention
(no max subtraction) per request; sim's off-chip bytes equal analyze's totals at the run's
dims; dynamic parallelisation beats static interleaving on high-variance lengths; the real
Azure KV traces run when ../shared/data is present.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from stepc.analyze import analyze
from stepc.cli import main
from stepc.frontend import compile_file
from stepc.hw import load_config
from stepc.sim.data import tensor_values
from stepc.sim.run import simulate
from stepc.traces import synthetic_kv_lengths

REPO = Path(__file__).resolve().parent.parent
PROGRAMS = {p: REPO / "programs" / f"attention_{p}.step"
            for p in ("interleaved", "coarse", "dynamic")}
AZURE = REPO.parent / "shared" / "data" / "azure_kv_trace"
QPK = 8
SMALL = {"HEAD_DIM": 16, "TILE_N": 8, "MAXN": 64}  # 8 KV tiles of 8 rows per request slot


def compile_program(name: str, **params):
    if name == "coarse":  # one block of NB = B / R consecutive requests per region by default
        params.setdefault("NB", params.get("B", 64) // params.get("R", 4))
    c = compile_file(str(PROGRAMS[name]), params)
    assert c.ok, "\n".join(str(d) for d in c.diagnostics.items)
    return c.typed


def assert_finished(name: str, run) -> None:
    """Static programs finish cleanly. The dynamic one ends quiescent: its dispatch loop is a
    feedback cycle that end-of-stream cannot cross (see test_dynamic_loop_terminates), so
    the operators left are all waiting on empty inputs, none on a full FIFO or memory."""
    if name != "dynamic" or run.deadlock is None:
        assert run.deadlock is None, run.deadlock
        return
    waits = {b.waiting for b in run.deadlock}
    assert waits <= {"empty input", "empty inputs"}, [b for b in run.deadlock
                                                       if not b.waiting.startswith("empty")]


def coarse_ids(B: int, R: int, NB: int) -> list[list[int]]:
    """The global request ids of each coarse region, in its order: blocks of NB requests,
    block b on region b mod R, a region's blocks back to back."""
    return [[b * NB + j for b in range(r, B // NB, R) for j in range(NB)] for r in range(R)]


def reference(typed, lens, B, D, TN, MAXN, whole_tiles=False, regions=None) -> np.ndarray:
    """out_i = (sum_j exp(q k_j^T) v_j) / (sum_j exp(q k_j^T)) over request i's L_i cached
    rows and its new row (which lands at row L_i of its slot). With `whole_tiles`, over every
    row of its ceil((L_i + 1) / TN) tiles: what the program computes when L_i + 1 is not a
    multiple of TN, since padding rows are not masked. With `regions` (coarse_ids), Q and the
    new rows are per-region slices [R, ...] whose row i is the region's i-th request."""
    t = {n: tensor_values(x, True) for n, x in typed.program.tensors.items()}
    k, v = t["K"].reshape(B * MAXN, D), t["V"].reshape(B * MAXN, D)
    if regions is None:
        q = t["Q"].reshape(B * QPK, D).astype(np.float64)
        kn, vn = t["KNEW"].reshape(B, D), t["VNEW"].reshape(B, D)
    else:
        q, kn, vn = np.zeros((B, QPK, D)), np.zeros((B, D)), np.zeros((B, D))
        for r, ids in enumerate(regions):
            q[ids] = t["Q"][r].reshape(-1, QPK, D)[:len(ids)]
            kn[ids], vn[ids] = t["KNEW"][r][:len(ids)], t["VNEW"][r][:len(ids)]
        q = q.reshape(B * QPK, D)
    out = np.zeros((B * QPK, D))
    for i, n in enumerate(lens):
        rows = math.ceil((n + 1) / TN) * TN if whole_tiles else n + 1
        ki = k[i * MAXN:i * MAXN + rows].astype(np.float64)
        vi = v[i * MAXN:i * MAXN + rows].astype(np.float64)
        ki[n], vi[n] = kn[i], vn[i]
        e = np.exp(q[i * QPK:(i + 1) * QPK] @ ki.T)
        out[i * QPK:(i + 1) * QPK] = (e @ vi) / e.sum(axis=1, keepdims=True)
    return out


# KV lengths whose new row fills the last tile (len + 1 a multiple of TILE_N): exact math.
ALIGNED = np.array([7, 63, 15, 31, 55, 7, 23, 47])
# Any lengths: empty cache, a full tile before the append (new tile), partial tiles.
UNALIGNED = np.array([0, 8, 5, 62, 17, 31, 40, 2])


@pytest.mark.parametrize("R", [4, 2])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_functional_equals_numpy_and_traffic_equals_analysis(name, R):
    B = 8
    typed = compile_program(name, B=B, R=R, **SMALL)
    run = simulate(typed, load_config(), {"kv_lens": ALIGNED}, functional=True)
    assert_finished(name, run)
    ref = reference(typed, ALIGNED, B, 16, 8, 64)
    got = run.outputs["O"].reshape(B * QPK, 16)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6 * np.abs(ref).max())
    bound = analyze(typed).bind(dict(run.bindings))
    assert bound.totals["off_chip_bytes"] == run.useful_bytes
    # K and V: every KV tile read once, the last one written back; Q in, out; new rows.
    tiles = int(np.sum(-(-(ALIGNED + 1) // 8)))
    tile = 8 * 16 * 2
    assert run.useful_bytes == 2 * tile * (tiles + B) + 2 * B * QPK * 16 * 2 + 2 * B * 16 * 2


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_unaligned_lengths_append_in_place_and_padding_is_unmasked(name):
    """Partial last tiles: the new row goes to row len mod TILE_N of the last tile, and the
    rest of that tile (not masked) takes part, exactly as the whole-tile reference says."""
    B = 8
    typed = compile_program(name, B=B, R=4, **SMALL)
    run = simulate(typed, load_config(), {"kv_lens": UNALIGNED}, functional=True)
    assert_finished(name, run)
    got = run.outputs["O"].reshape(B * QPK, 16)
    ref = reference(typed, UNALIGNED, B, 16, 8, 64, whole_tiles=True)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6 * np.abs(ref).max())
    exact = reference(typed, UNALIGNED, B, 16, 8, 64)
    assert not np.allclose(got, exact, rtol=1e-3)  # the padding rows do contribute
    assert analyze(typed).bind(dict(run.bindings)).totals["off_chip_bytes"] == run.useful_bytes


def region_metadata(typed, R: int) -> list[list[tuple[int, ...]]]:
    """The IDX slices each coarse region's id MetadataGens read, in graph order."""
    out = [[] for _ in range(R)]
    for name, node in typed.program.nodes.items():
        if node.op == "MetadataGen" and node.attrs["tensor"].name == "IDX":
            out[int(name[len("idx["):name.index("]")])].append(node.attrs["tensor"].index)
    return out


@pytest.mark.parametrize("B,R,NB", [(10, 4, 2), (6, 2, 2), (20, 4, 2)])
def test_coarse_uneven_blocks_equal_numpy(B, R, NB):
    """Blocks of NB requests dealt round-robin over R regions when B / NB is not a multiple
    of R (the artifact's B = 80 on 4 regions is 5 blocks: region 0 owns blocks 0 and 4):
    a region runs its blocks back to back with its global ids, so every request's output
    still equals numpy, and sim's traffic equals analyze's."""
    typed = compile_program("coarse", B=B, R=R, NB=NB, **SMALL)
    regions = coarse_ids(B, R, NB)
    nblk = B // NB
    for r in range(R):  # region r: blocks r, r + R, ...; one MetadataGen per block
        blocks = list(range(r, nblk, R))
        assert typed.types[(f"lens[{r}]", 0)].shape == (len(blocks) * NB,)
        assert region_metadata(typed, R)[r] == [(k, r) for k in range(len(blocks))]
    assert len(regions[0]) == NB * -(-nblk // R) > len(regions[-1])  # uneven
    lens = np.resize(np.array([7, 63, 15, 31, 55, 7, 23, 47, 39]), B)
    run = simulate(typed, load_config(), {"kv_lens": lens}, functional=True)
    assert_finished("coarse", run)
    ref = reference(typed, lens, B, 16, 8, 64, regions=regions)
    got = run.outputs["O"].reshape(B * QPK, 16)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6 * np.abs(ref).max())
    assert analyze(typed).bind(dict(run.bindings)).totals["off_chip_bytes"] == run.useful_bytes


def test_coarse_one_block_per_region_is_the_contiguous_split():
    """B = R * NB: region r owns the consecutive requests [NB r, NB (r + 1)), read by one
    MetadataGen (no concatenation), as before blocks were introduced; with B = 5 NB region 0
    also owns the last block: the artifact's B = 80 split (0-15 and 64-79)."""
    typed = compile_program("coarse", B=64, R=4, NB=16)
    assert not any(n.op == "Reassemble" and name.startswith("idx[")
                   for name, n in typed.program.nodes.items())
    ids = tensor_values(typed.program.tensors["IDX"], True)
    for r, slices in enumerate(region_metadata(typed, 4)):
        assert slices == [(0, r)]
        np.testing.assert_array_equal(ids[slices[0]], np.arange(16 * r, 16 * r + 16))
        assert typed.types[(f"lens[{r}]", 0)].shape == (16,)
    assert coarse_ids(64, 4, 16) == [list(range(16 * r, 16 * r + 16)) for r in range(4)]
    typed = compile_program("coarse", B=80, R=4, NB=16)
    ids = tensor_values(typed.program.tensors["IDX"], True)
    got = [np.concatenate([ids[s] for s in slices]).tolist()
           for slices in region_metadata(typed, 4)]
    assert got == coarse_ids(80, 4, 16)
    assert got[0] == list(range(16)) + list(range(64, 80))
    assert [len(g) for g in got] == [32, 16, 16, 16]


def test_dynamic_beats_interleaved_on_high_variance_lengths():
    """Figure 14's direction at B=16: geomean over four seeded high-variance batches (the
    generator at the paper's high-class std 1456) of interleaved / dynamic cycles > 1."""
    typed = {p: compile_program(p, B=16, MAXN=8192) for p in ("interleaved", "dynamic")}
    ratios = []
    for seed in range(4):
        lens = synthetic_kv_lengths(16, mean=1024, std=1456, seed=seed, max_len=8000)
        cyc = {}
        for p, t in typed.items():
            run = simulate(t, load_config(), {"kv_lens": lens}, functional=False)
            assert_finished(p, run)
            cyc[p] = run.cycles
        ratios.append(cyc["interleaved"] / cyc["dynamic"])
    assert math.prod(ratios) ** (1 / len(ratios)) > 1.1, ratios


def test_regions_run_in_parallel_at_the_load_issue_rate():
    """One region reads a [32, 64] bf16 KV tile (64 requests, one issued per cycle) in
    about 85-90 cycles; R regions cut a balanced batch's cycles about R times."""
    lens = np.full(16, 32 * 20 - 1)  # 20 KV tiles per request
    cyc = {}
    for R in (1, 4):
        run = simulate(compile_program("coarse", B=16, R=R), load_config(),
                       {"kv_lens": lens}, functional=False)
        assert_finished("coarse", run)
        cyc[R] = run.cycles
    per_tile = cyc[1] / (16 * 20)
    assert 80 <= per_tile <= 95, per_tile
    assert 3.5 <= cyc[1] / cyc[4] <= 4.1, cyc


def test_dynamic_loop_terminates():
    typed = compile_program("dynamic", B=8, R=4, **SMALL)
    run = simulate(typed, load_config(), {"kv_lens": ALIGNED}, functional=False)
    assert run.deadlock is None


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_cli_analyze_dot_and_sim(name, monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    rel = PROGRAMS[name].relative_to(REPO).as_posix()
    runner = CliRunner(env={"COLUMNS": "100", "NO_COLOR": "1"})
    for args in (["analyze", rel], ["dot", rel, "--collapse"]):
        result = runner.invoke(main, args)
        assert result.exit_code == 0, (args, result.output)
    lens = tmp_path / "lens.npy"
    np.save(lens, np.array([100, 2000, 35, 700, 64, 1023, 5, 300]))
    blocks = ["-D", "NB=2"] if name == "coarse" else []  # 8 requests on 4 regions
    result = runner.invoke(main, ["sim", rel, "-D", "B=8", "-D", "MAXN=2048", *blocks,
                                  "--trace", f"kv_lens={lens}", "--timing-only"])
    assert result.exit_code == 0, result.output


# ---------------------------------------------------------------- real traces
def _azure(batch: int, pattern: str) -> list[Path]:
    files = sorted((AZURE / f"b{batch}").glob(pattern))
    if not files:
        pytest.skip(f"no Azure KV traces under {AZURE} (../shared/data is absent)")
    return files


@pytest.mark.slow  # an experiment check on the Azure traces
def test_azure_b16_high_variance_traces_run():
    """The three high-variance B=16 windows of Fig 21 (maxN 4672): every program runs to
    the end, sim's traffic equals analyze's, and dynamic beats interleaved on each."""
    typed = {p: compile_program(p, B=16, MAXN=4672) for p in PROGRAMS}
    for f in _azure(16, "conv_stdev145[456]_*.npy"):
        lens = np.load(f)
        cyc = {}
        for p, t in typed.items():
            run = simulate(t, load_config(), {"kv_lens": lens}, functional=False)
            assert_finished(p, run)
            assert analyze(t).bind(dict(run.bindings)).totals["off_chip_bytes"] == \
                run.useful_bytes
            cyc[p] = run.cycles
        assert cyc["dynamic"] < cyc["interleaved"], (f.name, cyc)


@pytest.mark.slow  # an experiment check: Figure 15's claim
def test_azure_fig15_coarse_over_dynamic():
    """Fig 15 (B=16 and 64, the first B lengths of the med window 4007-4070, 16 requests per
    coarse region): coarse / dynamic is 2.72x and 1.43x in the paper; within 10 %."""
    (f,) = _azure(64, "conv_stdev0996_4007_4070.npy")
    full = np.load(f)
    for B, paper in ((16, 2.72), (64, 1.43)):
        lens = full[:B]
        cyc = {}
        for p, params in (("coarse", {"R": B // 16}), ("dynamic", {})):
            run = simulate(compile_program(p, B=B, **params), load_config(),
                           {"kv_lens": lens}, functional=False)
            assert_finished(p, run)
            cyc[p] = run.cycles
        ratio = cyc["coarse"] / cyc["dynamic"]
        assert abs(ratio / paper - 1) <= 0.10, (B, ratio, cyc)
