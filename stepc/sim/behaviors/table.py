"""The simulator's table of behaviors: operator name -> the generator that simulates it.

A behavior registers itself with `@behavior("Map")` beside its code; registering an
operator twice is an error.
"""

from __future__ import annotations

from collections.abc import Callable

from stepc.registry import registrar

BEHAVIORS: dict[str, Callable] = {}
behavior = registrar(BEHAVIORS, "operator", "a behavior")
