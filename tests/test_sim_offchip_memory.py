"""Token-by-token tests of the simulator behaviors of the off-chip memory operators
(LinearOffChipLoad / Store, RandomOffChipLoad / Store); notation and harness in
tests/behavior_harness.py."""

from __future__ import annotations

import numpy as np
import pytest
from behavior_harness import first_value, paper, run_program, show, sunk, times

from stepc.ops.base import TensorRef
from stepc.sim.harness import run_operator
from stepc.sim.kernel import SimError
from stepc.sim.tokens import TileVal, int_tile

# =====================================================================================
# Off-chip memory: LinearOffChipLoad / Store, RandomOffChipLoad / Store
# =====================================================================================


# X [2, 48] in [1, 16] tiles is a 2 x 3 tiled tensor; with `arange` data tile k starts
# with the value 16 * k, so `tile_id` recovers k.
LOADS = """
    tensor X : f32[2, 48] input = arange
    plain = LinearOffChipLoad(X, tile=[1, 16], shape=[2, 3], stride=[3, 1])
    twice = LinearOffChipLoad(X, tile=[1, 16], shape=[2, 2, 3], stride=[0, 3, 1])
    cols = LinearOffChipLoad(X, tile=[1, 16], shape=[3, 2], stride=[1, 3])
    Sink(plain)
    Sink(twice)
    Sink(cols)
"""


def tile_id(p) -> str:
    return f"t{first_value(p) // 16}"


def _tile_tokens(got):
    return [(tile_id(p), s) for _, p, s in got]


def test_linear_load_values_and_view_order(recorded):
    """2.1: the view's multi-index in row-major order, tile index = sum(idx * stride);
    stride 0 re-reads; the tiles hold the tensor's data."""
    typed, _ = run_program(LOADS)
    assert [tile_id(p) for _, p, _ in sunk(recorded, typed, "plain")] == \
        ["t0", "t1", "t2", "t3", "t4", "t5"]
    assert [tile_id(p) for _, p, _ in sunk(recorded, typed, "twice")] == \
        ["t0", "t1", "t2", "t3", "t4", "t5"] * 2
    assert [tile_id(p) for _, p, _ in sunk(recorded, typed, "cols")] == \
        ["t0", "t3", "t1", "t4", "t2", "t5"]
    got = sunk(recorded, typed, "plain")
    np.testing.assert_array_equal(got[4][1].data, np.arange(64, 80).reshape(1, 16))
    assert all(p.in_mu for _, p, _ in got)  # loaded tiles sit in a memory unit


def test_linear_load_stops_2_1_example(recorded):
    """2.1 with stepc's paper shapes: stride (3,1), out (2,3) is the rank-1 stream
    `t0 t1 t2 S1 t3 t4 t5 S1 D`; stride (0,3,1), out (2,2,3) (rank 2) reads the tensor
    twice: `t0 t1 t2 S1 t3 t4 t5 S2 t0 t1 t2 S1 t3 t4 t5 S2 D`."""
    typed, _ = run_program(LOADS)
    assert show(_tile_tokens(sunk(recorded, typed, "plain"))) == "t0 t1 t2 S1 t3 t4 t5 S1 D"
    assert show(_tile_tokens(sunk(recorded, typed, "twice"))) == \
        "t0 t1 t2 S1 t3 t4 t5 S2 t0 t1 t2 S1 t3 t4 t5 S2 D"
    assert show(_tile_tokens(sunk(recorded, typed, "cols"))) == "t0 t3 S1 t1 t4 S1 t2 t5 S1 D"


def test_load_and_merged_stream_of_equal_shape_zip_at_run_time():
    """Both Map inputs have type [4, 1] (rank 1): their elements must agree stop by stop
    (2.14), so the program runs."""
    _, r = run_program("""
        tensor X : f32[4, 64] input = arange
        tensor Y : f32[4, 64] input = arange
        tensor Z : f32[4, 64] output
        x = LinearOffChipLoad(X, tile=[1, 64])        # [4, 1]
        y = LinearOffChipLoad(Y, tile=[1, 64])        # [4, 1]
        part = Parallelize(y, consumers=2, rank=1)    # [2, 1] each
        m, _ = EagerMerge(part, rank=1)               # [4, 1]
        s = Map(x, m, fn=add)
        LinearOffChipStore(s, Z)
    """)
    X = np.arange(4 * 64, dtype=np.float32).reshape(4, 64)
    assert sorted(r.outputs["Z"][:, 0].tolist()) == sorted((2 * X[:, 0]).tolist())


def _tref(name="X", dtype="f32", shape=(2, 48)):
    return TensorRef(name, dtype, tuple(shape), (), None)


def test_linear_load_with_ref_2_2_example():
    """2.2: for each ref element the whole view; the view's last tile gets S_L, or
    S_(L+s) when the ref element carried S_s. Frontend example: ref `r0 r1 S1` (1,2), view
    (1,2): `t0 t1 S2 t0 t1 S3 D`; paper form (ref rank 0): `t0 t1 S2 t0 t1 S2 D`."""
    attrs = {"tensor": _tref(), "tile": [1, 16], "shape": [1, 2], "stride": [2, 1]}
    for ref, want in (("r0 r1 S1 D", [0, 2, 0, 3]), ("r0 r1 D", [0, 2, 0, 2]),
                      ("r0 S1 r1 r2 S1 D", [0, 3, 0, 2, 0, 3])):
        outs, _ = run_operator("LinearOffChipLoad", attrs, {"ref": paper(ref)})
        assert [s for _, _, s in outs[0]] == want, ref


def test_linear_load_with_ref_waits_for_the_ref():
    attrs = {"tensor": _tref(), "tile": [1, 16], "shape": [1]}
    outs, _ = run_operator("LinearOffChipLoad", attrs, {"ref": paper("r0 r1 D")},
                           times={"ref": [0, 500]})
    t0, t1 = times(outs[0])
    assert t0 == 1 + 19 and t1 == 500 + 1 + 19


def test_linear_load_tile_timing():
    """Simulation-errata 3.6.4 / 12: a K-request tile issued at t completes at t + K + 18
    and is visible downstream at t + K + 19; tiles do not overlap, and start-up applies to
    every request. [1,16] f32 = 64 B = 1 request; [16,64] bf16 = 16 rows x 128 B = 32."""
    outs, _ = run_operator("LinearOffChipLoad",
                           {"tensor": _tref(), "tile": [1, 16], "shape": [3], "stride": [1]},
                           {})
    assert times(outs[0]) == [20, 39, 58]
    outs, _ = run_operator("LinearOffChipLoad",
                           {"tensor": _tref("K", "bf16", (32, 64)), "tile": [16, 64]}, {})
    assert times(outs[0]) == [32 + 19, 2 * (32 + 18) + 1]


def test_linear_store_writes_tiles_row_major():
    """2.3: the tiles are written linearly in row-major tile order: `t0 t2 S1 t1 t3 S1`
    (a column-major view of the 2x2 tiled X) fills Y's first tile row with t0 t2."""
    typed, r = run_program("""
        tensor X : f32[32, 32] input = arange
        tensor Y : f32[32, 32] output
        tensor Z : f32[32, 32] output
        x = LinearOffChipLoad(X, tile=[16, 16], shape=[2, 2], stride=[1, 2])
        LinearOffChipStore(x, Y)
        z = LinearOffChipLoad(X, tile=[16, 16])
        LinearOffChipStore(z, Z)
    """)
    X = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    np.testing.assert_array_equal(r.outputs["Z"], X)
    t = [X[:16, :16], X[:16, 16:], X[16:, :16], X[16:, 16:]]
    want = np.block([[t[0], t[2]], [t[1], t[3]]])
    np.testing.assert_array_equal(r.outputs["Y"], want)


def test_random_load_2_4_example():
    """2.4: `5 2 S1 7 S1 D` -> `T5 T2 S1 T7 S1 D`: the output has the address stream's
    stops."""
    seq = [(int_tile(5), 0), (int_tile(2), 1), (int_tile(7), 1)]
    outs, _ = run_operator("RandomOffChipLoad",
                           {"tensor": _tref("K", "f32", (128, 16)), "tile": [16, 16]},
                           {"raddr": seq})
    assert [s for _, _, s in outs[0]] == [0, 1, 1]
    assert all((p.rows, p.cols, p.in_mu) == (16, 16, True) for _, p, _ in outs[0])


def test_random_load_gathers_tiles_in_a_program(recorded, tmp_path):
    """2.4: each address is a row-major tile index into the tiled tensor."""
    np.save(tmp_path / "addr.npy", np.array([[5, 2, 7]], dtype=np.uint64))
    typed, _ = run_program(f"""
        tensor K : f32[128, 16] input = arange
        tensor A : u64[1, 3] input = file(path="{(tmp_path / 'addr.npy').as_posix()}")
        addr = MetadataGen(A)
        k = RandomOffChipLoad(addr, K, tile=[16, 16])
        Sink(k)
    """)
    got = sunk(recorded, typed, "k")
    assert [first_value(p) // 256 for _, p, _ in got] == [5, 2, 7]
    np.testing.assert_array_equal(got[0][1].data,
                                  np.arange(128 * 16, dtype=np.float32).reshape(128, 16)[80:96])


def test_random_load_address_out_of_range_is_an_error():
    with pytest.raises(SimError, match="outside"):
        run_operator("RandomOffChipLoad",
                     {"tensor": _tref("K", "f32", (32, 16)), "tile": [16, 16]},
                     {"raddr": [(int_tile(2), 0)]})


def test_random_store_acks_follow_waddr_2_5():
    """2.5: one bool ack per (waddr, wdata) pair after the write, with waddr's stops."""
    waddr = [(int_tile(5), 0), (int_tile(2), 1), (int_tile(7), 1)]
    wdata = [(TileVal(16, 16, "f32"), s) for s in (0, 1, 1)]
    outs, _ = run_operator("RandomOffChipStore", {"tensor": _tref("K", "f32", (128, 16))},
                           {"waddr": waddr, "wdata": wdata})
    assert show(outs[0]) == "T T S1 T S1 D"


def test_random_store_scatters_tiles_in_a_program(recorded, tmp_path):
    np.save(tmp_path / "slots.npy", np.array([[3], [0]], dtype=np.uint64))
    typed, r = run_program(f"""
        tensor KNEW : f32[32, 16] input = arange
        tensor S : u64[2, 1] input = file(path="{(tmp_path / 'slots.npy').as_posix()}")
        tensor K : f32[64, 16] output
        waddr = MetadataGen(S)
        knew = LinearOffChipLoad(KNEW, tile=[16, 16])
        ack = RandomOffChipStore(waddr, knew, K)
        Sink(ack)
    """)
    knew = np.arange(32 * 16, dtype=np.float32).reshape(32, 16)
    want = np.zeros((64, 16), np.float32)
    want[48:64] = knew[:16]
    want[0:16] = knew[16:]
    np.testing.assert_array_equal(r.outputs["K"], want)
    assert [p for _, p, _ in sunk(recorded, typed, "ack")] == [True, True]
