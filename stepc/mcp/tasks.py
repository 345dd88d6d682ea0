"""The task suite's tools (`stepc tasks list|show|check`, through stepc.app.tasks): the list
and a task's statement answer in the server; a check runs in the worker, under the call's
time limit, on a solution file of the workspace or on solution text."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

from stepc.mcp.workspace import Refused

# the checker's own fields: where the task lives, its numpy reference's name and the
# known-wrong solutions it is tested with
HIDDEN = ("folder", "reference", "wrong")


def task_list(args: dict) -> dict:
    """`stepc tasks list --format json`."""
    from stepc.app.tasks import list_tasks
    return list_tasks().to_dict()


def task_show(args: dict) -> dict:
    """What `stepc tasks show` prints, as fields: the task's record (tensors, external
    streams, preset, time limit, ...), statement, interface, scoring and, unless
    `solution` is false, the reference solution."""
    from stepc.app.tasks import show_task
    from stepc.mcp.tools import jsonable
    record = show_task(args.get("name"), resources=False).task
    doc = {k: v for k, v in jsonable(asdict(record)).items() if k not in HIDDEN}
    doc.update(statement=record.statement, interface=record.interface(),
               scoring=f"scored on the preset {record.preset}; the candidate's compile and run "
               f"have {record.time_limit:g} s; reward = reference cycles / candidate cycles "
               "when the outputs match, else 0")
    if args.get("solution", True):
        doc["solution"] = record.solution.read_text(encoding="utf-8")
    return doc


def task_check(tools, args: dict) -> dict:
    """`task_check`, run by the worker on its Tools: the checker's result for the solution
    at workspace `path` or in `program` (text, written to a temporary file of the
    workspace's scratch directory as `name`, removed after). Imports and data files
    outside the workspace are refused before the check, as for every program tool; a
    failing solution is a result, not an error."""
    from stepc.app.tasks import check_task, task
    from stepc.mcp.tools import jsonable
    record = task(args.get("task"))
    text, path = args.get("program"), args.get("path")
    if (text is None) == (path is None):
        raise Refused("give the solution as `program` (its text) or `path` (a file in the "
                      "workspace), one of the two")
    if path is not None:
        real = tools.workspace.file(path, "path")
        _vet(tools, str(real))
        return _relative(jsonable(check_task(record.name, str(real), args.get("seed"))
                                  .to_dict()), str(tools.workspace.root) + os.sep)
    data, name, _ = tools.source({"program": text, "name": args.get("name")
                                  or "solution.step"})
    with tools.scratch_folder("task_check", "the solution text") as folder:
        candidate = os.path.join(folder, os.path.basename(name))
        with open(candidate, "wb") as f:
            f.write(data)
        _vet(tools, candidate)
        result = jsonable(check_task(record.name, candidate, args.get("seed")).to_dict())
        return _relative(result, folder + os.sep)


def _vet(tools, path: str) -> None:
    """Refuse a solution that imports, or reads data from, outside the workspace."""
    from stepc.app.inputs import checked_guarded, data_files
    report = checked_guarded(path, {}, tools.may_import)
    outside = [p for p in data_files(report) if not tools.workspace.contains(p)]
    if outside:
        raise Refused(f"the solution reads the data file {outside[0]!r}, outside the "
                      "workspace")


def _relative(value: Any, prefix: str) -> Any:
    """`value` with every mention of `prefix` (a folder) taken out of its texts: files are
    named as the caller named them."""
    if isinstance(value, dict):
        return {k: _relative(v, prefix) for k, v in value.items()}
    if isinstance(value, list):
        return [_relative(v, prefix) for v in value]
    return value.replace(prefix, "") if isinstance(value, str) else value
