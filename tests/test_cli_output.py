"""What `stepc` writes for people: reports in files and pipes, files it was asked for,
and output paths checked before any work."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from stepc.cli import main

REPO = Path(__file__).resolve().parent.parent
SIMPLE = "programs/moe_simple.step"


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    monkeypatch.chdir(REPO)


def run(*args):
    return CliRunner().invoke(main, list(args))


# ------------------------------------------------------------------ piped reports (item 7)
def test_piped_analyze_never_wraps_names_and_has_no_trailing_spaces():
    r = run("analyze", "programs/moe_static.step", "-D", "E=8", "-D", "K=2", "--all")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert not [ln for ln in lines if ln != ln.rstrip()], "trailing spaces"
    # every operator instance is on one line, whole, so grep finds it
    assert any(re.match(r"\s+moe\.ffn\[0\]\.LinearOffChipLoad@11\s+LinearOffChipLoad\s", ln)
               for ln in lines)
    assert not any(ln.strip().startswith("oad@") for ln in lines)


def test_piped_sim_report_has_no_trailing_spaces():
    r = run("sim", "programs/swiglu.step")
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() and all(ln == ln.rstrip() for ln in r.stdout.splitlines())


# ------------------------------------------------------------------ analyze summary (item 6)
def test_analyze_of_128_experts_fits_a_screen():
    r = run("analyze", "programs/moe_static.step", "--hw", "paper-eval")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert len(lines) <= 45, len(lines)
    assert max(len(ln) for ln in lines) <= 220
    assert "Σ_{i<128} 9437184*ceil(n_i/16)" in r.stdout  # the folded, exact total
    assert "n_0..n_127 (128 symbols)" in r.stdout
    assert "--trace routing=FILE" in r.stdout  # how to make it concrete
    # the JSON keeps every operator and the full expression
    doc = json.loads(run("analyze", "programs/moe_static.step", "--format", "json").stdout)
    assert len(doc["ops"]) == 2442 and "ceil(n_127/16)" in doc["totals"]["off_chip_bytes"]


def test_symbols_sort_naturally():
    from stepc.analyze import analyze
    from stepc.frontend import compile_file
    a = analyze(compile_file("programs/moe_static.step").typed)
    free = a.free_symbols()
    counts = [s for s in free if s.startswith("n_")]
    assert counts[:3] == ["n_0", "n_1", "n_2"] and free.index("n_10") > free.index("n_9")
    assert [s for s in a.symbols if s.startswith("n_")][:3] == ["n_0", "n_1", "n_2"]


def test_folding_is_exact():
    import sympy

    from stepc.analyze.fold import fmt_folded
    n = [sympy.Symbol(f"n_{i}", integer=True, nonnegative=True) for i in range(5)]
    assert fmt_folded(sum(3 * sympy.ceiling(x / 16) for x in n) + 7) == \
        "7 + Σ_{i<5} 3*ceil(n_i/16)"
    # a gap in the indices or a different coefficient is not folded
    assert "Σ" not in fmt_folded(n[0] + n[1] + n[3])
    assert fmt_folded(n[0] + n[1] + 2 * n[2]).count("n_") == 3


# ------------------------------------------------------------------ written files (item 14)
def test_trace_out_says_where_and_is_readable_by_others(tmp_path):
    out = tmp_path / "run.json"
    r = run("sim", "programs/swiglu.step", "--trace-out", str(out))
    assert r.exit_code == 0, r.output
    assert f"wrote the Perfetto trace to {out}" in r.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~_umask()
    json.loads(out.read_text())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_out_says_where_and_what(tmp_path):
    r = run("sim", SIMPLE, "--out", str(tmp_path / "o"))
    assert r.exit_code == 0, r.output
    assert "wrote Y.npy to" in r.stderr and (tmp_path / "o" / "Y.npy").exists()
    r = run("sim", SIMPLE, "--timing-only", "--out", str(tmp_path / "t"))
    assert r.exit_code == 0 and "nothing written" in r.stderr


# ------------------------------------------------------------------ output paths (item 4)
@pytest.mark.parametrize("args", [
    ["dot", SIMPLE, "-o", "{file}/g.dot"],
    ["dot", SIMPLE, "-o", "{dir}"],
    ["dot", SIMPLE, "-o", "{missing}/g.dot"],
    ["sim", SIMPLE, "--out", "{file}/out"],
    ["sim", SIMPLE, "--out", "{file}"],
    ["sim", SIMPLE, "--trace-out", "{missing}/run.json"],
    ["sim", SIMPLE, "--trace-out", "{dir}"],
    ["sim", SIMPLE, "--trace-out", "{file}/run.json"],
], ids=lambda a: " ".join(a[0:1] + a[2:]))
def test_bad_output_paths_are_usage_errors_before_the_run(tmp_path, args):
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    names = {"file": str(afile), "dir": str(tmp_path), "missing": str(tmp_path / "nodir")}
    r = run(*[a.format(**names) for a in args])
    assert r.exit_code == 2, (r.exit_code, r.output)
    assert args[2] in r.stderr  # the message names the flag
    assert "cycles" not in r.stdout  # nothing ran
    assert afile.read_text() == "mine\n"


def test_read_only_directory_is_a_usage_error(tmp_path, monkeypatch):
    """A directory stepc may not write in: a usage error before the run. (The permission is
    faked, so that the test also means something when run as root, who may write anyway.)"""
    ro = tmp_path / "ro"
    ro.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if Path(path) == ro
                        else real_access(path, mode))
    for args in (["dot", SIMPLE, "-o", str(ro / "g.dot")],
                 ["sim", SIMPLE, "--trace-out", str(ro / "t.json")],
                 ["sim", SIMPLE, "--out", str(ro / "out")]):
        r = run(*args)
        assert r.exit_code == 2 and "permission denied" in r.stderr, r.output
        assert "cycles" not in r.stdout
    assert not list(ro.iterdir())


# ------------------------------------------------------------------ help (item 13)
@pytest.mark.parametrize("command", ["check", "analyze", "dot", "sim"])
def test_help_has_examples_and_every_option_explained(command):
    r = run(command, "--help")
    assert r.exit_code == 0
    assert "Examples:" in r.stdout and f"stepc {command} " in r.stdout
    for param in main.commands[command].params:  # every option says what it does
        if param.param_type_name == "option" and not param.hidden:
            assert param.help, f"{command} {param.opts[0]} has no help text"


@pytest.mark.parametrize("command", ["analyze", "sim"])
def test_hw_help_lists_every_preset(command):
    from stepc.hw.config import preset_names
    text = re.sub(r"-\n\s+", "-", run(command, "--help").stdout)  # undo wrapping at hyphens
    text = re.sub(r"\s+", " ", text)
    for name in preset_names():
        assert name in text, name


def test_top_level_help_has_examples():
    r = run("--help")
    assert "Examples:" in r.stdout and "stepc sim " in r.stdout
    assert "..." not in "".join(ln for ln in r.stdout.splitlines()
                                if re.match(r"\s+(check|analyze|dot|sim)\s", ln))


def test_sim_lists_dims_in_natural_order():
    r = run("sim", SIMPLE, "-D", "E=12", "--timing-only")
    assert r.exit_code == 0, r.output
    dims = re.search(r"dims of this run:\s+(.*)", r.stdout)[1]
    names = re.findall(r"(D_\d+) =", dims)
    assert names[:3] == ["D_0", "D_1", "D_2"], dims


def test_long_expressions_are_cut_at_a_term_and_whole_with_all():
    from stepc.report.analyze import _clip
    text = "12 + (5 + x if y > 0 else 0) + " + " + ".join(f"(7 if n_{i} > 0 else 0)"
                                                        for i in range(0, 60, 2))
    short = _clip(text, False)
    assert len(short) < 200 and short.endswith("+ ... (--all or --format json: whole)")
    head = short.removesuffix(" + ... (--all or --format json: whole)")
    assert text.startswith(head) and head.count("(") == head.count(")")
    assert _clip(text, True) == text


def test_large_fractional_values_are_not_in_e_notation():
    import sympy

    from stepc.report.analyze import fmt_value
    assert fmt_value(sympy.Rational(8260609, 2)) == "4,130,304.5"
    assert fmt_value(sympy.Rational(146, 10)) == "14.6"


def test_a_location_is_never_an_emoji(monkeypatch, capsys):
    """rich reads `:100:` in `f.step:100:15` as the emoji code for 💯; a report prints
    locations as written, to a file and to a terminal."""
    from rich.table import Table

    from stepc.cli import common
    from stepc.tables import print_table

    for terminal in (False, True):
        monkeypatch.setattr(common, "stdout_is_terminal", lambda t=terminal: t)
        table = Table("where")
        common.print_report(lambda console, t=table: print_table(console, t,
                                                                 [["f.step:100:15"]]))
        out = capsys.readouterr().out
        assert "f.step:100:15" in out and "\U0001f4af" not in out
