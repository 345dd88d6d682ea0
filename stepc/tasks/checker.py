"""`check(task, path)`: is a candidate `.step` solution of a task right, and how fast?

The candidate must declare exactly the task's interface (guardrails, before it runs); the
checker then draws fresh inputs from the check's seed, runs the reference solution and the
candidate functionally on the task's preset, compares the candidate's outputs with the
numpy reference, and scores it against the reference solution's cycles:

    reward = 0 when the candidate fails, else reference cycles / candidate cycles.

The guardrails hold the hardware fixed (stepc.tasks.resources): no operator set faster
than the preset, and no resource (operators, compute units, memory ports, FIFO slots,
on-chip bytes) over HEADROOM x the reference solution's, so a candidate scores by using
the same hardware better, not by allocating more of it.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from stepc.schemas import schema
from stepc.tasks.records import INPUT_ROLES, TOLERANCE, Task, TaskError
from stepc.tasks.references import REFERENCES, draw_external, draw_tensor
from stepc.tasks.resources import HEADROOM, allocation, budget, fast_knob, over_budget

if TYPE_CHECKING:
    from stepc.frontend import Compiled
    from stepc.hw import HardwareConfig
    from stepc.measure import Measurement

CONSTANT_SOURCES = ("zeros", "ones", "arange")  # a tensor outside the interface holds one
CYCLE_FACTOR = 50  # a candidate passing this many times the reference's cycles fails


@dataclass
class SolutionRun:
    """What one solution measured on the task's preset."""
    cycles: int
    on_chip_bytes: int
    off_chip_bytes: int
    seconds: float
    resources: dict[str, int] = field(default_factory=dict)  # what it allocates


@dataclass
class CheckResult:
    """A check's verdict: `status` pass/fail, `stage` where it ended (compile, guardrail,
    run, compare, done), the reason, the measurements and the reward."""
    task: str
    file: str
    seed: int
    preset: str
    status: str = "fail"
    stage: str = "compile"
    reason: str = ""
    max_error: float | None = None  # largest |got - want| as a share of its tolerance
    tolerance: dict[str, Any] = field(default_factory=dict)
    candidate: SolutionRun | None = None
    reference: SolutionRun | None = None
    budget: dict[str, int] = field(default_factory=dict)  # the most of each resource allowed
    reward: float = 0.0
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def to_dict(self) -> dict:
        return {"schema": schema("tasks-check"), **asdict(self)}


class _TimeUp(Exception):
    """The candidate's compile and run took longer than the task's time limit."""


def check(task: Task, path: str | os.PathLike, seed: int | None = None,
          time_limit: float | None = None) -> CheckResult:
    """Check the candidate at `path` on inputs drawn from `seed` (None: a fresh one)."""
    from stepc.frontend import compile_file
    from stepc.hw import load_config

    start = time.monotonic()
    if task.reference not in REFERENCES:
        raise TaskError(f"task `{task.name}`: no reference function `{task.reference}`")
    seed = int.from_bytes(os.urandom(4), "little") if seed is None else seed
    limit = task.time_limit if time_limit is None else time_limit
    result = CheckResult(task.name, str(path), seed, task.preset,
                         tolerance={d: {"rtol": r, "atol": a} for d, (r, a) in TOLERANCE.items()})

    def done() -> CheckResult:
        result.seconds = round(time.monotonic() - start, 3)
        return result

    hw = load_config(task.preset)
    compiling = time.monotonic()
    compiled = compile_file(str(path))
    compile_seconds = time.monotonic() - compiling  # the time limit covers it too
    if compile_seconds > limit:
        result.reason = (f"compiling the program took {compile_seconds:.2f} s, longer than "
                         f"the time limit of {limit:g} s")
        return done()
    if not compiled.ok:
        errors = [d for d in compiled.diagnostics.sorted() if d.severity == "error"]
        result.reason = "the program does not compile: " + "; ".join(
            _located(d.span, f"error[{d.code}]: {d.message}") for d in errors[:3])
        return done()
    result.stage = "guardrail"
    refusal = guardrail(task, compiled, hw)
    if refusal:
        result.reason = refusal
        return done()

    values, traces = draw(task, seed)
    result.budget = budget(reference_allocation(task, seed))
    counting = time.monotonic()
    used = allocation(compiled, hw, traces)
    compile_seconds += time.monotonic() - counting  # the limit covers the count too
    over = over_budget(used, result.budget)
    if over:
        result.reason = _over_budget(over)
        return done()
    want = REFERENCES[task.reference](values, traces)

    result.stage = "run"
    result.reference = ref_run = reference_run(task, seed)
    try:
        got, cand_run = _run(compiled, hw, values, traces, CYCLE_FACTOR * ref_run.cycles,
                             limit - compile_seconds)
    except _TimeUp:
        result.reason = (f"compiling ({compile_seconds:.2f} s) and running the program took "
                         f"longer than the time limit of {limit:g} s")
        return done()
    except _Failed as e:
        result.reason = str(e)
        return done()
    result.candidate = cand_run
    cand_run.resources = used
    if not isinstance(used["on_chip_bytes"], int):  # dims only the run decided
        used["on_chip_bytes"] = cand_run.on_chip_bytes
        if not isinstance(cand_run.on_chip_bytes, int):
            result.reason = "the program's on-chip bytes depend on dims the run did not bind"
            return done()
        over = over_budget(used, result.budget)
        if over:
            result.reason = _over_budget(over)
            return done()

    result.stage = "compare"
    outputs = got.result.outputs
    worst = 0.0
    for spec in task.outputs:
        rtol, atol = TOLERANCE[spec.dtype]
        ref = want[spec.name]
        scale = float(np.abs(ref).max()) or 1.0
        have = np.asarray(outputs[spec.name], dtype=np.float64).reshape(ref.shape)
        if not np.isfinite(have).all():
            result.reason = f"output {spec.name} holds non-finite values"
            return done()
        excess = np.abs(have - ref) / (atol * scale + rtol * np.abs(ref))
        worst = max(worst, float(excess.max()))
        if not np.allclose(have, ref, rtol=rtol, atol=atol * scale):
            at = np.unravel_index(int(np.argmax(excess)), ref.shape)
            result.max_error = worst
            result.reason = (f"output {spec.name} differs from the reference: at "
                             f"{list(map(int, at))} {have[at]:.6g} instead of {ref[at]:.6g} "
                             f"({int((excess > 1).sum())} of {ref.size} values off)")
            return done()
    result.max_error = worst
    result.stage, result.status = "done", "pass"
    result.reward = round(ref_run.cycles / cand_run.cycles, 4) if cand_run.cycles else 0.0
    return done()


def draw(task: Task, seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The inputs and the external streams' data of a check, from its seed."""
    rng = np.random.default_rng(seed)
    values = {t.name: draw_tensor(t, rng) for t in task.inputs}
    return values, {e.name: draw_external(e, rng) for e in task.externals}


@functools.lru_cache(maxsize=64)
def reference_run(task: Task, seed: int) -> SolutionRun:
    """The reference solution's run on a seed's inputs (kept: checks of several candidates
    on one seed run it once)."""
    from stepc.hw import load_config

    values, traces = draw(task, seed)
    try:
        run = _run(_reference_program(task), load_config(task.preset), values, traces,
                   None, None)[1]
    except _Failed as e:
        raise TaskError(f"task `{task.name}`: its reference solution fails: {e}") from None
    run.resources = dict(reference_allocation(task, seed))
    return run


@functools.lru_cache(maxsize=64)
def reference_allocation(task: Task, seed: int) -> dict[str, int]:
    """What the reference solution allocates on the task's preset, at a seed's dims."""
    from stepc.hw import load_config

    return allocation(_reference_program(task), load_config(task.preset),
                      draw(task, seed)[1])


@functools.lru_cache(maxsize=16)
def _reference_program(task: Task) -> Compiled:
    """The task's reference solution, compiled (once per process)."""
    from stepc.frontend import compile_file

    reference = compile_file(str(task.solution))
    if not reference.ok:
        raise TaskError(f"task `{task.name}`: its reference solution does not compile")
    return reference


class _Failed(Exception):
    """The candidate's run failed: a deadlock, a run-time error, too many cycles."""


def _run(compiled: Compiled, hw, values, traces, max_cycles: int | None,
         limit: float | None) -> tuple[Measurement, SolutionRun]:
    """Simulate functionally with the task's values and traces and measure it."""
    from stepc.measure import measure, number
    from stepc.sim.kernel import SimError
    from stepc.traces import TraceError

    start = time.monotonic()

    def watch(_cycle: int) -> None:
        if limit is not None and time.monotonic() - start > limit:
            raise _TimeUp()

    try:
        with np.errstate(all="ignore"):  # a candidate's overflows show as non-finite outputs
            m = measure(compiled.typed, hw, traces, functional=True, values=values,
                        max_cycles=max_cycles, progress=watch)
    except SimError as e:
        if max_cycles is not None and "--max-cycles" in str(e):
            raise _Failed(f"the run passed {max_cycles:,} cycles ({CYCLE_FACTOR}x the "
                          "reference solution's)") from None
        raise _Failed(_located(e.span, f"run-time error: {e}")) from None
    except TraceError as e:
        raise _Failed(_located(e.span, f"the task's stream data does not fit: {e}")) from None
    seconds = time.monotonic() - start
    watch(0)  # a short run may end before the simulator first reports progress
    if m.deadlocked:
        blocked = ", ".join(sorted({b.op for b in m.result.deadlock})[:4])
        raise _Failed(f"the run deadlocked (blocked: {blocked})")
    run = SolutionRun(m.cycles, number(m.on_chip_bytes), number(m.off_chip_bytes),
                      round(seconds, 3))
    return m, run


def guardrail(task: Task, compiled: Compiled, hw: HardwareConfig) -> str | None:
    """Why the candidate may not run (None: it may): every interface tensor declared as the
    task states it, no other tensor but constants, no `file()` data, external streams only
    the task's, no operator faster than the preset's hardware."""
    from stepc.ops import OPS

    prog = compiled.typed.program
    tensors = prog.tensors
    for t in tensors.values():
        src = getattr(t.source, "name", None)
        if src == "file":
            return _located(t.span, f"tensor {t.name} reads a file: a solution may not load "
                            "data (the checker binds every input)")
    for spec in task.tensors:
        t = tensors.get(spec.name)
        if t is None:
            return f"the program does not declare the task's tensor {spec.name} " \
                   f"({spec.describe()})"
        role_ok = t.role in INPUT_ROLES if spec.role in INPUT_ROLES else t.role == spec.role
        if not role_ok or t.dtype != spec.dtype or tuple(t.shape) != spec.shape:
            dims = ", ".join(map(str, t.shape))
            return _located(t.span, f"tensor {t.name} is declared {t.dtype}[{dims}] {t.role}; "
                            f"the task fixes `{spec.describe()}`")
    declared = {s.name for s in task.tensors}
    for t in tensors.values():
        if t.name in declared:
            continue
        src = getattr(t.source, "name", None)
        if src not in CONSTANT_SOURCES and not (t.role == "scratch" and src is None):
            return _located(t.span, f"tensor {t.name} is not part of the task's interface: "
                            "another tensor may only hold a constant (zeros, ones, arange)")
    streams = {e.name for e in task.externals}
    for node in prog.nodes.values():
        if not OPS[node.op].external:
            continue
        name, gen = node.attrs["name"], node.attrs.get("gen", {})
        if name not in streams:
            known = ", ".join(sorted(streams)) or "none"
            return _located(node.span, f"external stream `{name}` is not one of the task's "
                            f"(the checker drives: {known})")
        if "file" in gen:
            return _located(node.span, f"external stream `{name}` reads a file: the checker "
                            "supplies the task's streams")
    knob = fast_knob(compiled, hw)
    return _located(*knob) if knob else None


def _over_budget(over: list[str]) -> str:
    return (f"the program allocates more than the task's hardware ({HEADROOM:g}x the "
            "reference solution's): " + ", ".join(over))


def _located(span, message: str) -> str:
    return message if span is None else f"{span}: {message}"
