"""The use cases of the agent task suite (`stepc tasks list|show|check` and the MCP task
tools): the tasks, one task's statement and hardware, a solution checked and scored."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stepc.api import InputError

if TYPE_CHECKING:
    from stepc.tasks import CheckResult, Task

MAX_SEED = 2**63 - 1  # numpy's generators take any non-negative integer; keep it printable


@dataclass
class TaskList:
    """Every task of the suite, by name."""

    tasks: list[Task]

    def to_dict(self) -> dict:
        """The document of `stepc tasks list --format json`."""
        from stepc.schemas import schema
        return {"schema": schema("tasks-list"), "tasks": [
            {"name": t.name, "family": t.family, "preset": t.preset, "title": t.title}
            for t in self.tasks]}

    def text(self) -> str:
        from stepc.report.tasks import task_list
        return task_list(self.tasks)


@dataclass
class TaskShown:
    """One task: its record and, when asked for, the hardware a solution may allocate
    (`resources`: headroom, reference, budget, meaning, knobs)."""

    task: Task
    resources: dict | None = None

    def text(self, solution: bool = True) -> str:
        """What `stepc tasks show` prints (`solution`: with the reference solution)."""
        from stepc.report.tasks import task_statement
        return task_statement(self.task, self.resources, solution)


def list_tasks() -> TaskList:
    """The suite's tasks, sorted by name."""
    from stepc.tasks import task_names
    return TaskList([task(name) for name in task_names()])


def show_task(name: str, resources: bool = True) -> TaskShown:
    """Task `name` (an unknown name raises InputError listing the tasks), with its
    hardware unless `resources` is false (working it out runs the reference solution)."""
    record = task(name)
    return TaskShown(record, task_resources(record) if resources else None)


def task(name: str) -> Task:
    """The task `name`; an unknown name raises InputError listing the tasks."""
    from stepc.tasks import TaskError, load_task
    if not isinstance(name, str):
        raise InputError(f"name: expected a task name, found {type(name).__name__}")
    try:
        return load_task(name)
    except TaskError as e:
        raise InputError(str(e)) from None


def task_resources(record: Task) -> dict:
    """The hardware of a task: `headroom`, what its reference solution allocates
    (`reference`, each resource at the dims of seed 0's inputs), the most a candidate may
    allocate (`budget`), what each resource counts (`meaning`), and the speed knobs' bounds
    (`knobs`, one line each)."""
    from stepc.hw import load_config
    from stepc.tasks.checker import reference_allocation
    from stepc.tasks.resources import HEADROOM, RESOURCES, budget, knob_rules
    used = reference_allocation(record, 0)
    return {"headroom": HEADROOM, "reference": used, "budget": budget(used),
            "meaning": {r: meaning for r, (_, meaning) in RESOURCES.items()},
            "knobs": knob_rules(load_config(record.preset))}


def check_task(name: str, path: str | os.PathLike, seed: int | None = None,
               time_limit: float | None = None) -> CheckResult:
    """Check the solution at `path` for task `name` on inputs drawn from `seed` (None: a
    fresh one; `path` "-": standard input); `time_limit` (seconds of the candidate's
    compile and run) overrides the task's. A failing solution is a result with `status`
    "fail", not an exception (`stepc.report.tasks.check_report` is its text); a missing
    file raises InputError."""
    from stepc.tasks import check
    record = task(name)
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path:
        raise InputError(f"path: expected a file path (str or os.PathLike), found {path!r}")
    if path != "-":
        if not os.path.isfile(path):
            raise InputError(f"{path}: no such file" if not os.path.exists(path)
                             else f"{path}: not a file")
        try:
            open(path, "rb").close()
        except OSError as e:
            raise InputError(f"{path}: cannot read it ({e.strerror})") from None
    if seed is not None:
        seed = _seed(seed)
    if time_limit is not None:
        time_limit = _positive("time_limit", time_limit)
    return check(record, path, seed, time_limit)


def _seed(value: Any) -> int:
    """The seed as `stepc.api` checks an integer argument (numpy integers too)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        name = type(value).__name__
        raise InputError(f"seed: expected an integer, found {'an' if name[0] in 'aeiou' else 'a'}"
                         f" {name} ({value!r})")
    value = value.__index__()
    if value < 0:
        raise InputError(f"seed: expected an integer >= 0, found {value}")
    if value > MAX_SEED:
        raise InputError(f"seed: expected an integer <= {MAX_SEED:,}, found {value:,}")
    return value


def _positive(arg: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InputError(f"{arg}: expected a positive number of seconds, found {value!r}")
    return float(value)
