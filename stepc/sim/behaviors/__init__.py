"""One behavior (a generator) per operator, named by the `behavior` field of its `OPS` record.

`BEHAVIORS` is derived from the records: "memory.linear_load" is `memory.linear_load` of
this package; a record may also hold the generator itself. An operator registered after
import is resolved on first use.
"""

from importlib import import_module

from stepc.ops import OPS, OpSpec


def behavior_of(spec: OpSpec):
    """The generator that simulates `spec`'s operator."""
    if callable(spec.behavior):
        return spec.behavior
    module, _, name = spec.behavior.rpartition(".")
    if not module:
        raise LookupError(f"operator {spec.name} names no simulator behavior")
    return getattr(import_module(f"{__name__}.{module}"), name)


class BehaviorTable(dict):
    """Operator name -> behavior, filled from the records."""

    def __missing__(self, op: str):
        self[op] = behavior_of(OPS[op])
        return self[op]


BEHAVIORS = BehaviorTable({name: behavior_of(spec) for name, spec in OPS.items()})
