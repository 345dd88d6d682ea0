"""The use cases of FIFO sizing and rewriting (stepc.app.fifo, stepc.app.rewrite): plain
values in, one result out; the commands enter them once."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from test_fifo import fork_join

from stepc.cli import main

REPO = Path(__file__).resolve().parent.parent
SWIGLU = str(REPO / "programs" / "swiglu.step")


def test_sizing_a_fork_join_holds_the_static_minimum(tmp_path):
    """Before: a fork-join whose short branch must hold 6 elements. Expected: one row with
    that minimum, no search, and the JSON document of `Program.fifo`."""
    from stepc.api import load
    from stepc.app.fifo import size_fifos
    path = tmp_path / "fj.step"
    path.write_text(fork_join(3, 6, 0))
    sized = size_fifos(str(path), search=False)
    assert [int(r.static_minimum) for r in sized.report.rows if r.notable] == [6]
    assert sized.report.unbounded_cycles is None and sized.applied is None
    assert sized.to_dict() == load(str(path)).fifo(search=False).to_dict()


def test_a_program_with_errors_comes_back_with_its_diagnostics(tmp_path):
    from stepc.app.fifo import size_fifos
    path = tmp_path / "bad.step"
    path.write_text("x = Nope()\n")
    sized = size_fifos(str(path), search=False)
    assert sized.report is None and not sized.checked.ok


def test_settings_the_run_will_not_read_are_heard_before_compiling(tmp_path):
    from stepc.app.fifo import size_fifos
    heard: list[str] = []
    size_fifos(str(tmp_path / "missing.step"), sets=["dram.part=hbm2"],
               search=False, warn=heard.append)
    assert len(heard) == 1 and "dram.part" in heard[0] and "no effect" in heard[0]


def test_fifo_totals_and_their_line():
    from stepc.api import check
    from stepc.app.fifo import fifo_totals
    from stepc.report.fifo import fifo_line
    compiled = check(SWIGLU).compiled
    totals = fifo_totals(compiled, None, {}, 1000)
    assert isinstance(totals["fifo_bytes"], int) and totals["fifo_bytes"] > 0
    assert totals["on_chip_bytes_with_fifos"] == totals["fifo_bytes"] + 1000
    assert fifo_line({"fifo_bytes": 1234, "on_chip_bytes_with_fifos": "N*8"}) == \
        "FIFOs at their depths: 1,234 B; on-chip memory with them: N*8 B"


def test_stepc_fifo_enters_the_use_cases_once(monkeypatch):
    import stepc.app.fifo as app_fifo
    calls = []
    real = app_fifo.size_fifos

    def counted(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)
    monkeypatch.setattr(app_fifo, "size_fifos", counted)
    res = CliRunner().invoke(main, ["fifo", SWIGLU, "--static", "--format", "json"])
    assert res.exit_code == 0, res.output
    assert calls == [SWIGLU] and json.loads(res.output)["program"] == SWIGLU


def test_rewriting_a_file_records_each_operator(tmp_path):
    """Before: swiglu with logical tiles. Expected: every operator rewritten into 16x16
    sub-tiles, none left, and the summary saying so."""
    from stepc.app.rewrite import rewrite_file
    done = rewrite_file("downtile", SWIGLU, tile="16x16")
    assert done.changes and all(c.action == "rewritten" for c in done.changes)
    assert done.summary_lines(None) == [f"downtile: {len(done.changes)} operators "
                                        "rewritten, 0 left"]
    assert done.verdict is None and done.verification_lines() == []
