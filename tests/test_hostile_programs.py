"""Hostile .step input never ends in an internal error, a hang or a flood (issue 41, item
12): the regressions found, one per class, and a seeded fuzzer over the text commands
(tests/hostile_corpus.py makes the mutants)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from stepc.cli import main
from stepc.diagnostics import EXCERPT_WIDTH, SHOWN_PER_CODE, render_text
from stepc.frontend import compile_source
from stepc.source import SourceFile


def run(*args: str):
    return CliRunner().invoke(main, list(args))


# ------------------------------------------------------------------ reports in proportion
def test_unused_params_on_one_long_line_report_in_proportion(tmp_path):
    """2,000 unused params on one 33 KB line: each warning quoted the whole line (10,000
    of them on a 208 KB line wrote 2.1 GB); now 120 characters each, 20 warnings listed
    and the rest counted."""
    n = 2000
    path = tmp_path / "p.step"
    path.write_text(" ".join(f"param P{i} = 1;" for i in range(n)) + "\n", encoding="utf-8")
    res = run("check", str(path))
    assert res.exit_code == 0, res.output[-500:]
    assert len(res.output) < 10_000, len(res.output)
    quoted = [line for line in res.output.splitlines() if line.startswith("    1 | ")]
    assert len(quoted) == SHOWN_PER_CODE
    assert max(len(line) for line in quoted) <= len("    1 | ") + EXCERPT_WIDTH + 2
    more = n - SHOWN_PER_CODE
    assert f"note: and {more:,} more W0002 warnings, not listed" in res.output
    assert f"0 errors, {n + 1:,} warnings" in res.output  # and W0003: no operator
    doc = json.loads(run("check", str(path), "--format", "json").stdout)
    assert sum(d["code"] == "W0002" for d in doc["diagnostics"]) == SHOWN_PER_CODE
    assert doc["summary"] == {"errors": 0, "warnings": n + 1}


def test_an_excerpt_of_a_long_line_underlines_what_the_span_covers():
    text = "x = f(" + "a, " * 100 + "\tbad_name, " + "b, " * 100 + "c)\n"
    src = SourceFile("t.step", text)
    col = text.index("bad_name") + 1
    span = src.span(col - 1, col - 1 + len("bad_name"))
    compiled = compile_source(src)
    assert compiled.diagnostics.errors
    d = compiled.diagnostics.errors[0]
    out = render_text([type(d)(d.code, d.severity, "here", span)], {"t.step": src})
    quoted, caret = out.splitlines()[1:3]
    assert quoted.startswith("    1 | …") and quoted.endswith("…")
    assert len(quoted) <= len("    1 | ") + EXCERPT_WIDTH + 2 + 3  # the tab is 4 wide
    start = caret.index("^")
    assert quoted[start:start + len("bad_name")] == "bad_name"
    assert caret[start:] == "^" * len("bad_name")


def test_a_name_thousands_of_characters_long_is_quoted_in_part(tmp_path):
    name = "n" * 20_000
    path = tmp_path / "p.step"
    path.write_text(f"param {name} = 1\n", encoding="utf-8")
    res = run("check", str(path))
    assert res.exit_code == 0
    assert len(res.output) < 3_000, len(res.output)
    assert "characters left out" in res.output
