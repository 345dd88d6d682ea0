"""Golden-file tests of the CLI: one directory per command under tests/golden/.

A `.step` case in `tests/golden/<command>/` is a program run through the real CLI
(`stepc <command> [ARGS] <case>`), in process, from the repository root, with the case path
given relative to the root so that no machine path appears in the output. An optional
first line `# ARGS: <args>` gives extra command-line arguments (shell-quoted); if they
contain a lone `-`, the program is read from standard input (the case file's bytes are fed
to it) instead of being named.

A `.cmd` case holds one command line (after `#` comment lines), run from the repository
root: `analyze programs/swiglu.step --onchip-model paper`. It records a run on a bundled
program without copying it.

The expected exit code, stdout and stderr live beside the case in `<case>.expect`:

    # exit: 1
    # stdout:
    ...
    # stderr:
    ...

Run `pytest tests/test_golden.py --update-goldens` to (re)write the .expect files after
an intended change of output; review the diff before committing it.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from stepc.cli import main

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "golden"
CASES = sorted([*GOLDEN.glob("*/*.step"), *GOLDEN.glob("*/*.cmd")])
ENV = {"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb", "LC_ALL": "C.UTF-8",
       "PYTHONHASHSEED": "0"}


def case_args(data: bytes) -> list[str]:
    """The extra CLI args from a first line `# ARGS: ...` (the file may be binary)."""
    first = data.split(b"\n", 1)[0].decode("utf-8", errors="replace").strip()
    if first.startswith("# ARGS:"):
        return shlex.split(first[len("# ARGS:"):])
    return []


def render(exit_code: int, stdout: str, stderr: str) -> str:
    """The .expect text: three sections in a fixed order."""
    def section(text: str) -> str:
        return text if not text or text.endswith("\n") else text + "\n"
    return (f"# exit: {exit_code}\n# stdout:\n{section(stdout)}"
            f"# stderr:\n{section(stderr)}")


def command_line(path: Path) -> tuple[list[str], bytes | None]:
    """The CLI arguments of a case and the bytes to feed to standard input, if any."""
    data = path.read_bytes()
    if path.suffix == ".cmd":
        lines = [ln for ln in data.decode().splitlines() if ln.strip() and
                 not ln.startswith("#")]
        return shlex.split(lines[0]), None
    args = case_args(data)
    if "-" in args:
        return [path.parent.name, *args], data
    return [path.parent.name, *args, path.relative_to(REPO).as_posix()], None


def run_case(path: Path, monkeypatch) -> str:
    rel = path.relative_to(REPO).as_posix()
    args, stdin = command_line(path)
    monkeypatch.chdir(REPO)
    runner = CliRunner(env=ENV)
    result = runner.invoke(main, args, input=stdin, catch_exceptions=True,
                           prog_name="stepc")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback
        tb = "".join(traceback.format_exception(*result.exc_info))
        pytest.fail(f"stepc raised an internal error on {rel}:\n{tb}")
    assert result.exit_code in (0, 1, 2), f"unexpected exit code {result.exit_code}"
    return render(result.exit_code, result.stdout, result.stderr)


def test_cases_exist():
    assert CASES, "no golden cases found in tests/golden"


def test_every_program_has_goldens():
    """Each bundled program is recorded by analyze (both on-chip models) and dot."""
    for program in sorted((REPO / "programs").glob("*.step")):
        for name in (f"analyze/{program.stem}_artifact.cmd", f"analyze/{program.stem}_paper.cmd",
                     f"dot/{program.stem}.cmd"):
            assert (GOLDEN / name).exists(), f"missing golden case tests/golden/{name}"


@pytest.mark.parametrize("case", CASES, ids=[c.relative_to(REPO).as_posix() for c in CASES])
def test_golden(case: Path, request, monkeypatch):
    actual = run_case(case, monkeypatch)
    expect = case.with_suffix(".expect")
    if request.config.getoption("--update-goldens"):
        if not expect.exists() or expect.read_text(encoding="utf-8") != actual:
            expect.write_text(actual, encoding="utf-8", newline="\n")
        return
    if not expect.exists():
        pytest.fail(f"missing golden file {expect.relative_to(REPO).as_posix()}: run "
                    "`python -m pytest tests/test_golden.py --update-goldens` to create it, "
                    "then review it")
    assert actual == expect.read_text(encoding="utf-8"), (
        f"output of the CLI on {case.relative_to(REPO).as_posix()} differs from "
        f"{expect.name} (rerun with --update-goldens if the change is intended)")
