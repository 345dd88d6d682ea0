"""The search's timing-only runs at given FIFO depths, one after another or, when several
are independent, on several cores: forked worker processes that inherit the program, the
hardware, the traces and the cost analysis, and send back only what the search reads.
A run gives the same answer wherever it runs."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from stepc.fifo.static import EdgeKey


@dataclass(frozen=True)
class Trial:
    """A run to make: each FIFO's depth, and the cycle past which it stops (None: none)."""

    depths: dict[EdgeKey, int]
    limit: int | None = None


@dataclass(frozen=True)
class Outcome:
    """What a run gave the search: its cycles (0: it deadlocked) and the most each FIFO
    held (by the simulator's name of the FIFO)."""

    cycles: int
    held: dict[str, int]

    @property
    def deadlocked(self) -> bool:
        return self.cycles == 0


@dataclass(frozen=True)
class _Raised:
    """An error raised in a worker, to be raised again, attributes and all, by the caller
    (an exception's pickle keeps only its message)."""

    kind: type
    args: tuple
    attrs: dict[str, Any]

    def throw(self) -> None:
        error = self.kind.__new__(self.kind)
        error.args = self.args
        error.__dict__.update(self.attrs)
        raise error


def default_jobs() -> int:
    """The cores of the machine: the default number of runs made at once."""
    return os.cpu_count() or 1


class Runner:
    """Runs trials of one program on one hardware configuration (`jobs`: at most that
    many at once); counts them."""

    def __init__(self, typed, hw, traces, costs, jobs: int = 1):
        self.program = (typed, hw, traces, costs)
        self.jobs = jobs
        self.runs = 0

    def one(self, trial: Trial) -> Outcome | None:
        """A run here; None when it passed its limit."""
        self.runs += 1
        return _outcome(self.program, trial)

    def all(self, trials: Sequence[Trial]) -> list[Outcome | None]:
        """Independent runs, in parallel up to `jobs` (forked workers, where the platform
        forks); their outcomes in the order given."""
        workers = min(self.jobs, len(trials))
        if workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
            return [self.one(t) for t in trials]
        self.runs += len(trials)
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_inherit,
                                 initargs=(self.program,)) as pool:
            done = list(pool.map(_in_worker, trials))
        for d in done:
            if isinstance(d, _Raised):
                d.throw()
        return done  # type: ignore[return-value]  # no _Raised left


_PROGRAM: tuple | None = None  # a worker's program, hardware, traces and cost analysis


def _inherit(program: tuple) -> None:
    global _PROGRAM
    _PROGRAM = program


def _in_worker(trial: Trial) -> Outcome | None | _Raised:
    try:
        return _outcome(_PROGRAM, trial)  # type: ignore[arg-type]  # set by _inherit
    except Exception as e:  # noqa: BLE001  # raised again by the caller
        return _Raised(type(e), e.args, dict(vars(e)))


def _outcome(program: tuple, trial: Trial) -> Outcome | None:
    from stepc.measure import measure
    from stepc.sim.kernel import CycleLimitError

    typed, hw, traces, costs = program
    try:
        m = measure(typed, hw, traces, functional=False, analysis=costs,
                    depths=trial.depths, max_cycles=trial.limit)
    except CycleLimitError:
        if trial.limit is None:
            raise
        return None
    return Outcome(0 if m.deadlocked else m.result.cycles,
                   {name: fifo[0] for name, fifo in m.result.fifo.items()})
