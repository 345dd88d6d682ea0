"""The user documentation is tested against the code so that it cannot drift.

- every operator in `OPS` has an example program `stepc/ops/examples/<Name>.step`, every
  example file names an operator, and every example checks without diagnostics;
- the generated operator/function reference in docs/language.md is current
  (`python -m stepc.docgen` regenerates it);
- the grammar embedded in docs/language.md is `stepc/grammar/step.tx`, verbatim;
- every ```step block in docs/*.md is a complete program that checks without diagnostics
  (fragments are written as ```text);
- every `stepc check --types` output shown in docs/language.md is what stepc prints;
- docs/diagnostics.md documents exactly the codes stepc's source can emit, and each
  documented mistake produces its code with the message shown;
- the memory-model fidelity table in docs/dram.md is what the simulator measures
  (`python -m stepc.reproduction.fidelity` regenerates it).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from stepc import docgen
from stepc.cli import main
from stepc.diagnostics import render_text
from stepc.frontend import compile_file
from stepc.ops import OPS

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
LANGUAGE = DOCS / "language.md"
DIAGNOSTICS = DOCS / "diagnostics.md"
EXAMPLES = REPO / "stepc" / "ops" / "examples"
GRAMMAR = REPO / "stepc" / "grammar" / "step.tx"
CODE = re.compile(r'"([EW][0-9]{4})"')
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
ENV = {"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb", "LC_ALL": "C.UTF-8"}
# Codes that no program text can produce: E0003 needs a binary file, E0403 a graph that the
# language cannot build (see docs/diagnostics.md).
NO_EXAMPLE = {"E0003", "E0005", "E0403"}  # E0005: a binary .pb file


def blocks(path: Path, lang: str) -> list[str]:
    return [body for kind, body in FENCE.findall(path.read_text(encoding="utf-8"))
            if kind == lang]


def report(result) -> str:
    return render_text(result.diagnostics.sorted(), result.sources)


def check_clean(path: Path, where: str) -> None:
    result = compile_file(str(path))
    assert result.ok and not result.diagnostics.items, f"{where}:\n{report(result)}"


# ---------------------------------------------------------------- examples
def test_every_op_has_an_example():
    names = {p.stem for p in EXAMPLES.glob("*.step")}
    assert set(OPS) - names == set(), "operators without an example"
    assert names - set(OPS) == set(), "example files that name no operator"


@pytest.mark.parametrize("op", sorted(OPS))
def test_example_checks_clean(op, monkeypatch):
    monkeypatch.chdir(REPO)
    path = EXAMPLES / f"{op}.step"
    text = path.read_text(encoding="utf-8")
    assert text.startswith(f"# {op}:"), "an example starts with `# <Op>: what it shows`"
    assert re.search(rf"\b{op}\b", "\n".join(
        line for line in text.splitlines() if not line.lstrip().startswith("#"))) or \
        op == "External" and "external(" in text, f"the example does not use {op}"
    check_clean(path.relative_to(REPO), f"stepc/ops/examples/{op}.step")


# ---------------------------------------------------------------- language guide
def test_generated_reference_is_current():
    text = LANGUAGE.read_text(encoding="utf-8")
    assert docgen.splice(text, docgen.render()) == text, \
        "docs/language.md is stale: run `python -m stepc.docgen`"
    assert docgen.main(["--check", "--doc", str(LANGUAGE)]) == 0


def test_docgen_is_deterministic_and_complete():
    out = docgen.render()
    assert out == docgen.render()
    for op in OPS:
        assert f"\n### {op}\n" in out
    assert "\n#### fn matmul\n" in out


def test_grammar_is_embedded_verbatim():
    grammar = GRAMMAR.read_text(encoding="utf-8")
    assert grammar in blocks(LANGUAGE, "text"), "the Grammar section differs from step.tx"


def test_types_outputs_are_current(monkeypatch):
    text = LANGUAGE.read_text(encoding="utf-8")
    shown = re.findall(r"<!-- types-output: (\S+) -->\n```text\n(.*?)^```$", text, re.S | re.M)
    assert shown, "no `--types` outputs found"
    monkeypatch.chdir(REPO)
    for program, expected in shown:
        result = CliRunner(env=ENV).invoke(main, ["check", "--types", program],
                                           prog_name="stepc")
        assert result.exit_code == 0, result.output
        assert result.stdout == expected, f"`stepc check --types {program}` changed"


def step_blocks():
    for doc in sorted(DOCS.glob("*.md")):
        for i, body in enumerate(blocks(doc, "step")):
            yield pytest.param(body, id=f"{doc.name}#{i}")


@pytest.mark.parametrize("body", list(step_blocks()))
def test_step_blocks_check_clean(body, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("block.step").write_text(body, encoding="utf-8")
    check_clean(Path("block.step"), body)


# ---------------------------------------------------------------- diagnostics catalogue
def source_codes() -> set[str]:
    out: set[str] = set()
    for path in (REPO / "stepc").rglob("*.py"):
        out |= set(CODE.findall(path.read_text(encoding="utf-8")))
    return out


def documented() -> dict[str, str]:
    """Code -> its section of docs/diagnostics.md."""
    text = DIAGNOSTICS.read_text(encoding="utf-8")
    parts = re.split(r"^### ([EW][0-9]{4}) ", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_code_is_documented():
    docs = documented()
    assert source_codes() - set(docs) == set(), "codes emitted by stepc but not documented"
    assert set(docs) - source_codes() == set(), "documented codes that stepc never emits"


@pytest.mark.parametrize("code", sorted(documented()))
def test_documented_mistake_produces_its_code(code, tmp_path, monkeypatch):
    section = documented()[code]
    severity = "warning" if code.startswith("W") else "error"
    assert section.startswith(f"({severity}): "), f"{code}: heading needs ({severity})"
    if code in NO_EXAMPLE:
        assert "Mistake:" not in section
        return
    command = re.search(r"^Mistake \(`stepc ([^`]+)`(.*?)\):$", section, re.M | re.S)
    assert "Mistake:" in section or command, f"{code} has no example"
    program, expected = [body for kind, body in FENCE.findall(section) if kind == "text"][:2]
    monkeypatch.chdir(tmp_path)
    Path("prog.step").write_text(program, encoding="utf-8")
    if command:  # a command-line mistake: run it; files it needs are described in words
        for name, lines in re.findall(r"`(\S+\.csv)` holding the\s+lines (.*)",
                                      command[2], re.S):
            Path(name).write_text("".join(v + "\n" for v in re.findall(r"`(\d+)`", lines)))
        result = CliRunner(env=ENV).invoke(main, command[1].split(), prog_name="stepc")
        assert result.exit_code == 2, result.output
        for line in expected.splitlines():
            assert line in result.stderr.splitlines(), f"{code}: message changed:\n" + \
                result.stderr
        return
    result = compile_file("prog.step")
    assert code in {d.code for d in result.diagnostics.items}, report(result)
    for line in expected.splitlines():
        assert line in report(result).splitlines(), f"{code}: message changed:\n" + \
            report(result)


@pytest.mark.slow
def test_dram_fidelity_and_calibration_tables_are_current():
    """docs/dram.md's Figure 8 tables (every model against the reference simulator and the
    HDL, and the hdl-like calibration) equal a fresh run; they need the paper's data."""
    from stepc.reproduction import fidelity
    if fidelity.load_measured(fidelity.DATA) is None:
        pytest.skip("the paper's data (../shared/data/fig8) is not beside the repository")
    doc = DOCS / "dram.md"
    assert fidelity.main(["--check", "--doc", str(doc)]) == 0, \
        "docs/dram.md is stale: run `python -m stepc.reproduction.fidelity`"


def test_benchmark_readme_states_the_runs_bench_sim_makes():
    """benchmarks/README.md's "medians of N runs" is what bench_sim.py does by default."""
    readme = (REPO / "benchmarks" / "README.md").read_text(encoding="utf-8")
    script = (REPO / "benchmarks" / "bench_sim.py").read_text(encoding="utf-8")
    stated = re.search(r"Medians of (\d+) runs", readme)
    default = re.search(r'"--repeat", type=int, default=(\d+)', script)
    assert stated and default and stated[1] == default[1], (stated, default)


def test_declared_pytest_markers_are_used():
    """A marker pyproject.toml declares (and so promises a behaviour for) is used by a test."""
    import tomllib
    conf = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    declared = conf["tool"]["pytest"]["ini_options"].get("markers", [])
    sources = "".join(p.read_text(encoding="utf-8") for p in (REPO / "tests").glob("*.py"))
    for marker in declared:
        name = marker.split(":")[0]
        assert f"pytest.mark.{name}" in sources, f"marker `{name}` is declared but unused"
