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
