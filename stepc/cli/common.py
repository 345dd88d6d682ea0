"""What the `stepc` commands share: exit codes (from `exits`), options, reading
-D/NAME=VALUE pairs, reporting diagnostics, warnings and usage errors, checking output paths.
"""

from __future__ import annotations

import functools
import gc
import io
import os
import sys
from typing import TYPE_CHECKING, NoReturn

import click

from stepc.cli.exits import (  # noqa: F401 - the commands import them from here
    EXIT_DEADLOCK,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PROGRAM,
    EXIT_USAGE,
    quick_exit,
)
from stepc.codes import TRACE_MISMATCH
from stepc.diagnostics import Diagnostic, Note, render_text

if TYPE_CHECKING:
    from stepc.api import CheckReport, InputError
    from stepc.frontend import Compiled

def fewer_collections(command):
    """For a command that compiles one program and exits: the cyclic garbage collector runs
    ~100x less often (its passes over the growing heap of sympy expressions, most of them
    live until the end, cost ~0.1 s of `stepc analyze` on a 2,442-operator program)."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        gc.set_threshold(50_000, 50, 100)
        return command(*args, **kwargs)
    return wrapper


def parse_defines(values: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        name, sep, val = v.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise click.UsageError(f"-D expects NAME=VALUE, found {v!r}")
        try:
            out[name] = int(val.strip(), 0)
        except ValueError:
            raise click.UsageError(f"-D {name}: expected an integer, found {val!r}") from None
    return out


def compiled_or_exit(file: str, defines: tuple[str, ...]) -> CheckReport:
    """The checked program of `file` with the -D values; its diagnostics and exit 1 if it
    has errors (unknown -D names are usage errors)."""
    from stepc.app import InputError
    from stepc.app.inputs import checked_program
    try:
        report = checked_program(file, parse_defines(defines))
    except InputError as e:
        input_error(e)
    exit_on_errors(report)
    return report


def exit_on_errors(report: CheckReport) -> None:
    """A program with errors: its diagnostics, then exit 1 (2 when the file could not be
    read)."""
    if not report.compiled.ok:
        emit_diagnostics(report.compiled)
        sys.exit(EXIT_USAGE if report.unreadable else EXIT_PROGRAM)


def input_error(e: InputError, traces: tuple[str, ...] = ()) -> NoReturn:
    """A setting the API refused: coded diagnostics (a --trace file that does not fit gets
    a note naming the flag) then exit 2, or a plain usage error."""
    if not e.diagnostics:
        raise click.UsageError(str(e))
    diags = []
    for d in e.diagnostics:
        if d.code == TRACE_MISMATCH:
            d = Diagnostic(d.code, d.severity, d.message, d.span, d.notes + tuple(
                Note(f"from --trace {name}={path}") for name, path in pairs(traces, "--trace")
                if f"`{name}`" in d.message))
        diags.append(d)
    click.echo(render_text(diags, e.sources or {}), err=True, nl=False)
    sys.exit(EXIT_USAGE)


def emit_diagnostics(result: Compiled, sort: bool = True, werror: bool = False) -> None:
    diags = result.diagnostics.sorted() if sort else result.diagnostics.items
    text = render_text(diags, result.sources, werror)
    if text:
        click.echo(text, err=True, nl=False)


def check_output_path(flag: str, path: str, directory: bool = False) -> None:
    """A usage error now, before any work, if `path` (a file, or with `directory` a
    directory that may not exist yet) cannot be written (the rule of stepc.outputs)."""
    from stepc import outputs
    try:
        outputs.check_output_path(flag, path, directory)
    except outputs.OutputPathError as e:
        raise click.UsageError(str(e)) from None


def check_new_output(flag: str, path: str, force: bool) -> None:
    """`check_output_path`, and exit 2 if `path` exists and `--force` was not given."""
    check_output_path(flag, path)
    if os.path.exists(path) and not force:
        click.echo(f"stepc: error: {path} exists; --force overwrites it", err=True)
        sys.exit(EXIT_USAGE)


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def print_report(render) -> None:
    """Run `render(console)` for standard output: on a terminal at the terminal's width; in
    a file or pipe plain, names never wrapped (so grep finds them) and no trailing spaces."""
    from rich.console import Console

    if stdout_is_terminal():
        render(Console(file=sys.stdout, highlight=False, soft_wrap=False, emoji=False))
        return
    buf = io.StringIO()
    render(Console(file=buf, width=100_000, highlight=False, soft_wrap=False,
                   color_system=None, emoji=False))  # `f.step:100:15` is no emoji code
    lines = [line.rstrip() for line in buf.getvalue().splitlines()]
    click.echo("\n".join(lines) + ("\n" if lines else ""), nl=False)


DEFINE = click.option("-D", "defines", multiple=True, metavar="NAME=VALUE",
                       help="Override a `param` of the program (repeatable).")
FORMAT = click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
                       show_default=True, help="A report to read, or one JSON document "
                       "(every value, for scripts).")


def presets(default: str | None = None) -> str:
    """The hardware presets, for help texts (read from the package, so new ones show)."""
    from stepc.app.inputs import hardware_presets  # light: help loads no sympy
    return ", ".join(f"{n} (default)" if n == default else n for n in hardware_presets())


def pairs(values: tuple[str, ...], flag: str) -> list[tuple[str, str]]:
    out = []
    for v in values:
        name, sep, val = v.partition("=")
        if not sep or not name.strip() or not val.strip():
            raise click.UsageError(f"{flag} expects NAME=VALUE, found {v!r}")
        out.append((name.strip(), val.strip()))
    return out


def int_pairs(values: tuple[str, ...], flag: str) -> dict[str, int]:
    """NAME=VALUE pairs whose values are integers (`--bind D_0=4`)."""
    out: dict[str, int] = {}
    for name, val in pairs(values, flag):
        try:
            out[name] = int(val, 0)
        except ValueError:
            raise click.UsageError(f"{flag} {name}: expected an integer, found {val!r}") \
                from None
    return out


def warn(warnings: list[str]) -> None:
    """Each warning on standard error (settings a run will not read)."""
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)


def load_hw(hw: str | None, sets: tuple[str, ...]):
    """The hardware configuration; warns about each `--set` the run will not read (for
    `stepc fifo`)."""
    from stepc.app import InputError
    from stepc.app.inputs import load_hardware
    try:
        config, warnings = load_hardware(hw, sets)
    except InputError as e:
        raise click.UsageError(str(e)) from None
    warn(warnings)
    return config
