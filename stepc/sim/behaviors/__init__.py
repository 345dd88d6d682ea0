"""One behavior (a generator) per operator, registered in `BEHAVIORS` by `@behavior(name)`
in the family modules imported here."""

from stepc.sim.behaviors import compute, memory, routing, shape, source  # noqa: F401 (register)
from stepc.sim.behaviors.table import BEHAVIORS, behavior

__all__ = ["BEHAVIORS", "behavior"]
