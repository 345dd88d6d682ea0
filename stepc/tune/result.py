"""What a search produces: each candidate's record (`Scored`) and the outcome (`TuneResult`),
with the rank agreement and Pareto functions the result needs."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from stepc.schemas import schema
from stepc.tune.space import Budget, Candidate, Objective, aggregate

RUNNERS_UP = 5


@dataclass
class Scored:
    """A candidate and what each stage learned of it."""
    candidate: Candidate
    overrides: dict[str, int]  # the params it runs with (-D values and its own)
    status: str = "new"  # new, excluded, infeasible, analyzed, over_budget, pruned,
    #                      screened, screened_out, unconfirmed, confirmed, failed
    reason: str = ""
    analysis: list[dict] = field(default_factory=list)  # per trace case
    fluid: dict[str, float] = field(default_factory=dict)  # aggregated metrics
    confirmed: dict[str, float] = field(default_factory=dict)
    worst: dict[str, float] = field(default_factory=dict)  # confirmed, max over traces

    def lower_bound(self, how: str) -> float:
        bounds = [c.get("lower_bound_cycles") for c in self.analysis]
        return aggregate(bounds, how) if bounds and None not in bounds else 0.0

    @property
    def measured_by(self) -> str:
        """Which model's numbers `metrics` holds: the confirming one's, or fluid's."""
        return "confirm" if self.confirmed else ("fluid" if self.fluid else "analysis")

    @property
    def metrics(self) -> dict[str, float]:
        return self.confirmed or self.fluid

    def to_dict(self) -> dict:
        return {"program": self.candidate.program, "params": dict(self.overrides),
                "hw": list(self.candidate.sets), "status": self.status,
                **({"reason": self.reason} if self.reason else {}),
                "measured_by": self.measured_by, "metrics": self.metrics}


@dataclass
class TuneResult:
    """The outcome of a search: the winner, runners-up, Pareto front and per-stage counts."""
    winner: Scored | None
    runners_up: list[Scored]
    pareto: list[Scored]
    stages: dict[str, int]
    rank_agreement: dict
    objectives: list[Objective]
    budgets: list[Budget]
    aggregate: str
    model: str
    wall_seconds: float
    command: str  # the `stepc sim` command reproducing the winner (first trace case)
    space_size: int
    candidates: list[Scored] = field(default_factory=list)
    unconfirmed: list[Scored] = field(default_factory=list)  # within the margin per fluid
    policy: str = "adaptive"
    margin: float = 0.05
    stage_seconds: dict[str, float] = field(default_factory=dict)  # analyze, screen, confirm
    fifo_bytes: bool = False  # on-chip bytes count the FIFOs at their depths

    def to_dict(self) -> dict:
        return {
            "schema": schema("tune"),
            "winner": self.winner.to_dict() if self.winner else None,
            "runners_up": [s.to_dict() for s in self.runners_up],
            "pareto": [s.to_dict() for s in self.pareto],
            "not_confirmed": [s.to_dict() for s in self.unconfirmed],
            "confirm_policy": self.policy,
            "margin": self.margin,
            "fifo_bytes": self.fifo_bytes,
            "stages": dict(self.stages),
            "rank_agreement": dict(self.rank_agreement),
            "objectives": [o.text() for o in self.objectives],
            "budgets": [b.text() for b in self.budgets],
            "aggregate": self.aggregate,
            "model": self.model,
            "space_size": self.space_size,
            "wall_seconds": round(self.wall_seconds, 3),
            "stage_seconds": dict(self.stage_seconds),
            "command": self.command,
        }


def kendall_tau(a: list[float], b: list[float]) -> float | None:
    """Kendall's tau-b between two rankings (None for fewer than two points)."""
    n = len(a)
    if n < 2:
        return None
    conc = disc = ties_a = ties_b = 0
    for i, j in itertools.combinations(range(n), 2):
        da, db = a[i] - a[j], b[i] - b[j]
        if da == 0 and db == 0:
            continue
        if da == 0:
            ties_a += 1
        elif db == 0:
            ties_b += 1
        elif (da > 0) == (db > 0):
            conc += 1
        else:
            disc += 1
    denom = math.sqrt((conc + disc + ties_a) * (conc + disc + ties_b))
    return (conc - disc) / denom if denom else None


def pareto_front(items: list, cost) -> list[int]:
    """Indices of the items no other item dominates (all costs minimised)."""
    from stepc.explore.pareto import pareto_front as front
    return front([cost(s) for s in items])
