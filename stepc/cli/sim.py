"""The `stepc sim` command (registered by stepc.cli): one simulation, its report and the
files it was asked to write."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

import click

from stepc.cli.common import (
    DEFINE,
    EXIT_DEADLOCK,
    EXIT_OK,
    EXIT_PROGRAM,
    EXIT_USAGE,
    FORMAT,
    check_output_path,
    compiled_or_exit,
    emit_diagnostics,
    input_error,
    load_hw,
    pairs,
    presets,
    print_report,
    quick_exit,
)

if TYPE_CHECKING:
    from stepc.api.program import Program


@click.command("sim", short_help="Simulate a program cycle by cycle.")
@click.argument("file", type=str)
@DEFINE
@click.option("--hw", default=None, metavar="PRESET|FILE.toml",
              help=f"Hardware (presets: {presets('paper-eval')}; or a TOML file).")
@click.option("--set", "sets", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override one hardware setting, e.g. hbm.model=fluid (repeatable).")
@click.option("--trace", "traces", multiple=True, metavar="NAME=PATH",
              help="Drive the external stream NAME from a trace file (.npy, .npz, .csv).")
@click.option("--weights", "weights", default=None, metavar="FILE",
              help="Tensor values by name (.safetensors, or a PyTorch state dict read with "
              "weights_only): a module's weights and inputs for a program from `stepc "
              "from-torch`; keys match tensor names, dots read as underscores, under one "
              "prefix such as `model.layers.0.mlp.` (docs/torch.md).")
@click.option("--weights-prefix", default=None, metavar="PREFIX",
              help="Read the --weights entries under this key prefix (default: the one "
              "naming the most tensors).")
@click.option("--allow-missing-weights", is_flag=True,
              help="Weight tensors --weights lacks keep their declared initialiser (random) "
              "instead of being an error.")
@click.option("--timing-only", is_flag=True,
              help="Carry shapes, selectors and addresses but no tile values (faster; same "
              "cycles). The default for programs whose tensors exceed 256 MiB.")
@click.option("--functional", is_flag=True,
              help="Compute tile values even for programs with large tensors.")
@click.option("--out", "out_dir", default=None, metavar="DIR",
              help="Write output tensors as DIR/<tensor>.npy (functional mode).")
@click.option("--inputs-out", default=None, metavar="DIR",
              help="Write the input, weight and scratch tensors the run starts from as "
              "DIR/<tensor>.npy (functional mode), to check its outputs against.")
@click.option("--trace-out", default=None, metavar="FILE.json",
              help="Write a Chrome/Perfetto trace (one track per operator).")
@FORMAT
@click.option("--print-config", is_flag=True, help="Print the effective hardware config "
              "as TOML and exit.")
@click.option("--max-cycles", type=click.IntRange(min=1), default=None, metavar="N",
              help="Stop with an error if the run passes cycle N.")
@click.option("--fifo-bytes", is_flag=True, help="Also the bytes of every FIFO at its depth "
              "and the on-chip memory with them (docs/fifo.md).")
@quick_exit
def sim_cmd(file, defines, hw, sets, traces, weights, weights_prefix, allow_missing_weights,
            timing_only, functional, out_dir, inputs_out, trace_out, fmt, print_config,
            max_cycles, fifo_bytes):
    """Simulate a program cycle by cycle on a spatial dataflow accelerator model.

    \b
    Examples:
      stepc sim programs/moe_simple.step
      stepc sim programs/swiglu.step --hw hdl-validation --set hbm.model=fluid
      stepc sim programs/moe_static.step --trace routing=ids.npy --timing-only
      stepc sim programs/moe_simple.step --out results/ --trace-out run.json
    """
    from stepc.api.errors import Deadlock, InputError, SimulationError
    from stepc.api.results import FUNCTIONAL_LIMIT

    if out_dir:
        check_output_path("--out", out_dir, directory=True)
    if trace_out:
        check_output_path("--trace-out", trace_out)
    config = load_hw(hw, sets)
    if print_config:
        click.echo(config.to_toml(), nl=False)
        sys.exit(EXIT_OK)
    report = compiled_or_exit(file, defines)
    result = report.compiled
    if inputs_out:
        check_output_path("--inputs-out", inputs_out, directory=True)
    if timing_only and functional:
        raise click.UsageError("--timing-only and --functional exclude each other")
    if (weights_prefix is not None or allow_missing_weights) and not weights:
        raise click.UsageError("--weights-prefix and --allow-missing-weights apply to --weights")
    prog = report.program()
    values = (_load_weights(weights, prog, weights_prefix, allow_missing_weights)
              if weights else None)
    if values is not None and timing_only:
        raise click.UsageError("--weights sets tensor values, which --timing-only does not "
                               "compute")
    size = prog.tensor_bytes
    if not timing_only and not functional and size > FUNCTIONAL_LIMIT:
        timing_only = True
        click.echo(f"note: timing-only run: the tensors hold {size / 2**20:,.0f} MiB "
                   "(--functional computes values anyway)", err=True)
    deadlock = None
    try:
        with _progress() as progress:
            run = prog.simulate(hw=config, traces=dict(pairs(traces, "--trace")),
                                timing_only=timing_only, max_cycles=max_cycles,
                                trace_ops=trace_out is not None, progress=progress,
                                values=values)
    except InputError as e:
        input_error(e, traces)
    except SimulationError as e:
        click.echo(e.located(), err=True)
        sys.exit(EXIT_PROGRAM)
    except Deadlock as e:
        run, deadlock = e.run, e.report
    fifos = None
    if fifo_bytes:
        from stepc.app.fifo import fifo_totals
        fifos = fifo_totals(report.compiled, config, run.dims, run.on_chip_bytes)
    if fmt == "json":
        click.echo(json.dumps({**run.to_dict(), **(fifos or {})}, indent=2, sort_keys=True))
    else:
        print_report(run.render)
        if fifos:
            from stepc.report.fifo import fifo_line
            click.echo(fifo_line(fifos))
    _write_sim_outputs(run.result, out_dir, trace_out)
    if inputs_out:
        _write_inputs(prog, values, inputs_out, run.result.functional)
    emit_diagnostics(result)
    if deadlock:
        click.echo(deadlock, err=True, nl=False)
        sys.exit(EXIT_DEADLOCK)
    sys.exit(EXIT_OK)


def _load_weights(path: str, prog: Program, prefix: str | None,
                  allow_missing: bool) -> dict:
    """The program's tensor values from a weights file; a file that does not fit is a usage
    error (stepc.weights.match_weights says what fits)."""
    from stepc.api.errors import InputError
    try:
        values, notes = prog.weight_values(path, prefix, allow_missing)
    except InputError as e:
        click.echo(f"stepc: error: --weights {path}: {e}", err=True)
        sys.exit(EXIT_USAGE)
    for note in notes:
        click.echo(f"note: --weights: {note}", err=True)
    return values


def _write_sim_outputs(run, out_dir: str | None, trace_out: str | None) -> None:
    """The files `sim` was asked for, each announced on stderr (after the report, so a
    failed write loses no result)."""
    from stepc.api.files import write_array, write_trace
    try:
        if trace_out:
            write_trace(trace_out, run)
            click.echo(f"wrote the Perfetto trace to {trace_out} (open it in ui.perfetto.dev "
                       "or chrome://tracing)", err=True)
        if out_dir and not run.outputs:
            click.echo(f"--out {out_dir}: nothing written: a timing-only run computes no "
                       "tensor values (--functional computes them)", err=True)
        elif out_dir and run.deadlock:
            click.echo(f"--out {out_dir}: nothing written: the run deadlocked", err=True)
        elif out_dir:
            os.makedirs(out_dir, exist_ok=True)  # its parent was checked to exist
            names = sorted(run.outputs)
            for name in names:
                write_array(os.path.join(out_dir, f"{name}.npy"), run.outputs[name])
            click.echo(f"wrote {', '.join(f'{n}.npy' for n in names)} to {out_dir}",
                       err=True)
    except OSError as e:
        click.echo(f"stepc: error: cannot write {e.filename or 'the output'}: "
                   f"{e.strerror or e}", err=True)
        sys.exit(EXIT_USAGE)


def _write_inputs(prog, values, inputs_out: str, functional: bool) -> None:
    """`--inputs-out`: the tensors a functional run started from, as .npy files."""
    from stepc.api.errors import SimulationError
    from stepc.api.files import write_array
    if not functional:
        click.echo(f"--inputs-out {inputs_out}: nothing written: a timing-only run uses no "
                   "tensor values (--functional computes them)", err=True)
        return
    try:
        arrays = prog.inputs(values)
        os.makedirs(inputs_out, exist_ok=True)
        for name, array in sorted(arrays.items()):
            write_array(os.path.join(inputs_out, f"{name}.npy"), array)
    except SimulationError as e:
        click.echo(e.located(), err=True)
        sys.exit(EXIT_PROGRAM)
    except OSError as e:
        click.echo(f"stepc: error: cannot write {e.filename or 'the inputs'}: "
                   f"{e.strerror or e}", err=True)
        sys.exit(EXIT_USAGE)
    click.echo(f"wrote {', '.join(f'{n}.npy' for n in sorted(arrays))} to {inputs_out}",
               err=True)


class _progress:
    """A spinner with the simulated cycle on stderr, only on a terminal."""

    def __enter__(self):
        self.live = None
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
            self.live = Progress(SpinnerColumn(),
                                 TextColumn("simulating: cycle {task.fields[c]:,}"),
                                 TimeElapsedColumn(), console=Console(stderr=True),
                                 transient=True)
            self.live.__enter__()
            self.task = self.live.add_task("sim", total=None, c=0)
            return lambda t: self.live.update(self.task, c=t)
        return None

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.__exit__(*exc)
        return False
