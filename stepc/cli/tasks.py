"""`stepc tasks list|show|check`: the agent task suite (stepc.tasks, through the API)."""

from __future__ import annotations

import json
import sys
import textwrap

import click

from stepc.cli.common import EXIT_OK, EXIT_PROGRAM, FORMAT, input_error

CHECK_EPILOG = """\b
Examples:
  stepc tasks list
  stepc tasks show softmax
  stepc tasks check softmax mine.step --seed 3
Exit codes: 0 the solution passes, 1 it fails (rejected, wrong values, deadlock, too slow),
2 usage error (unknown task, missing file, bad option)."""


@click.group("tasks", short_help="Kernel-writing tasks with checkers and rewards.")
def tasks_cmd() -> None:
    """Kernel-writing tasks (GEMM, attention, MoE, ...) for agents and people: each has a
    statement, a fixed interface, a numpy reference and a reference solution; `check` runs
    a candidate `.step` solution on fresh inputs and scores it."""


@tasks_cmd.command("list", short_help="The tasks, one per line.")
@FORMAT
def list_cmd(fmt: str) -> None:
    """The tasks: name, family, the preset they are scored on, and title."""
    from stepc.api.tasks import task, task_names, tasks_document
    if fmt == "json":
        click.echo(json.dumps(tasks_document(), indent=2))
        return
    records = [task(name) for name in task_names()]
    width = max(len(t.name) for t in records)
    for t in records:
        click.echo(f"{t.name:<{width}}  {t.family:<9}  {t.preset:<14}  {t.title}")


@tasks_cmd.command("show", short_help="A task's statement, interface and reference code.")
@click.argument("name")
@click.option("--no-reference", is_flag=True, help="Leave out the reference solution.")
def show_cmd(name: str, no_reference: bool) -> None:
    """The statement of task NAME, the declarations a solution must make, how it is scored,
    and the reference solution."""
    from stepc.api.errors import InputError
    from stepc.api.tasks import task
    try:
        t = task(name)
    except InputError as e:
        input_error(e)
    click.echo(t.statement.rstrip("\n"))
    click.echo(f"\n## Interface\n\n{t.interface()}\n")
    click.echo(_resources(name))
    click.echo(f"## Scoring\n\nScored on --hw {t.preset}; the candidate's compile and "
               f"run have {t.time_limit:g} s; reward = reference cycles / candidate cycles "
               "when the program fits the resources and its outputs match, else 0.")
    if not no_reference:
        click.echo(f"\n## Reference solution\n\n{t.solution.read_text(encoding='utf-8')}",
                   nl=False)


@tasks_cmd.command("check", epilog=CHECK_EPILOG,
                   short_help="Check and score a solution of a task.")
@click.argument("name")
@click.argument("file", type=str)
@click.option("--seed", type=int, default=None, metavar="N",
              help="Seed of the inputs (default: a fresh one, printed in the report).")
@click.option("--time-limit", type=float, default=None, metavar="SECONDS",
              help="Wall-clock limit of the candidate's compile and simulation (default: "
              "the task's).")
@FORMAT
def check_cmd(name: str, file: str, seed: int | None, time_limit: float | None,
              fmt: str) -> None:
    """Run FILE, a `.step` solution of task NAME (`-`: standard input), on fresh inputs;
    compare its outputs with the task's numpy reference; report its cycles, on-chip bytes
    and off-chip traffic on the task's preset and its reward (reference cycles / its
    cycles; 0 when it fails)."""
    from stepc.api.errors import InputError
    from stepc.api.tasks import check_task
    try:
        result = check_task(name, file, seed, time_limit)
    except InputError as e:
        input_error(e)
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        click.echo(_report(result))
    sys.exit(EXIT_OK if result.passed else EXIT_PROGRAM)


def _resources(name: str) -> str:
    """The statement's section on the hardware a solution may allocate."""
    from stepc.api.tasks import resource_labels, task_resources
    doc = task_resources(name)
    lines = ["## Resources", "", textwrap.fill(
             f"The task's hardware is what the reference solution allocates, with "
             f"{doc['headroom']:g}x headroom. A candidate allocating more of any resource is "
             "refused before it runs (the reason names the resource); within the budget, "
             "the reward counts cycles.", 90), "",
             "| resource | reference | budget | counts |", "|---|---|---|---|"]
    lines += [f"| {label} | {doc['reference'][r]:,} | {doc['budget'][r]:,} | "
              f"{doc['meaning'][r]} |" for r, label in resource_labels().items()]
    lines += ["", "No operator may run faster than the preset; slowing one is allowed:"]
    lines += [f"- {rule}" for rule in doc["knobs"]]
    return "\n".join(lines) + "\n"


def _report(r) -> str:
    """The text report of a check."""
    from stepc.api.tasks import resource_labels
    labels = resource_labels()
    lines = [f"task {r.task}: {'PASS' if r.passed else 'FAIL'} (seed {r.seed}, "
             f"--hw {r.preset}, {r.seconds:.2f} s)"]
    if not r.passed:
        lines.append(f"  {r.stage}: {r.reason}")
    else:
        lines.append(f"  outputs match the reference (largest error: {r.max_error:.2%} "
                     "of the tolerance)")
    for label, run in (("candidate", r.candidate), ("reference", r.reference)):
        if run is not None:
            lines.append(f"  {label}: {run.cycles:,} cycles, {run.on_chip_bytes:,} B on chip, "
                         f"{run.off_chip_bytes:,} B off chip")
            lines.append("    allocates: " + ", ".join(
                f"{labels[k]} {v:,}" for k, v in run.resources.items()))
    if r.budget:
        lines.append("  budget: " + ", ".join(f"{labels[k]} {v:,}"
                                              for k, v in r.budget.items()))
    lines.append(f"  reward: {r.reward:.4f}" + (" (reference cycles / candidate cycles)"
                                                 if r.passed else " (the check failed)"))
    return "\n".join(lines)
