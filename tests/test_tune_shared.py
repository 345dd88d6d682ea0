"""`stepc tune` compiles each candidate once: its forked workers keep what the analysis stage
compiled for the candidate's simulations. The shared path must decide exactly as the
unshared one (every task compiling its own program) and write the same records."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from stepc.analyze import analyze
from stepc.explore.runner import LocalPool, compile_cached
from stepc.frontend import compile_files, program_files
from stepc.hw import load_config
from stepc.tune import Budget, Objective, Space, tune
from stepc.tune.workers import CandidatePool, can_fork

REPO = Path(__file__).resolve().parent.parent
MOE_STATIC = str(REPO / "programs" / "moe_static.step")
MOE_DYNAMIC = str(REPO / "programs" / "moe_dynamic.step")
SMALL_MOE = {"B": 16, "D": 64, "F": 128, "E": 4, "K": 2, "TILE_F": 64}

needs_fork = pytest.mark.skipif(not can_fork(), reason="the platform cannot fork")


def _routing(tmp_path, seed: int) -> str:
    rng = np.random.default_rng(seed)
    ids = np.stack([rng.choice(4, size=2, replace=False, p=[0.55, 0.25, 0.15, 0.05])
                    for _ in range(16)])
    path = tmp_path / f"r{seed}.npy"
    np.save(path, ids.astype(np.int64))
    return str(path)


def _records(path: Path) -> list[dict]:
    """A results file's records without what differs between two runs of the same point."""
    if not path.exists():
        return []
    out = [json.loads(line) for line in path.read_text().splitlines()]
    for r in out:
        r.pop("wall_seconds"), r.pop("seal")
    return sorted(out, key=lambda r: json.dumps(r, sort_keys=True))


def _decisions(res) -> list[tuple]:
    return sorted((s.candidate.program, json.dumps(s.overrides, sort_keys=True), s.status,
                   s.reason, json.dumps(s.analysis, sort_keys=True),
                   json.dumps(s.fluid, sort_keys=True), json.dumps(s.confirmed, sort_keys=True))
                  for s in res.candidates)


@needs_fork
@pytest.mark.parametrize("budgets", [pytest.param([], marks=pytest.mark.slow),
                                     [Budget("on_chip_bytes", 115_000)]])
def test_shared_compiles_decide_and_record_as_unshared(tmp_path, budgets):
    """(Without a budget every candidate is confirmed: the same check at three times the
    runs, under `-m slow`.)"""
    traces = {"routing": [_routing(tmp_path, 1), _routing(tmp_path, 2)]}
    space = Space([MOE_STATIC, MOE_DYNAMIC], {"TILE_N": [2, 4, 8, 16]}, {}, [], SMALL_MOE)
    args = dict(objectives=[Objective("cycles")], budgets=budgets, traces=traces, jobs=2)
    shared = tune(space, out=str(tmp_path / "shared"), **args)
    pool = LocalPool(2)
    try:
        unshared = tune(space, out=str(tmp_path / "unshared"), executor=pool, **args)
    finally:
        pool.shutdown()
    assert shared.winner is not None
    assert shared.winner.candidate == unshared.winner.candidate
    assert shared.stages == unshared.stages
    assert _decisions(shared) == _decisions(unshared)
    for name in ("screen.jsonl", "results.jsonl"):
        assert _records(tmp_path / "shared" / name) == \
            _records(tmp_path / "unshared" / name)
    assert _records(tmp_path / "shared" / "results.jsonl")  # something was confirmed


@pytest.mark.parametrize("tile", [4, 16])
def test_compile_cached_gives_the_program_compile_files_gives(tile):
    files = program_files(MOE_STATIC)
    overrides = {**SMALL_MOE, "TILE_N": tile}
    once = [compile_cached(files, MOE_STATIC, overrides) for _ in range(2)]  # parsed, reused
    plain = compile_files(files, MOE_STATIC, overrides)
    want = analyze(plain.typed, "artifact").totals
    for got in once:
        assert got.ok and list(got.typed.program.nodes) == list(plain.typed.program.nodes)
        assert got.typed.types == plain.typed.types
        assert analyze(got.typed, "artifact").totals == want


@pytest.mark.parametrize("hw", ["paper-eval", "hdl-validation"])
def test_runs_share_the_analysis_of_hardware_with_the_same_fabric(hw):
    """What the search relies on to hand the analysis stage's analysis to the runs."""
    typed = compile_files(program_files(MOE_STATIC), MOE_STATIC, SMALL_MOE).typed
    base = load_config(hw)
    want = analyze(typed, "artifact", base)
    for model in ("fluid", "ref", "dram"):
        run = load_config(hw, (f"hbm.model={model}",))
        assert run.fabric == base.fabric
        got = analyze(typed, "artifact", run)
        assert got.totals == want.totals and got.allocated_compute == want.allocated_compute
        assert [(o.node, o.off_chip, o.on_chip, o.activity, o.flops, o.compute_bw)
                for o in got.ops] == [(o.node, o.off_chip, o.on_chip, o.activity, o.flops,
                                       o.compute_bw) for o in want.ops]


def test_compile_cached_reports_errors_as_compile_files(tmp_path):
    bad = tmp_path / "bad.step"
    bad.write_text("param N = 4\nx = Nope(\n")
    files = program_files(str(bad))
    got = compile_cached(files, str(bad), {})
    want = compile_files(files, str(bad), {})
    assert not got.ok
    assert [(d.code, d.message, str(d.span)) for d in got.diagnostics.errors] == \
        [(d.code, d.message, str(d.span)) for d in want.diagnostics.errors]


@dataclass(frozen=True)
class _Task:
    key: str
    pause: float = 0.0  # keeps its worker busy while the next task is submitted


def _pid(task: _Task) -> int:
    time.sleep(task.pause)
    return os.getpid()


@needs_fork
def test_a_candidate_goes_back_to_the_worker_that_compiled_it():
    pool = CandidatePool(2)
    try:
        first = {k: pool.submit(_pid, _Task(k, 0.5)) for k in "ab"}  # one worker each
        pids = {k: f.result(timeout=60) for k, f in first.items()}
        assert pids["a"] != pids["b"]
        for k in "bab":
            assert pool.submit(_pid, _Task(k)).result(timeout=60) == pids[k]
        # both busy with "a"-tasks: the second goes to the other worker, not in a queue
        both = [pool.submit(_pid, _Task("a", 0.5)) for _ in range(2)]
        assert {f.result(timeout=60) for f in both} == set(pids.values())
    finally:
        pool.shutdown()
