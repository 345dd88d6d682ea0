"""The `stepc fifo` command (registered by stepc.cli): FIFO sizing and deadlock freedom."""

from __future__ import annotations

import json
import sys

import click

from stepc.app.study import MAX_JOBS
from stepc.cli.common import (
    DEFINE,
    EXIT_DEADLOCK,
    EXIT_OK,
    EXIT_PROGRAM,
    FORMAT,
    check_output_path,
    emit_diagnostics,
    exit_on_errors,
    input_error,
    pairs,
    parse_defines,
    presets,
    print_report,
    quick_exit,
)


@click.command("fifo", short_help="FIFO depths: deadlock minima and throughput depths.")
@click.argument("file", type=str)
@DEFINE
@click.option("--hw", default=None, metavar="PRESET|FILE.toml",
              help=f"Hardware (presets: {presets('paper-eval')}; or a TOML file).")
@click.option("--set", "sets", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override one hardware setting, e.g. fabric.fifo_depth=4 (repeatable).")
@click.option("--trace", "traces", multiple=True, metavar="NAME=PATH",
              help="Drive the external stream NAME from a trace file (.npy, .npz, .csv).")
@click.option("--tolerance", type=click.FloatRange(0, 10), default=1.0, show_default=True,
              metavar="PERCENT", help="Throughput depths keep the cycles within this many "
              "percent of a run with unbounded FIFOs.")
@click.option("--static", "static_only", is_flag=True,
              help="Only the static analysis: no simulations, no throughput depths.")
@click.option("--all", "show_all", is_flag=True,
              help="List every FIFO, not only those on reconvergent paths or deepened.")
@click.option("--apply", "apply_depths", is_flag=True,
              help="Write the searched depths into FILE and the files it imports as "
              "`depth=` attributes (formatted like `stepc fmt`), as the confirmation run "
              "compiled them.")
@click.option("-j", "--jobs", type=click.IntRange(min=1, max=MAX_JOBS), default=None,
              metavar="N", help="Simulations the search runs at once where they are "
              "independent (default: the number of cores); the depths do not depend on it.")
@FORMAT
@quick_exit
def fifo_cmd(file, defines, hw, sets, traces, tolerance, static_only, show_all, apply_depths,
             jobs, fmt):
    """How deep each FIFO of a program must be: the depth below which a FIFO on a
    reconvergent path must deadlock (static, from the stream shapes), feedback loops no
    depth can start, and the smallest depths at which simulated cycles stay within
    --tolerance of unbounded FIFOs, with the FIFO bytes they cost.

    Every answer is confirmed: the program with the depths written into its text is
    compiled and simulated, and its cycles and FIFO bytes must be the search's.

    Exit codes: 0 ok, 1 program errors or depths the confirmation run does not reproduce,
    2 usage error, 3 no depth makes the program complete (a dead feedback loop, or a
    deadlock with unbounded FIFOs).

    \b
    Examples:
      stepc fifo programs/moe_simple.step
      stepc fifo programs/moe_static.step -D B=1024 -D TILE_N=16 --tolerance 2
      stepc fifo programs/swiglu.step --static --format json
      stepc fifo my.step --tolerance 2 --apply
    """
    from stepc.app import InputError, SimulationError
    from stepc.app.fifo import size_fifos

    if static_only and jobs is not None:
        raise click.UsageError("--jobs sets the search's simulations: drop --static")
    if apply_depths:
        if static_only:
            raise click.UsageError("--apply writes the searched depths: drop --static")
        if file == "-" or not file.endswith(".step"):
            raise click.UsageError(f"--apply {file}: depths are written into a .step file")
        check_output_path("--apply", file)
    try:
        sizing = size_fifos(file, parse_defines(defines), hw, sets,
                            dict(pairs(traces, "--trace")), tolerance / 100,
                            search=not static_only, apply=apply_depths, warn=warning,
                            jobs=jobs)
    except InputError as e:
        input_error(e, traces)
    except SimulationError as e:
        click.echo(e.located(), err=True)
        sys.exit(EXIT_PROGRAM)
    exit_on_errors(sizing.checked)
    if fmt == "json":
        click.echo(json.dumps(sizing.to_dict(), indent=2, sort_keys=True))
    else:
        print_report(lambda console: sizing.render(console, show_all))
    emit_diagnostics(sizing.checked.compiled)
    if sizing.report is not None and not sizing.report.deadlock_free:
        sys.exit(EXIT_DEADLOCK)
    if sizing.apply_error is not None:
        input_error(sizing.apply_error, traces)
    if sizing.applied is not None:
        edited, written = sizing.applied
        click.echo(f"{file}: depth= set on {edited} call{'s' if edited != 1 else ''}"
                   + (f" in {', '.join(written)}" if written else ""), err=True)
    sys.exit(EXIT_OK)


def warning(text: str) -> None:
    """A setting the run will not read, as `stepc` warns of it."""
    click.echo(f"warning: {text}", err=True)
