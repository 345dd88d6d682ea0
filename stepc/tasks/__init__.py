"""The agent task suite: kernels to write in `.step` (GEMM, attention, MoE, ...), each with
a statement, a fixed interface, a numpy reference and a reference solution, and a checker
that runs a candidate on fresh inputs and scores it (`stepc tasks`)."""

from stepc.tasks.checker import CheckResult, SolutionRun, check
from stepc.tasks.records import Task, TaskError, load_task, task_names

__all__ = ["CheckResult", "SolutionRun", "Task", "TaskError", "check", "load_task",
           "task_names"]
