"""The study commands' use cases (stepc.app.study, tune, tasks, estimate): each test gives
the use case its input (before) and names the result it must return (expected); and
`stepc sweep` and `stepc tune` each enter stepc.app once."""

from __future__ import annotations

import inspect
import io
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from stepc.api import InputError
from stepc.app import study, tasks
from stepc.app import tune as tuning
from stepc.app.study import FigureDone, SweepOutcome
from stepc.cli import main

REPO = Path(__file__).resolve().parent.parent
SWIGLU = str(REPO / "programs" / "swiglu.step")


def record(tb: int, cycles: int, on_chip: int, status: str = "ok", program: str = SWIGLU,
           on_demand: int | None = None) -> dict:
    """A sweep record of swiglu at TB=tb, as results.jsonl holds it."""
    return {"program": program, "params": {"TB": tb}, "traces": {}, "hw": "paper-eval",
            "sets": [], "status": status, "cycles": cycles if status == "ok" else None,
            "off_chip_bytes": 1000, "on_chip_bytes": on_chip,
            "on_chip_bytes_on_demand": on_demand if on_demand is not None else on_chip,
            **({"error": "boom"} if status == "error" else {})}


def outcome(*records: dict) -> SweepOutcome:
    return SweepOutcome(list(records), ran=len(records), reused=0, out="r.jsonl")


# ---------------------------------------------------------------- sweep
def test_the_pareto_front_of_a_sweep():
    before = outcome(record(32, 100, 900), record(16, 200, 400), record(64, 300, 950))
    front = before.pareto(["cycles", "on_chip_bytes"], baselines=[("TB", "16")])
    assert front.lines() == [
        "Pareto-optimal over (cycles, on_chip_bytes):",
        "  swiglu.step TB=16 paper-eval: cycles=200, on_chip_bytes=400",
        "  swiglu.step TB=32 paper-eval: cycles=100, on_chip_bytes=900",
        "Pareto Improvement Distance to the baseline front (> 1: beyond it, 1: on it, "
        "< 1: dominated):",
        f"  swiglu.step TB=32 paper-eval: PID {front.distances[1]:.3f}",
        f"  swiglu.step TB=64 paper-eval: PID {front.distances[2]:.3f}",
    ]
    assert front.distances[1] > 1 > front.distances[2] and not front.missing_baseline


def test_on_demand_points_are_charged_the_buffers_in_use():
    before = outcome(record(16, 100, 900, on_demand=300), record(32, 90, 800))
    front = before.pareto(["cycles", "on_chip_bytes"], on_demand=[("TB", "16")])
    assert front.lines() == [
        "on_chip_bytes of the 1 point(s) with TB=16: on_chip_bytes_on_demand (the buffers "
        "in use); the others: allocated",
        "Pareto-optimal over (cycles, on_chip_bytes):",
        "  swiglu.step TB=16 paper-eval: cycles=100, on_chip_bytes_on_demand=300",
        "  swiglu.step TB=32 paper-eval: cycles=90, on_chip_bytes=800",
    ]


@pytest.mark.parametrize("metrics, baselines, on_demand, expected", [
    (["cycles", "power"], [], [], "--pareto power: not a numeric metric of every point"),
    (["cycles", "on_chip_bytes"], [], [("TB", "8")], "--on-demand selects no point"),
])
def test_a_front_that_cannot_be_drawn_is_an_input_error(metrics, baselines, on_demand,
                                                        expected):
    with pytest.raises(InputError, match=expected):
        outcome(record(16, 1, 2)).pareto(metrics, baselines, on_demand)


def test_a_baseline_that_selects_nothing_still_draws_the_front():
    front = outcome(record(16, 1, 2)).pareto(["cycles"], baselines=[("TB", "99")])
    assert front.missing_baseline and front.distances is None
    assert front.lines()[0] == "Pareto-optimal over (cycles):"


def test_a_sweep_outcome_reports_its_points_and_failures():
    before = outcome(record(32, 100, 900), record(16, 0, 0, status="error"),
                     record(64, 0, 0, status="deadlock"))
    buf = io.StringIO()
    before.render(Console(file=buf, width=200, color_system=None))
    rows = [line.split() for line in buf.getvalue().splitlines() if "swiglu.step" in line]
    assert [r[r.index("swiglu.step") + 1] for r in rows] == ["TB=16", "TB=32", "TB=64"]
    assert before.errors() == ["error in swiglu.step TB=16 paper-eval: boom"]
    assert before.failures() == {"error": 1, "deadlock": 1}
    assert before.written() == "wrote 3 records to r.jsonl"
    assert SweepOutcome([], 0, 2, "r.jsonl").written() == \
        "nothing to run: every point's record is in r.jsonl"
    assert before.to_dict() == {"records": before.records, "reused": 0, "ran": 3,
                                "out": "r.jsonl"}


def test_a_plot_of_a_file_that_is_not_results_is_an_input_error(tmp_path):
    bad = tmp_path / "r.jsonl"
    bad.write_text("not json\n")
    with pytest.raises(InputError, match="r.jsonl"):
        study.plot(str(bad), str(tmp_path / "p.png"))


def test_a_reproduced_figure_in_one_line():
    from stepc.reproduction.report import Reproduced
    done = Reproduced("out/fig9/report.md", reproduced=3, not_reproduced=1, needs_data=2,
                      reused=5, simulated=7, shared=1, failed_points=1)
    assert FigureDone("9", done).line() == (
        "figure 9: 3 of 4 claims reproduced (2 need the paper's data: --data DIR); 5 points "
        "reused, 7 simulated, 1 shared with other figures, 1 FAILED: out/fig9/report.md")


# ---------------------------------------------------------------- tune, tasks, estimate
@pytest.mark.parametrize("kwargs, expected", [
    ({"budgets": [("cycles", "lots")]}, "found 'lots'"),
    ({"objectives": ["speed"]}, "speed"),
    ({"wheres": ["TB <"]}, "TB <"),
    ({"defines": {"TB": 16}}, "-D TB and --space TB: give the param one or the other"),
])
def test_a_tuning_input_that_does_not_parse_is_an_input_error(kwargs, expected):
    with pytest.raises(InputError, match=expected):
        tuning.tune([SWIGLU], {"TB": [16, 32]}, **kwargs)


def test_the_task_list():
    listed = tasks.list_tasks()
    doc = listed.to_dict()
    assert doc["schema"] == "stepc-tasks-list/1"
    names = [t["name"] for t in doc["tasks"]]
    assert names == sorted(names) and "softmax" in names
    assert [line.split()[0] for line in listed.text().splitlines()] == names


def test_a_task_shown_without_its_resources_runs_nothing():
    shown = tasks.show_task("softmax", resources=False)
    assert shown.resources is None
    text = shown.text(solution=False)
    assert "## Interface" in text and "## Resources" not in text
    assert "## Reference solution" not in text and text.endswith("else 0.\n")


@pytest.mark.parametrize("seed", [-1, 2**63, 2.0, True])
def test_a_seed_is_checked_as_the_api_checks_an_integer(seed, tmp_path):
    from stepc.api.arguments import int_arg  # the message every API argument gives
    with pytest.raises(InputError) as api:
        int_arg("seed", seed, minimum=0, maximum=tasks.MAX_SEED)
    with pytest.raises(InputError) as app:
        tasks.check_task("softmax", SWIGLU, seed)
    assert str(app.value) == str(api.value)


def test_estimates_name_their_model_and_source():
    from stepc.api import load
    from stepc.app.estimate import estimate
    got = estimate(load(SWIGLU), ["roofline"], "paper-eval").to_dict()
    assert got["program"].endswith("swiglu.step") and got["hw"] == "paper-eval"
    (roof,) = got["estimates"]
    assert roof["model"] == "roofline" and roof["kind"] == "lower bound"
    assert roof["cycles"] > 0 and roof["note"].startswith("no simulation")
    assert got["error_source"].startswith("docs/dram.md")


# ---------------------------------------------------------------- one entry per command
def count_entries(monkeypatch, module, name: str, result) -> list[str]:
    """Every public function of `module` counted when called; `name` answers `result`."""
    calls: list[str] = []
    for fn_name, fn in list(vars(module).items()):
        if fn_name.startswith("_") or not inspect.isfunction(fn) or \
                fn.__module__ != module.__name__:
            continue

        def counted(*a, __name=fn_name, __fn=fn, **k):
            calls.append(__name)
            return result if __name == name else __fn(*a, **k)
        monkeypatch.setattr(module, fn_name, counted)
    return calls


def test_stepc_sweep_enters_the_use_cases_once(monkeypatch, tmp_path):
    out = str(tmp_path / "r.jsonl")
    calls = count_entries(monkeypatch, study, "sweep", SweepOutcome(
        [record(16, 200, 400), record(32, 100, 900)], 2, 0, out))
    r = CliRunner().invoke(main, ["sweep", SWIGLU, "--grid", "TB=16,32", "--out", out,
                                  "--pareto", "cycles,on_chip_bytes"])
    assert r.exit_code == 0, r.output
    assert calls == ["sweep"]
    assert "  swiglu.step TB=32 paper-eval: cycles=100, on_chip_bytes=900" in r.output


def test_stepc_tune_enters_the_use_cases_once(monkeypatch, tmp_path):
    from stepc.tune import Objective, TuneResult
    nothing = TuneResult(None, [], [], {}, {}, [Objective.parse("cycles")], [], "max", "ref",
                         0.0, "", 2)
    calls = count_entries(monkeypatch, tuning, "tune", tuning.TuneOutcome(nothing))
    (tmp_path / "t").mkdir()  # the search makes it
    r = CliRunner().invoke(main, ["tune", SWIGLU, "--space", "TB=16,32",
                                  "--out", str(tmp_path / "t")])
    assert r.exit_code == 1, r.output  # no winner
    assert calls == ["tune"]
    assert "No schedule satisfies the budgets." in r.output
