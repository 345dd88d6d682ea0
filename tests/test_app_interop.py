"""The use cases of `stepc import` and `stepc export` (stepc.app.interop): one call per
command, results that say what was written, coded errors for what cannot be read or said."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

pytest.importorskip("google.protobuf")

from click.testing import CliRunner  # noqa: E402
from rich.console import Console  # noqa: E402

import stepc.app.interop as app  # noqa: E402
from stepc.api import InputError, StepError  # noqa: E402
from stepc.cli import main  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SWIGLU = str(REPO / "programs" / "swiglu.step")
SMALL = {"B": 64, "I": 256, "TB": 16, "TI": 64}


def _text(result) -> str:
    buf = io.StringIO()
    result.render(Console(file=buf, color_system=None, highlight=False))
    return buf.getvalue()


def _counting(monkeypatch, name: str) -> list:
    calls: list = []
    real = getattr(app, name)
    monkeypatch.setattr(app, name, lambda *a, **k: calls.append(a) or real(*a, **k))
    return calls


def test_an_export_says_what_it_wrote(tmp_path):
    out = str(tmp_path / "g.pb")
    result = app.export_graph(SWIGLU, out, SMALL, "paper-eval")
    assert result.ok and Path(out).is_file()
    assert result.to_dict() == {"file": SWIGLU, "output": out, "operators": 12,
                                "side_directory": None, "side_files": [], "notes": [],
                                "diagnostics": []}
    assert _text(result) == f"wrote {out} (12 operators)\n"


def test_an_import_gives_the_program_and_writes_it_when_asked(tmp_path):
    graph = str(tmp_path / "g.pb")
    app.export_graph(SWIGLU, graph, SMALL, "paper-eval")
    printed = app.import_graph(graph)
    assert printed.output is None and _text(printed) == ""
    assert printed.text.startswith("# Imported from the STeP IR graph g.pb (swiglu): 12 ")
    out = str(tmp_path / "back.step")
    written = app.import_graph(graph, out)
    assert Path(out).read_text() == printed.text
    assert written.to_dict() == {"graph": graph, "output": out, "operators": 12,
                                 "program": printed.text}
    assert _text(written) == f"wrote {out} (12 operators)\n"


def test_a_program_with_errors_comes_back_with_its_diagnostics(tmp_path):
    prog = tmp_path / "bad.step"
    prog.write_text("tensor X : bf16[64, 64] input\nx = LinearOffChipLoad(X, tile=[16, 16]\n")
    out = tmp_path / "g.pb"
    result = app.export_graph(str(prog), str(out), {}, "paper-eval")
    assert not result.ok and [d.code for d in result.diagnostics] == ["E0001"]
    assert result.to_dict()["diagnostics"][0]["code"] == "E0001"
    assert not out.exists()


def test_what_cannot_be_read_or_said_raises_coded_errors(tmp_path):
    with pytest.raises(InputError) as missing:
        app.import_graph(str(tmp_path / "none.pb"))
    junk = tmp_path / "junk.pb"
    junk.write_bytes(b"junk")
    with pytest.raises(StepError) as unreadable:
        app.import_graph(str(junk))
    assert not isinstance(unreadable.value, InputError)
    prog = tmp_path / "p.step"
    prog.write_text("tensor X : u64[4, 1] input = arange\n"
                    "x = LinearOffChipLoad(X, tile=[1, 1])\n"
                    "Sink(Map(x, fn=ceildiv_int(by=2, plus=1)))\n")
    with pytest.raises(StepError) as unsayable:
        app.export_graph(str(prog), str(tmp_path / "g.pb"), {}, "paper-eval")
    codes = [[d.code for d in e.value.diagnostics] for e in (missing, unreadable, unsayable)]
    assert codes == [["E0002"], ["E0005"], ["E0005"]]


@pytest.mark.parametrize("command", ["export", "import"])
def test_each_command_enters_its_use_case_once(tmp_path, monkeypatch, command):
    graph = str(tmp_path / "g.pb")
    if command == "import":
        app.export_graph(SWIGLU, graph, SMALL, "paper-eval")
    calls = _counting(monkeypatch, f"{command}_graph")
    args = ["export", SWIGLU, "-D", "B=64", "-D", "I=256", "-D", "TB=16", "-D", "TI=64",
            "-o", graph] if command == "export" else ["import", graph]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert len(calls) == 1
