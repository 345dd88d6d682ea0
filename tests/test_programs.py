"""Every example program in programs/ checks clean, without warnings, through the real CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from stepc.cli import main

REPO = Path(__file__).resolve().parent.parent
PROGRAMS = sorted((REPO / "programs").glob("*.step"))
ENV = {"COLUMNS": "100", "NO_COLOR": "1"}


def check(path: Path, monkeypatch):
    monkeypatch.chdir(REPO)
    rel = path.relative_to(REPO).as_posix()
    result = CliRunner(env=ENV).invoke(main, ["check", "--werror", rel])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


@pytest.mark.parametrize("program", PROGRAMS,
                         ids=[p.relative_to(REPO).as_posix() for p in PROGRAMS])
def test_program_checks_clean(program: Path, monkeypatch):
    result = check(program, monkeypatch)
    assert result.exit_code == 0, result.stderr
    assert ": error[" not in result.stderr and ": warning[" not in result.stderr, \
        result.stderr


def test_programs_exist():
    assert len(PROGRAMS) >= 2, "expected at least two example programs in programs/"
