"""The `stepc` command line: thin compositions of the pipeline stages.

Exit codes: 0 success (warnings allowed), 1 the program has errors, 2 usage error,
3 the simulation deadlocked, 70 internal error (a bug in stepc: please report it).
"""

from __future__ import annotations

import functools
import gc
import importlib
import io
import json
import os
import sys
import traceback
from typing import TYPE_CHECKING, NoReturn

import click

from stepc import __version__
from stepc.diagnostics import Diagnostic, Note, render_text

if TYPE_CHECKING:
    from stepc.api import CheckReport, Cost, InputError
    from stepc.frontend import Compiled

EXIT_OK, EXIT_PROGRAM, EXIT_USAGE, EXIT_DEADLOCK, EXIT_INTERNAL = 0, 1, 2, 3, 70


_quick_exit = False  # set by a command that may end the process without tearing it down


def quick_exit(command):
    """Mark a command that leaves no child processes or open resources behind: when it
    ends, the process exits at once, without freeing its heap object by object (sympy's
    caches, a simulation's arrays), which the operating system reclaims anyway."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        global _quick_exit
        _quick_exit = True
        return command(*args, **kwargs)
    return wrapper


def fewer_collections(command):
    """For a command that compiles one program and exits: the cyclic garbage collector runs
    ~100x less often (its passes over the growing heap of sympy expressions, most of them
    live until the end, cost ~0.1 s of `stepc analyze` on a 2,442-operator program)."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        gc.set_threshold(50_000, 50, 100)
        return command(*args, **kwargs)
    return wrapper


def compile_file(path: str, defines: dict[str, int]) -> CheckReport:
    """`stepc.check`, loaded on first use: `stepc --help` and commands that compile
    nothing do not import sympy, textX or networkx."""
    from stepc.api.program import check
    return check(path, **defines)


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


def usage_diagnostics(result: Compiled, diags: list[Diagnostic]) -> NoReturn:
    """Report command-line input that does not fit the program (E0106, E0404): coded
    diagnostics like the program's own, then exit 2."""
    click.echo(render_text(diags, result.sources), err=True, nl=False)
    sys.exit(EXIT_USAGE)


def check_overrides(report: CheckReport) -> None:
    """Unknown -D names are usage errors (once the program parsed)."""
    unknown = report.unknown_params()
    if unknown:
        usage_diagnostics(report.compiled, unknown)


def compiled_or_exit(file: str, defines: tuple[str, ...]) -> CheckReport:
    """The checked program of `file` with the -D values; its diagnostics and exit 1 if it
    has errors (unknown -D names are usage errors)."""
    report = compile_file(file, parse_defines(defines))
    check_overrides(report)
    if not report.compiled.ok:
        emit_diagnostics(report.compiled)
        sys.exit(EXIT_USAGE if report.unreadable else EXIT_PROGRAM)
    return report


def input_error(e: InputError, traces: tuple[str, ...] = ()) -> NoReturn:
    """A setting the API refused: coded diagnostics (a --trace file that does not fit gets
    a note naming the flag) then exit 2, or a plain usage error."""
    if not e.diagnostics:
        raise click.UsageError(str(e))
    diags = []
    for d in e.diagnostics:
        if d.code == "E0404":
            d = Diagnostic(d.code, d.severity, d.message, d.span, d.notes + tuple(
                Note(f"from --trace {name}={path}") for name, path in _pairs(traces, "--trace")
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
        render(Console(file=sys.stdout, highlight=False, soft_wrap=False))
        return
    buf = io.StringIO()
    render(Console(file=buf, width=100_000, highlight=False, soft_wrap=False,
                   color_system=None))
    lines = [line.rstrip() for line in buf.getvalue().splitlines()]
    click.echo("\n".join(lines) + ("\n" if lines else ""), nl=False)


def _exit_code(result: Compiled, werror: bool) -> int:
    if result.diagnostics.errors or result.typed is None:
        return EXIT_PROGRAM
    if werror and result.diagnostics.warnings:
        return EXIT_PROGRAM
    return EXIT_OK


# Commands that live in other modules (they use the functions above), imported only when
# the command line names them or help lists them: `stepc check` does not load them.
_ELSEWHERE = {
    "sweep": ("stepc.cli_sweep", "sweep_cmd"), "plot": ("stepc.cli_sweep", "plot_cmd"),
    "reproduce": ("stepc.cli_sweep", "reproduce_cmd"), "fmt": ("stepc.cli_editor", "fmt_cmd"),
    "lsp": ("stepc.cli_editor", "lsp_cmd"), "from-torch": ("stepc.cli_torch", "from_torch_cmd"),
    "tune": ("stepc.cli_tune", "tune_cmd"), "sim": ("stepc.cli_sim", "sim_cmd"),
    "import": ("stepc.cli_interop", "import_cmd"), "export": ("stepc.cli_interop", "export_cmd"),
}


class _Commands(dict):
    """A group's commands by name; those of `_ELSEWHERE` are imported on first lookup."""

    def __missing__(self, name: str) -> click.Command:
        if name not in _ELSEWHERE:
            raise KeyError(name)
        module, attr = _ELSEWHERE[name]
        command = self[name] = getattr(importlib.import_module(module), attr)
        return command

    def get(self, name, default=None):
        try:
            return self[name]
        except KeyError:
            return default


class _Group(click.Group):
    """The `stepc` group: commands of other modules load when used (or listed by help)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.commands = _Commands(self.commands)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *_ELSEWHERE})


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]},
             epilog="Exit codes: 0 ok, 1 program errors, 2 usage errors, 3 simulation "
             "deadlock, 70 internal error.")
@click.version_option(__version__, prog_name="stepc")
@click.option("--debug", is_flag=True, hidden=True, help="Show Python tracebacks of "
              "internal errors.")
def main(debug: bool) -> None:
    """stepc: check, analyze, simulate and draw Streaming Tensor Programs (.step files).

    \b
    Examples:
      stepc check --types programs/moe_simple.step
      stepc analyze programs/moe_static.step --trace routing=ids.npy
      stepc sim programs/swiglu.step --hw hdl-validation
      stepc dot programs/moe_static.step --collapse -o moe.svg

    `stepc COMMAND --help` describes each command.
    """


_DEFINE = click.option("-D", "defines", multiple=True, metavar="NAME=VALUE",
                       help="Override a `param` of the program (repeatable).")
_FORMAT = click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
                       show_default=True, help="A report to read, or one JSON document "
                       "(every value, for scripts).")


def _presets(default: str | None = None) -> str:
    """The hardware presets, for help texts (read from the package, so new ones show)."""
    from stepc.hw.config import preset_names
    return ", ".join(f"{n} (default)" if n == default else n for n in preset_names())


@main.command("check", short_help="Type- and shape-check a program.")
@click.argument("file", type=str)
@_DEFINE
@click.option("--types", "show_types", is_flag=True,
              help="Print every stream's inferred type and symbolic shape, in source order "
              "(loop iterations folded: `[*]`).")
@click.option("--all", "show_all", is_flag=True,
              help="With --types: list every loop iteration's streams, symbols and facts.")
@_FORMAT
@click.option("--werror", is_flag=True, help="Treat warnings as errors (exit 1).")
@quick_exit
@fewer_collections
def check_cmd(file: str, defines: tuple[str, ...], show_types: bool, show_all: bool,
              fmt: str, werror: bool) -> None:
    """Type- and shape-check a .step program (FILE, or - for standard input).

    \b
    Examples:
      stepc check programs/moe_simple.step
      stepc check --types -D TB=32 -D TI=64 programs/swiglu.step
      stepc check --format json --werror mine.step
    """
    if show_all and not show_types:
        raise click.UsageError("--all lists every loop iteration of --types: give --types too")
    report = compile_file(file, parse_defines(defines))
    check_overrides(report)
    result = report.compiled
    code = EXIT_USAGE if report.unreadable else _exit_code(result, werror)
    if fmt == "json":
        click.echo(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        if show_types and result.typed is not None:
            from stepc.cli_types import types_text
            click.echo(types_text(result, show_all), nl=False)
        emit_diagnostics(result, werror=werror)
    sys.exit(code)


def _pairs(values: tuple[str, ...], flag: str) -> list[tuple[str, str]]:
    out = []
    for v in values:
        name, sep, val = v.partition("=")
        if not sep or not name.strip() or not val.strip():
            raise click.UsageError(f"{flag} expects NAME=VALUE, found {v!r}")
        out.append((name.strip(), val.strip()))
    return out


def _load_hw(hw: str | None, sets: tuple[str, ...], roofline: bool = False):
    """The hardware configuration; warns about each `--set` the run will not read."""
    from stepc.api.errors import InputError
    from stepc.api.program import hardware
    try:
        config, warnings = hardware(hw, sets, roofline)
    except InputError as e:
        raise click.UsageError(str(e)) from None
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    return config


@main.command("analyze", short_help="Traffic, on-chip memory, FLOPs and intensity.")
@click.argument("file", type=str)
@_DEFINE
@click.option("--bind", "binds", multiple=True, metavar="SYMBOL=VALUE",
              help="Give a symbolic dim a value (repeatable).")
@click.option("--trace", "traces", multiple=True, metavar="NAME=PATH",
              help="Bind the external stream NAME to a trace file (.npy, .npz, .csv).")
@click.option("--hw", default=None, metavar="PRESET|FILE.toml",
              help=f"Hardware for the roofline bound (presets: {_presets()}).")
@click.option("--set", "sets", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override one hardware setting (repeatable).")
@click.option("--onchip-model", type=click.Choice(["artifact", "paper"]), default="artifact",
              show_default=True, help="On-chip accounting: the evaluation's (artifact) or the "
              "paper's Section 4.2 equations (paper).")
@_FORMAT
@click.option("--all", "show_all", is_flag=True, help="List every operator instance (not one "
              "row per statement), also those with no cost.")
@quick_exit
@fewer_collections
def analyze_cmd(file: str, defines, binds, traces, hw, sets, onchip_model, fmt,
                show_all) -> None:
    """Off-chip traffic, on-chip memory, FLOPs and operational intensity of a program,
    symbolic in its dynamic dims until --bind or --trace gives them values.

    \b
    Examples:
      stepc analyze programs/swiglu.step --hw paper-eval
      stepc analyze programs/moe_static.step --trace routing=ids.npy
      stepc analyze programs/moe_simple.step --bind D_0=4 --bind D_1=6 --format json
    """
    from stepc.analyze.report import render_text

    report = compile_file(file, parse_defines(defines))
    check_overrides(report)
    result = report.compiled
    config = _load_hw(hw, sets, roofline=True) if (hw or sets) else None
    if not result.ok:
        emit_diagnostics(result)
        sys.exit(EXIT_USAGE if report.unreadable else EXIT_PROGRAM)
    cost = _cost(report, binds, traces, onchip_model, config)
    if fmt == "json":
        click.echo(json.dumps(cost.to_dict(), indent=2, sort_keys=True))
    else:
        print_report(lambda console: render_text(cost.analysis, console, show_all, config,
                                                 cost.roofline_bound, result.typed))
        emit_diagnostics(result)
    sys.exit(EXIT_OK)


LARGE_GRAPH = 500  # operators above which an uncollapsed diagram is illegible


@main.command("dot", short_help="Draw a program's graph (DOT, SVG, PNG, PDF).")
@click.argument("file", type=str)
@_DEFINE
@click.option("-o", "--output", "out", default=None, metavar="FILE",
              help="Write to FILE (.dot/.gv text, or .svg/.png/.pdf via Graphviz); default: "
              "DOT text on standard output.")
@click.option("--collapse", is_flag=True,
              help="Fold identical loop iterations into one cluster labeled with the count.")
@click.option("--annotate", default=None, metavar="analysis|FILE.json",
              help="Shade nodes: `analysis` by share of off-chip traffic (labels on-chip "
              "bytes), or a JSON file {\"heat\": {node: {\"fraction\": f, \"note\": s}}}.")
@click.option("--bind", "binds", multiple=True, metavar="SYMBOL=VALUE",
              help="Bind a symbol for --annotate analysis.")
@click.option("--trace", "traces", multiple=True, metavar="NAME=PATH",
              help="Bind an external stream to a trace for --annotate analysis.")
@click.option("--onchip-model", type=click.Choice(["artifact", "paper"]), default="artifact",
              show_default=True, help="On-chip accounting for --annotate analysis.")
@click.option("--force", is_flag=True, help="Overwrite FILE even if stepc did not write it.")
@quick_exit
def dot_cmd(file, defines, out, collapse, annotate, binds, traces, onchip_model, force):
    """Draw a program's graph as DOT (or SVG/PNG/PDF with Graphviz installed).

    \b
    Examples:
      stepc dot programs/moe_simple.step -o moe.svg
      stepc dot programs/moe_static.step --collapse --annotate analysis -o moe.svg
      stepc sim programs/swiglu.step --format json > r.json
      stepc dot programs/swiglu.step --annotate r.json -o swiglu.png
    """
    from stepc.viz.render import RenderError, check_target, write_output

    to_file = out is not None and out != "-"
    if to_file:
        check_output_path("-o", out)
        try:
            check_target(out, force)
        except RenderError as e:
            raise click.UsageError(str(e)) from None
    report = compiled_or_exit(file, defines)
    result = report.compiled
    prog = report.program()
    if annotate == "analysis":
        text = prog.dot(collapse, _cost(report, binds, traces, onchip_model))
    elif annotate is not None:
        text = prog.dot(collapse, _heat_file(annotate), f"{result.name}: shaded by {annotate}")
    else:
        text = prog.dot(collapse)
    n_ops = prog.operators
    if not collapse and n_ops > LARGE_GRAPH:
        click.echo(f"stepc: warning: the graph has {n_ops:,} operators: drawn whole, its text "
                   "is too small to read; --collapse folds identical loop iterations into one "
                   "cluster each", err=True)
    if to_file:
        try:
            write_output(text, out, force)
        except RenderError as e:
            click.echo(f"stepc: error: {e}", err=True)
            sys.exit(EXIT_USAGE)
        except OSError as e:
            click.echo(f"stepc: error: -o {out}: cannot write: {e.strerror or e}", err=True)
            sys.exit(EXIT_USAGE)
        click.echo(f"wrote {out}", err=True)
    else:
        click.echo(text, nl=False)
    emit_diagnostics(result)
    sys.exit(EXIT_OK)


def _heat_file(annotate: str) -> dict:
    """Node shading for `stepc dot --annotate FILE.json`."""
    from stepc.viz.dot import Heat

    try:
        with open(annotate, encoding="utf-8") as f:
            doc = json.load(f)
        heat = {k: Heat(float(v["fraction"]), str(v.get("note", "")))
                for k, v in doc["heat"].items()}
    except FileNotFoundError:
        raise click.UsageError(f"--annotate {annotate}: expected `analysis` or a JSON file "
                               "that exists") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise click.UsageError(f"--annotate {annotate}: expected JSON "
                               f"{{\"heat\": {{node: {{\"fraction\": ...}}}}}} ({e})") from None
    return heat


def _cost(report: CheckReport, binds, traces, onchip_model, config=None) -> Cost:
    """`Program.analyze` with --bind and --trace values (usage errors for bad ones)."""
    from stepc.api.errors import InputError

    values: dict[str, int] = {}
    for name, val in _pairs(binds, "--bind"):
        try:
            values[name] = int(val, 0)
        except ValueError:
            raise click.UsageError(f"--bind {name}: expected an integer, found {val!r}") \
                from None
    try:
        return report.program().analyze(hw=config, bind=values,
                                        traces=dict(_pairs(traces, "--trace")),
                                        onchip_model=onchip_model)
    except InputError as e:
        input_error(e, traces)


def run() -> None:
    """Entry point wrapper: never show a Python traceback for a stepc bug without context."""
    try:
        main(standalone_mode=True)
    except SystemExit as e:
        if _quick_exit:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, (int, type(None))):
                click.echo(e.code, err=True)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        raise
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - the last resort: exit 70 with a message
        click.echo(internal_error_message(e, debug="--debug" in sys.argv), err=True)
        if "--debug" in sys.argv:
            traceback.print_exc()
        sys.exit(EXIT_INTERNAL)


def internal_error_message(e: BaseException, debug: bool) -> str:
    """What exit 70 prints: the exception in one line, and how to get its traceback."""
    how = "the traceback is below" if debug else \
        "`stepc --debug COMMAND ...` prints the traceback to attach"
    return (f"stepc: internal error: {type(e).__name__}: {e}\n"
            f"this is a bug in stepc: please report it with the input that triggered it "
            f"({how})")
