"""`stepc import`: a STeP IR graph (the reference toolchain's ProgramGraph `.pb`) as a
readable `.step` program."""

from __future__ import annotations

import os
import sys

import click

from stepc.cli.common import EXIT_OK, EXIT_PROGRAM, EXIT_USAGE, check_new_output, quick_exit
from stepc.codes import UNREADABLE_FILE, UNREADABLE_GRAPH


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
    try:
        from stepc.api.program import import_graph
        from stepc.interop import GraphFileError, InteropError, InvalidGraphError
    except ImportError:
        click.echo("stepc: error: `import` needs protobuf: pip install 'stepc[interop]'",
                   err=True)
        sys.exit(EXIT_USAGE)
    try:
        imported = import_graph(graph, os.path.dirname(out) if out else None)
        if imported.refusal is not None:  # what it wrote does not check: nothing is written
            raise imported.refusal
    except GraphFileError as e:
        click.echo(f"stepc: error[{UNREADABLE_FILE}]: {e}", err=True)
        sys.exit(EXIT_USAGE)
    except InvalidGraphError as e:
        click.echo(f"stepc: error[{UNREADABLE_GRAPH}]: {e}", err=True)
        sys.exit(EXIT_USAGE)
    except InteropError as e:
        click.echo(f"stepc: error[{UNREADABLE_GRAPH}]: {e}", err=True)
        sys.exit(EXIT_PROGRAM)
    if out:
        from stepc.app.files import write_text
        write_text(out, imported.text)
        click.echo(f"wrote {out} ({imported.operators} operators)", err=True)
    else:
        click.echo(imported.text, nl=False)
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
    from stepc.cli.common import compiled_or_exit, input_error
    check_new_output("-o", out, force)
    side = os.path.splitext(out)[0] + ".npy"  # the side files' directory
    if os.path.exists(side) and not force:
        click.echo(f"stepc: error: {side} exists; --force overwrites it", err=True)
        sys.exit(EXIT_USAGE)
    try:
        from stepc.interop import InteropError
        from stepc.interop.export import export_program
    except ImportError:
        click.echo("stepc: error: `export` needs protobuf: pip install 'stepc[interop]'",
                   err=True)
        sys.exit(EXIT_USAGE)
    from stepc.api import InputError
    from stepc.api.inputs import hardware
    prog = compiled_or_exit(file, defines).program()
    try:
        config, _ = hardware(hw)
    except InputError as e:
        input_error(e)
    from stepc.api.inputs import trace_arrays
    try:
        arrays = trace_arrays(dict(t.partition("=")[::2] for t in traces))
    except InputError as e:
        input_error(e, traces)
    try:
        notes: list[str] = []
        data, files = export_program(prog, out, config, arrays, notes)
    except InteropError as e:
        click.echo(f"stepc: error[{UNREADABLE_GRAPH}]: {e}", err=True)
        sys.exit(EXIT_PROGRAM)
    import numpy as np
    for name, arr in files.items():
        os.makedirs(side, exist_ok=True)
        np.save(os.path.join(side, name), arr)
    with open(out, "wb") as f:
        f.write(data)
    click.echo(f"wrote {out} ({prog.operators} operators)" +
               (f" and {len(files)} side files in {side}" if files else ""), err=True)
    for note in notes:
        click.echo(f"stepc: note: {note}", err=True)
    sys.exit(EXIT_OK)
