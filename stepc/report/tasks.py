"""The text reports of the agent task suite: the list of tasks, a task's statement with
its hardware and scoring, and a solution's check."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from stepc.tasks.resources import RESOURCES

if TYPE_CHECKING:
    from stepc.tasks import CheckResult, Task

LABELS = {r: label for r, (label, _) in RESOURCES.items()}  # a resource's name in reports


def task_list(tasks: list[Task]) -> str:
    """One line per task: name, family, preset and title."""
    width = max(len(t.name) for t in tasks)
    return "".join(f"{t.name:<{width}}  {t.family:<9}  {t.preset:<14}  {t.title}\n"
                   for t in tasks)


def task_statement(task: Task, resources: dict | None, solution: bool) -> str:
    """The statement of `task`, the declarations a solution must make, the hardware it may
    allocate (`resources`, when given), how it is scored and (`solution`) the reference."""
    parts = [task.statement.rstrip("\n") + "\n", f"\n## Interface\n\n{task.interface()}\n\n"]
    if resources is not None:
        parts.append(_resources(resources) + "\n")
    parts.append(f"## Scoring\n\nScored on --hw {task.preset}; the candidate's compile and "
                 f"run have {task.time_limit:g} s; reward = reference cycles / candidate "
                 "cycles when the program fits the resources and its outputs match, else 0.\n")
    if solution:
        parts.append(f"\n## Reference solution\n\n{task.solution.read_text(encoding='utf-8')}")
    return "".join(parts)


def _resources(doc: dict) -> str:
    """The statement's section on the hardware a solution may allocate."""
    lines = ["## Resources", "", textwrap.fill(
             f"The task's hardware is what the reference solution allocates, with "
             f"{doc['headroom']:g}x headroom. A candidate allocating more of any resource is "
             "refused before it runs (the reason names the resource); within the budget, "
             "the reward counts cycles.", 90), "",
             "| resource | reference | budget | counts |", "|---|---|---|---|"]
    lines += [f"| {label} | {doc['reference'][r]:,} | {doc['budget'][r]:,} | "
              f"{doc['meaning'][r]} |" for r, label in LABELS.items()]
    lines += ["", "No operator may run faster than the preset; slowing one is allowed:"]
    lines += [f"- {rule}" for rule in doc["knobs"]]
    return "\n".join(lines) + "\n"


def check_report(r: CheckResult) -> str:
    """The text report of a check (no final newline)."""
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
                f"{LABELS[k]} {v:,}" for k, v in run.resources.items()))
    if r.budget:
        lines.append("  budget: " + ", ".join(f"{LABELS[k]} {v:,}"
                                              for k, v in r.budget.items()))
    lines.append(f"  reward: {r.reward:.4f}" + (" (reference cycles / candidate cycles)"
                                                 if r.passed else " (the check failed)"))
    return "\n".join(lines)
