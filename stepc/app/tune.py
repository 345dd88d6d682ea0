"""The use case of `stepc tune` and the MCP `tune` tool: a search space, budgets and
objectives given as text, searched by stepc.tune."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from stepc.api import InputError
from stepc.explore.runner import Interrupted
from stepc.tune import Budget, Constraint, Objective, Space, TuneError, TuneResult
from stepc.tune import tune as search

__all__ = ["Interrupted", "TuneOutcome", "tune"]


@dataclass
class TuneOutcome:
    """A finished search: the winner (None when no schedule satisfies the budgets) and
    everything the report shows."""

    result: TuneResult

    @property
    def found(self) -> bool:
        return self.result.winner is not None

    def to_dict(self) -> dict:
        return self.result.to_dict()

    def markdown(self) -> str:
        """The report as Markdown (what `stepc tune` prints and writes to report.md)."""
        from stepc.report.tune import markdown
        return markdown(self.result)


def tune(files: Sequence[str], params: Mapping[str, list],
         hw_keys: Mapping[str, list] | None = None, *,
         defines: Mapping[str, int] | None = None, wheres: Sequence[str] = (),
         budgets: Sequence[tuple[str, str]] = (), objectives: Sequence[str] = ("cycles",),
         traces: Mapping[str, list[str]] | None = None, aggregate: str = "max",
         hw: str = "paper-eval", sets: Sequence[str] = (), model: str = "ref",
         out: str | None = None, resume: bool = False, jobs: int | None = None,
         executor=None, margin: float = 0.05, confirm: str = "adaptive",
         max_confirm: int | None = None, probe: int = 0, sampler: str = "auto",
         trials: int | None = None, max_exhaustive: int = 512, seed: int = 0,
         fifo_bytes: bool = False, log: Callable[[str], None] | None = None) -> TuneOutcome:
    """Search the space of `files` x `params` (param -> values) x `hw_keys` (hardware key
    -> values) under `wheres` (conditions between params) and `budgets` ((metric, limit)
    texts) for `objectives` (metric texts, `max:METRIC` maximises). A space, budget or
    objective that does not parse raises InputError; Ctrl-C raises Interrupted."""
    defines = dict(defines or {})
    both = sorted(set(defines) & set(params))
    if both:
        raise InputError(f"-D {both[0]} and --space {both[0]}: give the param one or the "
                         "other")
    try:
        space = Space(list(files), dict(params), dict(hw_keys or {}),
                      [Constraint.parse(w) for w in wheres], defines)
        limits = [Budget.parse(metric, limit) for metric, limit in budgets]
        goals = [Objective.parse(o) for o in objectives]
        return TuneOutcome(search(
            space, objectives=goals, budgets=limits,
            traces=None if traces is None else dict(traces), aggregate=aggregate,
            hw=hw, sets=tuple(sets), model=model, out=out, resume=resume, jobs=jobs,
            executor=executor, margin=margin, confirm=confirm, max_confirm=max_confirm,
            sampler=sampler, trials=trials, max_exhaustive=max_exhaustive, seed=seed,
            probe=probe, fifo_bytes=fifo_bytes, log=log))
    except TuneError as e:
        raise InputError(str(e)) from None
