"""The use cases of one program (stepc.app.program, stepc.app.sim): each command enters
them once, and their results give the command's JSON document and text report."""

from __future__ import annotations

import inspect
import io
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

import stepc
from stepc.app import program, sim
from stepc.cli import main
from stepc.schemas import schema

REPO = Path(__file__).resolve().parent.parent
SWIGLU = str(REPO / "programs" / "swiglu.step")


def text_of(result) -> str:
    out = io.StringIO()
    result.render(Console(file=out, width=200, color_system=None))
    return out.getvalue()


def entries(monkeypatch) -> list[str]:
    """The calls made into the use-case layer from outside it (a front end's), recorded as
    they pass through every function of stepc.app.program and stepc.app.sim."""
    calls = []
    for module in (program, sim):
        for name, function in list(vars(module).items()):
            if not inspect.isfunction(function) or function.__module__ != module.__name__:
                continue

            def wrapper(*args, _name=f"{module.__name__}.{name}", _function=function,
                        **kwargs):
                caller = sys._getframe(1).f_globals["__name__"]
                if not caller.startswith("stepc.app."):
                    calls.append(_name)
                return _function(*args, **kwargs)
            monkeypatch.setattr(module, name, wrapper)
    return calls


@pytest.mark.parametrize("command, use_case", [
    (["analyze", SWIGLU, "--hw", "paper-eval", "--fifo-bytes"], "stepc.app.program.analyze"),
    (["sim", SWIGLU, "--timing-only", "--fifo-bytes"], "stepc.app.sim.simulate"),
], ids=["analyze", "sim"])
def test_each_command_enters_the_use_case_layer_once(command, use_case, monkeypatch):
    import stepc.cli.program
    import stepc.cli.sim  # noqa: F401  (their help texts list the presets when loaded)
    calls = entries(monkeypatch)
    res = CliRunner().invoke(main, command)
    assert res.exit_code == 0, res.output
    assert calls == [use_case]


def test_check_result_is_the_check_document_and_lists_types():
    before = program.check(SWIGLU, {})
    assert before.to_dict() == stepc.check(SWIGLU).to_dict()
    assert text_of(before) == ""
    listed = program.check(SWIGLU, {"TB": 32}, show_types=True)
    assert text_of(listed) == stepc.check(SWIGLU, TB=32).types_text()


def test_check_refuses_a_define_the_program_lacks():
    with pytest.raises(stepc.InputError) as e:
        program.check(SWIGLU, {"NOPE": 1})
    assert e.value.diagnostics and "NOPE" in e.value.diagnostics[0].message


def test_analyze_result_document_and_report(tmp_path):
    analyzed = program.analyze(SWIGLU, {}, hw="paper-eval", fifo_bytes=True)
    doc = analyzed.to_dict()
    assert {"schema", "program", "ops", "totals", "roofline", "fifo_bytes",
            "on_chip_bytes_with_fifos"} <= set(doc)
    text = text_of(analyzed)
    assert "roofline (paper-eval):" in text and "FIFOs at their depths:" in text
    bad = tmp_path / "bad.step"
    bad.write_text("param N = \n")
    errors = program.analyze(str(bad), {})
    assert errors.cost is None and not errors.checked.ok


def test_analyze_collects_the_settings_it_does_not_read():
    analyzed = program.analyze(SWIGLU, {}, sets=["dram.banks=8"])
    assert analyzed.warnings and "dram.banks" in analyzed.warnings[0]


def test_simulated_result_document_and_report():
    heard = []
    simulated = sim.simulate(SWIGLU, {}, timing_only=True, fifo_bytes=True,
                             note=heard.append)
    doc = simulated.to_dict()
    assert doc["schema"] == schema("sim")
    assert doc["cycles"] == simulated.run.cycles and doc["deadlock"] is None
    assert "fifo_bytes" in doc and heard == []
    text = text_of(simulated)
    assert f"cycles:             {simulated.run.cycles:,}" in text
    assert "FIFOs at their depths:" in text


def test_draw_reads_a_heat_file_or_refuses_it(tmp_path):
    heat = tmp_path / "heat.json"
    heat.write_text('{"heat": {"up": {"fraction": 0.5, "note": "half"}}}')
    drawing = program.draw(SWIGLU, {}, annotate=str(heat))
    assert "digraph" in drawing.text and "shaded by" in drawing.text and "half" in drawing.text
    with pytest.raises(stepc.InputError, match="expected `analysis` or a JSON file"):
        program.draw(SWIGLU, {}, annotate=str(tmp_path / "none.json"))


def test_run_is_a_view_over_its_measurement():
    run = stepc.load(SWIGLU).simulate(timing_only=True)
    m = run.measurement
    assert (run.cycles, run.flops, run.off_chip_bytes) == (m.cycles, m.flops,
                                                           m.off_chip_bytes)
    assert run.hw == m.hw.name and run.result is m.result
    assert set(vars(run)) == {"measurement", "warnings"}
