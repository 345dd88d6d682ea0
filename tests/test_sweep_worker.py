"""A sweep worker's shared work and the pool's order: compiling with the worker's parse
cache gives the records a fresh compile gives, whatever ran before in the worker, the
local pool runs waiting points lowest rank first, and a point two sweeps share (all but
their tags) runs once for both, and the second counts it as shared."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from stepc.explore import runner, worker
from stepc.explore.pool import LocalPool
from stepc.explore.runner import Sweep, earlier_results, grid_points, prepare, run_point, seal
from stepc.frontend import compile_files, program_files

REPO = Path(__file__).resolve().parent.parent
IGNORED = ("wall_seconds", "seal")


def _same(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k not in IGNORED}


def _fresh_worker() -> None:
    for cache in (worker._compiled, worker._analyses, worker._parsed):
        cache.clear()


def test_cached_compile_equals_a_fresh_compile():
    path = str(REPO / "programs" / "moe_static.step")
    files = program_files(path)
    _fresh_worker()
    small = {"E": 8, "K": 2}  # the 128-expert default compiles 10x slower, to the same end
    for params in ({"TILE_N": 16, **small}, {"TILE_N": 64, **small},
                   {"TILE_N": 16, "B": 128, **small}):
        fresh = compile_files(files, path, params)
        cached = runner.compile_cached(files, path, params)
        assert cached.ok and fresh.ok
        assert cached.typed.program.nodes.keys() == fresh.typed.program.nodes.keys()
        assert {k: str(v) for k, v in cached.typed.types.items()} == \
            {k: str(v) for k, v in fresh.typed.types.items()}
        assert cached.unknown_overrides == fresh.unknown_overrides
    assert len(worker._parsed) == len(files)  # each file parsed once


def test_cached_compile_reports_errors_like_a_fresh_one(tmp_path):
    bad = tmp_path / "bad.step"
    bad.write_text('import "missing.step"\n')
    files = program_files(str(bad))
    fresh = compile_files(files, str(bad), {})
    cached = runner.compile_cached(files, str(bad), {})
    assert not cached.ok
    assert [d.message for d in cached.diagnostics.errors] == \
        [d.message for d in fresh.diagnostics.errors]


def test_records_do_not_depend_on_what_the_worker_ran_before():
    points = grid_points([str(REPO / "programs" / "swiglu.step")],
                         {"TB": [32, 64], "TI": [128, 256]}, ["hdl-validation"], (), {}, True)
    prepared = [prepare(p) for p in points]
    alone = []
    for p, inputs in prepared:
        _fresh_worker()
        alone.append(_same(run_point(p, inputs)))
    _fresh_worker()
    warm = [_same(run_point(p, inputs)) for p, inputs in reversed(prepared)][::-1]
    assert warm == alone


def _note(name: str, log: str, gate: str) -> str:
    """Wait for `gate` to exist, then append `name` to `log` (one worker: in run order)."""
    while not os.path.exists(gate):
        time.sleep(0.01)
    with open(log, "a") as f:
        f.write(name + "\n")
    return name


def test_the_pool_runs_waiting_work_lowest_rank_first(tmp_path):
    log, gate = str(tmp_path / "log"), str(tmp_path / "gate")
    pool = LocalPool(1)
    try:
        futures = [pool.submit(_note, "first", log, gate)]  # holds the only worker
        futures += [pool.submit(_note, name, log, gate, rank=rank)
                    for name, rank in (("b1", 1), ("c1", 1), ("a0", 0), ("d0", 0))]
        Path(gate).touch()
        assert [f.result(timeout=60) for f in futures] == ["first", "b1", "c1", "a0", "d0"]
    finally:
        pool.shutdown()
    assert Path(log).read_text().split() == ["first", "a0", "d0", "b1", "c1"]


def test_a_sweep_gives_the_same_records_in_any_rank(tmp_path):
    points = grid_points([str(REPO / "programs" / "swiglu.step")],
                         {"TB": [32, 64], "TI": [128]}, ["hdl-validation"], (), {}, True)
    outs = []
    for rank, name in ((0, "a.jsonl"), (1, "b.jsonl")):
        pool = LocalPool(2)
        try:
            outcome = Sweep(points, str(tmp_path / name)).submit(pool, rank=rank).collect()
        finally:
            pool.shutdown()
        outs.append([_same(r) for r in outcome.records])
    assert outs[0] == outs[1] and all(r["status"] == "ok" for r in outs[0])
    lines = (tmp_path / "a.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(x)["status"] == "ok" for x in lines)



def test_work_under_one_share_key_runs_once(tmp_path):
    log, gate = str(tmp_path / "log"), str(tmp_path / "gate")
    Path(gate).touch()
    pool = LocalPool(2)
    try:
        futures = [pool.submit(_note, name, log, gate, share=key)
                   for name, key in (("a", "k"), ("b", "k"), ("c", None), ("d", "other"))]
        assert [f.result(timeout=60) for f in futures] == ["a", "a", "c", "d"]
    finally:
        pool.shutdown()
    assert sorted(Path(log).read_text().split()) == ["a", "c", "d"]


@pytest.mark.parametrize("tags", [("first", "second"), ("static", "static")])
def test_sweeps_sharing_a_point_run_it_once_and_keep_their_own_tags(tmp_path, tags):
    """Two figures' series with the same point (as Figures 12 and 13, or 14 and 21, have,
    under different or equal series tags): one simulation, counted as shared by the second,
    and each results file holds a sealed record under its own tag that a resumed run
    reuses."""
    base = grid_points([str(REPO / "programs" / "swiglu.step")], {"TB": [32], "TI": [128]},
                       ["hdl-validation"], (), {}, True)
    sweeps = [Sweep([replace(p, tag=tag) for p in base], str(tmp_path / f"{n}.jsonl"))
              for n, tag in enumerate(tags)]
    pool = LocalPool(2)
    try:
        pending = [s.submit(pool) for s in sweeps]
        outcomes = [p.collect() for p in pending]
    finally:
        pool.shutdown()
    assert [(o.ran, o.shared) for o in outcomes] == [(1, 0), (1, 1)]
    (a,), (b,) = [o.records for o in outcomes]
    assert (a["tag"], b["tag"]) == tags
    assert a["wall_seconds"] == b["wall_seconds"]  # one run: its record, retagged
    assert _same({**a, "tag": None, "key": None}) == _same({**b, "tag": None, "key": None})
    for s, rec in zip(sweeps, (a, b)):
        assert rec["key"] == s.points[0].key and rec["seal"] == seal(rec)
        assert list(earlier_results(s.out, s.points).reusable) == [s.points[0].key]
