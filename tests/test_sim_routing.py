"""Token-by-token tests of the simulator behaviors of the routing and merging operators
(Partition, Reassemble, EagerMerge, Parallelize, Broadcast); notation and harness in
tests/behavior_harness.py."""

from __future__ import annotations

import pytest
from behavior_harness import consumer, paper, run_net, show, st, times

from stepc.sim.harness import run_operator
from stepc.sim.kernel import SimError
from stepc.sim.tokens import TileVal

# =====================================================================================
# Routing and merging: Partition, Reassemble, EagerMerge, Parallelize, Broadcast
# =====================================================================================


def _partition(data, sel, rank=1, consumers=2, t=None, **attrs):
    outs, _ = run_operator("Partition", {"rank": rank, "consumers": consumers, **attrs},
                           {"in": data if isinstance(data, list) else paper(data),
                            "sel": paper(sel)}, times=t)
    return outs


def test_partition_2_9_example_two_consumers():
    """2.9 (p = 1, 2 consumers): in `x0 x1 S1 y0 y1 S1 z0 z1 S2 D` (1,3,2), sel
    `{0} {1} {0} S1 D` -> out0 `x0 x1 S1 z0 z1 S1 D`, out1 `y0 y1 S1 D`."""
    out0, out1 = _partition("x0 x1 S1 y0 y1 S1 z0 z1 S2 D", "{0} {1} {0} S1 D")
    assert show(out0) == "x0 x1 S1 z0 z1 S1 D"
    assert show(out1) == "y0 y1 S1 D"


def test_partition_paper_form_rank0_selector():
    """Paper 3.3 Route: [3, 2] (rank 1) with a rank-0 selector [3]."""
    out0, out1 = _partition("x0 x1 S1 y0 y1 S1 z0 z1 S1 D", "{0} {1} {0} D")
    assert show(out0) == "x0 x1 S1 z0 z1 S1 D"
    assert show(out1) == "y0 y1 S1 D"


def test_partition_multicast_and_drop():
    """2.9: several bits -> multicast; no bit -> the chunk is dropped."""
    out0, out1 = _partition("x0 S1 y0 y1 S1 z0 S1 D", "{0,1} {} {1} D")
    assert show(out0) == "x0 S1 D"
    assert show(out1) == "x0 S1 z0 S1 D"


def test_partition_rank0_routes_single_elements():
    out0, out1, out2 = _partition("a b c d D", "{2} {0} {2} {1} D", rank=0, consumers=3)
    assert (show(out0), show(out1), show(out2)) == ("b D", "d D", "a c D")


def test_partition_cuts_higher_stops_down_to_p():
    """2.9: inside a chunk stops below p pass; the chunk end carries S_p on every output
    (S_(s+p) on the input when the selector carries S_s)."""
    out0, out1 = _partition("a S1 b S2 c S1 d S3 D", "{0} {1} S1 D", rank=2)
    assert show(out0) == "a S1 b S2 D"
    assert show(out1) == "c S1 d S2 D"


def test_partition_selector_stop_check():
    """2.9: if the selector element carries S_s the chunk's input end must carry S_(s+p)
    (else "expected stop level does not match"); a Val selector with an input stop > p
    is an error too."""
    with pytest.raises(SimError):  # sel rank 0, chunk end carries S2
        _partition("x0 x1 S1 y0 y1 S2 D", "{0} {1} D")
    with pytest.raises(SimError):  # sel carries S1, the chunk end only S1 (needs S2)
        _partition("x0 x1 S1 y0 y1 S1 D", "{0} {1} S1 D")
    # the data ends before the selector: the Partition is done (in a feedback loop the
    # selector stream only ends after the Partition does)
    out0, out1 = _partition("x0 x1 S1 D", "{0} {1} D")
    assert [v for _, v, _ in out0] == ["x0", "x1"] and out1 == []


def test_partition_timing():
    """2.9 / errata 1: per data element load (if in a memory unit), release, then
    switch_cycles plus write-back, then the sends."""
    data = [(TileVal(16, 64, "f32"), 0), (TileVal(16, 64, "f32"), 1)]
    out0, _ = _partition(data, "{0} D")
    assert times(out0) == [2, 3]  # switch 1 each
    data = [(TileVal(16, 64, "f32", in_mu=True), 1)]
    out0, _ = _partition(data, "{0} D", switch_cycles=3)
    assert times(out0) == [64 + 3 + 1]
    assert out0[0][1].in_mu is False  # read_from_mu = write_back_mu
    out0, _ = _partition(data, "{0} D", write_back=True)
    assert times(out0) == [64 + 1 + 64 + 1]
    assert out0[0][1].in_mu is True


def _reassemble(ins, sel, rank, t=None, t_sel=None, **attrs):
    tt = {}
    if t is not None:
        tt["ins"] = t
    if t_sel is not None:
        tt["sel"] = t_sel
    outs, _ = run_operator("Reassemble", {"rank": rank, **attrs},
                           {"ins": [paper(x) if isinstance(x, str) else x for x in ins],
                            "sel": paper(sel)}, times=tt or None)
    return outs[0]


def test_reassemble_2_10_example_input0_first():
    """2.10 (q = 1): sel `{0,1} {1} S1 D`, in0 `a0 a1 S1 D`, in1 `b0 b1 S1 c0 c1 S1 D`,
    in0 arriving first: `a0 a1 S1 b0 b1 S2 c0 c1 S3 D`."""
    out = _reassemble(["a0 a1 S1 D", "b0 b1 S1 c0 c1 S1 D"], "{0,1} {1} S1 D", 1,
                      t=[[1, 2], [5, 6, 7, 8]])
    assert show(out) == "a0 a1 S1 b0 b1 S2 c0 c1 S3 D"


def test_reassemble_multi_hot_orders_by_arrival():
    """Same, with input 1 arriving first: its chunk is copied first."""
    out = _reassemble(["a0 a1 S1 D", "b0 b1 S1 c0 c1 S1 D"], "{0,1} {1} S1 D", 1,
                      t=[[5, 6], [1, 2, 7, 8]])
    assert show(out) == "b0 b1 S1 a0 a1 S2 c0 c1 S3 D"


def test_reassemble_does_not_interleave_chunks():
    """Errata 10: the chunk that started is copied whole, even if the other selected
    input has data earlier than the chunk's later elements."""
    out = _reassemble(["a0 a1 S1 D", "b0 b1 S1 D"], "{0,1} D", 1, t=[[1, 20], [2, 3]])
    assert show(out) == "a0 a1 S1 b0 b1 S2 D"


def test_reassemble_rank0_chunks():
    """2.10 for q = 0: every non-last element is a plain value, the last gets S_(1+s)."""
    out = _reassemble(["a0 a1 D", "b0 b1 b2 D"], "{0,1} {1} {0,1} D", 0,
                      t=[[0, 0], [1, 1, 1]])
    assert show(out) == "a0 b0 S1 b1 S1 a1 b2 S1 D"


def test_reassemble_keeps_stops_inside_chunks():
    """q = 2: a chunk's inner S1 is kept; its end S2 becomes S_(q+1+s) = S3 on the last
    chunk of the group."""
    out = _reassemble(["a S1 b S2 D", "c S1 d S2 D"], "{0,1} D", 2, t=[[0, 0], [1, 1]])
    assert show(out) == "a S1 b S2 c S1 d S3 D"


def test_reassemble_starts_with_the_first_input_that_has_data():
    """Errata 10: routing starts with the first selected input that has data, without
    waiting for the other selected inputs (input 1 at t=3, input 0 only at t=10)."""
    out = _reassemble(["a0 D", "b0 D"], "{0,1} D", 0, t=[[10], [3]])
    assert show(out) == "b0 a0 S1 D"
    assert out[0][0] < 10
    assert out[0][0] == 3 + 1 + 1  # arrival + switch_cycles, then the hop


def test_reassemble_timing_and_output_flag():
    """2.10: released no earlier than arrival + switch (+ load of a tile in a memory
    unit), plus write-back; outputs get read_from_mu = write_back_mu."""
    tile = TileVal(16, 64, "f32", in_mu=True)
    out = _reassemble([[(tile, 0)]], "{0} D", 0, switch_cycles=2)
    assert times(out) == [2 + 64 + 1]
    assert out[0][1].in_mu is False
    out = _reassemble([[(tile, 0)]], "{0} D", 0, switch_cycles=2, write_back=True)
    assert times(out) == [2 + 64 + 64 + 1]
    assert out[0][1].in_mu is True


def _eager(ins, rank, t=None, info=None):
    outs, _ = run_operator("EagerMerge", {"rank": rank},
                           {"ins": [paper(x) for x in ins]}, times={"ins": t} if t else None,
                           info_in=info)
    return outs


def test_eager_merge_2_11_example():
    """2.11 (a = 1): in0 `a0 a1 S1 D` (arrives at t=10), in1 `b0 b1 S1 D` (t=3):
    data `b0 b1 S1 a0 a1 S1 D`, sel `{1} {0} D`."""
    data, sel = _eager(["a0 a1 S1 D", "b0 b1 S1 D"], 1, t=[[10, 10], [3, 3]])
    assert show(data) == "b0 b1 S1 a0 a1 S1 D"
    assert show(sel) == "{1} {0} D"


def test_eager_merge_timing():
    """2.11 / errata 7: the selector is sent at the decision time; each forwarded element
    adds 1 cycle."""
    data, sel = _eager(["a0 a1 S1 D", "b0 b1 S1 D"], 1, t=[[10, 10], [3, 3]])
    assert times(sel) == [4, 11]
    assert times(data) == [4, 5, 11, 12]


def test_eager_merge_ties_go_to_the_lower_index():
    data, sel = _eager(["a0 S1 D", "b0 S1 D", "c0 S1 D"], 1, t=[[5], [5], [5]])
    assert show(sel) == "{0} {1} {2} D"
    data, sel = _eager(["a0 S1 D", "b0 S1 D", "c0 S1 D"], 1, t=[[6], [5], [5]])
    assert show(sel) == "{1} {2} {0} D"


def test_eager_merge_never_commits_before_an_earlier_arrival_is_ruled_out():
    """2.11: input 1's chunk arrives at 4, input 0's at 7, although input 0 is listed
    first and input 1 is still empty at the start."""
    data, sel = _eager(["a0 a1 S1 D", "b0 b1 S1 D"], 1, t=[[7, 8], [4, 30]])
    assert show(sel) == "{1} {0} D"
    assert show(data) == "b0 b1 S1 a0 a1 S1 D"


def test_eager_merge_picks_the_earliest_pending_chunk_each_time():
    """After forwarding input 0's first chunk (until t=2), input 1's chunk (arrived at 2)
    goes before input 0's second chunk (arrived at 3)."""
    data, sel = _eager(["a0 a1 S1 c0 S1 D", "b0 S1 D"], 1, t=[[0, 0, 3], [2]])
    assert show(sel) == "{0} {1} {0} D"
    assert show(data) == "a0 a1 S1 b0 S1 c0 S1 D"


def test_eager_merge_rank0_and_default_rank():
    data, sel = _eager(["a b D", "c D"], None, t=[[0, 2], [1]],
                       info={"ins": [st((2,)), st((1,))]})
    assert show(data) == "a c b D"
    assert show(sel) == "{0} {1} {0} D"


def test_eager_merge_input_stop_above_the_chunk_rank_is_an_error():
    with pytest.raises(SimError):
        _eager(["a S2 D", "b S1 D"], 1)


def test_parallelize_2_12_example():
    """2.12 (rank 1, P = 2): chunks dealt round-robin."""
    outs, _ = run_operator("Parallelize", {"consumers": 2, "rank": 1},
                           {"in": paper("x0 x1 S1 y0 y1 S1 z0 z1 S1 w0 w1 S1 D")})
    assert show(outs[0]) == "x0 x1 S1 z0 z1 S1 D"
    assert show(outs[1]) == "y0 y1 S1 w0 w1 S1 D"


def test_parallelize_rank0_and_default_rank():
    outs, _ = run_operator("Parallelize", {"consumers": 3}, {"in": paper("a b c d e D")},
                           info_in={"in": st((5,))})
    assert [show(o) for o in outs] == ["a d D", "b e D", "c D"]


def test_parallelize_timing():
    """2.12: 0 cycles, outputs stamped t + switch_cycles."""
    outs, _ = run_operator("Parallelize", {"consumers": 2, "rank": 0, "switch_cycles": 3},
                           {"in": paper("a b c D")}, times={"in": [0, 5, 6]})
    assert times(outs[0]) == [3, 9]
    assert times(outs[1]) == [8]


def test_broadcast_2_13_example():
    outs, _ = run_operator("Broadcast", {"consumers": 3}, {"in": paper("a b S1 D")})
    assert [show(o) for o in outs] == ["a b S1 D"] * 3
    assert [times(o) for o in outs] == [[1, 1]] * 3


def test_broadcast_copies_share_one_stamp_under_back_pressure():
    """Errata 6: Broadcast dequeues, waits for a credit on every target (its clock becomes
    the max of their credit times), then sends all copies with that one stamp. Output 0
    is deep, output 1 has depth 1 and a consumer that first reads at t=10 (credit 11): the
    second element is visible at 12 on BOTH outputs."""
    outs, logs, _, _ = run_net("Broadcast", {"consumers": 2}, {"in": paper("a b D")},
                               out_caps={1: 1}, consumers={1: consumer(start=10)})
    assert times(outs[0]) == [1, 12]
    assert [t for t, _, _ in logs[1]] == [10, 12]


def test_broadcast_slowest_consumer_back_pressures_all():
    """The slowest consumer back-pressures all: with output 0 full, output 1's copy is not
    sent earlier than output 0's."""
    outs, logs, _, _ = run_net("Broadcast", {"consumers": 2}, {"in": paper("a b D")},
                               out_caps={0: 1}, consumers={0: consumer(start=10)})
    assert [t for t, _, _ in logs[0]] == [10, 12]
    assert times(outs[1]) == [1, 12]
