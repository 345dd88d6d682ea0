"""What a solution allocates on the fabric, read from its compiled program, and the rules a
task's hardware sets: the budget (each resource at most HEADROOM x what the task's
reference solution allocates on the same inputs) and the speed knobs an operator may not
turn past the preset.

The simulator gives every operator its own unit: a higher-order operator computes at up to
`compute_bw` FLOPs per cycle and reads its tiles at `onchip_bw` bytes per cycle, an
off-chip memory operator issues `par_dispatch` requests per cycle, every stream has its
FIFO. Splitting a kernel over N lanes buys N times all of these, so the budget counts
them; bigger tiles buy on-chip bytes, which it counts too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from stepc.frontend import Compiled
    from stepc.hw import HardwareConfig

HEADROOM = 1.5  # a resource may reach this multiple of the reference solution's

# resource -> (its label, what it counts), in the order reports list them
RESOURCES = {
    "operators": ("operators", "operator instances, each a unit of the fabric"),
    "compute_units": ("compute units", "higher-order operators (Map, Accum, Scan, FlatMap)"),
    "memory_ports": ("memory ports", "off-chip memory operators, each an HBM port"),
    "fifo_slots": ("FIFO slots", "the streams' FIFO depths, summed"),
    "on_chip_bytes": ("on-chip bytes", "on-chip bytes allocated (the artifact accounting, "
                      "at the check's dims)"),
}

# attributes that set an operator's speed -> +1 (a larger value is faster) or -1 (a smaller
# one is). Such an attribute may slow its operator, never speed it past the task's
# hardware: the preset's value when it mirrors a hardware key, else the operator's default.
SPEED_KNOBS = {"compute_bw": +1, "par_dispatch": +1, "switch_cycles": -1}


def allocation(compiled: Compiled, hw: HardwareConfig,
               traces: dict[str, np.ndarray]) -> dict[str, int | str]:
    """The resources the program allocates on `hw`, its run-time dims bound by `traces`
    (on-chip bytes stay an expression, a string, when they depend on dims only a run
    decides)."""
    from stepc.measure import measure
    from stepc.ops import OPS

    prog = compiled.typed.program
    nodes = list(prog.nodes.values())
    on_chip = measure(compiled.typed, hw, traces, simulate=False).on_chip_bytes
    return {
        "operators": len(nodes),
        "compute_units": sum(OPS[n.op].family == "higher_order" for n in nodes),
        "memory_ports": sum(bool(OPS[n.op].memory and OPS[n.op].memory.off_chip)
                            for n in nodes),
        "fifo_slots": sum(_depth(prog.nodes[e.dst], e.slot, hw) for e in prog.edges),
        "on_chip_bytes": on_chip,
    }


def _depth(node, slot: int, hw: HardwareConfig) -> int:
    """The FIFO depth of a node's input `slot`: its `depth=` (one value, or one per input),
    else the preset's."""
    depth = node.attrs.get("depth")
    if isinstance(depth, list):
        depth = depth[slot] if slot < len(depth) else None
    return depth or hw.fabric.fifo_depth


def budget(reference: dict[str, int]) -> dict[str, int]:
    """Each resource's limit: HEADROOM x the reference solution's, rounded down."""
    return {r: int(HEADROOM * v) for r, v in reference.items()}


def over_budget(used: dict[str, int | str], limits: dict[str, int]) -> list[str]:
    """The resources `used` exceeds, each as `name used > limit` (one still an expression
    is not compared)."""
    return [f"{RESOURCES[r][0]} {used[r]:,} > {limits[r]:,}" for r in RESOURCES
            if isinstance(used[r], int) and used[r] > limits[r]]


def fast_knob(compiled: Compiled, hw: HardwareConfig) -> tuple[object, str] | None:
    """The first operator attribute set faster than the task's hardware allows, as
    (its span, why), or None."""
    from stepc.ops import OPS

    for node in compiled.typed.program.nodes.values():
        for p in OPS[node.op].all_params:
            sign = SPEED_KNOBS.get(p.name)
            value = node.attrs.get(p.name)
            if sign is None or value is None:
                continue
            bound = hw.value(p.hw) if p.hw is not None else p.default
            if (value - bound) * sign > 0:
                where = f"{p.hw} on the preset" if p.hw is not None else f"{node.op}'s own"
                limit = "at most" if sign > 0 else "at least"
                return node.span, (f"{p.name}={value} makes {node.op} faster than the "
                                   f"task's hardware: {p.name} must be {limit} {bound} "
                                   f"({where}; a solution may slow an operator, not speed "
                                   "it up)")
    return None


def knob_rules(hw: HardwareConfig) -> list[str]:
    """The speed knobs' bounds on `hw`, one line each: `switch_cycles at least 1 (...)`."""
    from stepc.ops import OPS

    rules = {}
    for spec in OPS.values():
        for p in spec.all_params:
            sign = SPEED_KNOBS.get(p.name)
            if sign is None or p.name in rules:
                continue
            bound = hw.value(p.hw) if p.hw is not None else p.default
            users = ", ".join(o.name for o in OPS.values()
                              if any(q.name == p.name for q in o.all_params))
            where = f"{p.hw} on the preset" if p.hw is not None else "the operators' default"
            rules[p.name] = (f"{p.name}= {'at most' if sign > 0 else 'at least'} {bound} "
                             f"({where}; {users})")
    return [rules[k] for k in SPEED_KNOBS]
