"""Hostile .step input never ends in an internal error, a hang or a flood (issue 41, item
12): the regressions found, one per class, and a seeded fuzzer over the text commands
(tests/hostile_corpus.py makes the mutants)."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from hostile_corpus import (
    BUNDLED,
    COMMANDS,
    FOUND,
    MUTATIONS,
    Mutant,
    fmt_problems,
    mutants,
    problems,
    time_limit,
)

from stepc.cli import main
from stepc.diagnostics import EXCERPT_WIDTH, SHOWN_PER_CODE, StepError, render_text
from stepc.frontend import compile_source
from stepc.source import SourceFile

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = sorted((ROOT / "programs").glob("**/*.step"))


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


# ------------------------------------------------------------------ nesting
EXTERNAL = 'stream x : Strm<Tile<bf16, [1, 64]>, 1>[10, 1] = external("x")\n'
DEEP = {  # each nests 300 to 20,000 levels; each ended in RecursionError (exit 70)
    "param index": "param A = 1" + "[0]" * 1000 + "\n",
    "stream index": EXTERNAL + "y = Map(x" + "[0]" * 1000 + ", fn=silu)\nSink(y)\n",
    "target index": EXTERNAL + "y" + "[0]" * 1000 + " = Map(x, fn=silu)\n",
    "type dim index": "stream s : Strm<Tile<bf16, [1, 64]>, 1>[10" + "[0]" * 1000
                      + ', 1] = external("s")\nSink(s)\n',
    "parentheses": "param A = " + "(" * 1000 + "1" + ")" * 1000 + "\n",
    "sum": "param A = " + "+".join(["1"] * 20_000) + "\nparam B = A + zz\n",
    "floor division": EXTERNAL + "stream t : Strm<Tile<bf16, [1, 64]>, 1>[N" + "//2" * 300
                      + ', 1] = external("t")\nSink(t)\nSink(x)\n',
    "calls": EXTERNAL + "y = " + "Map(" * 1000 + "x" + ", fn=silu)" * 1000 + "\nSink(y)\n",
    "loops": "for i in 0..1 {\n" * 1000 + "}\n" * 1000,
}


@pytest.mark.parametrize("text", DEEP.values(), ids=DEEP.keys())
def test_deep_nesting_is_refused_where_it_passes_the_limit(text, tmp_path):
    path = tmp_path / "deep.step"
    path.write_text(text, encoding="utf-8")
    for command in ("check", "analyze"):
        res = run(command, str(path))
        assert res.exit_code == 2, (command, res.output[-800:])
        assert re.search(r"deep\.step:\d+:\d+: error\[E0006\]: ", res.output), res.output
        assert res.output.count("\n") < 10


def test_every_bundled_program_nests_far_below_the_limit(monkeypatch):
    from stepc.grammar import nesting
    from stepc.grammar.parse import _parse
    monkeypatch.setattr(nesting, "MAX_NESTING", nesting.MAX_NESTING // 3)
    for path in PROGRAMS:
        src = SourceFile(str(path), path.read_text(encoding="utf-8"))
        nesting.check_brackets(src)
        nesting.check_levels(_parse(src), src)


N = 24  # MAX_NESTING, spelled out for the cases below
AT_THE_LIMIT = {
    "calls": "x = " + "f(" * N + "1" + ")" * N,
    "lists": "param A = " + "[" * N + "1" + "]" * N,
    "loops": "for i in 0..1 {\n" * N + "}\n" * N,
    "calls in loops": "for i in 0..1 {\n" * (N - 2) + "x = f((1))\n" + "}\n" * (N - 2),
    "tuple types": "stream s : Strm<" + "(" * (N - 1) + "MultiHot<(1)>" + ", f32)" * (N - 1)
                   + ">",
    "indices in a dim": "stream s : Strm<f32, 1>[" + "a[" * (N - 1) + "0" + "]" * (N - 1) + "]",
}


@pytest.mark.parametrize("text", AT_THE_LIMIT.values(), ids=AT_THE_LIMIT.keys())
def test_what_nests_to_the_limit_takes_the_fast_path(text):
    """The fast parser declines only past what parse() refuses: textX (which would parse
    all that follows, with none of the fast parser's early refusals) never sees it."""
    from stepc.grammar.descent import parse_fast
    from stepc.grammar.nesting import MAX_NESTING, check_brackets
    assert N == MAX_NESTING
    src = SourceFile("t.step", text)
    check_brackets(src)
    assert parse_fast(src) is not None


@pytest.mark.parametrize("deep", ["calls", "brackets"])
def test_textx_reports_syntax_errors_at_the_limit_on_a_deep_stack(deep):
    """What the limit lets through, textX (which recurses ~27 frames a bracket) parses
    and reports as a syntax error, also from a thread already 300 frames deep."""
    from stepc.grammar.nesting import MAX_NESTING
    from stepc.grammar.parse import _parse_textx
    text = {"calls": "x = " + "f(" * MAX_NESTING + "1" + ")" * MAX_NESTING,
            "brackets": "x = " + "([" * (MAX_NESTING // 2) + "1" + "])" * (MAX_NESTING // 2)
            }[deep] + " +\n"  # a syntax error at the end: the fast parser leaves it to textX
    found = []

    def parse_at(depth: int):
        if depth:
            return parse_at(depth - 1)
        try:
            _parse_textx(SourceFile("t.step", text))
        except StepError as e:
            found.extend(d.message for d in e.diagnostics)
    thread = threading.Thread(target=parse_at, args=(300,))
    thread.start()
    thread.join()
    assert found and "nested" not in found[0] and found[0].startswith("syntax error"), found


# ------------------------------------------------------------------ threads
def test_two_threads_parse_different_programs_at_once():
    """The language server parses on more than one thread: two threads building textX's
    metamodel at once broke each other (IndexError), and the cache of parsed files is
    shared. Each round starts both threads together on a fresh metamodel; texts with a
    syntax error take the textX path, and more distinct texts than the cache holds churn
    it."""
    from stepc.grammar import parse as parsing
    texts = [p.read_text(encoding="utf-8") for p in PROGRAMS[:4]]
    failures: list[str] = []

    def work(k: int, start: threading.Barrier) -> None:
        start.wait()
        for i in range(12):
            text = "" if i % 3 == 0 else texts[(i + k) % len(texts)]
            text += f"\nparam Z{k}_{i} = 1\n" + ("x = = 1\n" if i % 3 == 0 else "")
            src = SourceFile(f"t{k}.step", text)
            try:
                module = parsing.parse(src)
            except StepError as e:
                if e.diagnostics[0].code != "E0001" or i % 3:
                    failures.append(f"{e.diagnostics[0]}")
                continue
            except Exception as e:  # noqa: BLE001 - what the test looks for
                failures.append(f"{type(e).__name__}: {e}")
                continue
            if module.statements[-1].name != f"Z{k}_{i}":
                failures.append(f"thread {k} got another program's tree")

    for _ in range(4):
        parsing.metamodel.cache_clear()
        start = threading.Barrier(2)
        threads = [threading.Thread(target=work, args=(k, start)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not failures, failures[:3]


# ------------------------------------------------------------------ the fuzzer
SMALL = ("swiglu", "moe_simple", "attention_coarse")  # whose every command takes < 1 s
SIMULATED = ("sim", "fifo", "rewrite")  # run on mutants of SMALL programs only (a decoder's
LATER = [c for c in COMMANDS if c != "check"]  # rewrite alone takes 40 s)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A folder for mutants, with the bundled programs' lib/ (which they import)."""
    folder = tmp_path_factory.mktemp("hostile")
    shutil.copytree(BUNDLED / "lib", folder / "lib")
    return folder


def fuzz(cases: list[Mutant], workdir: Path, seconds: int) -> list[str]:
    """Every case through `check` and `fmt`; one that checks clean through every other
    command too (SIMULATED ones for mutants of SMALL programs), one that does not through
    one of them in turn (they compile it the same way). The problems found, each named by
    its case."""
    found = []
    for i, case in enumerate(cases):
        path = workdir / f"{case.name}.step"
        path.write_bytes(case.data)
        code, bad = problems("check", path, seconds)
        bad += fmt_problems(case.data, seconds)
        small = case.name.split("-")[0] in SMALL
        later = [c for c in LATER if small or c not in SIMULATED]
        for command in later if code == 0 else [later[i % len(later)]]:
            bad += problems(command, path, seconds)[1]
        found += [f"{case.name}: {b}" for b in bad]
    return found


def test_mutants_of_small_bundled_programs(workdir):
    """A few dozen seeded mutants (every mutation of hostile_corpus) of the small
    programs: no internal error, hang or traceback, exit 0 only with valid output."""
    cases = mutants(0, 36, [BUNDLED / f"{name}.step" for name in SMALL])
    assert {c.name.split("-")[1] for c in cases} == set(MUTATIONS)
    assert not fuzz(cases, workdir, 60)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 11))
def test_mutants_of_every_bundled_program(seed, workdir):
    """36 mutants a seed of every bundled program (a decoder's commands take a minute)."""
    assert not fuzz(mutants(seed, 36, sorted(BUNDLED.glob("*.step"))), workdir, 600)


@pytest.mark.parametrize(("data", "commands"), FOUND.values(), ids=FOUND.keys())
def test_what_the_fuzzer_found(data, commands, workdir):
    path = workdir / "found.step"
    path.write_bytes(data)
    found = fmt_problems(data, 120) if "fmt" in commands else []
    for command in commands:
        if command != "fmt":
            found += problems(command, path, 120)[1]
    assert not found


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="devices and FIFOs")
@pytest.mark.parametrize("kind", ["fifo", "device", "npz", "empty", "header"])
def test_a_tensor_file_that_is_no_array_of_its_shape_is_refused(kind, tmp_path):
    """`file(path=...)` names a path in the program text: a FIFO was waited on forever, an
    .npz ended in AttributeError, an empty file in click's "Aborted!", and a header that
    claims 10**12 elements in MemoryError."""
    import numpy as np
    names = {"fifo": "pipe.npy", "device": "/dev/zero", "npz": "x.npz", "empty": "e.npy",
             "header": "h.npy"}
    os.mkfifo(tmp_path / "pipe.npy")
    np.savez(tmp_path / "x.npz", data=np.zeros((4, 64)))
    (tmp_path / "e.npy").write_bytes(b"")
    with open(tmp_path / "h.npy", "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": (10**6, 10**6)})
    path = tmp_path / "p.step"
    path.write_text(f'tensor X : bf16[4, 64] input = file(path="{names[kind]}")\n'
                    "tensor Y : bf16[4, 64] output\nx = LinearOffChipLoad(X, tile=[4, 64])\n"
                    "LinearOffChipStore(x, Y)\n", encoding="utf-8")
    with time_limit(60):
        res = run("sim", str(path))
    assert res.exit_code == 1, res.output
    said = {"fifo": "pipe.npy is not a regular file", "device": "/dev/zero is not a regular "
            "file", "npz": "x.npz is an .npz archive", "empty": "e.npy: No data left",
            "header": "h.npy: mmap length is greater than file size"}[kind]
    assert "p.step:1:32: error[E0002]: tensor `X`: " in res.output and said in res.output, \
        res.output


# ------------------------------------------------------------------ size
def test_a_chain_of_200000_indices_is_refused_before_it_is_built(monkeypatch):
    """A 600 KB chain `x[0][0]...`: the tree was built whole before the nesting check (4 MB
    took 96 s and 1 GB); the fast parser stops at the first index past the limit."""
    from stepc.grammar import ast
    from stepc.grammar.nesting import MAX_NESTING
    from stepc.grammar.parse import parse
    read, real = [], ast.IntLit
    monkeypatch.setattr(ast, "IntLit", lambda *a: read.append(1) or real(*a))
    with pytest.raises(StepError) as e:
        parse(SourceFile("t.step", "param A = x" + "[0]" * 200_000 + "\n"))
    assert e.value.diagnostics[0].code == "E0006"
    assert len(read) == MAX_NESTING + 1  # the indices read before the refusal


@pytest.mark.parametrize(("text", "parsed", "where"), [
    ("".join(f"param P{i} = {i}\n" for i in range(2000)) + "x = = 1\n",
     "param P1999 = 1999\nx = = 1", "t.step:2001:4"),
    ("\n" * 1_000_000 + "x = = 1\n", "x = = 1", "t.step:1000001:4"),
], ids=["after 2,000 statements", "after 1,000,000 blank lines"])
def test_textx_reports_a_syntax_error_from_the_statement_before_it(text, parsed, where,
                                                                    monkeypatch):
    """textX takes ~100 times the fast parser's time and memory (16 MiB of statements
    then an error took minutes and gigabytes; its whitespace is skipped a character at a
    time): it parses from the statement before the one in error (or from that one, the
    first), and the report is the same."""
    from stepc.grammar import parse as parsing
    with pytest.raises(StepError) as whole:
        parsing._parse_textx(SourceFile("t.step", text))
    given: list[str] = []
    real = parsing.metamodel()

    class Spy:
        def model_from_str(self, text: str):
            given.append(text)
            return real.model_from_str(text)
    monkeypatch.setattr(parsing, "metamodel", Spy)
    with pytest.raises(StepError) as e:
        parsing.parse(SourceFile("t.step", text))
    assert e.value.diagnostics == whole.value.diagnostics
    assert str(e.value.diagnostics[0].span) == where
    assert [t.strip() for t in given] == [parsed]


def test_the_longest_sum_allowed_runs_every_command_on_a_deep_stack(tmp_path):
    """A sum of MAX_CHAIN operators (a param written out term by term) passes check,
    analyze, sim, fmt and dot from a thread already 300 frames deep (the language server
    checks on a thread); one term more is refused with E0006."""
    from stepc.grammar.nesting import MAX_CHAIN
    swiglu = next(p for p in PROGRAMS if p.name == "swiglu.step").read_text(encoding="utf-8")
    ones = MAX_CHAIN - 1  # with `16 +` and `- ones`: MAX_CHAIN operators
    path = tmp_path / "sum.step"
    path.write_text(swiglu.replace("param TB = 16", "param TB = 16 + " + " + ".join(["1"] * ones)
                                   + f" - {ones}", 1), encoding="utf-8")
    codes = {}

    def run_at(depth: int):
        if depth:
            return run_at(depth - 1)
        for command in (["check"], ["analyze"], ["sim", "--timing-only"], ["dot"], ["fmt"]):
            codes[command[0]] = run(*command, str(path)).exit_code
    thread = threading.Thread(target=run_at, args=(300,))
    thread.start()
    thread.join()
    assert codes == {"check": 0, "analyze": 0, "sim": 0, "dot": 0, "fmt": 0}, codes
    path.write_text(path.read_text(encoding="utf-8").replace("16 + 1", "16 + 1 + 1", 1),
                    encoding="utf-8")
    res = run("check", str(path))
    assert res.exit_code == 2 and "error[E0006]" in res.output, res.output[-500:]
