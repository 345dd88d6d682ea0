"""The `stepc plot` and `stepc reproduce` commands (registered by stepc.cli): figures from a
sweep's results, and the paper's figures run, checked and reported.

`reproduce` exits 1 when any point failed, and 130 on Ctrl-C after stopping its workers,
with every finished point kept for the next run.
"""

from __future__ import annotations

import os
import sys

import click

from stepc.app.study import MAX_JOBS
from stepc.cli.common import EXIT_INTERRUPTED, EXIT_OK, EXIT_PROGRAM, check_output_path, pairs
from stepc.cli.sweep import sweep_progress
from stepc.hw.memory import MEMORY_MODELS

PLOT_EXAMPLE = """\b
Examples:
  stepc plot results.jsonl --x on_chip_bytes --y cycles --label TI --group TB -o pareto.png
  stepc plot results.jsonl --bar cycles --relative-to TB=16 --relative-to TI=16 -o up.svg"""


@click.command("plot", epilog=PLOT_EXAMPLE)
@click.argument("results", type=str, metavar="RESULTS.jsonl")
@click.option("--x", "x", default="on_chip_bytes", show_default=True, metavar="METRIC",
              help="Metric on the x axis of a scatter plot.")
@click.option("--y", "y", default="cycles", show_default=True, metavar="METRIC",
              help="Metric on the y axis of a scatter plot.")
@click.option("--label", default=None, metavar="PARAM",
              help="Label points (bars: name bars) with a param's value.")
@click.option("--group", default=None, metavar="FIELD",
              help="One series (bars: one colour) per value of this field or param "
              "[scatter default: program].")
@click.option("--logx", is_flag=True, help="Logarithmic x axis (scatter plots).")
@click.option("--logy", is_flag=True, help="Logarithmic y (value) axis.")
@click.option("--bar", "bar_metric", default=None, metavar="METRIC",
              help="A bar chart of this metric instead of a scatter plot.")
@click.option("--relative-to", "relative", multiple=True, metavar="FIELD=VALUE",
              help="With --bar: divide the baseline point's metric by each point's (a "
              "speedup, for cycles). Repeatable: together the FIELD=VALUE pairs must select "
              "exactly one point (e.g. --relative-to TB=16 --relative-to TI=16).")
@click.option("-o", "--output", "out", required=True, metavar="FILE.png|svg|pdf",
              help="The picture to write.")
@click.option("--force", is_flag=True, help="Overwrite FILE even if stepc did not write it.")
@click.pass_context
def plot_cmd(ctx, results, x, y, label, group, logx, logy, bar_metric, relative, out, force):
    """Plot sweep results: Pareto scatter plots (default) or bar charts. A point run more
    than once (a resumed sweep) is plotted from its last record."""
    from stepc.app import InputError
    from stepc.app.study import plot

    def given(name: str) -> bool:
        return ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE

    if bar_metric:
        ignored = [f"--{n}" for n in ("x", "y", "logx") if given(n)]
        if ignored:
            raise click.UsageError(f"{', '.join(ignored)}: not for bar charts (--bar); "
                                   "--logy, --label and --group are")
    elif relative:
        raise click.UsageError("--relative-to needs --bar")
    if not os.path.exists(results):
        raise click.UsageError(f"no such results file: {results}")
    check_output_path("-o", out)
    try:
        plotted = plot(results, out, bar=bar_metric, x=x, y=y, label=label, group=group,
                       logx=logx, logy=logy, relative=dict(pairs(relative, "--relative-to")),
                       force=force)
    except InputError as e:  # a results file, format, metric, selector or missing extra
        raise click.UsageError(str(e)) from None
    shown = plotted.shown
    click.echo(f"wrote {out} ({shown} point{'s' if shown != 1 else ''})", err=True)
    sys.exit(EXIT_OK)


def _figures() -> str:
    from stepc.app.study import figure_names  # light: help loads no sympy
    return ", ".join(figure_names())


REPRODUCE_EXAMPLE = """\b
Examples:
  stepc reproduce 9 --data ../shared/data -j 2
  stepc reproduce all --data ../shared/data --out reproduction --fresh
Exit codes: 0 every point ran (the verdicts are in the reports), 1 a point failed,
2 usage error, 130 interrupted (finished points are kept: run the command again)."""


@click.command("reproduce", epilog=REPRODUCE_EXAMPLE,
               help=f"""Reproduce a figure of the paper's evaluation: run its points, put
stepc's numbers beside the paper's claims in DIR/fig<N>/report.md.

FIGURE is one of {_figures()}, or `all`. A rerun reuses the points of an earlier run in DIR
whose program, traces, hardware and stepc are unchanged (--fresh: none).""")
@click.argument("figure", metavar="FIGURE")
@click.option("--data", default=None, metavar="DIR",
              help="The paper's data (expert_routing/, azure_kv_trace/, fig8/); without it, "
              "seeded synthetic traces, and claims on reference data are not judged.")
@click.option("--out", "out_dir", default="reproduction", show_default=True, metavar="DIR",
              help="Results, CSV, plots and report per figure.")
@click.option("-j", "--jobs", type=click.IntRange(min=1, max=MAX_JOBS), default=None,
              metavar="N",
              help="Worker processes (default: the number of cores).")
@click.option("--model", type=click.Choice(list(MEMORY_MODELS)), default="ref",
              show_default=True, help="Off-chip memory model (dram: HBM2 with the preset's "
              "channels, see docs/dram.md).")
@click.option("--fresh", is_flag=True, help="Simulate every point again instead of reusing "
              "an earlier run's records in DIR.")
def reproduce_cmd(figure, data, out_dir, jobs, model, fresh):
    from rich.console import Console

    from stepc.app import InputError
    from stepc.app.study import Interrupted, figure_names, reproduce

    failed = 0
    # the figure being collected
    current = [figure_names()[0] if figure == "all" else figure.removeprefix("fig")]

    def collecting(figure: str) -> None:
        current[0] = figure

    try:
        for done in reproduce(figure, data, out_dir, jobs, model, fresh,
                              progress=sweep_progress(Console(stderr=True), 0),
                              on_figure=collecting):
            click.echo(done.line())
            failed += done.failed_points
    except InputError as e:
        raise click.UsageError(str(e)) from None
    except (Interrupted, KeyboardInterrupt) as e:
        finished = f"{e.finished} of {e.total} points" if isinstance(e, Interrupted) \
            else "the finished points"
        fig = current[0]
        click.echo(f"interrupted: figure {fig}: {finished} finished, kept in "
                   f"{os.path.join(out_dir, f'fig{fig}', 'results.jsonl')}; run the same "
                   "command again to continue", err=True)
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(EXIT_PROGRAM if failed else EXIT_OK)
