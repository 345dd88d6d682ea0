"""`stepc tasks list|show|check`: the agent task suite (through stepc.app.tasks)."""

from __future__ import annotations

import json
import sys

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
    from stepc.app.tasks import list_tasks
    tasks = list_tasks()
    if fmt == "json":
        click.echo(json.dumps(tasks.to_dict(), indent=2))
        return
    click.echo(tasks.text(), nl=False)


@tasks_cmd.command("show", short_help="A task's statement, interface and reference code.")
@click.argument("name")
@click.option("--no-reference", is_flag=True, help="Leave out the reference solution.")
def show_cmd(name: str, no_reference: bool) -> None:
    """The statement of task NAME, the declarations a solution must make, how it is scored,
    and the reference solution."""
    from stepc.app import InputError
    from stepc.app.tasks import show_task
    try:
        shown = show_task(name)
    except InputError as e:
        input_error(e)
    click.echo(shown.text(solution=not no_reference), nl=False)


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
    from stepc.app import InputError
    from stepc.app.tasks import check_task
    from stepc.report.tasks import check_report
    try:
        result = check_task(name, file, seed, time_limit)
    except InputError as e:
        input_error(e)
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        click.echo(check_report(result))
    sys.exit(EXIT_OK if result.passed else EXIT_PROGRAM)
