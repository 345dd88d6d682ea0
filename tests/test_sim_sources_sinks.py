"""Token-by-token tests of the simulator behaviors of the Sink and the sources (External,
SelectGen, MetadataGen), through tiny compiled programs; notation and harness in
tests/behavior_harness.py."""

from __future__ import annotations

import numpy as np
from behavior_harness import first_value, paper, run_program, show, sunk, times

from stepc.sim.harness import run_operator

# =====================================================================================
# Sink (harness) and the sources, through tiny compiled programs
# =====================================================================================


def test_sink_consumes_one_element_per_cycle():
    """2.25: a sink consumes one element per cycle."""
    outs, ctx = run_operator("Sink", {}, {"in": paper("a b S1 c S1 D")})
    assert outs == [] and ctx.t == 3
    outs, ctx = run_operator("Sink", {}, {"in": paper("a b D")}, times={"in": [5, 5]})
    assert ctx.t == 7


def test_sink_in_a_program_drains_everything(recorded):
    typed, r = run_program("""
        tensor X : f32[4, 64] input = arange
        x = LinearOffChipLoad(X, tile=[1, 64])
        Sink(x)
    """)
    got = sunk(recorded, typed, "x")
    assert [first_value(p) for _, p, _ in got] == [0, 64, 128, 192]
    assert r.deadlock is None


EXTERNAL = """
    stream route : Strm<MultiHot<3>, 0>[5] = external("routing")
    stream lens  : Strm<Tile<u64, [1, 1]>, 1>[2, 3] = external("lens")
    Sink(route)
    Sink(lens)
"""
EXTERNAL_TRACES = {"routing": np.array([2, 0, 1, 1, 0]),
                   "lens": np.array([[4, 5, 6], [7, 8, 9]])}


def test_external_values_and_timing(recorded):
    """2.25 (generator source): one element per cycle, the first visible at t = 1."""
    typed, _ = run_program(EXTERNAL, traces=EXTERNAL_TRACES)
    route = sunk(recorded, typed, "route")
    assert [p for _, p, _ in route] == [(2,), (0,), (1,), (1,), (0,)]
    assert times(route) == [1, 2, 3, 4, 5]
    lens = sunk(recorded, typed, "lens")
    assert [first_value(p) for _, p, _ in lens] == [4, 5, 6, 7, 8, 9]


def test_external_stops_follow_the_declared_rank(recorded):
    """Semantics 0.2: a rank-0 stream carries no stops; a rank-1 [2, 3] stream ends with S1
    (the outermost dim is closed by Done, not by a stop)."""
    typed, _ = run_program(EXTERNAL, traces=EXTERNAL_TRACES)
    assert show(sunk(recorded, typed, "route")) == "{2} {0} {1} {1} {0} D"
    assert show(sunk(recorded, typed, "lens")) == "4 5 6 S1 7 8 9 S1 D"


SELECTGEN = """
    tensor TOPK : i32[3, 2] input = arange
    sel = SelectGen(TOPK, n=6)
    each = SelectGen(TOPK, n=6, onehot=true)
    Sink(sel)
    Sink(each)
"""


def test_selectgen_values_and_timing(recorded):
    """2.25: one multi-hot selector per row of ids (one one-hot per id with onehot);
    one element per cycle, the first visible at t = 1."""
    typed, _ = run_program(SELECTGEN)
    sel = sunk(recorded, typed, "sel")
    assert [p for _, p, _ in sel] == [(0, 1), (2, 3), (4, 5)]
    assert times(sel) == [1, 2, 3]
    each = sunk(recorded, typed, "each")
    assert [p for _, p, _ in each] == [(0,), (1,), (2,), (3,), (4,), (5,)]


def test_selectgen_stops_follow_the_declared_rank(recorded):
    """2.25: element stop = highest dim ending there, below the outermost (paper shapes:
    [3] is rank 0, [3, 2] is rank 1)."""
    typed, _ = run_program(SELECTGEN)
    assert show(sunk(recorded, typed, "sel")) == "{0,1} {2,3} {4,5} D"
    assert show(sunk(recorded, typed, "each")) == "{0} {1} S1 {2} {3} S1 {4} {5} S1 D"


METADATAGEN = """
    tensor LEN : u64[4] input = arange
    tensor PAGES : u64[2, 3] input = arange
    len = MetadataGen(LEN)
    pages = MetadataGen(PAGES)
    Sink(len)
    Sink(pages)
"""


def test_metadatagen_values_and_timing(recorded):
    """2.25: [1,1] u64 tiles, one per tensor entry, one per cycle from t = 1."""
    typed, _ = run_program(METADATAGEN)
    got = sunk(recorded, typed, "len")
    assert [first_value(p) for _, p, _ in got] == [0, 1, 2, 3]
    assert all((p.rows, p.cols, p.dtype) == (1, 1, "u64") for _, p, _ in got)
    assert times(got) == [1, 2, 3, 4]
    assert [first_value(p) for _, p, _ in sunk(recorded, typed, "pages")] == list(range(6))


def test_metadatagen_stops_follow_the_declared_rank(recorded):
    typed, _ = run_program(METADATAGEN)
    assert show(sunk(recorded, typed, "len")) == "0 1 2 3 D"
    assert show(sunk(recorded, typed, "pages")) == "0 1 2 S1 3 4 5 S1 D"
