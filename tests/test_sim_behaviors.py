"""Every operator in `stepc.ops.OPS` has a simulator behavior and token-by-token tests in the
family file `COVERED` names (tests/test_sim_*.py; notation and harness in
tests/behavior_harness.py)."""

from __future__ import annotations

import importlib

import pytest
from behavior_harness import paper, show

from stepc.ops import OPS
from stepc.sim.behaviors import BEHAVIORS, behavior

# =====================================================================================
# Coverage: every operator has tests in its family file
# =====================================================================================


# operator -> (family test module, the stem its tests are named by: `test_<stem>...`)
COVERED = {
    "Flatten": ("test_sim_shape_ops", "flatten"),
    "Reshape": ("test_sim_shape_ops", "reshape"),
    "Promote": ("test_sim_shape_ops", "promote"),
    "Expand": ("test_sim_shape_ops", "expand"),
    "Repeat": ("test_sim_shape_ops", "repeat"),
    "Zip": ("test_sim_shape_ops", "zip"),
    "Map": ("test_sim_higher_order", "map"),
    "Accum": ("test_sim_higher_order", "accum"),
    "Scan": ("test_sim_higher_order", "scan"),
    "FlatMap": ("test_sim_higher_order", "flatmap"),
    "Bufferize": ("test_sim_onchip_memory", "bufferize"),
    "Streamify": ("test_sim_onchip_memory", "streamify"),
    "Partition": ("test_sim_routing", "partition"),
    "Reassemble": ("test_sim_routing", "reassemble"),
    "EagerMerge": ("test_sim_routing", "eager_merge"),
    "Parallelize": ("test_sim_routing", "parallelize"),
    "Broadcast": ("test_sim_routing", "broadcast"),
    "Sink": ("test_sim_sources_sinks", "sink"),
    "External": ("test_sim_sources_sinks", "external"),
    "SelectGen": ("test_sim_sources_sinks", "selectgen"),
    "MetadataGen": ("test_sim_sources_sinks", "metadatagen"),
    "LinearOffChipLoad": ("test_sim_offchip_memory", "linear_load"),
    "LinearOffChipStore": ("test_sim_offchip_memory", "linear_store"),
    "RandomOffChipLoad": ("test_sim_offchip_memory", "random_load"),
    "RandomOffChipStore": ("test_sim_offchip_memory", "random_store"),
}


def test_every_operator_has_one_behavior_and_every_behavior_an_operator():
    assert sorted(set(OPS) - set(BEHAVIORS)) == []  # operators without a behavior
    assert sorted(set(BEHAVIORS) - set(OPS)) == []  # behaviors of no operator
    generators = [f"{g.__module__}.{g.__name__}" for g in BEHAVIORS.values()]
    assert len(set(generators)) == len(generators)  # one generator serves one operator


def test_registering_an_operator_twice_is_an_error():
    before = dict(BEHAVIORS)
    with pytest.raises(ValueError, match="operator Map already has a behavior "
                                         r"\(stepc.sim.behaviors.compute.map_\)"):
        behavior("Map")(lambda *args: None)
    assert BEHAVIORS == before


def test_every_operator_is_covered():
    assert set(OPS) == set(COVERED)
    untested = []
    for op, (family, stem) in COVERED.items():
        names = vars(importlib.import_module(family))
        if not any(name.startswith(f"test_{stem}") and callable(test)
                   for name, test in names.items()):
            untested.append(f"{op} (no test_{stem}* in tests/{family}.py)")
    assert not untested, untested


def test_notation_round_trip():
    seq = paper("1 2 S1 3 S2 4 S1 5 6 7 S2 D")
    assert seq == [("1", 0), ("2", 1), ("3", 2), ("4", 1), ("5", 0), ("6", 0), ("7", 2)]
    assert show(seq) == "1 2 S1 3 S2 4 S1 5 6 7 S2 D"
    assert paper("{0,1} {} {2} S1") == [((0, 1), 0), ((), 0), ((2,), 1)]
