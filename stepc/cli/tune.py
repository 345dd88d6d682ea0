"""The `stepc tune` command (registered by stepc.cli); the search lives in stepc.tune."""

from __future__ import annotations

import json
import os
import sys

import click

from stepc.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PROGRAM,
    check_output_path,
    pairs,
    parse_defines,
)
from stepc.cli.sweep import MAX_JOBS, _dask_client, grid_values
from stepc.hw.memory import confirming_models

TUNE_EXAMPLE = """\b
Examples:
  stepc tune programs/moe_static.step programs/moe_dynamic.step \\
      --space TILE_N=8..64:pow2 --budget on_chip_bytes=128MiB \\
      --objective cycles --trace routing=a.npz,b.npz --aggregate max -j 2 --out tune/
  stepc tune programs/moe_timemux.step --space R=4..128:pow2 \\
      --objective allocated_compute --budget 'cycles=1.05*min'
  stepc tune programs/moe_timemux.step --space R=4..128:pow2 \\
      --budget 'allocated_compute=0.5*max'
Exit codes: 0 a winner was found, 1 no schedule satisfies the budgets, 2 usage error,
130 interrupted (finished simulations are kept: rerun with --resume)."""


def _space_values(name: str, text: str) -> list:
    """Integers and ranges for params and numeric hardware keys; other hardware values
    (e.g. hbm.model=ref,dram) as given."""
    if "." in name:
        items = [v.strip() for v in text.split(",") if v.strip()]
        try:
            return [str(v) for v in grid_values(name, text)]
        except click.UsageError:
            if not items:
                raise
            return list(dict.fromkeys(items))
    return grid_values(name, text)


def _trace_paths(name: str, text: str) -> list[str]:
    """The files of `--trace NAME=a.npz,b.npz`; a pattern (`qwen_b64/*.npz`) is expanded."""
    import glob
    paths: list[str] = []
    for item in (p for p in text.split(",") if p):
        if glob.has_magic(item):
            found = sorted(glob.glob(item))
            if not found:
                raise click.UsageError(f"--trace {name}: no file matches {item}")
            paths += found
        elif not os.path.exists(item):
            raise click.UsageError(f"--trace {name}: no such file {item}")
        else:
            paths.append(item)
    return list(dict.fromkeys(paths))


@click.command("tune", epilog=TUNE_EXAMPLE,
               short_help="The best schedule under budgets, without the whole grid.")
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option("--space", "spaces", multiple=True, metavar="NAME=VALUES",
              help="A dimension: a param (16,32,64, 16..256, 16..256:pow2, 0..64:8) or a "
              "hardware key (hbm.channels=16,32). Several programs are one more dimension.")
@click.option("-D", "defines", multiple=True, metavar="NAME=VALUE",
              help="Fix a param of every program that declares it (repeatable).")
@click.option("--where", "wheres", multiple=True, metavar="EXPR",
              help="A condition between params, e.g. 'TILE_F <= F' (repeatable; points "
              "failing it are counted, not run).")
@click.option("--budget", "budgets", multiple=True, metavar="METRIC=LIMIT",
              help="An upper limit that must hold for every trace, e.g. "
              "on_chip_bytes=64MiB, allocated_compute=400000, cycles=2e6, or relative to "
              "the best value in the space, cycles=1.05*min, or to the largest value of an "
              "analysis metric, allocated_compute=0.5*max (repeatable).")
@click.option("--objective", "objectives", default="cycles", show_default=True,
              metavar="M[,M2]", help="The metric to minimise (max:METRIC maximises), or two "
              "for a Pareto front.")
@click.option("--trace", "traces", multiple=True, metavar="NAME=PATH1,PATH2,...",
              help="Trace files (or patterns like dir/*.npz) for an external stream; the "
              "objective is aggregated over them.")
@click.option("--aggregate", default="max", show_default=True, metavar="mean|max|pNN",
              help="How the objective combines traces.")
@click.option("--hw", default="paper-eval", show_default=True, metavar="PRESET|PATH",
              help="Hardware configuration.")
@click.option("--set", "sets", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override a hardware setting for every point (repeatable).")
@click.option("--model", default="ref", show_default=True,
              type=click.Choice(confirming_models()),
              help="The memory model that confirms the best candidates.")
@click.option("--margin", default=0.05, show_default=True, type=float,
              help="Keep candidates the fluid screen puts within this fraction of the best "
              "(see --confirm for which are simulated).")
@click.option("--confirm", "confirm_policy", type=click.Choice(["adaptive", "margin"]),
              default="adaptive", show_default=True,
              help="Which candidates within the margin the chosen model simulates: those "
              "that could still win after fluid's error seen on confirmed points of their "
              "program (adaptive), or all of them (margin).")
@click.option("--max-confirm", type=click.IntRange(min=1), default=None, metavar="N",
              help="Confirm at most N candidates.")
@click.option("--probe", type=click.IntRange(min=0), default=0, show_default=True,
              metavar="N", help="Screen and confirm the N lowest-bound candidates first, so "
              "the roofline prunes before the other fluid runs.")
@click.option("--sampler", type=click.Choice(["auto", "grid", "optuna"]), default="auto",
              show_default=True, help="Every point (grid), Optuna's TPE sampler (optuna), or "
              "grid up to --max-exhaustive points (auto).")
@click.option("--trials", type=click.IntRange(min=1), default=None, metavar="N",
              help="Candidates the sampler tries (default: a tenth of the space, at least 64).")
@click.option("--max-exhaustive", type=click.IntRange(min=1), default=512, show_default=True,
              metavar="N", help="Largest space --sampler auto enumerates.")
@click.option("--seed", type=int, default=0, show_default=True, help="The sampler's seed.")
@click.option("-j", "--jobs", type=click.IntRange(min=1, max=MAX_JOBS), default=None,
              metavar="N",
              help="Worker processes (default: the number of cores).")
@click.option("--out", default="tune", show_default=True, metavar="DIR",
              help="Directory of results.jsonl (confirmed runs), screen.jsonl (fluid runs), "
              "report.md and tune.json.")
@click.option("--resume", is_flag=True, help="Reuse the simulations of an earlier search in "
              "--out whose inputs are unchanged.")
@click.option("--backend", type=click.Choice(["local", "dask"]), default="local",
              show_default=True, help="Where points run: local processes or a Dask cluster.")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Dask scheduler address for --backend dask.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Print the report (text) or one JSON document.")
@click.option("--fifo-bytes", is_flag=True, help="On-chip bytes (budgets, objectives, the "
              "report) count every FIFO at its depth, as `stepc analyze --fifo-bytes`.")
def tune_cmd(files, spaces, defines, wheres, budgets, objectives, traces, aggregate, hw,
             sets, model, margin, confirm_policy, max_confirm, probe, sampler, trials,
             max_exhaustive, seed, jobs, out, resume, backend, scheduler, fmt, fifo_bytes):
    """Find the best schedule of .step programs under budgets without simulating the whole
    grid: exact analysis, roofline bound, fluid screen, then the chosen model confirms."""
    from stepc.app import InputError
    from stepc.app.tune import Interrupted, tune

    if scheduler and backend != "dask":
        raise click.UsageError("--scheduler needs --backend dask")
    check_output_path("--out", out, directory=True)
    try:
        params, hw_keys = {}, {}
        for name, text in pairs(spaces, "--space"):
            (hw_keys if "." in name else params)[name] = _space_values(name, text)
        fixed = parse_defines(defines)
        trace_sets = {n: _trace_paths(n, v) for n, v in pairs(traces, "--trace")}
        client = _dask_client(scheduler) if backend == "dask" else None
        try:
            outcome = tune(list(files), params, hw_keys, defines=fixed, wheres=wheres,
                           budgets=pairs(budgets, "--budget"),
                           objectives=[o.strip() for o in objectives.split(",") if o.strip()],
                           traces=trace_sets, aggregate=aggregate, hw=hw, sets=sets,
                           model=model, out=out, resume=resume, jobs=jobs,
                           executor=client.get_executor() if client else None,
                           margin=margin, confirm=confirm_policy, max_confirm=max_confirm,
                           probe=probe, sampler=sampler, trials=trials,
                           max_exhaustive=max_exhaustive, seed=seed, fifo_bytes=fifo_bytes,
                           log=lambda m: click.echo(m, err=True))
        finally:
            if client is not None:
                client.close()
    except InputError as e:
        raise click.UsageError(str(e)) from None
    except (Interrupted, KeyboardInterrupt):
        click.echo(f"interrupted: finished simulations are kept in {out}; continue with the "
                   "same command and --resume", err=True)
        sys.exit(EXIT_INTERRUPTED)
    report = outcome.markdown()
    doc = outcome.to_dict()
    with open(os.path.join(out, "report.md"), "w", encoding="utf-8") as f:
        f.write(report)
    with open(os.path.join(out, "tune.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
    if fmt == "json":
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        click.echo(report, nl=False)
        click.echo(f"wrote {os.path.join(out, 'report.md')}", err=True)
    sys.exit(EXIT_OK if outcome.found else EXIT_PROGRAM)
