"""The agent task suite (`stepc tasks`): list the tasks, read one, check a solution."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from stepc.api.arguments import int_arg, path_arg
from stepc.api.errors import InputError

if TYPE_CHECKING:
    from stepc.tasks import CheckResult, Task

MAX_SEED = 2**63 - 1  # numpy's generators take any non-negative integer; keep it printable


def task_names() -> list[str]:
    """The names of the suite's tasks, sorted."""
    from stepc.tasks import task_names as names
    return names()


def tasks_document() -> dict:
    """The document of `stepc tasks list --format json`: each task's name, family, preset
    and title."""
    from stepc.schemas import schema
    return {"schema": schema("tasks-list"), "tasks": [
        {"name": t.name, "family": t.family, "preset": t.preset, "title": t.title}
        for t in map(task, task_names())]}


def task(name: str) -> Task:
    """The task `name`; an unknown name raises InputError listing the tasks."""
    from stepc.tasks import TaskError, load_task
    if not isinstance(name, str):
        raise InputError(f"name: expected a task name, found {type(name).__name__}")
    try:
        return load_task(name)
    except TaskError as e:
        raise InputError(str(e)) from None


def task_resources(name: str) -> dict:
    """The hardware of task `name`: `headroom`, what its reference solution allocates
    (`reference`, each resource at the dims of seed 0's inputs), the most a candidate may
    allocate (`budget`), what each resource counts (`meaning`), and the speed knobs' bounds
    (`knobs`, one line each)."""
    from stepc.hw import load_config
    from stepc.tasks.checker import reference_allocation
    from stepc.tasks.resources import HEADROOM, RESOURCES, budget, knob_rules
    record = task(name)
    used = reference_allocation(record, 0)
    return {"headroom": HEADROOM, "reference": used, "budget": budget(used),
            "meaning": {r: meaning for r, (_, meaning) in RESOURCES.items()},
            "knobs": knob_rules(load_config(record.preset))}


def resource_labels() -> dict[str, str]:
    """Each resource's label in reports (`compute_units` -> "compute units"), in order."""
    from stepc.tasks.resources import RESOURCES
    return {r: label for r, (label, _) in RESOURCES.items()}


def check_task(name: str, path: str | os.PathLike, seed: int | None = None,
               time_limit: float | None = None) -> CheckResult:
    """Check the solution at `path` for task `name` on inputs drawn from `seed` (None: a
    fresh one; `path` "-": standard input); `time_limit` (seconds of the candidate's
    compile and run) overrides the task's. A failing solution is a result with `status`
    "fail", not an exception; a missing file raises InputError."""
    from stepc.tasks import check
    record = task(name)
    path = path_arg("path", path)
    if path != "-":
        if not os.path.isfile(path):
            raise InputError(f"{path}: no such file" if not os.path.exists(path)
                             else f"{path}: not a file")
        try:
            open(path, "rb").close()
        except OSError as e:
            raise InputError(f"{path}: cannot read it ({e.strerror})") from None
    if seed is not None:
        seed = int_arg("seed", seed, minimum=0, maximum=MAX_SEED)
    if time_limit is not None:
        time_limit = _positive("time_limit", time_limit)
    return check(record, path, seed, time_limit)


def _positive(arg: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InputError(f"{arg}: expected a positive number of seconds, found {value!r}")
    return float(value)
