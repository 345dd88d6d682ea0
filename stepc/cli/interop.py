"""`stepc import`: a STeP IR graph (the reference toolchain's ProgramGraph `.pb`) as a
readable `.step` program; `stepc export`: a program as such a graph."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, NoReturn

import click

from stepc.cli.common import EXIT_OK, EXIT_PROGRAM, EXIT_USAGE, check_new_output, quick_exit
from stepc.diagnostics import render_text

if TYPE_CHECKING:
    from rich.console import Console

    from stepc.app import StepError


@click.command("import", short_help="Read a STeP IR graph (.pb) as a .step program.")
@click.argument("graph", metavar="GRAPH.pb")
@click.option("-o", "--output", "out", default=None, metavar="FILE.step",
              help="Write the program here (default: standard output).")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@quick_exit
def import_cmd(graph, out, force):
    """Read GRAPH.pb, a ProgramGraph written by the reference toolchain's serializer, and
    write the same program in stepc's language: one statement per operator, named after the
    operator's debug name, with its id in a comment. Selector files the graph names are read
    from beside it (or its `.npy/` directory) as the external streams' data.

    `stepc check|analyze|sim|dot GRAPH.pb` import the graph the same way, without a file.

    \b
    Examples:
      stepc import graphs/swiglu.pb -o swiglu_imported.step
      stepc analyze graphs/qwen3_moe_b64_static16.pb
    """
    if out:
        check_new_output("-o", out, force)
    from stepc.app import InputError, StepError
    from stepc.app.interop import NeedsProtobuf, import_graph
    try:
        result = import_graph(graph, out)
    except NeedsProtobuf:
        needs_protobuf("import")
    except InputError as e:
        coded_error(e, EXIT_USAGE)
    except StepError as e:
        coded_error(e, EXIT_PROGRAM)
    if out:
        result.render(stderr_console())
    else:
        click.echo(result.text, nl=False)
    sys.exit(EXIT_OK)


@click.command("export", short_help="Write a .step program as a STeP IR graph (.pb).")
@click.argument("file", metavar="FILE.step")
@click.option("-o", "--output", "out", required=True, metavar="GRAPH.pb",
              help="Write the graph here.")
@click.option("-D", "defines", multiple=True, metavar="NAME=VALUE",
              help="Override a param (repeatable).")
@click.option("--hw", default="paper-eval", show_default=True, metavar="PRESET|FILE.toml",
              help="The hardware whose compute_bw and par_dispatch fill in what the program "
              "leaves to the hardware (the format has no defaults).")
@click.option("--trace", "traces", multiple=True, metavar="NAME=PATH",
              help="The data of an external stream (repeatable), written as the graph's "
              "selector or metadata file, with the integer counts computed from it (KV "
              "tile counts); default: the stream's seeded generator, as `stepc sim` uses.")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@quick_exit
def export_cmd(file, out, defines, hw, traces, force):
    """Write FILE.step as a ProgramGraph the reference toolchain reads: one operation per
    operator, ids in source order. Operators the format cannot say are refused by name.

    \b
    Example:
      stepc export programs/swiglu.step -D TB=32 --hw hdl-validation -o swiglu.pb
    """
    from stepc.cli.common import input_error, parse_defines
    check_new_output("-o", out, force)
    from stepc.app import InputError, StepError
    from stepc.app.interop import NeedsProtobuf, export_graph, side_directory
    side = side_directory(out)
    if os.path.exists(side) and not force:
        click.echo(f"stepc: error: {side} exists; --force overwrites it", err=True)
        sys.exit(EXIT_USAGE)
    try:
        result = export_graph(file, out, parse_defines(defines), hw,
                              dict(t.partition("=")[::2] for t in traces))
    except NeedsProtobuf:
        needs_protobuf("export")
    except InputError as e:
        input_error(e, traces)
    except StepError as e:  # a program the format cannot say
        coded_error(e, EXIT_PROGRAM)
    if not result.ok:
        click.echo(render_text(result.diagnostics, result.sources), err=True, nl=False)
        sys.exit(EXIT_PROGRAM)
    result.render(stderr_console())
    sys.exit(EXIT_OK)


def needs_protobuf(command: str) -> NoReturn:
    click.echo(f"stepc: error: `{command}` needs protobuf: pip install 'stepc[interop]'",
               err=True)
    sys.exit(EXIT_USAGE)


def coded_error(e: StepError, code: int) -> NoReturn:
    """The interop error `e` as one line, `stepc: error[CODE]: message`, then exit `code`."""
    for d in e.diagnostics:
        click.echo(f"stepc: error[{d.code}]: {d.message}", err=True)
    sys.exit(code)


def stderr_console() -> Console:
    """A plain console on standard error, for what a command reports beside its output."""
    from rich.console import Console
    return Console(file=sys.stderr, highlight=False, color_system=None, emoji=False,
                   soft_wrap=True)
