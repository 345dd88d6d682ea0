"""`stepc sweep`: Pareto fronts and PID, resuming a killed sweep, the Dask backend."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from stepc.cli import main
from stepc.sweep.pareto import dominates, pareto_front, pid
from stepc.sweep.runner import Sweep, grid_points, read_results, run_point


def test_pareto_front_and_dominance():
    pts = [(10, 5), (8, 8), (12, 4), (11, 6), (8, 8), (20, 1)]
    assert dominates((1, 1), (2, 1)) and not dominates((1, 1), (1, 1))
    assert pareto_front(pts) == [0, 1, 2, 4, 5]


def test_pid_matches_the_paper_definition():
    baseline = [(100, 10), (50, 20), (120, 12)]  # (120, 12) is dominated
    # beyond the front: the best baseline point would need 2x on its worse objective
    assert pid((50, 10), baseline) == pytest.approx(min(max(100 / 50, 10 / 10),
                                                        max(50 / 50, 20 / 10)))
    assert pid((100, 10), baseline) == pytest.approx(1.0)  # on the front
    assert pid((200, 40), baseline) < 1  # dominated
    with pytest.raises(ValueError):
        pid((1, 1), [])


def small_points(tmp_path):
    return grid_points(["programs/swiglu.step"], {"TB": [32, 64], "TI": [128, 256]},
                       ["hdl-validation"], (), {}, True)


def test_run_point_record():
    rec = run_point(small_points(None)[0])
    assert rec["status"] == "ok" and rec["cycles"] > 0
    assert rec["off_chip_bytes"] == 33_554_432 // 128 + 100_663_296 // 32 + 65_536


def test_resume_after_a_killed_sweep(tmp_path):
    out = tmp_path / "r.jsonl"
    points = small_points(tmp_path)
    first = [run_point(p) for p in points[:2]]
    # a killed sweep: two finished records and a torn last line
    out.write_text("".join(json.dumps(r) + "\n" for r in first) + '{"key": "torn')
    ran = Sweep(points, str(out), jobs=2).run(resume=True)
    assert sorted(r["key"] for r in ran) == sorted(p.key for p in points[2:])
    keys = [r["key"] for r in read_results(str(out))]
    assert sorted(keys) == sorted(p.key for p in points)


def test_cli_sweep_refuses_to_overwrite_and_reports(tmp_path):
    out = tmp_path / "r.jsonl"
    args = ["sweep", "programs/swiglu.step", "--grid", "TB=32,64", "--grid", "TI=256",
            "--hw", "hdl-validation", "--out", str(out), "-j", "2",
            "--pareto", "cycles,on_chip_bytes", "--baseline", "TB=32"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "Pareto-optimal" in r.stdout and "PID" in r.stdout
    assert len(read_results(str(out))) == 2
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and "--resume" in r.stderr
    r = CliRunner().invoke(main, args + ["--resume"])
    assert r.exit_code == 0 and len(read_results(str(out))) == 2


def test_cli_sweep_usage_errors(tmp_path):
    r = CliRunner().invoke(main, ["sweep", "programs/swiglu.step", "--grid", "TX=1",
                                  "--out", str(tmp_path / "x.jsonl")])
    assert r.exit_code == 2 and "no parameter `TX`" in r.stderr
    r = CliRunner().invoke(main, ["sweep", "programs/swiglu.step", "--grid", "TB=a",
                                  "--out", str(tmp_path / "x.jsonl")])
    assert r.exit_code == 2


def test_dask_backend_equals_local(tmp_path):
    distributed = pytest.importorskip("distributed")
    points = small_points(tmp_path)
    local = {r["key"]: r for r in Sweep(points, str(tmp_path / "a.jsonl"), jobs=2).run()}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        remote = Sweep(points, str(tmp_path / "b.jsonl"), executor=client.get_executor()).run()
    assert len(remote) == len(points)
    for r in remote:
        ref = local[r["key"]]
        assert {k: v for k, v in r.items() if k != "wall_seconds"} == \
            {k: v for k, v in ref.items() if k != "wall_seconds"}


def test_plots(tmp_path):
    pytest.importorskip("matplotlib")
    import xml.etree.ElementTree as ET
    out = tmp_path / "r.jsonl"
    points = small_points(tmp_path)
    Sweep(points, str(out), jobs=2).run()
    png, svg, bar = tmp_path / "p.png", tmp_path / "p.svg", tmp_path / "b.png"
    r = CliRunner().invoke(main, ["plot", str(out), "--label", "TB", "--logy", "-o", str(png)])
    assert r.exit_code == 0, r.output
    assert png.read_bytes().startswith(b"\x89PNG")
    assert CliRunner().invoke(main, ["plot", str(out), "-o", str(svg)]).exit_code == 0
    ET.fromstring(svg.read_bytes())
    r = CliRunner().invoke(main, ["plot", str(out), "--bar", "cycles", "--relative-to",
                                  "TB=32", "-o", str(bar)])
    assert r.exit_code == 0, r.output
    # a plot may replace its own earlier output, never someone else's file
    assert CliRunner().invoke(main, ["plot", str(out), "-o", str(png)]).exit_code == 0
    mine = tmp_path / "mine.png"
    mine.write_bytes(b"\x89PNG someone else's picture")
    r = CliRunner().invoke(main, ["plot", str(out), "-o", str(mine)])
    assert r.exit_code == 1 and "--force" in r.stderr


def test_reproduce_figure_8(tmp_path, monkeypatch):
    """A whole figure: its points run, its claims are checked against the paper's."""
    from pathlib import Path
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    r = CliRunner().invoke(main, ["reproduce", "8", "--out", str(tmp_path), "-j", "2"])
    assert r.exit_code == 0, r.output
    report = (tmp_path / "fig8" / "report.md").read_text()
    assert "NOT reproduced" not in report and report.count("| reproduced |") == 3
    assert (tmp_path / "fig8" / "results.csv").read_text().count("\n") == 16


def test_claim_expressions():
    from stepc.sweep.reproduce import SpecError, evaluate_claim
    recs = [{"tag": "a", "params": {"T": 8}, "status": "ok", "cycles": 200},
            {"tag": "a", "params": {"T": 16}, "status": "ok", "cycles": 100},
            {"tag": "b", "params": {}, "status": "ok", "cycles": 50}]
    assert evaluate_claim("a[T=8].cycles / b.cycles", recs) == 4.0
    with pytest.raises(SpecError):
        evaluate_claim("a.cycles", recs)  # two points match
    with pytest.raises(SpecError):
        evaluate_claim("__import__('os')", recs)
