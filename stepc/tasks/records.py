"""Task records: what a task fixes (its tensors, external streams, preset, reference) read
from `library/<name>/task.toml`, with the statement and the solutions beside it."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

LIBRARY = Path(__file__).resolve().parent / "library"

# allclose tolerances by output dtype: |got - want| <= atol * max|want| + rtol * |want|
TOLERANCE = {"f32": (1e-4, 1e-4)}  # dtype -> (rtol, atol relative to the largest |want|)

INPUT_ROLES = ("input", "weight")
TENSOR_INITS = ("normal", "wide_rows", "rotate_half")  # how the checker draws an input
EXTERNAL_KINDS = ("routing", "lengths")  # how the checker draws an external stream


class TaskError(Exception):
    """A task name that does not exist, or a task record that does not hold together."""


@dataclass(frozen=True)
class TensorSpec:
    """A tensor of the task's interface: `role` input/weight (the checker binds its values,
    drawn as `init` says) or output (compared with the reference)."""
    name: str
    dtype: str
    shape: tuple[int, ...]
    role: str
    init: str = "normal"

    def describe(self) -> str:
        dims = ", ".join(map(str, self.shape))
        init = "" if self.role == "output" or self.init == "normal" else f" ({self.init})"
        return f"tensor {self.name} : {self.dtype}[{dims}] {self.role}{init}"


@dataclass(frozen=True)
class ExternalSpec:
    """An external stream the checker drives: `routing` (`rows` tokens, each to `topk`
    distinct experts of `experts`: a [rows, topk] id array) or `lengths` (`rows` lengths,
    multiples of `multiple` from `low` to `high`)."""
    name: str
    kind: str
    rows: int
    experts: int = 0
    topk: int = 0
    low: int = 0
    high: int = 0
    multiple: int = 1

    def describe(self) -> str:
        if self.kind == "routing":
            return (f"stream {self.name}: {self.rows} tokens, each routed to {self.topk} "
                    f"distinct experts of {self.experts} ([{self.rows}, {self.topk}] ids)")
        return (f"stream {self.name}: {self.rows} lengths, multiples of {self.multiple} "
                f"from {self.low} to {self.high}")


@dataclass(frozen=True)
class WrongSolution:
    """A known-wrong solution and how the checker must turn it down: `mismatch` (runs, wrong
    values) or `rejected` (a guardrail refuses it before it runs), with `says`, words the
    checker's reason must hold (the resource or the knob a refusal names)."""
    file: str
    fails: str
    why: str
    says: str = ""


@dataclass(frozen=True)
class Task:
    name: str
    title: str
    family: str
    preset: str
    reference: str  # the function of stepc.tasks.references computing the outputs
    tensors: tuple[TensorSpec, ...]
    externals: tuple[ExternalSpec, ...]
    wrong: tuple[WrongSolution, ...]
    time_limit: float  # seconds a check may take to compile and run the candidate
    folder: Path

    @property
    def statement(self) -> str:
        return (self.folder / "statement.md").read_text(encoding="utf-8")

    @property
    def solution(self) -> Path:
        """The reference `.step` solution (its cycles are the reward's yardstick)."""
        return self.folder / "solution.step"

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return tuple(t for t in self.tensors if t.role in INPUT_ROLES)

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        return tuple(t for t in self.tensors if t.role == "output")

    def interface(self) -> str:
        """The declarations a solution must make, one per line."""
        return "\n".join([t.describe() for t in self.tensors]
                         + [e.describe() for e in self.externals])


def task_names() -> list[str]:
    return sorted(p.name for p in LIBRARY.iterdir() if (p / "task.toml").is_file())


@cache
def load_task(name: str) -> Task:
    """The task `name` of the library; TaskError names the tasks there are otherwise."""
    names = task_names()
    if name not in names:
        shown = name if len(name) <= 60 else name[:57] + "..."
        raise TaskError(f"no task `{shown}` (tasks: {', '.join(names)})")
    folder = LIBRARY / name
    with open(folder / "task.toml", "rb") as f:
        raw = tomllib.load(f)
    try:
        task = Task(name, raw["title"], raw["family"], raw["preset"], raw["reference"],
                    tuple(TensorSpec(t["name"], t["dtype"], tuple(t["shape"]), t["role"],
                                     t.get("init", "normal")) for t in raw["tensor"]),
                    tuple(ExternalSpec(**e) for e in raw.get("external", [])),
                    tuple(WrongSolution(**w) for w in raw.get("wrong", [])),
                    float(raw.get("time_limit", 10)), folder)
    except (KeyError, TypeError) as e:
        raise TaskError(f"task `{name}`: malformed task.toml ({e})") from None
    _validate(task)
    return task


def _validate(task: Task) -> None:
    from stepc.hw import preset_names
    if task.preset not in preset_names() or not task.time_limit > 0:
        raise TaskError(f"task `{task.name}`: preset {task.preset!r}, time limit "
                        f"{task.time_limit!r}")
    for t in task.tensors:
        if t.role not in (*INPUT_ROLES, "output") or t.init not in TENSOR_INITS:
            raise TaskError(f"task `{task.name}`: tensor {t.name}: role {t.role!r}, "
                            f"init {t.init!r}")
        if t.role == "output" and t.dtype not in TOLERANCE:
            raise TaskError(f"task `{task.name}`: output {t.name} of dtype {t.dtype} has "
                            "no tolerance")
    for e in task.externals:
        if e.kind not in EXTERNAL_KINDS:
            raise TaskError(f"task `{task.name}`: external {e.name}: kind {e.kind!r}")
    for w in task.wrong:
        if w.fails not in ("mismatch", "rejected"):
            raise TaskError(f"task `{task.name}`: {w.file}: fails {w.fails!r}")
