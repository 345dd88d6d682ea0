"""`stepc import`: a STeP IR graph (the reference toolchain's ProgramGraph `.pb`) as a
readable `.step` program."""

from __future__ import annotations

import os
import sys

import click

from stepc.cli import EXIT_OK, EXIT_PROGRAM, EXIT_USAGE, check_output_path, quick_exit


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
        check_output_path("-o", out)
        if os.path.exists(out) and not force:
            click.echo(f"stepc: error: {out} exists; --force overwrites it", err=True)
            sys.exit(EXIT_USAGE)
    try:
        from stepc.interop import InteropError, import_graph
    except ImportError:
        click.echo("stepc: error: `import` needs protobuf: pip install 'stepc[interop]'",
                   err=True)
        sys.exit(EXIT_USAGE)
    try:
        imported = import_graph(graph, os.path.dirname(out) if out else None)
    except InteropError as e:
        click.echo(f"stepc: error[E0005]: {e}", err=True)
        sys.exit(EXIT_PROGRAM)
    if out:
        with open(out, "w") as f:
            f.write(imported.text)
        click.echo(f"wrote {out} ({imported.operators} operators)", err=True)
    else:
        click.echo(imported.text, nl=False)
    sys.exit(EXIT_OK)
