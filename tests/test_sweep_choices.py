"""Sweeps and plots that do what was asked or say why not: a grid param only some programs
declare, a repeated --grid, records in grid order whatever order the points finish in, a
`--relative-to` that must pick one point, series per model and axis labels with units."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from stepc.cli import main
from stepc.explore.runner import Sweep, grid_points, read_results

SMALL_MOE = ["-D", "B=8", "-D", "D=64", "-D", "F=128", "-D", "E=4", "-D", "K=2"]


def test_a_grid_param_one_program_lacks_is_not_swept_for_it(tmp_path):
    """Figure 9's comparison in one call: static tiles against dynamic tiling, its front and
    the dynamic point's PID (moe_dynamic.step has no TILE_N)."""
    out = tmp_path / "r.jsonl"
    r = CliRunner().invoke(main, ["sweep", "programs/moe_static.step",
                                  "programs/moe_dynamic.step", *SMALL_MOE, "--grid",
                                  "TILE_N=4,8", "--pareto", "cycles,on_chip_bytes",
                                  "--baseline", "program=moe_static.step", "-j", "1",
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    recs = read_results(str(out))
    assert sorted((rec["program"].split("/")[-1], rec["params"].get("TILE_N")) for rec in recs) \
        == [("moe_dynamic.step", None), ("moe_static.step", 4), ("moe_static.step", 8)]
    assert "moe_dynamic.step B=8, D=64, E=4, F=128, K=2 paper-eval: PID" in r.stdout


def test_a_grid_param_no_program_declares_is_refused(tmp_path):
    r = CliRunner().invoke(main, ["sweep", "programs/moe_static.step",
                                  "programs/moe_dynamic.step", "--grid", "TILE_X=4",
                                  "--out", str(tmp_path / "r.jsonl")])
    assert r.exit_code == 2 and "TILE_X: no program has" in r.stderr


def test_grid_points_skip_params_a_program_does_not_declare():
    points = grid_points(["a.step", "b.step"], {"T": [1, 2], "U": [3]}, ["h"], (), {}, True,
                         {"a.step": {"T", "U"}, "b.step": {"U"}})
    assert [(p.program, p.params) for p in points] == [
        ("a.step", (("T", 1), ("U", 3))), ("a.step", (("T", 2), ("U", 3))),
        ("b.step", (("U", 3),))]


def test_a_repeated_grid_is_refused(tmp_path):
    r = CliRunner().invoke(main, ["sweep", "programs/swiglu.step", "--grid", "TB=16",
                                  "--grid", "TB=32", "--out", str(tmp_path / "r.jsonl")])
    assert r.exit_code == 2 and "--grid TB is given twice" in r.stderr


class _Done:
    """A finished future."""

    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value

    def done(self):
        return True


class _Backwards:
    """An executor whose points finish in reverse order of submission."""

    def __init__(self):
        self.futures = []

    def submit(self, fn, *args):
        fut = _Done(fn(*args))
        self.futures.insert(0, fut)
        return fut


def test_records_are_written_in_grid_order_whatever_order_points_finish(tmp_path, monkeypatch):
    from stepc.explore import runner
    monkeypatch.setattr(runner, "as_completed", lambda futures: list(executor.futures))
    points = grid_points(["programs/swiglu.step"], {"TB": [32, 64], "TI": [128, 256]},
                         ["hdl-validation"], (), {}, True)
    out = tmp_path / "r.jsonl"
    executor = _Backwards()
    appended = []
    real_keep = runner.Pending.keep

    def keep(self, i, rec, shared=False):
        real_keep(self, i, rec, shared)
        appended.append([json.loads(line)["params"] for line in out.read_text().splitlines()])
    monkeypatch.setattr(runner.Pending, "keep", keep)
    Sweep(points, str(out), executor=executor).run()
    grid = [dict(p.params) for p in points]
    # each record is on disk as soon as it finished (a killed sweep keeps it) ...
    assert appended[-1] == grid[::-1]
    # ... and the finished file lists them in grid order
    assert [rec["params"] for rec in read_results(str(out))] == grid
    # a resumed run appends only its own records, in grid order, after the earlier lines
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:1]) + "\n")
    executor = _Backwards()
    Sweep(points, str(out), executor=executor).run(resume=True)
    assert [rec["params"] for rec in read_results(str(out))] == grid


# ---------------------------------------------------------------- plots
def _records(tmp_path, grid):
    out = tmp_path / "r.jsonl"
    recs = [{"program": "programs/swiglu.step", "params": dict(zip(("TB", "TI"), v)),
             "traces": {}, "hw": "h", "sets": [], "status": "ok", "key": json.dumps({"point": v}),
             "cycles": 1_000_000 * v[0] // v[1], "on_chip_bytes": 4_000_000 * v[1]}
            for v in grid]
    out.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return out


def test_relative_to_must_select_one_point_and_names_it(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from stepc.explore import plot
    out = _records(tmp_path, [(16, 16), (16, 32), (32, 16), (32, 32)])
    bar = ["plot", str(out), "--bar", "cycles", "-o", str(tmp_path / "b.png")]
    r = CliRunner().invoke(main, bar + ["--relative-to", "TB=16"])
    assert r.exit_code == 2 and "selects 2 points" in r.stderr
    r = CliRunner().invoke(main, bar + ["--relative-to", "TB=64"])
    assert r.exit_code == 2 and "selects no point" in r.stderr
    labels = []
    monkeypatch.setattr(plot, "_save", lambda fig, path: labels.append(
        (fig.axes[0].get_ylabel(), [b.get_height() for b in fig.axes[0].patches])))
    r = CliRunner().invoke(main, bar + ["--relative-to", "TB=16", "--relative-to", "TI=32"])
    assert r.exit_code == 0, r.output
    ylabel, heights = labels[0]
    assert "TB=16, TI=32" in ylabel
    assert heights == pytest.approx([0.5, 1.0, 0.25, 0.5])
    r = CliRunner().invoke(main, ["plot", "--help"])
    assert "exactly one point" in r.output


def test_axes_carry_units_and_no_offset(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from stepc.explore import plot
    figs = []
    monkeypatch.setattr(plot, "_save", lambda fig, path: figs.append(fig))
    recs = [{"program": "p.step", "params": {"T": t}, "status": "ok", "cycles": 5_000_000 + t,
             "on_chip_bytes": 1_000 * t} for t in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)]
    plot.scatter(recs, "on_chip_bytes", "cycles", str(tmp_path / "s.png"), logx=True,
                 force=True)
    ax = figs[0].axes[0]
    figs[0].canvas.draw()
    assert ax.get_xlabel() == "on-chip memory (bytes)" and ax.get_ylabel() == "cycles"
    assert ax.yaxis.get_offset_text().get_text() == ""
    assert all(t.get_text().endswith("M") for t in ax.get_yticklabels() if t.get_text())
    # three decades on x: labels at the decades only
    minor = [t.get_text() for t in ax.xaxis.get_minorticklabels() if t.get_text()]
    assert minor == []


def test_figure_series_are_per_model(tmp_path, monkeypatch):
    """Figure 8's hdl_like points (TB = 16) form their own series, not the TB=16 one."""
    from stepc.explore import plot
    from stepc.reproduction import figure_plots
    seen = {}
    monkeypatch.setattr(plot, "scatter", lambda recs, x, y, out, label, group, *a, **k:
                        seen.update(names={plot._series_name(r, group) for r in recs}))
    recs = [{"program": "swiglu.step", "params": {"TB": tb, "TI": 16}, "status": "ok",
             "tag": tag, "cycles": 1, "off_chip_bytes": 1}
            for tag, tb in (("swiglu", 16), ("swiglu", 32), ("hdl_like", 16))]
    figure_plots._scatter_plot({"x": "off_chip_bytes", "y": "cycles", "series_by": "TB"},
                               recs, {}, tmp_path / "f.png")
    assert seen["names"] == {"swiglu TB=16", "swiglu TB=32", "hdl_like TB=16"}
