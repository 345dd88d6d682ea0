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
    emit_diagnostics,
    input_error,
    pairs,
    parse_defines,
    presets,
    print_report,
    quick_exit,
)

if TYPE_CHECKING:
    from stepc.app.sim import Simulated


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
    from stepc.app import InputError, SimulationError, sim

    for flag, path in (("--out", out_dir), ("--inputs-out", inputs_out)):
        if path:
            check_output_path(flag, path, directory=True)
    if trace_out:
        check_output_path("--trace-out", trace_out)
    if print_config:
        try:
            click.echo(sim.configuration(hw, sets, _warn), nl=False)
        except InputError as e:
            input_error(e)
        sys.exit(EXIT_OK)
    if timing_only and functional:
        raise click.UsageError("--timing-only and --functional exclude each other")
    if (weights_prefix is not None or allow_missing_weights) and not weights:
        raise click.UsageError("--weights-prefix and --allow-missing-weights apply to --weights")
    if weights and timing_only:
        raise click.UsageError("--weights sets tensor values, which --timing-only does not "
                               "compute")
    try:
        with _progress() as progress:
            simulated = sim.simulate(
                file, parse_defines(defines), hw, sets, dict(pairs(traces, "--trace")),
                weights, weights_prefix, allow_missing_weights,
                True if timing_only else False if functional else None, max_cycles,
                trace_out is not None, progress, fifo_bytes, _warn, _note)
    except sim.WeightsError as e:
        click.echo(f"stepc: error: --weights {e.path}: {e}", err=True)
        sys.exit(EXIT_USAGE)
    except InputError as e:
        input_error(e, traces)
    except SimulationError as e:
        click.echo(e.located(), err=True)
        sys.exit(EXIT_PROGRAM)
    result = simulated.checked.compiled
    if not result.ok:
        emit_diagnostics(result)
        sys.exit(EXIT_USAGE if simulated.checked.unreadable else EXIT_PROGRAM)
    if fmt == "json":
        click.echo(json.dumps(simulated.to_dict(), indent=2, sort_keys=True))
    else:
        print_report(simulated.render)
    _write_sim_outputs(simulated.run, out_dir, trace_out)
    if inputs_out:
        _write_inputs(simulated, inputs_out)
    emit_diagnostics(result)
    if simulated.deadlock:
        click.echo(simulated.deadlock, err=True, nl=False)
        sys.exit(EXIT_DEADLOCK)
    sys.exit(EXIT_OK)


def _warn(text: str) -> None:
    click.echo(f"warning: {text}", err=True)


def _note(text: str) -> None:
    click.echo(f"note: {text}", err=True)


def _write_sim_outputs(run, out_dir: str | None, trace_out: str | None) -> None:
    """The files `sim` was asked for, each announced on stderr (after the report, so a
    failed write loses no result)."""
    from stepc.app.files import write_array, write_trace
    try:
        if trace_out:
            write_trace(trace_out, run)
            click.echo(f"wrote the Perfetto trace to {trace_out} (open it in ui.perfetto.dev "
                       "or chrome://tracing)", err=True)
        run = run.result
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


def _write_inputs(simulated: Simulated, inputs_out: str) -> None:
    """`--inputs-out`: the tensors a functional run started from, as .npy files."""
    from stepc.app import SimulationError
    from stepc.app.files import write_array
    if not simulated.run.functional:
        click.echo(f"--inputs-out {inputs_out}: nothing written: a timing-only run uses no "
                   "tensor values (--functional computes them)", err=True)
        return
    try:
        arrays = simulated.inputs()
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
