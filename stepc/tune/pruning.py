"""What the stages of a search decide from what is known so far, without running anything:
the ranking by the objectives, the roofline bound against the incumbent (stage 2), the
fluid margin (stage 3), and fluid's error observed on the confirmed points (the `adaptive`
confirm policy of stage 4). The stages themselves are in stepc/tune/search.py."""

from __future__ import annotations

import math

from stepc.tune.result import Scored
from stepc.tune.space import ANALYSIS_METRICS, Budget, Objective, aggregate


class Pruning:
    """The decisions of a search (`Search` runs the stages); they read its state below."""

    objectives: list[Objective]
    budgets: list[Budget]
    how: str  # how the values of the trace cases aggregate: mean, max or pNN
    margin: float
    scored: list[Scored]  # every candidate so far
    incumbent: Scored | None  # the best confirmed within budget

    # ------------------------------------------------------------ ranking helpers
    def cost(self, metrics: dict) -> tuple:
        return tuple(o.key(metrics.get(o.metric, math.inf)) for o in self.objectives)

    def bounded(self) -> bool:
        """Whether the roofline can prune: one objective, cycles minimised."""
        return len(self.objectives) == 1 and self.objectives[0].metric == "cycles" and \
            not self.objectives[0].maximise

    def _exact(self, s: Scored, metric: str) -> float | None:
        values = [c[metric] for c in s.analysis]
        return aggregate(values, self.how) if values and None not in values else None

    def beaten_by_bound(self, s: Scored) -> bool:
        """Stage 2: the bound (or an exact objective) shows the candidate cannot beat the
        incumbent."""
        if self.incumbent is None:
            return False
        if self.bounded():
            return s.lower_bound(self.how) > self.incumbent.confirmed["cycles"]
        if len(self.objectives) == 1:  # an exact objective no better than the incumbent's
            o = self.objectives[0]
            mine = self._exact(s, o.metric) if o.metric in ANALYSIS_METRICS else None
            return mine is not None and \
                o.key(mine) >= o.key(self.incumbent.confirmed.get(o.metric, math.inf))
        # two objectives: pruned when a confirmed point surely dominates it
        sim = [o for o in self.objectives if o.metric not in ANALYSIS_METRICS]
        if [o.metric for o in sim] != ["cycles"] or sim[0].maximise:
            return False
        exact = next(o for o in self.objectives if o.metric in ANALYSIS_METRICS)
        mine = self._exact(s, exact.metric)
        if mine is None:
            return False
        lb = s.lower_bound(self.how)
        return any(q.status == "confirmed" and q.confirmed["cycles"] <= lb and
                   exact.key(q.confirmed.get(exact.metric, math.inf)) <= exact.key(mine) and
                   (q.confirmed["cycles"] < lb or
                    exact.key(q.confirmed.get(exact.metric, math.inf)) < exact.key(mine))
                   for q in self.scored)

    def close_enough(self, s: Scored, front: list[Scored]) -> bool:
        """Whether the fluid model puts the candidate within `margin` of the best: for one
        objective of the incumbent, for two of some point of the fluid front."""
        def relaxed(metrics: dict, o: Objective) -> float:
            v = o.key(metrics.get(o.metric, math.inf))
            if o.metric in ANALYSIS_METRICS:
                return v
            return v - self.margin * abs(v)
        mine = tuple(relaxed(s.fluid, o) for o in self.objectives)
        for q in front:
            theirs = self.cost(q.fluid)
            if all(t <= m for t, m in zip(theirs, mine)) and any(t < m for t, m in
                                                                   zip(theirs, mine)):
                return False
        return True

    # ------------------------------------------------------------ fluid's observed error
    def ratios(self, s: Scored, metric: str) -> list[float]:
        """The confirming model's value over fluid's, on the confirmed points of the same
        program and hardware as `s` (fluid's error is a property of the memory traffic a
        program makes, so it is calibrated per program)."""
        return [q.confirmed[metric] / q.fluid[metric] for q in self.scored
                if q.confirmed and q.candidate.program == s.candidate.program and
                q.candidate.sets == s.candidate.sets and q.fluid.get(metric) and
                metric in q.confirmed]

    def optimistic(self, s: Scored, metric: str, maximise: bool = False) -> float | None:
        """The best value the confirming model may give `s`'s metric, by fluid's value
        scaled with the most favourable ratio seen on its program's confirmed points; None
        before any of them is confirmed."""
        if metric in ANALYSIS_METRICS:
            return s.fluid.get(metric)
        r = self.ratios(s, metric)
        if not r or metric not in s.fluid:
            return None
        return s.fluid[metric] * (max(r) if maximise else min(r))

    def over_budget_by_fluid(self, s: Scored) -> str:
        """Why fluid, scaled by its observed error, puts `s` over a simulated budget."""
        for b in self.budgets:
            if b.exact_before_simulation:
                continue
            best = self.optimistic(s, b.metric)
            if best is not None and best > b.limit:
                return f"fluid puts {b.metric} at {best:,.0f} after its observed error, " \
                       f"over {b.limit:,.0f}"
        return ""

    def cannot_win_by_fluid(self, s: Scored) -> bool:
        """Whether `s`, at its most favourable value after fluid's observed error, is no
        better than a confirmed point in every objective. A program without a confirmed
        point has no observed error: the margin alone decides."""
        mine = []
        for o in self.objectives:
            v = self.optimistic(s, o.metric, o.maximise)
            if v is None:
                return False
            mine.append(o.key(v))
        return any(q.status == "confirmed" and
                   all(t <= m for t, m in zip(self.cost(q.confirmed), mine))
                   for q in self.scored)
