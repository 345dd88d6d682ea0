"""Pareto fronts (all objectives minimised) and the Pareto Improvement Distance (PID).

PID(p) = min over baseline Pareto points q of max_m(metric_m(q) / metric_m(p)) (the paper's
appendix): > 1 means p lies beyond the baseline frontier, 1 on it, < 1 dominated by it.
"""

from __future__ import annotations


def dominates(a: tuple, b: tuple) -> bool:
    """a is no worse than b in every objective and better in one (minimisation)."""
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def pareto_front(points: list[tuple]) -> list[int]:
    """Indices of the non-dominated points, in input order."""
    return [i for i, p in enumerate(points)
            if not any(dominates(q, p) for j, q in enumerate(points) if j != i)]


def pid(point: tuple, baseline: list[tuple]) -> float:
    """The Pareto Improvement Distance of `point` to the front of `baseline`."""
    front = [baseline[i] for i in pareto_front(baseline)]
    if not front:
        raise ValueError("PID needs at least one baseline point")
    return min(max(q / p if p else float("inf") for q, p in zip(qq, point)) for qq in front)
