"""Energy and area reach every place a run's results go: the sim document (and its
schema), the text report, the Perfetto trace's counters (whose energy ends at the run's
`energy_j`), `stepc analyze --energy` (a lower bound the simulated energy meets), the MCP
estimate and `stepc tune`'s energy objective and area budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from stepc.cli import main
from stepc.energy import COMPONENTS

ROOT = Path(__file__).resolve().parent.parent
SWIGLU = str(ROOT / "programs" / "swiglu.step")


def sim_doc(*args: str) -> dict:
    r = CliRunner().invoke(main, ["sim", SWIGLU, "--timing-only", "--format", "json", *args])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_the_sim_document_has_energy_and_area():
    doc = sim_doc()
    assert doc["schema"] == "stepc-sim/3"
    energy, area = doc["energy"], doc["area"]
    assert energy["joules"] == pytest.approx(sum(energy["by_component"].values()), rel=1e-12)
    assert set(energy["by_component"]) == set(COMPONENTS)
    assert energy["seconds"] == pytest.approx(doc["cycles"] / 1e9, rel=1e-12)  # 1000 MHz
    assert energy["edp"] == pytest.approx(energy["joules"] * energy["seconds"], rel=1e-12)
    per_op = sum(sum(parts.values()) for parts in energy["ops"].values())
    assert abs(per_op - energy["dynamic_joules"]) < 1e-12 * energy["dynamic_joules"]
    assert abs(area["mm2"] - area["compute_mm2"] - area["sram_mm2"]) < 1e-9
    assert area["allocated_compute"] == doc["analysis"]["allocated_compute"]


def test_the_text_report_prints_energy_and_area():
    r = CliRunner().invoke(main, ["sim", SWIGLU, "--timing-only"])
    assert "  energy:" in r.stdout and "mJ (compute" in r.stdout and "EDP" in r.stdout
    assert "  area:" in r.stdout and "compute units" in r.stdout


def test_the_trace_energy_counter_ends_at_the_runs_energy(tmp_path):
    out = tmp_path / "run.json"
    doc = sim_doc("--trace-out", str(out))
    events = json.loads(out.read_text())["traceEvents"]
    spent = [e for e in events if e.get("name") == "energy (mJ)"]
    power = [e for e in events if e.get("name") == "power (W)"]
    assert spent and power and spent[-1]["ts"] == doc["cycles"]
    assert abs(spent[-1]["args"]["energy"] / 1e3 - doc["energy"]["joules"]) < \
        1e-9 * doc["energy"]["joules"]
    assert all(e["args"]["static"] > 0 for e in power)


def test_analyze_energy_is_a_lower_bound_of_the_simulated_energy():
    r = CliRunner().invoke(main, ["analyze", SWIGLU, "--energy", "--format", "json"])
    assert r.exit_code == 0, r.output
    bound = json.loads(r.stdout)["energy"]
    run = sim_doc()["energy"]
    assert bound["dynamic_joules"] == run["dynamic_joules"]  # exact: the dims are static
    assert run["dynamic_joules"] < bound["lower_bound_joules"] <= run["joules"]
    plain = json.loads(CliRunner().invoke(main, ["analyze", SWIGLU, "--format",
                                                 "json"]).stdout)
    assert "energy" not in plain  # only when asked: the document keeps its shape
    text = CliRunner().invoke(main, ["analyze", SWIGLU, "--energy"]).stdout
    assert "energy bound: >= " in text and "area: " in text


def test_the_mcp_estimate_gives_energy():
    from stepc.api import load
    from stepc.app.estimate import estimate
    got = estimate(load(SWIGLU), ["roofline", "fluid"], "paper-eval").to_dict()["estimates"]
    bound, fluid = got[0]["energy_j"], got[1]["energy_j"]
    assert 0 < bound <= fluid


def test_a_figures_report_says_how_its_claims_metrics_are_counted():
    import tomllib

    from stepc.measure import METRICS
    from stepc.report.reproduction import _metric_lines
    path = ROOT / "stepc" / "reproduction" / "experiments" / "fig17.toml"
    lines = _metric_lines(tomllib.loads(path.read_text()))
    meaning = " ".join(METRICS["allocated_compute"].meaning.split())
    assert f"- `allocated_compute` (FLOPs/cycle): {meaning}" in lines
    assert any(line.startswith("- `cycles`") for line in lines)


def test_a_sweep_records_and_fronts_energy_and_area(tmp_path):
    out = tmp_path / "results.jsonl"
    r = CliRunner().invoke(main, ["sweep", SWIGLU, "--grid", "TB=16,32", "--pareto",
                                  "energy_j,area_mm2", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "Pareto-optimal over (energy_j, area_mm2):" in r.stdout
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert {rec["schema"] for rec in records} == {"stepc-sweep/3"}
    for rec in records:
        assert rec["energy_j"] == pytest.approx(rec["energy_dynamic_j"] +
                                                rec["energy_static_j"], rel=1e-12)
        assert rec["edp"] > 0 and rec["area_mm2"] > 0 and rec["compute_units"] == 5

