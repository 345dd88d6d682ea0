"""Figure 8's 15 points on `hdl-validation` under the `ref` model: their cycles are pinned
in a reviewed golden (so any timing change shows as a diff, with or without the paper's
data), and equal the reference simulator's published counts exactly when
../shared/data/fig8 is beside the repository."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from stepc.explore.runner import grid_points, run_point
from stepc.reproduction.spec import load_spec

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "golden" / "reproduce" / "fig8_ref_cycles.expect"
PUBLISHED = REPO.parent / "shared" / "data" / "fig8" / "swiglu_paper_sim.csv"


@pytest.fixture(scope="module")
def cycles() -> dict[tuple[int, int], int]:
    """(TB, TI) -> cycles of the spec's first sweep (the 15 validation points)."""
    sweep = load_spec("8")["sweep"][0]
    points = grid_points([str(REPO / sweep["program"])], sweep["grid"], [sweep["hw"]], (), {},
                         True)
    out = {}
    for point in points:
        rec = run_point(point)
        assert rec["status"] == "ok", rec
        params = dict(point.params)
        out[(params["TB"], params["TI"])] = rec["cycles"]
    assert len(out) == 15
    return out


def render(cycles: dict[tuple[int, int], int]) -> str:
    lines = ["# Figure 8: cycles of swiglu.step on hdl-validation (ref model), per (TB, TI)",
             "TB  TI   cycles"]
    lines += [f"{tb:<3} {ti:<4} {c}" for (tb, ti), c in sorted(cycles.items())]
    return "\n".join(lines) + "\n"


def test_the_cycles_are_the_reviewed_ones(cycles, request):
    text = render(cycles)
    if request.config.getoption("--update-goldens"):
        if not GOLDEN.exists() or GOLDEN.read_text(encoding="utf-8") != text:
            GOLDEN.write_text(text, encoding="utf-8", newline="\n")
        return
    assert GOLDEN.exists(), "run `python -m pytest tests/test_fig8_cycles.py " \
        "--update-goldens`, then review the file"
    assert text == GOLDEN.read_text(encoding="utf-8"), \
        "Figure 8's cycles changed (rerun with --update-goldens if intended, then review)"


def test_the_cycles_equal_the_published_reference_exactly(cycles):
    if not PUBLISHED.is_file():
        pytest.skip("the paper's data (../shared/data/fig8) is not beside the repository")
    with open(PUBLISHED, newline="") as f:
        published = {(int(r["tile_b"]), int(r["tile_i"])): int(r["sim_cycles"])
                     for r in csv.DictReader(f)}
    assert published == cycles


def test_the_claim_is_an_exact_match():
    [claim] = [c for c in load_spec("8")["claim"] if "paper_sim" in c["value"]]
    assert claim["expected"] == 0 and claim["tolerance"] == {"abs": 0}


def test_the_validation_presets_say_what_each_value_is_and_where_it_comes_from():
    """Every key of the presets Figure 8 runs carries its unit and source on its line."""
    for name in ("hdl-validation", "hdl-like"):
        text = (REPO / "stepc" / "hw" / "presets" / f"{name}.toml").read_text()
        keys = [line for line in text.splitlines()
                if "=" in line.split("#")[0] and not line.startswith(("name", "description"))]
        assert keys and all("#" in line for line in keys), \
            [line for line in keys if "#" not in line]
