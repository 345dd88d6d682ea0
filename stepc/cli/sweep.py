"""The `stepc sweep` command (registered by stepc.cli), with what tune and reproduce share.

Exit codes beyond stepc's usual ones: `sweep` exits 1 when any point failed (3 when the
only failures are deadlocks), and 130 on Ctrl-C after stopping its workers, with every
finished point kept for `--resume`.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys

import click

from stepc.app.study import MAX_JOBS
from stepc.cli.common import (
    EXIT_DEADLOCK,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PROGRAM,
    check_output_path,
    input_error,
    pairs,
    parse_defines,
    print_report,
)
from stepc.diagnostics import render_text

MAX_POINTS = 10_000  # values of one --grid range
_RANGE = re.compile(r"(-?\w+)\.\.(-?\w+)(?::(\w+))?")


def grid_values(name: str, text: str) -> list[int]:
    """The values of `--grid NAME=...`: integers and ranges, comma-separated: `16,32`,
    `16..256` (every integer, both ends included), `16..256:pow2` (powers of two),
    `0..64:8` (step 8). Repeated values count once."""
    values: list[int] = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        m = _RANGE.fullmatch(item)
        try:
            if m is None:
                values.append(int(item, 0))
                continue
            lo, hi, step = int(m.group(1), 0), int(m.group(2), 0), m.group(3)
        except ValueError:
            raise click.UsageError(f"--grid {name}: expected integers or ranges like 16..256 "
                                   f"or 16..256:pow2, found {item!r}") from None
        if lo > hi:
            raise click.UsageError(f"--grid {name}: range {item} runs backwards")
        if step == "pow2":
            found = [1 << k for k in range(max(lo, 1).bit_length() - 1, hi.bit_length())
                     if lo <= 1 << k <= hi]
            if not found:
                raise click.UsageError(f"--grid {name}: no power of two in {lo}..{hi}")
        else:
            try:
                by = int(step or "1", 0)
            except ValueError:
                raise click.UsageError(f"--grid {name}: range step {step!r} is not `pow2` or "
                                       "a positive integer") from None
            if by < 1:
                raise click.UsageError(f"--grid {name}: range step must be positive")
            if (hi - lo) // by >= MAX_POINTS:
                raise click.UsageError(f"--grid {name}: {item} has more than {MAX_POINTS:,} "
                                       "values")
            found = list(range(lo, hi + 1, by))
        values += found
    if not values:
        raise click.UsageError(f"--grid {name}: no values")
    return list(dict.fromkeys(values))


def _interrupted(finished: int, total: int, out: str, again: str) -> None:
    click.echo(f"interrupted: {finished} of {total} points finished, kept in {out}; "
               f"{again}", err=True)
    sys.exit(EXIT_INTERRUPTED)


SWEEP_EXAMPLE = """\b
Examples:
  stepc sweep programs/swiglu.step --hw hdl-validation --grid TB=16,32,64 --grid TI=16..256:pow2
  stepc sweep programs/moe_static.step programs/moe_dynamic.step -D B=64 \\
      --grid TILE_N=8..64:pow2 --trace routing=a.npz,b.npz --pareto cycles,on_chip_bytes \\
      --on-demand program=moe_dynamic.step --baseline program=moe_static.step
Exit codes: 0 every point ran, 1 a point failed (3: only deadlocks), 2 usage error,
130 interrupted (finished points are kept: rerun with --resume)."""


@click.command("sweep", epilog=SWEEP_EXAMPLE)
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option("-D", "defines", multiple=True, metavar="NAME=VALUE",
              help="Fix a `param` of every program for every point (repeatable).")
@click.option("--grid", "grids", multiple=True, metavar="NAME=VALUES",
              help="Values of a param to sweep, e.g. 16,32,64, 16..256 (every integer), "
              "16..256:pow2 or 0..64:8 (once per param, repeatable over params; the cross "
              "product is run). A program that does not declare the param runs once per "
              "value of the others.")
@click.option("--hw", "hws", multiple=True, metavar="PRESET|PATH",
              help="Hardware configurations to sweep (repeatable; default: paper-eval).")
@click.option("--set", "sets", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override a hardware setting for every point (repeatable).")
@click.option("--trace", "traces", multiple=True, metavar="NAME=PATH1,PATH2,...",
              help="Trace files for an external stream (swept like a param).")
@click.option("-j", "--jobs", type=click.IntRange(min=1, max=MAX_JOBS), default=None,
              metavar="N",
              help="Worker processes (default: the number of cores).")
@click.option("--out", default="results.jsonl", show_default=True, metavar="FILE.jsonl",
              help="Results, one JSON line per finished point.")
@click.option("--resume", is_flag=True, help="Continue a sweep in --out: skip the points it "
              "finished whose program, traces, hardware and stepc are unchanged; rerun the "
              "others (failed ones too).")
@click.option("--timing-only/--functional", "timing_only", default=True,
              help="Carry no tile values (the default; same cycles) or compute them.")
@click.option("--pareto", default=None, metavar="M1,M2",
              help="Print the Pareto-optimal points over these metrics (minimised), e.g. "
              "cycles,on_chip_bytes.")
@click.option("--baseline", "baselines", multiple=True, metavar="FIELD=VALUE",
              help="Select the baseline points (e.g. program=programs/moe_static.step); "
              "the others get their Pareto Improvement Distance to the baseline front.")
@click.option("--on-demand", "on_demand", multiple=True, metavar="FIELD=VALUE",
              help="With --pareto: charge these points (e.g. program=moe_dynamic.step) "
              "on_chip_bytes_on_demand where a metric is on_chip_bytes: the buffers in use, "
              "as the paper's Figure 9 charges dynamic tiling against static tiling's "
              "allocated buffers.")
@click.option("--backend", type=click.Choice(["local", "dask"]), default="local",
              show_default=True, help="Where points run: a local process pool or a Dask "
              "cluster (--scheduler); programs and traces are read here and shipped.")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Dask scheduler address for --backend dask.")
def sweep_cmd(files, defines, grids, hws, sets, traces, jobs, out, resume, timing_only,
              pareto, baselines, on_demand, backend, scheduler):
    """Run every combination of params x hardware x traces of .step programs, in parallel,
    and compare the points."""
    check_output_path("--out", out)  # a directory or an unwritable place first: --resume
    if os.path.lexists(out) and not resume:  # cannot help those (before anything is compiled)
        raise click.UsageError(f"--out {out} exists: add --resume to continue that sweep, or "
                               "choose another file")
    try:
        _sweep(files, defines, grids, hws, sets, traces, jobs, out, resume, timing_only,
               pareto, baselines, on_demand, backend, scheduler)
    except KeyboardInterrupt:  # before the points ran, or a second Ctrl-C
        if os.path.exists(out):
            click.echo(f"interrupted: finished points are kept in {out}: continue with the "
                       "same command and --resume", err=True)
        else:
            click.echo(f"interrupted before any point finished: nothing was written to {out}",
                       err=True)
        sys.exit(EXIT_INTERRUPTED)


def _sweep(files, defines, grids, hws, sets, traces, jobs, out, resume, timing_only,
           pareto, baselines, on_demand, backend, scheduler) -> None:
    from rich.console import Console

    from stepc.app import InputError
    from stepc.app.study import Interrupted, sweep
    from stepc.diagnostics import StepError

    if scheduler and backend != "dask":
        raise click.UsageError("--scheduler needs --backend dask")
    if baselines and not pareto:
        raise click.UsageError("--baseline needs --pareto (the metrics of the front)")
    if on_demand and not pareto:
        raise click.UsageError("--on-demand needs --pareto (it changes what a front charges)")
    if on_demand and pareto and "on_chip_bytes" not in pareto.split(","):
        raise click.UsageError("--on-demand charges on_chip_bytes: give it in --pareto")
    fixed = parse_defines(defines)
    grid: dict[str, list[int]] = {}
    for name, values in pairs(grids, "--grid"):
        if name in grid:
            raise click.UsageError(f"--grid {name} is given twice: list every value in one "
                                   f"--grid {name}=... (e.g. 8,16,32 or 8..32:pow2)")
        grid[name] = grid_values(name, values)
    trace_sets = {name: [p for p in paths.split(",") if p] for name, paths in
                  pairs(traces, "--trace")}
    try:
        outcome = sweep(list(files), grid, fixed, hws or ("paper-eval",), sets, trace_sets,
                        timing_only, jobs, out, resume,
                        connect=(lambda: dask_executor(scheduler)) if backend == "dask"
                        else None,
                        progress=lambda total: sweep_progress(Console(stderr=True), total),
                        log=lambda line: click.echo(line, err=True))
    except InputError as e:
        input_error(e)
    except StepError as e:  # a program with errors
        click.echo(render_text(e.diagnostics, e.sources or {}), err=True, nl=False)
        sys.exit(EXIT_PROGRAM)
    except Interrupted as e:
        _interrupted(e.finished, e.total, out, "continue with the same command and --resume")
    click.echo(outcome.written(), err=True)

    def report(console) -> None:
        outcome.render(console)
        for line in outcome.errors():
            click.echo(line, err=True)
    print_report(report)
    if pareto:
        try:
            front = outcome.pareto(pareto.split(","), pairs(baselines, "--baseline"),
                                   pairs(on_demand, "--on-demand"))
        except InputError as e:
            raise click.UsageError(str(e)) from None
        for line in front.lines():
            click.echo(line)
        if front.missing_baseline:
            raise click.UsageError("--baseline selects no point")
    failed = outcome.failures()
    if failed:
        kinds = ", ".join(f"{n} {s}" for s, n in sorted(failed.items()))
        click.echo(f"stepc: {sum(failed.values())} of {len(outcome.records)} points failed "
                   f"({kinds}); --resume reruns them", err=True)
        sys.exit(EXIT_PROGRAM if failed.get("error") else EXIT_DEADLOCK)
    sys.exit(EXIT_OK)


@contextlib.contextmanager
def dask_executor(scheduler):
    """The executor of a Dask cluster at `scheduler`, closed when the sweep ends."""
    client = _dask_client(scheduler)
    try:
        yield client.get_executor()
    finally:
        client.close()


def _dask_client(scheduler):
    try:
        from distributed import Client
    except ImportError:
        raise click.UsageError("--backend dask needs Dask distributed: pip install "
                               "'stepc[dask]'") from None
    if not scheduler:
        raise click.UsageError("--backend dask needs --scheduler ADDRESS")
    try:
        return Client(scheduler, timeout=10)
    except (OSError, TimeoutError, ValueError) as e:
        raise click.UsageError(f"--scheduler {scheduler}: cannot connect ({e})") from None


class sweep_progress:
    """A progress bar over points on stderr (only on a terminal)."""

    def __init__(self, console, total: int):
        self.console, self.total = console, total

    def __enter__(self):
        if not self.console.is_terminal:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
        self.bar = Progress(BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=self.console, transient=True)
        self.bar.__enter__()
        self.task = self.bar.add_task("sweep", total=self.total or None)
        return lambda rec: self.bar.advance(self.task)

    def __exit__(self, *exc):
        if self.console.is_terminal:
            self.bar.__exit__(*exc)
        return False
