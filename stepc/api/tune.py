"""Tuning through the API (`stepc tune`): the search space, its constraints, budgets and
objectives, `tune` itself and the markdown report of its result."""

from stepc.explore.runner import Interrupted
from stepc.tune import Budget, Constraint, Objective, Space, TuneError, tune
from stepc.tune.report import markdown

__all__ = ["Budget", "Constraint", "Interrupted", "Objective", "Space", "TuneError",
           "markdown", "tune"]
