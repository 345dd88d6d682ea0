"""`stepc tune`: the best schedule of a search space under budgets, found by stages of
increasing cost (exact analysis, roofline bound, fluid screen, confirming simulation)
instead of simulating the whole grid."""

from stepc.tune.search import Scored, TuneResult, tune
from stepc.tune.space import Budget, Constraint, Objective, Space, TuneError

__all__ = ["tune", "TuneResult", "Scored", "Space", "Budget", "Objective", "Constraint",
           "TuneError"]
