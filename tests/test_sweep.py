"""`stepc sweep`: Pareto fronts and PID, grids with ranges, exit codes, what `--resume`
reuses (records of unchanged, unedited inputs) and retries, the Dask backend (workers read
no file), Ctrl-C, plots."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from stepc.cli import main
from stepc.cli.sweep import grid_values
from stepc.explore.pareto import dominates, pareto_front, pid
from stepc.explore.runner import Sweep, grid_points, read_results, run_point


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


REPO = Path(__file__).resolve().parent.parent


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
    done = Sweep(points, str(out), jobs=2).run(resume=True)
    assert (done.reused, done.ran) == (2, 2) and done.records[:2] == first
    keys = [r["key"] for r in read_results(str(out))]
    assert sorted(keys) == sorted(r["key"] for r in done.records)


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
    local = {r["key"]: r for r in Sweep(points, str(tmp_path / "a.jsonl"), jobs=2).run().records}
    # one worker process (a second one costs seconds): the points cross to it and back as
    # on a cluster
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        remote = Sweep(points, str(tmp_path / "b.jsonl"),
                       executor=client.get_executor()).run().records
    assert len(remote) == len(points)
    for r in remote:
        ref = local[r["key"]]
        assert {k: v for k, v in r.items() if k not in ("wall_seconds", "seal")} == \
            {k: v for k, v in ref.items() if k not in ("wall_seconds", "seal")}


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
                                  "TB=32", "--relative-to", "TI=128", "-o", str(bar)])
    assert r.exit_code == 0, r.output
    # a plot may replace its own earlier output, never someone else's file
    assert CliRunner().invoke(main, ["plot", str(out), "-o", str(png)]).exit_code == 0
    mine = tmp_path / "mine.png"
    mine.write_bytes(b"\x89PNG someone else's picture")
    r = CliRunner().invoke(main, ["plot", str(out), "-o", str(mine)])
    assert r.exit_code == 2 and "--force" in r.stderr


@pytest.mark.slow  # an experiment check: Figure 8 through the sweep runner
def test_reproduce_figure_8(tmp_path):
    """A whole figure: its points run, its claims are checked against the paper's (those on
    reference data wait for --data)."""
    r = CliRunner().invoke(main, ["reproduce", "8", "--out", str(tmp_path), "-j", "2"])
    assert r.exit_code == 0, r.output
    assert "figure 8: 3 of 3 claims reproduced (5 need the paper's data: --data DIR), 1 of " \
        "1 of stepc's own checks met (not reproductions)" in r.stdout
    report = (tmp_path / "fig8" / "report.md").read_text()
    assert "NOT reproduced" not in report and report.count(" | reproduced |") == 3
    assert report.count(" | in-sample target met |") == 1
    assert (tmp_path / "fig8" / "results.csv").read_text().count("\n") == 21


def test_claim_expressions():
    from stepc.reproduction.claims import SpecError, evaluate_claim
    recs = [{"tag": "a", "params": {"T": 8}, "status": "ok", "cycles": 200},
            {"tag": "a", "params": {"T": 16}, "status": "ok", "cycles": 100},
            {"tag": "b", "params": {}, "status": "ok", "cycles": 50}]
    assert evaluate_claim("a[T=8].cycles / b.cycles", recs) == 4.0
    with pytest.raises(SpecError):
        evaluate_claim("a.cycles", recs)  # two points match
    with pytest.raises(SpecError):
        evaluate_claim("__import__('os')", recs)


# ---------------------------------------------------------------- grids and exit codes
def test_grid_values_take_lists_and_ranges():
    assert grid_values("T", "16,32,64") == [16, 32, 64]
    assert grid_values("T", "16..256:pow2") == [16, 32, 64, 128, 256]
    assert grid_values("T", "10..100:pow2") == [16, 32, 64]
    assert grid_values("T", "3..6") == [3, 4, 5, 6]  # both ends included
    assert grid_values("T", "0..64:16,8") == [0, 16, 32, 48, 64, 8]
    assert grid_values("T", "16,16..32:pow2") == [16, 32]  # repeated values count once
    for bad, why in (("a", "expected integers"), ("64..16", "backwards"),
                     ("16..256:pow3", "pow2"), ("1..8:0", "positive"),
                     ("3..3:pow2", "no power of two"), ("0..10**9", "expected integers"),
                     ("0..100000000", "more than")):
        with pytest.raises(click.UsageError, match=why):
            grid_values("T", bad)


def test_cli_sweep_ranges_and_fixed_params(tmp_path):
    out = tmp_path / "r.jsonl"
    r = CliRunner().invoke(main, ["sweep", "programs/swiglu.step", "--hw", "hdl-validation",
                                  "-D", "TB=64", "--grid", "TI=64..256:pow2", "--out",
                                  str(out), "-j", "2"])
    assert r.exit_code == 0, r.output
    assert sorted((rec["params"]["TB"], rec["params"]["TI"]) for rec in read_results(str(out))) \
        == [(64, 64), (64, 128), (64, 256)]
    r = CliRunner().invoke(main, ["sweep", "programs/swiglu.step", "-D", "TB=64", "--grid",
                                  "TB=16,32", "--out", str(tmp_path / "x.jsonl")])
    assert r.exit_code == 2 and "one or the other" in r.stderr
    r = CliRunner().invoke(main, ["sweep", "programs/swiglu.step", "-D", "TX=1", "--out",
                                  str(tmp_path / "x.jsonl")])
    assert r.exit_code == 2 and "no parameter `TX`" in r.stderr
    for ignored, why in ((["--scheduler", "tcp://h:1"], "needs --backend dask"),
                         (["--baseline", "TB=16"], "needs --pareto")):
        r = CliRunner().invoke(main, ["sweep", "programs/swiglu.step", *ignored])
        assert r.exit_code == 2 and why in r.stderr


def test_cli_sweep_with_failing_points_exits_nonzero_and_resume_retries_them(tmp_path):
    out = tmp_path / "r.jsonl"
    args = ["sweep", "programs/swiglu.step", "--grid", "TB=7,9,32", "--grid", "TI=256",
            "--hw", "hdl-validation", "--out", str(out), "-j", "2"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 1, r.output
    assert "2 of 3 points failed (2 error)" in r.stderr and "does not divide" in r.stderr
    assert "None:" not in r.stderr
    r = CliRunner().invoke(main, args + ["--resume"])
    assert r.exit_code == 1
    assert "skipping 1 finished point(s), running 2 (2 failed before)" in r.stderr
    assert len(read_results(str(out))) == 5  # the two failed points ran again


def test_sweep_table_sorts_params_by_value(tmp_path):
    out = tmp_path / "r.jsonl"
    r = CliRunner(env={"COLUMNS": "200"}).invoke(
        main, ["sweep", "programs/swiglu.step", "--grid", "TI=128,16,32", "--grid", "TB=64",
               "--hw", "hdl-validation", "--out", str(out), "-j", "2"])
    assert r.exit_code == 0, r.output
    rows = [line for line in r.stdout.splitlines() if "swiglu.step" in line]
    assert [row.split("TI=")[1].split()[0] for row in rows] == ["16", "32", "128"]


# ---------------------------------------------------------------- what --resume reuses
def _lib_program(tmp_path):
    """swiglu.step behind an import: main.step imports lib/swiglu.step."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "swiglu.step").write_text(
        (REPO / "programs" / "swiglu.step").read_text())
    (tmp_path / "main.step").write_text('import "lib/swiglu.step"\n')
    return str(tmp_path / "main.step")


def test_resume_reruns_points_whose_imports_traces_or_stepc_changed(tmp_path, monkeypatch):
    import stepc.explore.points as points_module
    program = _lib_program(tmp_path)
    points = grid_points([program], {"TI": [128, 256]}, ["hdl-validation"], (), {}, True)
    out = str(tmp_path / "r.jsonl")
    first = Sweep(points, out, jobs=2).run()
    assert (first.reused, first.ran) == (0, 2)
    assert Sweep(points, out, jobs=2).run(resume=True).ran == 0
    lib = tmp_path / "lib" / "swiglu.step"
    lib.write_text(lib.read_text() + "\n# an edit of an imported file\n")
    again = Sweep(points, out, jobs=2).run(resume=True)
    assert (again.reused, again.ran) == (0, 2) and again.why_run == {"program changed": 2}
    monkeypatch.setattr(points_module, "code_digest", lambda: "9.9.9+other")
    again = Sweep(points, out, jobs=2).run(resume=True)
    assert again.why_run == {"stepc changed": 2}


def test_resume_reruns_a_point_whose_trace_changed(tmp_path):
    import numpy as np
    lens = tmp_path / "lens.npy"
    np.save(lens, np.array([100, 2000, 35, 700, 64, 1023, 5, 300]))
    points = grid_points(["programs/attention_dynamic.step"], {"B": [8], "MAXN": [2048]},
                         ["paper-eval"], (), {"kv_lens": [str(lens)]}, True)
    out = str(tmp_path / "r.jsonl")
    first = Sweep(points, out, jobs=1).run()
    assert first.records[0]["status"] == "ok", first.records[0].get("error")
    np.save(lens, np.array([100, 2000, 35, 700, 64, 1023, 5, 301]))
    again = Sweep(points, out, jobs=1).run(resume=True)
    assert again.why_run == {"trace changed": 1}


def test_an_edited_record_is_not_reused(tmp_path):
    points = small_points(tmp_path)[:2]
    out = tmp_path / "r.jsonl"
    Sweep(points, str(out), jobs=2).run()
    lines = out.read_text().splitlines()
    rec = json.loads(lines[0])
    rec["cycles"] = 99_999
    out.write_text("\n".join([json.dumps(rec), *lines[1:]]) + "\n")
    again = Sweep(points, str(out), jobs=2).run(resume=True)
    assert again.why_run == {"record altered": 1}
    assert 99_999 not in [r["cycles"] for r in again.records]


def test_plot_takes_the_last_record_of_a_point(tmp_path):
    from stepc.explore.runner import latest_records
    points = small_points(tmp_path)[:1]
    out = tmp_path / "r.jsonl"
    Sweep(points, str(out), jobs=1).run()
    old = json.loads(out.read_text())
    old["digests"] = {"stepc": "0.0.1"}
    old["key"] = json.dumps({**json.loads(old["key"]), "digests": {"stepc": "0.0.1"}})
    out.write_text(json.dumps(old) + "\n")
    Sweep(points, str(out), jobs=1).run(resume=True)
    assert len(read_results(str(out))) == 2
    (latest,) = latest_records(read_results(str(out)))
    assert latest["digests"]["stepc"] != "0.0.1"


# ---------------------------------------------------------------- Dask: nothing is read there
@pytest.mark.slow  # a second Dask cluster (test_dask_backend_equals_local covers it)
def test_dask_workers_get_the_program_not_its_path(tmp_path, monkeypatch):
    """A relative program path and trace that do not exist where the workers run."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        work = tmp_path / "elsewhere"
        work.mkdir()
        monkeypatch.chdir(work)  # the workers started in another directory
        program = os.path.relpath(_lib_program(work), work)
        points = grid_points([program, "missing.step"], {"TI": [256]}, ["hdl-validation"],
                             (), {}, True)
        done = Sweep(points, "r.jsonl", executor=client.get_executor()).run()
    ok, missing = done.records
    assert ok["status"] == "ok", ok.get("error")
    assert missing["status"] == "error" and missing["error"] == "no such file: missing.step"


# ---------------------------------------------------------------- Ctrl-C
def _processes_mentioning(marker: str) -> list[int]:
    out = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker in (proc / "cmdline").read_bytes().decode(
                    errors="replace"):
                out.append(int(proc.name))
        except OSError:
            continue
    return out


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to find the workers")
def test_ctrl_c_stops_the_workers_keeps_finished_points_and_exits_130(tmp_path):
    out = tmp_path / "ctrl-c-test.jsonl"
    # 144 points: too many to finish before the test sees the first, however loaded the machine
    cmd = [sys.executable, "-m", "stepc", "sweep", "programs/swiglu.step", "--grid",
           "B=256,512,1024", "--grid", "TB=16,32,64", "--grid", "TI=16,32,64,128", "--grid",
           "I=512,1024,2048,4096", "-j", "1", "--out", str(out)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    for _ in range(600):  # until the first point is recorded (or the sweep is over)
        if (out.exists() and out.read_text().count("\n") >= 1) or proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    try:
        _, stderr = proc.communicate(timeout=60)  # a hang guard, not a timing claim
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("stepc sweep did not exit after Ctrl-C")
    assert proc.returncode == 130, stderr
    assert "--resume" in stderr and "Traceback" not in stderr
    kept = read_results(str(out))
    assert kept and all(r["status"] == "ok" for r in kept)
    for _ in range(50):  # the workers are gone too
        if not _processes_mentioning(str(out)):
            break
        time.sleep(0.1)
    assert _processes_mentioning(str(out)) == []


# ---------------------------------------------------------------- plot options
def test_plot_says_where_it_wrote_and_honours_or_refuses_every_option(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "r.jsonl"
    Sweep(small_points(tmp_path), str(out), jobs=2).run()
    png = tmp_path / "p.png"
    r = CliRunner().invoke(main, ["plot", str(out), "-o", str(png)])
    assert r.exit_code == 0 and r.stderr == f"wrote {png} (4 points)\n" and not r.stdout
    bar = ["plot", str(out), "--bar", "cycles", "-o", str(tmp_path / "b.png")]
    for flag in (["--logx"], ["--x", "cycles"], ["--y", "flops"]):
        r = CliRunner().invoke(main, bar + flag)
        assert r.exit_code == 2 and "not for bar charts" in r.stderr, flag
    r = CliRunner().invoke(main, bar + ["--logy", "--group", "TB", "--label", "TI"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, bar + ["--label", "NOPE"])
    assert r.exit_code == 2 and "--label NOPE" in r.stderr
    r = CliRunner().invoke(main, ["plot", str(out), "--relative-to", "TB=32", "-o",
                                  str(png)])
    assert r.exit_code == 2 and "needs --bar" in r.stderr


def _drawn(monkeypatch, draw) -> object:
    """The matplotlib figure a plot function would save."""
    import stepc.explore.plot as plot
    seen = {}
    monkeypatch.setattr(plot, "_save", lambda fig, path: seen.setdefault("fig", fig))
    draw(plot)
    return seen["fig"]


def test_plot_legends_sort_by_value_and_coinciding_labels_merge(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    recs = [{"program": "p.step", "params": {"B": b, "T": t}, "traces": {}, "hw": "h",
             "sets": [], "status": "ok", "cycles": 10 * b, "on_chip_bytes": 5}
            for b in (1024, 256, 64) for t in (1, 2)]
    fig = _drawn(monkeypatch, lambda plot: plot.scatter(
        recs, "on_chip_bytes", "cycles", str(tmp_path / "s.png"), label="T", group="B",
        force=True))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["B=64", "B=256", "B=1024"]
    # two points (T=1, T=2) on the same spot of each series: one label "1, 2" each
    assert sorted(t.get_text() for t in ax.texts) == ["1, 2"] * 3


def test_on_demand_charges_the_selected_points_buffers_in_use(tmp_path):
    out = tmp_path / "r.jsonl"
    base = ["sweep", "programs/swiglu.step", "--grid", "TB=32,64", "--grid", "TI=256",
            "--hw", "hdl-validation", "--out", str(out), "-j", "2",
            "--pareto", "cycles,on_chip_bytes"]
    r = CliRunner().invoke(main, base + ["--on-demand", "TB=64", "--baseline", "TB=32"])
    assert r.exit_code == 0, r.output
    assert "on_chip_bytes of the 1 point(s) with TB=64: on_chip_bytes_on_demand" in r.stdout
    for extra, said in ((["--on-demand", "TB=8"], "selects no point"),
                        (["--on-demand", "TB=64", "--pareto", "cycles,off_chip_bytes"],
                         "give it in --pareto")):
        r = CliRunner().invoke(main, base + extra + ["--resume"])
        assert r.exit_code == 2 and said in r.stderr, r.output
    r = CliRunner().invoke(main, base[:-2] + ["--on-demand", "TB=64", "--resume"])
    assert r.exit_code == 2 and "needs --pareto" in r.stderr


@pytest.mark.slow
def test_the_help_qwen_example_gives_figure_9s_pid(tmp_path):
    """The sweep help's MoE example on the paper's Qwen trace: with --on-demand the
    dynamic point's PID is Figure 9's (2.105, the paper rounds to 2.11; the tolerance of
    that claim in stepc/reproduction/experiments/fig9.toml); without it, allocated bytes
    against allocated bytes, it was 1.33 or 1.22 and said nothing."""
    trace = Path(__file__).resolve().parents[2] / "shared" / "data" / "expert_routing" / \
        "qwen_b64" / "032_012.npz"
    if not trace.exists():
        pytest.skip(f"the paper's Qwen routing trace is not here ({trace.name})")
    r = CliRunner().invoke(main, [
        "sweep", "programs/moe_static.step", "programs/moe_dynamic.step", "-D", "B=64",
        "--grid", "TILE_N=8..64:pow2", "--trace", f"routing={trace}", "--pareto",
        "cycles,on_chip_bytes", "--on-demand", "program=moe_dynamic.step", "--baseline",
        "program=moe_static.step", "--out", str(tmp_path / "r.jsonl"), "-j", "2"])
    assert r.exit_code == 0, r.output
    pid = float(r.stdout.split("PID ")[-1].split()[0])
    assert abs(pid - 2.105) <= 0.0005, r.stdout


def test_the_code_a_record_depends_on_is_what_a_worker_loads(tmp_path):
    """`record_sources` (the files the sweep cache digests) holds every stepc module a
    worker process loads while running points, timing and functional, on the CPU model and
    the dram model; front ends and renderers are outside it, so editing them keeps records."""
    from stepc.explore.points import record_sources
    script = """
import json, sys
from stepc.explore.points import Point
from stepc.explore.worker import run_point
for hw, timing in (("paper-eval", True), ("hdl-validation-dram", False)):
    record = run_point(Point("programs/swiglu.step", (("B", 32),), hw, timing_only=timing))
    assert record["status"] == "ok", record
print(json.dumps(sorted(m.__file__ for n, m in sys.modules.items()
                        if n.startswith("stepc") and getattr(m, "__file__", None))))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    root = REPO / "stepc"
    loaded = {Path(f).resolve().relative_to(root).as_posix() for f in json.loads(done.stdout)}
    loaded = {f.split(".")[0] + ".pyx" if f.endswith(".so") else f for f in loaded}
    derived = record_sources(root)
    assert loaded <= derived, sorted(loaded - derived)
    assert not {f for f in derived if f.split("/")[0] in ("cli", "lsp", "mcp", "viz", "api")}
