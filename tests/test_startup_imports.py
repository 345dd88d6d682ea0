"""What a quick command imports: checking a program whose dims are all numbers loads neither
sympy nor textX (nor sympy to list its types), and `stepc --help` loads no command's module
(it lists them from the group's table, whose summaries must match the commands') and so no
sympy, numpy or hardware model (each costs a large part of a short command's time). Each
runs in a fresh interpreter, where nothing is loaded yet."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from stepc.cli.group import _ELSEWHERE, main

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
                   "loaded": sorted(m for m in {watched!r} if m in sys.modules),
                  "stepc": sorted(m for m in sys.modules if m.startswith("stepc."))}}))
"""
WATCHED = ("sympy", "textx", "numpy", "rich")


def loaded_by(*argv: str) -> dict:
    """The exit code, standard output, the watched modules and the stepc modules loaded by
    `stepc ARGV`."""
    code = _RUN.format(argv=list(argv), watched=WATCHED)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, check=True)
    return json.loads(proc.stdout.splitlines()[-1])


def test_check_of_a_concrete_program_loads_no_sympy_or_textx():
    run = loaded_by("check", "programs/swiglu.step")
    assert run["code"] == 0
    assert run["loaded"] == []  # no sympy, textX, numpy, rich


def test_the_types_listing_of_a_concrete_program_loads_no_sympy():
    run = loaded_by("check", "--types", "programs/swiglu.step")
    assert run["code"] == 0
    assert "Strm<Tile<f32, [16, 256]>, 1>[4, 1]" in run["out"]  # the listing was printed
    assert run["loaded"] == ["rich"]  # its table; no sympy, textX or numpy


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


def test_help_loads_no_command_module_nor_their_dependencies():
    run = loaded_by("--help")
    assert run["code"] == 0
    assert "check" in run["out"] and "tune" in run["out"]
    assert run["loaded"] == []  # no sympy, textX, numpy, rich
    # the group and its exit codes only: no command's module, none of their helpers
    # (stepc.cli.common, the diagnostics), no hardware model, use case or API
    assert run["stepc"] == ["stepc.cli", "stepc.cli.exits", "stepc.cli.group"]


def test_a_command_help_loads_its_own_module():
    run = loaded_by("tune", "--help")
    assert run["code"] == 0 and "stepc.cli.tune" in run["stepc"]


@pytest.mark.parametrize("name", sorted(_ELSEWHERE))
def test_the_group_lists_each_command_as_its_own_help_says(name):
    """The table's summary, shortened to any width, is what the command's own help gives."""
    entry = _ELSEWHERE[name]
    command = getattr(importlib.import_module(entry.module), entry.attr)
    stand_in = entry.stand_in(name)
    assert command.name == name and not command.hidden and not command.deprecated
    assert (command.short_help is None) == entry.from_help
    for limit in range(10, 200):
        assert stand_in.get_short_help_str(limit) == command.get_short_help_str(limit), limit


@pytest.mark.parametrize("width", [50, 58, 80, 200])
def test_the_commands_section_is_the_one_the_loaded_commands_give(width):
    """`stepc --help`'s list of commands, from the table, is what click prints with every
    command loaded (the same names, order, summaries and wrapping)."""
    loaded = {name: getattr(importlib.import_module(e.module), e.attr)
              for name, e in _ELSEWHERE.items()}
    texts = []
    for group in (main, click.Group(commands=loaded)):
        ctx = click.Context(group, terminal_width=width)
        formatter = ctx.make_formatter()
        group.format_commands(ctx, formatter)
        texts.append(formatter.getvalue())
    assert texts[0] == texts[1]
    assert all(f"\n  {name} " in texts[0] for name in _ELSEWHERE)
