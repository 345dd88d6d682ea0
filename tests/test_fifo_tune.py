"""`stepc tune --fifo-bytes`: on-chip budgets count the FIFOs at their depths."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from stepc.cli import main
from stepc.fifo.capacity import fifo_bytes
from stepc.frontend import compile_file
from stepc.hw import load_config
from stepc.measure import measure
from stepc.tune import Budget, Objective, Space, tune

SWIGLU = str(Path(__file__).resolve().parent.parent / "programs" / "swiglu.step")
POINT = {"TB": [64], "TI": [256]}


def _bytes(hw: str, *sets: str) -> tuple[int, int]:
    """The operators' on-chip bytes of the point, and its FIFOs' bytes."""
    typed = compile_file(SWIGLU, {k: v[0] for k, v in POINT.items()}).typed
    config = load_config(hw, sets)
    return measure(typed, config, simulate=False)["on_chip_bytes"], int(fifo_bytes(typed, config))


def test_a_budget_met_without_fifo_bytes_fails_with_them(tmp_path):
    operators, fifos = _bytes("hdl-validation")
    assert fifos > 0
    limit = operators + fifos // 2
    args = dict(objectives=[Objective("cycles")], budgets=[Budget("on_chip_bytes", limit)],
                hw="hdl-validation", jobs=1)
    without = tune(Space([SWIGLU], POINT), out=str(tmp_path / "a"), **args)
    assert without.winner is not None
    assert without.winner.confirmed["on_chip_bytes"] == operators
    counted = tune(Space([SWIGLU], POINT), out=str(tmp_path / "b"), fifo_bytes=True, **args)
    assert counted.winner is None and counted.stages["over_budget_analysis"] == 1
    assert counted.to_dict()["fifo_bytes"] is True


def test_the_fifo_depth_moves_the_counted_bytes(tmp_path):
    """Shallower FIFOs fit the budget deeper ones break."""
    operators, shallow = _bytes("hdl-validation", "fabric.fifo_depth=1")
    _, deep = _bytes("hdl-validation", "fabric.fifo_depth=4")
    assert shallow < deep
    limit = operators + (deep + shallow) // 2
    res = tune(Space([SWIGLU], POINT, hw_keys={"fabric.fifo_depth": ["1", "4"]}),
               objectives=[Objective("cycles")], budgets=[Budget("on_chip_bytes", limit)],
               hw="hdl-validation", jobs=1, out=str(tmp_path / "t"), fifo_bytes=True)
    assert res.stages["over_budget_analysis"] == 1  # depth 4 breaks the budget
    assert res.winner is not None and "fabric.fifo_depth=1" in res.winner.candidate.sets
    assert res.winner.confirmed["on_chip_bytes"] == operators + shallow


def test_cli_flag(tmp_path):
    operators, fifos = _bytes("hdl-validation")
    args = ["tune", SWIGLU, "--space", "TB=64", "--space", "TI=256", "--hw", "hdl-validation",
            "--budget", f"on_chip_bytes={operators + fifos // 2}", "-j", "1", "--format", "json"]
    plain = CliRunner().invoke(main, args + ["--out", str(tmp_path / "a")])
    assert plain.exit_code == 0, plain.output
    counted = CliRunner().invoke(main, args + ["--out", str(tmp_path / "b"), "--fifo-bytes"])
    assert counted.exit_code == 1, counted.output
    doc = json.loads(counted.stdout)
    assert doc["fifo_bytes"] is True and doc["winner"] is None
