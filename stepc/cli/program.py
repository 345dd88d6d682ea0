"""`stepc check`, `stepc analyze` and `stepc dot`: one program, checked, costed or drawn."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from stepc.cli.common import (
    DEFINE,
    EXIT_OK,
    EXIT_PROGRAM,
    EXIT_USAGE,
    FORMAT,
    check_output_path,
    emit_diagnostics,
    fewer_collections,
    input_error,
    int_pairs,
    pairs,
    parse_defines,
    presets,
    print_report,
    quick_exit,
    warn,
)

if TYPE_CHECKING:
    from stepc.api import CheckReport


@click.command("check", short_help="Type- and shape-check a program.")
@click.argument("file", type=str)
@DEFINE
@click.option("--types", "show_types", is_flag=True,
              help="Print every stream's inferred type and symbolic shape, in source order "
              "(loop iterations folded: `[*]`).")
@click.option("--all", "show_all", is_flag=True,
              help="With --types: list every loop iteration's streams, symbols and facts.")
@FORMAT
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
    from stepc.app import InputError
    from stepc.app.program import check

    try:
        checked = check(file, parse_defines(defines), show_types, show_all, printed_only=True)
    except InputError as e:
        input_error(e)
    report = checked.checked
    code = EXIT_USAGE if report.unreadable else _exit_code(report, werror)
    if fmt == "json":
        click.echo(json.dumps(checked.to_dict(), indent=2, sort_keys=True))
    else:
        if checked.lists_types:
            print_report(checked.render)
        emit_diagnostics(report.compiled, werror=werror)
    sys.exit(code)


def _exit_code(report: CheckReport, werror: bool) -> int:
    result = report.compiled
    if result.diagnostics.errors or result.typed is None:
        return EXIT_PROGRAM
    if werror and result.diagnostics.warnings:
        return EXIT_PROGRAM
    return EXIT_OK


@click.command("analyze", short_help="Traffic, on-chip memory, FLOPs and intensity.")
@click.argument("file", type=str)
@DEFINE
@click.option("--bind", "binds", multiple=True, metavar="SYMBOL=VALUE",
              help="Give a symbolic dim a value (repeatable).")
@click.option("--trace", "traces", multiple=True, metavar="NAME=PATH",
              help="Bind the external stream NAME to a trace file (.npy, .npz, .csv).")
@click.option("--hw", default=None, metavar="PRESET|FILE.toml",
              help=f"Hardware for the roofline bound (presets: {presets()}).")
@click.option("--set", "sets", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override one hardware setting (repeatable).")
@click.option("--onchip-model", type=click.Choice(["artifact", "paper"]), default="artifact",
              show_default=True, help="On-chip accounting: the evaluation's (artifact) or the "
              "paper's Section 4.2 equations (paper).")
@FORMAT
@click.option("--all", "show_all", is_flag=True, help="List every operator instance (not one "
              "row per statement), also those with no cost.")
@click.option("--fifo-bytes", is_flag=True, help="Also the bytes of every FIFO at its depth "
              "and the on-chip memory with them (docs/fifo.md).")
@click.option("--energy", is_flag=True, help="Also the energy lower bound and the area "
              "(the JSON document always has them with a hardware configuration; "
              "docs/energy.md).")
@quick_exit
@fewer_collections
def analyze_cmd(file: str, defines, binds, traces, hw, sets, onchip_model, fmt,
                show_all, fifo_bytes, energy) -> None:
    """Off-chip traffic, on-chip memory, FLOPs and operational intensity of a program,
    symbolic in its dynamic dims until --bind or --trace gives them values.

    \b
    Examples:
      stepc analyze programs/swiglu.step --hw paper-eval
      stepc analyze programs/moe_static.step --trace routing=ids.npy
      stepc analyze programs/moe_simple.step --bind D_0=4 --bind D_1=6 --format json
    """
    from stepc.app import InputError
    from stepc.app.program import analyze

    defined, bound, traced = parse_defines(defines), int_pairs(binds, "--bind"), \
        dict(pairs(traces, "--trace"))
    try:
        analyzed = analyze(file, defined, hw, sets, bound, traced, onchip_model, fifo_bytes,
                           show_all, energy)
    except InputError as e:
        input_error(e, traces)
    warn(analyzed.warnings)
    result = analyzed.checked.compiled
    if not result.ok:
        emit_diagnostics(result)
        sys.exit(EXIT_USAGE if analyzed.checked.unreadable else EXIT_PROGRAM)
    if fmt == "json":
        click.echo(json.dumps(analyzed.to_dict(), indent=2, sort_keys=True))
    else:
        print_report(analyzed.render)
        emit_diagnostics(result)
    sys.exit(EXIT_OK)


@click.command("dot", short_help="Draw a program's graph (DOT, SVG, PNG, PDF).")
@click.argument("file", type=str)
@DEFINE
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
    from stepc.app import InputError
    from stepc.app.files import DrawingError, check_drawing, write_drawing
    from stepc.app.program import draw

    to_file = out is not None and out != "-"
    if to_file:
        check_output_path("-o", out)
        try:
            check_drawing(out, force)
        except DrawingError as e:
            raise click.UsageError(str(e)) from None
    defined = parse_defines(defines)
    bound, traced = (int_pairs(binds, "--bind"), dict(pairs(traces, "--trace"))) \
        if annotate == "analysis" else ({}, {})
    try:
        drawing = draw(file, defined, collapse, annotate, bound, traced, onchip_model)
    except InputError as e:
        input_error(e, traces)
    result = drawing.checked.compiled
    if not result.ok:
        emit_diagnostics(result)
        sys.exit(EXIT_USAGE if drawing.checked.unreadable else EXIT_PROGRAM)
    if drawing.illegible:
        click.echo(f"stepc: warning: the graph has {drawing.operators:,} operators: drawn "
                   "whole, its text is too small to read; --collapse folds identical loop "
                   "iterations into one cluster each", err=True)
    if to_file:
        try:
            write_drawing(drawing.text, out, force)
        except DrawingError as e:
            click.echo(f"stepc: error: {e}", err=True)
            sys.exit(EXIT_USAGE)
        except OSError as e:
            click.echo(f"stepc: error: -o {out}: cannot write: {e.strerror or e}", err=True)
            sys.exit(EXIT_USAGE)
        click.echo(f"wrote {out}", err=True)
    else:
        click.echo(drawing.text, nl=False)
    emit_diagnostics(result)
    sys.exit(EXIT_OK)
