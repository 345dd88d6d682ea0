"""`stepc fifo`'s answer is the program's: the depths it reports, written by `--apply` into a
copy of the program and the files it imports, make `stepc sim` run the reported cycles
with the reported `--fifo-bytes`. Generated programs whose fan-outs carry tiles of
different sizes run by default; every bundled program, and `moe_static` at B = 256 and
1024 with TILE_N = 16, under `-m slow`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from bundled import PROGRAMS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent


def _cli(*args):
    from click.testing import CliRunner

    from stepc.cli import main
    return CliRunner().invoke(main, [str(a) for a in args])


def applied_run(path: Path, *options: str, tolerance: str = "1") -> tuple[dict, dict]:
    """`stepc fifo --apply` on `path`, then `stepc sim --fifo-bytes` of what it wrote (both
    with `options`): the two JSON documents."""
    searched = _cli("fifo", path, *options, "--tolerance", tolerance, "--apply",
                    "--format", "json")
    assert searched.exit_code == 0, searched.output
    report = json.loads(searched.stdout)
    run = _cli("sim", path, *options, "--timing-only", "--fifo-bytes", "--format", "json")
    assert run.exit_code == 0, run.output
    return report, json.loads(run.stdout)


def assert_applied(report: dict, run: dict) -> None:
    """The run of the written program is the report's, and the report says so."""
    assert report["within_tolerance"]
    assert run["cycles"] == report["cycles"] == report["confirmation"]["cycles"]
    assert run["fifo_bytes"] == report["fifo_bytes"] == report["confirmation"]["fifo_bytes"]
    assert report["fifo_bytes"] == sum(f["bytes"] for f in report["fifos"])
    assert report["cycles"] <= report["unbounded_cycles"] * (1 + report["tolerance"])


# x is packed into tiles of ROWS rows by an Accum whose output is used twice (a fan-out
# stepc inserts, of tiles ROWS times larger than x's): one use through the graph `scale`,
# the other unpacked into rows and joined with x's rows again. `scale` is called on rows
# too, so one `depth=` in it sets FIFOs of both sizes.
FAN_OUT = """param N = {n}
param ROWS = {rows}
tensor X : f32[N, ROWS, {width}] input = random(seed=3)
tensor Y : f32[N * ROWS, {width}] output
tensor Z : f32[N * ROWS, {width}] output
graph scale(s) {{
    return Map(s, fn=exp)
}}
x = LinearOffChipLoad(X, tile=[1, {width}], shape=[N, ROWS])
t = Accum(x, fn=retile_row, rank=1)
a = scale(t)
rows = FlatMap(t, fn=retile_streamify)
y = Map({direct}, rows, fn=mul)
LinearOffChipStore(y, Y)
LinearOffChipStore(a, Z)
"""


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 3), rows=st.integers(2, 6), width=st.sampled_from([8, 16, 32]),
       through=st.booleans(), tolerance=st.sampled_from(["0", "1", "10"]))
def test_generated_fan_outs_of_mixed_tiles(tmp_path_factory, n, rows, width, through,
                                           tolerance):
    direct = "Flatten(x, min=0, max=1)"
    path = tmp_path_factory.mktemp("fan") / "fan.step"
    path.write_text(FAN_OUT.format(n=n, rows=rows, width=width,
                                   direct=f"scale({direct})" if through else direct))
    report, run = applied_run(path, tolerance=tolerance)
    assert_applied(report, run)
    fan_outs = [f for f in report["fifos"] if not f["settable"]]
    assert {f["element_bytes"] for f in fan_outs} == {4 * width, 4 * width * rows}
    assert all(f["depth"] == report["preset_depth"] for f in fan_outs)
    mixed = [f for f in report["fifos"] if isinstance(f["element_bytes"], list)]
    assert len(mixed) == through  # `scale`'s Map: rows and tiles


def _copy(name: str, tmp_path: Path) -> Path:
    """programs/<name>.step and the library it imports, copied under tmp_path."""
    shutil.copy(ROOT / "programs" / f"{name}.step", tmp_path)
    shutil.copytree(ROOT / "programs" / "lib", tmp_path / "lib")
    return tmp_path / f"{name}.step"


@pytest.mark.slow
@pytest.mark.parametrize("name", PROGRAMS)
def test_bundled_answers_are_the_programs(tmp_path, name):
    report, run = applied_run(_copy(name, tmp_path))
    assert_applied(report, run)


@pytest.mark.slow
@pytest.mark.parametrize("batch", [256, 1024])
def test_moe_static_at_large_batches(tmp_path, batch):
    """At B = 256 and 1024 the uniform depth deadlocks; the searched depths, some of them in
    lib/moe.step, complete."""
    report, run = applied_run(_copy("moe_static", tmp_path), "-D", f"B={batch}",
                              "-D", "TILE_N=16")
    assert_applied(report, run)
    assert report["uniform_cycles"] == 0
    assert any(f.endswith("moe.step") for f in report["confirmation"]["files"])
    assert "depth=" in (tmp_path / "lib" / "moe.step").read_text()


@pytest.mark.slow
def test_measured_section_is_current():
    """docs/fifo.md's measured table and lists are what fresh, confirmed searches give."""
    from stepc.fifo import measured
    assert measured.main(["--check"]) == 0, \
        "docs/fifo.md is stale: run `python -m stepc.fifo.measured`"
