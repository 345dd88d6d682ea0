"""The layout of what people read: `check --types` folds loop iterations, and the tables
of `analyze` and `sweep` at 80 columns keep every name and expression whole."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from stepc.cli import main

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    monkeypatch.chdir(REPO)


def run(*args, columns: int = 100):
    env = {"COLUMNS": str(columns), "NO_COLOR": "1", "TERM": "dumb"}
    return CliRunner(env=env).invoke(main, list(args), prog_name="stepc")


# ------------------------------------------------------------------ check --types
def test_types_fold_loop_iterations_and_all_lists_each():
    folded = run("check", "--types", "programs/moe_static.step")
    every = run("check", "--types", "--all", "programs/moe_static.step")
    assert folded.exit_code == every.exit_code == 0
    lines = folded.stdout.splitlines()
    assert len(lines) < 60, f"{len(lines)} lines"
    assert len(every.stdout.splitlines()) > 2000
    # the 128 outputs of one Partition are one line, with the count
    [row] = [ln for ln in lines if "moe.p[*]" in ln]
    assert row.endswith("[n_*, 1]  (128)")
    assert "moe.p[127]" in every.stdout and "moe.p[127]" not in folded.stdout
    # the 128 symbols of that Partition are one line, as analyze writes them
    assert any(ln.startswith("  n_0..n_127 (128 symbols): dynamic-regular") for ln in lines)
    assert "--all lists each" in folded.stdout


def test_all_without_types_is_refused():
    r = run("check", "--all", "programs/moe_simple.step")
    assert r.exit_code == 2 and "give --types too" in r.stderr


def test_types_of_iterations_that_differ_name_their_indices():
    r = run("check", "--types", "-D", "P=5", "tests/golden/check/types_parallel_define.step")
    assert r.exit_code == 0
    assert re.search(r"lanes\[1\]\s+: .*\[3, 1\]\n", r.stdout)
    assert re.search(r"lanes\[2\.\.4\]\s+: .*\[2, 1\]  \(3\)\n", r.stdout)


def test_types_of_two_iterations_stay_listed():
    """Fewer than three iterations are not folded (as analyze's Σ needs three terms)."""
    r = run("check", "--types", "programs/moe_simple.step")
    assert "p[0]" in r.stdout and "p[1]" in r.stdout and "[*]" not in r.stdout
    assert r.stdout == run("check", "--types", "--all", "programs/moe_simple.step").stdout


# ------------------------------------------------------------------ tables at 80 columns
def on_terminal(monkeypatch, columns: int):
    """Standard output as a terminal of `columns` columns (rich reads COLUMNS)."""
    monkeypatch.setattr("stepc.cli.common.stdout_is_terminal", lambda: True)
    monkeypatch.setenv("COLUMNS", str(columns))


def whole(text: str, *names: str) -> None:
    for name in names:
        assert name in text, f"{name!r} split or missing:\n{text}"


def test_analyze_at_80_columns_keeps_names_and_expressions_whole(monkeypatch):
    on_terminal(monkeypatch, 80)
    r = run("analyze", "programs/moe_simple.step", columns=80)
    assert r.exit_code == 0, r.output
    whole(r.stdout, "LinearOffChipLoad", "LinearOffChipStore@52",
          "32768*ceil(D_0/4) + 32768*ceil(D_1/4)", "131072*ceil(D_0/4) + 131072*ceil(D_1/4)")
    assert "─" not in r.stdout  # too wide for a table: plain rows
    assert re.search(r"^w\[\*\]  op = LinearOffChipLoad  n = 2  off-chip bytes = "
                     r"32768\*ceil\(D_0/4\) \+ 32768\*ceil\(D_1/4\)", r.stdout, re.MULTILINE)


def test_a_table_that_fits_stays_a_table(monkeypatch):
    on_terminal(monkeypatch, 200)
    r = run("analyze", "programs/moe_simple.step", columns=200)
    lines = r.stdout.splitlines()
    rule = next(ln for ln in lines if "────" in ln)
    assert max(len(ln) for ln in lines[:lines.index(rule) + 12]) <= 200
    assert re.search(r"^\s+w\[\*\]\s+LinearOffChipLoad\s+2\s", r.stdout, re.MULTILINE)


def test_sweep_table_follows_the_terminal_width(monkeypatch, tmp_path):
    args = ["sweep", "programs/swiglu.step", "--grid", "TB=16,32", "--out",
            str(tmp_path / "s")]
    on_terminal(monkeypatch, 80)
    narrow = run(*args, columns=80)
    assert narrow.exit_code == 0, narrow.output
    assert all(len(ln) <= 80 for ln in narrow.stdout.splitlines()
               if "│" in ln or "─" in ln or "┃" in ln), narrow.stdout
    on_terminal(monkeypatch, 200)
    wide = run(*args[:-1], str(tmp_path / "t"), columns=200)
    assert "┃" in wide.stdout and "TB=16" in wide.stdout
