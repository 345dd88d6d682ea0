"""The measurement record (stepc/measure.py): every metric derived once from a run and its
bound analysis, and read from there by sweeps, tune, claims, plots and the API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepc.frontend import compile_file
from stepc.hw import load_config
from stepc.measure import ANALYSIS_METRICS, METRICS, SIM_METRICS, measure

REPO = Path(__file__).resolve().parent.parent
SWIGLU = str(REPO / "programs" / "swiglu.step")
MOE = str(REPO / "programs" / "moe_simple.step")


@pytest.fixture(scope="module")
def moe():
    """moe_simple measured on paper-eval (a run of a few thousand cycles)."""
    hw = load_config("paper-eval", ())
    return measure(compile_file(MOE, {}).typed, hw)


def test_every_metric_says_what_it_is():
    assert set(ANALYSIS_METRICS) | set(SIM_METRICS) == set(METRICS)
    assert not set(ANALYSIS_METRICS) & set(SIM_METRICS)
    for name, m in METRICS.items():
        assert m.name == name and m.unit and m.label and m.column and m.meaning.endswith(".")


def test_metrics_derive_from_the_run(moe):
    run, alloc = moe.result, moe.analysis.allocated_compute
    assert moe.cycles == run.cycles > 0
    assert moe.off_chip_bytes == run.useful_bytes and moe.flops == run.flops
    assert moe.allocated_compute == alloc > 0
    assert moe.compute_utilization == pytest.approx(run.flops / run.cycles / alloc)
    assert moe.bw_utilization == pytest.approx(run.achieved_bw / moe.hw.peak_bw)
    assert moe.row_hit_rate is None  # the ref model has no DRAM rows
    assert moe.to_dict()["status"] == "ok"
    assert set(moe.to_dict()) == {"status", "hbm_model", *METRICS}


def test_analysis_alone_gives_only_the_analysis_metrics(moe):
    alone = measure(compile_file(MOE, {}).typed, moe.hw, simulate=False)
    assert set(alone.values) == set(ANALYSIS_METRICS)
    with pytest.raises(KeyError, match="only a simulation"):
        alone["cycles"]
    # the routing's dims stay symbolic without a run or traces: expressions, and no ratio
    assert "D_0" in alone.off_chip_bytes and alone.operational_intensity is None
    assert alone.allocated_compute == moe.allocated_compute
    bound = measure(None, moe.hw, analysis=moe.analysis, simulate=False)  # the run's dims
    for name in ANALYSIS_METRICS:
        assert bound[name] == pytest.approx(moe[name])


def test_operational_intensity_is_flops_per_off_chip_byte(moe):
    assert moe.operational_intensity == pytest.approx(moe.flops / moe.off_chip_bytes)
    assert moe.operational_intensity == pytest.approx(
        float(moe.analysis.totals["operational_intensity"]))


def test_a_larger_batch_tile_raises_operational_intensity():
    """swiglu re-reads the weights once per batch tile: a larger TB moves fewer bytes for
    the same FLOPs (docs of programs/swiglu.step)."""
    hw = load_config("hdl-validation", ())
    oi = {tb: measure(compile_file(SWIGLU, {"TB": tb}).typed, hw, simulate=False)
          for tb in (16, 64)}
    assert oi[16].flops == oi[64].flops
    assert oi[16].operational_intensity < oi[64].operational_intensity


def test_a_new_metric_reaches_sweeps_tune_claims_and_plots(tmp_path):
    """operational_intensity was added in stepc/measure.py alone."""
    from stepc.explore.plot import metric_label
    from stepc.explore.runner import Point, run_point
    from stepc.reproduction.claims import known_metric
    from stepc.reproduction.report import COLUMN_NAMES
    from stepc.tune.space import Budget, Objective

    rec = run_point(Point(MOE, (), "paper-eval"))
    assert rec["status"] == "ok"
    assert rec["operational_intensity"] == pytest.approx(rec["flops"] / rec["off_chip_bytes"])
    json.dumps(rec)  # a results-file line
    assert Objective.parse("max:operational_intensity").maximise
    assert Budget.parse("operational_intensity", "40").exact_before_simulation
    assert known_metric("operational_intensity")
    assert metric_label("operational_intensity") == METRICS["operational_intensity"].label
    assert COLUMN_NAMES["operational_intensity"] == "FLOPs/byte"  # a reproduce table column


def test_tune_refuses_a_metric_its_confirming_model_does_not_measure(tmp_path):
    from stepc.tune.search import tune
    from stepc.tune.space import Objective, TuneError

    with pytest.raises(TuneError, match="only the dram memory model measures it"):
        tune(None, objectives=[Objective.parse("max:row_hit_rate")], model="ref",
             out=str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()  # refused before any work
