"""The operator library: one `OpSpec` record per STeP operator, in the `OPS` registry.

Families: off-chip memory, on-chip memory, routing and merging, higher-order, shape, and
sources/sinks. `FUNCTIONS` holds the library of functions for the higher-order operators.
"""

from stepc.ops.base import OpSpec
from stepc.ops.functions import FUNCTIONS, INITS
from stepc.ops.higher_order import HIGHER_ORDER_OPS
from stepc.ops.offchip import OFFCHIP_OPS
from stepc.ops.onchip import ONCHIP_OPS
from stepc.ops.routing import ROUTING_OPS
from stepc.ops.shape import SHAPE_OPS
from stepc.ops.source import SOURCE_OPS

FAMILIES = {
    "offchip": "Off-chip memory",
    "onchip": "On-chip memory",
    "routing": "Routing and merging",
    "higher_order": "Higher-order",
    "shape": "Shape",
    "source": "Sources",
    "sink": "Sinks",
}

OPS: dict[str, OpSpec] = {
    spec.name: spec
    for spec in (*OFFCHIP_OPS, *ONCHIP_OPS, *ROUTING_OPS, *HIGHER_ORDER_OPS, *SHAPE_OPS,
                 *SOURCE_OPS)
}

__all__ = ["OPS", "FAMILIES", "FUNCTIONS", "INITS", "OpSpec"]
