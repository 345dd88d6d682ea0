"""The simulator's table of behaviors: operator name -> the generator that simulates it.

A behavior registers itself with `@behavior("Map")` beside its code; registering an
operator twice is an error.
"""

from __future__ import annotations

from collections.abc import Callable

BEHAVIORS: dict[str, Callable] = {}


def behavior(op: str) -> Callable[[Callable], Callable]:
    """Register the decorated generator as the behavior of operator `op`."""
    def register(generator: Callable) -> Callable:
        if op in BEHAVIORS:
            raise ValueError(f"operator {op} already has a behavior "
                             f"({BEHAVIORS[op].__module__}.{BEHAVIORS[op].__name__})")
        BEHAVIORS[op] = generator
        return generator
    return register
