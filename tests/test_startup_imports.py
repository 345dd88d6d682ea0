"""What a quick command imports: checking a program whose dims are all numbers loads neither
sympy nor textX, and `stepc --help` loads no sympy or numpy (each costs a large part of a
short command's time). Each runs in a fresh interpreter, where nothing is loaded yet."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_RUN = """
import contextlib, io, json, sys
from stepc.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
    try:
        main({argv!r})
    except SystemExit as e:
        code = e.code
print(json.dumps({{"code": code, "out": out.getvalue(),
                   "loaded": sorted(m for m in {watched!r} if m in sys.modules)}}))
"""
WATCHED = ("sympy", "textx", "numpy", "rich")


def loaded_by(*argv: str) -> dict:
    """The exit code, standard output and the watched modules loaded by `stepc ARGV`."""
    code = _RUN.format(argv=list(argv), watched=WATCHED)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, check=True)
    return json.loads(proc.stdout.splitlines()[-1])


def test_check_of_a_concrete_program_loads_no_sympy_or_textx():
    run = loaded_by("check", "programs/swiglu.step")
    assert run["code"] == 0
    assert run["loaded"] == []  # no sympy, textX, numpy, rich


def test_check_of_a_symbolic_program_still_uses_sympy():
    run = loaded_by("check", "--types", "programs/moe_dynamic.step")
    assert run["code"] == 0
    assert "sympy" in run["loaded"]
    assert "ragged" in run["out"]  # its symbols are listed


def test_a_syntax_error_the_fast_parser_declines_loads_textx(tmp_path):
    bad = tmp_path / "bad.step"
    bad.write_text("param B = 64\nx = Map(, fn=silu)\n")
    run = loaded_by("check", str(bad))
    assert run["code"] == 1
    assert "textx" in run["loaded"]


def test_help_loads_no_sympy_or_numpy():
    run = loaded_by("--help")
    assert run["code"] == 0
    assert "check" in run["out"]
    assert not {"sympy", "numpy"} & set(run["loaded"])
