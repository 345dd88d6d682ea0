"""Token-by-token tests of the simulator behaviors of the higher-order operators (Map,
Accum, Scan, FlatMap); notation and harness in tests/behavior_harness.py."""

from __future__ import annotations

import numpy as np
import pytest
from behavior_harness import F32, first_value, fn, paper, run_net, show, st, times, val_tile, values

from stepc.sim.harness import run_operator
from stepc.sim.kernel import SimError
from stepc.sim.tokens import TileVal, int_tile
from stepc.types import Tile

# =====================================================================================
# Higher-order operators: Map, Accum, Scan, FlatMap
# =====================================================================================


def _map(ins, f, out_elem=F32, times_in=None, **attrs):
    return run_operator("Map", {"fn": f, **attrs}, {"ins": ins},
                        info_out=[st((1,), out_elem)],
                        times={"ins": times_in} if times_in else None)[0][0]


def test_map_unary_preserves_stops_2_14_example():
    """2.14: `a b S1 c S2 D` -> `f(a) f(b) S1 f(c) S2 D`."""
    seq = [(val_tile(0.0), 0), (val_tile(1.0), 1), (val_tile(2.0), 2)]
    out = _map([seq], fn("exp"))
    assert [s for _, _, s in out] == [0, 1, 2]
    assert [float(p.data[0, 0]) for _, p, _ in out] == pytest.approx([1.0, np.e, np.e ** 2])


def test_map_binary_lockstep():
    a = [(val_tile(1.0), 0), (val_tile(2.0), 1), (val_tile(3.0), 2)]
    b = [(val_tile(10.0), 0), (val_tile(20.0), 1), (val_tile(30.0), 2)]
    assert values(_map([a, b], fn("add"))) == [(11.0, 0), (22.0, 1), (33.0, 2)]


def test_map_over_zip():
    pairs = [((val_tile(2.0), val_tile(5.0)), 0), ((val_tile(3.0), val_tile(4.0)), 1)]
    assert values(_map([pairs], fn("mul"))) == [(10.0, 0), (12.0, 1)]


def test_map_stops_must_match():
    """2.14: both elements Val, or both ValStop with the same level; else an error."""
    a = [(val_tile(1.0), 0), (val_tile(2.0), 1)]
    b = [(val_tile(1.0), 1), (val_tile(2.0), 1)]
    with pytest.raises(SimError, match="stop levels"):
        _map([a, b], fn("add"))


def test_map_one_input_ending_early_is_an_error():
    a = [(val_tile(1.0), 0), (val_tile(2.0), 0)]
    b = [(val_tile(1.0), 0), (val_tile(2.0), 0), (val_tile(3.0), 0)]
    with pytest.raises(SimError, match="end at different"):
        _map([a, b], fn("add"))


def _mm_inputs(n=1, a_mu=False, w_mu=False):
    a = [(TileVal(16, 64, "f32", in_mu=a_mu), 0) for _ in range(n)]
    w = [(TileVal(64, 64, "f32", in_mu=w_mu), 0) for _ in range(n)]
    return [a, w]


def test_map_matmul_roofline():
    """Paper 4.3 / semantics 2.0: a [16,64]x[64,64] matmul at compute_bw 1024 takes
    ceil(2*16*64*64/1024) = 128 cycles; the output is visible one cycle later. The node is
    not pipelined: the second element starts when the first is done."""
    out = _map(_mm_inputs(2), fn("matmul"), Tile("f32", 16, 64), compute_bw=1024)
    assert times(out) == [129, 257]
    assert [(p.rows, p.cols) for _, p, _ in out] == [(16, 64), (16, 64)]


def test_map_load_term_of_tiles_in_memory_units():
    """2.0: load = sum over inputs flagged read_from_mu of ceil(bytes / onchip_bw)
    (64 B/cycle): [16,64] f32 = 4096 B -> 64 cycles, [64,64] f32 -> 256 cycles."""
    bw = 1 << 20  # compute is 1 cycle
    out = _map(_mm_inputs(a_mu=True), fn("matmul"), Tile("f32", 16, 64), compute_bw=bw)
    assert times(out) == [64 + 1]
    out = _map(_mm_inputs(a_mu=True, w_mu=True), fn("matmul"), Tile("f32", 16, 64),
               compute_bw=bw)
    assert times(out) == [64 + 256 + 1]
    out = _map(_mm_inputs(a_mu=True), fn("matmul"), Tile("f32", 16, 64), compute_bw=1024)
    assert times(out) == [128 + 1]  # max(load 64, compute 128)


def test_map_store_term_and_output_flag():
    """2.0: store = ceil(output bytes / onchip_bw) with write_back; the output tile then
    sits in a memory unit (read_from_mu = write_back_mu), and not otherwise."""
    out = _map(_mm_inputs(a_mu=True), fn("matmul"), Tile("f32", 16, 64),
               compute_bw=1 << 20, write_back=True)
    assert times(out) == [64 + 1]
    assert out[0][1].in_mu is True
    out = _map(_mm_inputs(a_mu=True), fn("matmul"), Tile("f32", 16, 64), compute_bw=1 << 20)
    assert out[0][1].in_mu is False


@pytest.mark.parametrize("f,rows,cols,bw,cycles", [
    ("silu", 16, 64, 1024, 8),      # 8 FLOPs per element
    ("exp", 16, 64, 1024, 4),       # 4 FLOPs per element
    ("row_sum", 16, 64, 1024, 1),   # R*C
    ("silu", 16, 64, 100, 82),      # ceil(8192 / 100)
])
def test_map_unary_roofline(f, rows, cols, bw, cycles):
    """Section 3 function table: cycles = ceil(FLOPs / compute_bw)."""
    out = _map([[(TileVal(rows, cols, "f32"), 0)]], fn(f), Tile("f32", rows, cols),
               compute_bw=bw)
    assert times(out) == [cycles + 1]


def test_map_fixed_cycle_function():
    """cache_write_addr: idx * row_offset + len, a fixed 1 cycle."""
    out = _map([[(int_tile(3), 0), (int_tile(4), 0)], [(int_tile(5), 0), (int_tile(6), 0)]],
               fn("cache_write_addr", row_offset=16), Tile("u64", 1, 1))
    assert show(out) == "53 70 D"
    assert times(out) == [2, 3]


@pytest.mark.parametrize("f,attrs,values,expect", [
    ("mod_int", {"by": 32}, [0, 31, 32, 1000], "0 31 0 8 D"),
    ("mod_int", {"by": 32, "plus": 1}, [31, 1000], "0 9 D"),
    ("ceildiv_int", {"by": 32, "plus": 1}, [0, 31, 1000], "1 1 32 D"),
])
def test_map_integer_functions(f, attrs, values, expect):
    """The integer functions on [1,1] tiles: `(x + plus) mod by`, `ceil((x + plus) / by)`,
    one cycle each."""
    out = _map([[(int_tile(v), 0) for v in values]], fn(f, **attrs), Tile("u64", 1, 1))
    assert show(out) == expect
    assert times(out) == list(range(2, 2 + len(values)))


def test_map_holds_its_input_until_the_output_is_sent():
    """Errata 1 / 5.3: UnaryMap/BinaryMap peek, add roofline, send, release at the
    post-send clock (credit = that clock + 1)."""
    outs, _, ins, ctx = run_net("Map", {"fn": fn("matmul"), "compute_bw": 1024},
                                {"ins": _mm_inputs(1)},
                                info_out=[st((1,), Tile("f32", 16, 64))])
    assert times(outs[0]) == [129]
    assert [list(ch.credits) for ch in ins["ins"]] == [[129], [129]]


def _accum(seqs, f, rank, out_elem=F32, **attrs):
    outs, _ = run_operator("Accum", {"fn": f, "rank": rank, **attrs}, {"ins": seqs},
                           info_out=[st((1,), out_elem)])
    return outs[0]


def _vals(text):
    """`1 2 S1 3 4 S2` -> value tiles with those stops."""
    return [(val_tile(float(v)), s) for v, s in paper(text)]


def test_accum_rank1_2_15_example():
    """2.15 (r = 1): `a b S1 c d S2 D` -> `acc(a,b) acc(c,d) S1 D`."""
    assert values(_accum([_vals("1 2 S1 3 4 S2 D")], fn("add"), 1)) == [(3.0, 0), (7.0, 1)]


def test_accum_rank2_2_15_example():
    """2.15 (r = 2): `a b S1 c d S2 D` -> `acc(a,b,c,d) D`."""
    assert values(_accum([_vals("1 2 S1 3 4 S2 D")], fn("add"), 2)) == [(10.0, 0)]


def test_accum_paper_form_and_ragged_groups():
    """[2, D_ragged] (rank 1) -> [2] (rank 0): one plain value per group."""
    assert values(_accum([_vals("1 S1 2 3 4 S1 D")], fn("add"), 1)) == [(1.0, 0), (9.0, 0)]
    assert values(_accum([_vals("2 3 S1 4 S1 D")], fn("mul"), 1)) == [(6.0, 0), (4.0, 0)]


def test_accum_with_matmul_2_16_example():
    """2.16: A = `a0 a1 S1 a2 a3 S2`, W = `w0 w1 S1 w2 w3 S2` ->
    `(a0 w0 + a1 w1) (a2 w2 + a3 w3) S1 D`."""
    rng = np.random.default_rng(0)
    a = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(4)]
    w = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(4)]
    stops = [0, 1, 0, 2]
    A = [(TileVal(2, 3, "f32", data=x), s) for x, s in zip(a, stops)]
    W = [(TileVal(3, 4, "f32", data=x), s) for x, s in zip(w, stops)]
    out = _accum([A, W], fn("matmul"), 1, Tile("f32", 2, 4))
    assert [s for _, _, s in out] == [0, 1]
    np.testing.assert_allclose(out[0][1].data, a[0] @ w[0] + a[1] @ w[1], rtol=1e-5)
    np.testing.assert_allclose(out[1][1].data, a[2] @ w[2] + a[3] @ w[3], rtol=1e-5)


def test_accum_retile_row_packs_rows_and_adds_valid_rows():
    """Paper 3.3 Pack to Tile: four [1,64] rows -> one [4,64] tile; the valid-row counts
    (offsets) add up, so a chunk with two pad rows has 2 valid rows."""
    rows = [TileVal(1, 64, "f32", valid=v, data=np.full((1, 64), i, np.float32))
            for i, v in enumerate([1, 1, 1, 1, 1, 1, 0, 0])]
    seq = [(r, 1 if i % 4 == 3 else 0) for i, r in enumerate(rows)]
    out = _accum([seq], fn("retile_row"), 1, Tile("f32", 4, 64))
    assert [(p.rows, p.cols, p.valid, s) for _, p, s in out] == [(4, 64, 4, 0), (4, 64, 2, 0)]
    np.testing.assert_array_equal(out[1][1].data[:, 0], [4, 5, 6, 7])


def test_accum_timing_store_term_on_the_emitting_element():
    """Errata 1: per element max(load, compute); on the emitting element also the store
    term ceil(accumulator bytes / onchip_bw) with write_back. [16,64] f32 add: compute
    ceil(1024/1024) = 1, store 4096/64 = 64."""
    seq = [(TileVal(16, 64, "f32"), s) for s in (0, 1, 0, 1)]
    out = _accum([seq], fn("add"), 1, Tile("f32", 16, 64), compute_bw=1024)
    assert times(out) == [3, 5]
    out = _accum([seq], fn("add"), 1, Tile("f32", 16, 64), compute_bw=1024, write_back=True)
    assert times(out) == [1 + 64 + 1, 66 + 64 + 1]
    assert out[0][1].in_mu is True


def test_accum_with_matmul_timing():
    """2.16: per pair max(load(in1) + load(in2), 2*M*K*N / compute_bw)."""
    outs, _ = run_operator("Accum", {"fn": fn("matmul"), "rank": 1, "compute_bw": 1024},
                           {"ins": [[(x, s) for (x, _), s in zip(pair, (0, 1))]
                                    for pair in _mm_inputs(2)]},
                           info_out=[st((1,), Tile("f32", 16, 64))])
    assert times(outs[0]) == [2 * 128 + 1]
    outs, _ = run_operator("Accum", {"fn": fn("matmul"), "rank": 1, "compute_bw": 1024},
                           {"ins": [[(x, s) for (x, _), s in zip(pair, (0, 1))]
                                    for pair in _mm_inputs(2, w_mu=True)]},
                           info_out=[st((1,), Tile("f32", 16, 64))])
    assert times(outs[0]) == [2 * 256 + 1]


def test_accum_retile_with_empty_init_has_no_store_term():
    """Errata 1: the store term is sized from the re-initialised accumulator; an Accum
    with an Empty init (retiling) has a zero dimension, so its store term is 0 (and
    retile_row itself takes 0 cycles)."""
    seq = [(TileVal(1, 64, "f32"), s) for s in (0, 0, 0, 1)]
    out = _accum([seq], fn("retile_row"), 1, Tile("f32", 4, 64), write_back=True)
    assert times(out) == [1]


def test_accum_releases_inputs_before_sending():
    """Errata 1: Accum dequeues its input after the roofline and only then sends, so an
    input slot is freed even while the output send stalls. Output depth 1, no consumer:
    the second emission blocks, but its input element has already been dequeued."""
    seq = [(TileVal(16, 64, "f32"), 1) for _ in range(3)]
    outs, _, ins, ctx = run_net("Accum", {"fn": fn("add"), "rank": 1, "compute_bw": 1024},
                                {"ins": [seq]}, info_out=[st((3,), Tile("f32", 16, 64))],
                                out_caps={0: 1})
    assert len(outs[0]) == 1  # the first result; the second send is blocked
    assert len(ins["ins"][0].q) == 1  # elements 0 and 1 dequeued, element 2 not yet read
    assert list(ins["ins"][0].credits) == [2, 3]


def test_scan_2_17_example():
    """2.17 (r = 1, add): `a b c S1 d e S2 D` -> `a a+b a+b+c S1 d d+e S2 D`."""
    outs, _ = run_operator("Scan", {"fn": fn("add"), "rank": 1},
                           {"ins": [_vals("1 2 4 S1 8 16 S2 D")]}, info_out=[st((1,), F32)])
    assert values(outs[0]) == [(1.0, 0), (3.0, 0), (7.0, 1), (8.0, 0), (24.0, 2)]


def test_scan_rank2_resets_only_at_S2():
    outs, _ = run_operator("Scan", {"fn": fn("add"), "rank": 2},
                           {"ins": [_vals("1 2 S1 4 S2 8 S1 16 S2 D")]},
                           info_out=[st((1,), F32)])
    assert values(outs[0]) == [(1.0, 0), (3.0, 1), (7.0, 2), (8.0, 1), (24.0, 2)]


def test_scan_max_starts_from_minus_infinity():
    outs, _ = run_operator("Scan", {"fn": fn("max"), "rank": 1},
                           {"ins": [_vals("-5 -7 -1 S1 -9 S1 D")]}, info_out=[st((1,), F32)])
    assert values(outs[0]) == [(-5.0, 0), (-5.0, 0), (-1.0, 1), (-9.0, 1)]


def _split_tiles(valid1=None):
    t0 = TileVal(2, 4, "f32", data=np.array([[0] * 4, [1] * 4], np.float32))
    t1 = TileVal(2, 4, "f32", valid=valid1, data=np.array([[10] * 4, [11] * 4], np.float32))
    return [(t0, 0), (t1, 1)]


def test_flatmap_retile_streamify_2_18_example():
    """2.18: `T0 T1 S1 D` of [2,4] tiles -> `T0r0 T0r1 T1r0 T1r1 S1 D` of [1,4] rows; the
    input element's stop lands on its last piece."""
    outs, _ = run_operator("FlatMap", {"fn": fn("retile_streamify")}, {"ins": [_split_tiles()]})
    out = outs[0]
    assert [(first_value(p), s) for _, p, s in out] == [(0, 0), (1, 0), (10, 0), (11, 1)]
    assert all((p.rows, p.cols) == (1, 4) for _, p, _ in out)


def test_flatmap_retile_streamify_with_filter_drops_padding_rows():
    """2.18: with filter_mask and T1 having 1 valid row -> `T0r0 T0r1 T1r0 S1 D`."""
    outs, _ = run_operator("FlatMap", {"fn": fn("retile_streamify", filter=True)},
                           {"ins": [_split_tiles(valid1=1)]})
    assert [(first_value(p), s) for _, p, s in outs[0]] == [(0, 0), (1, 0), (10, 1)]
    # without the filter the pad row is kept
    outs, _ = run_operator("FlatMap", {"fn": fn("retile_streamify")},
                           {"ins": [_split_tiles(valid1=1)]})
    assert [(first_value(p), s) for _, p, s in outs[0]] == [(0, 0), (1, 0), (10, 0), (11, 1)]


def test_flatmap_input_stop_adds_to_the_inner_streams_last_stop():
    """Paper FlatMap: the input element's S_k becomes S_(k+b) on the inner stream's last
    element. expert_addr (b = 2): n addresses base + e*n + i, each S1, the last S2."""
    outs, _ = run_operator("FlatMap", {"fn": fn("expert_addr", tiles=3, base=100)},
                           {"ins": [paper("{2} {0} S1 D")]})
    assert show(outs[0]) == "106 S1 107 S1 108 S2 100 S1 101 S1 102 S3 D"


def test_flatmap_cache_read_addr_over_zip():
    """2.18 CacheReadAddrGen: for (idx, L) emit idx*row_offset + i, i < L, the last S1."""
    pairs = [((int_tile(2), int_tile(3)), 0), ((int_tile(5), int_tile(1)), 0)]
    outs, _ = run_operator("FlatMap", {"fn": fn("cache_read_addr", row_offset=16)},
                           {"ins": [pairs]})
    assert show(outs[0]) == "32 33 34 S1 80 S1 D"


def test_flatmap_filter_last_tile():
    """2.18 FilterLastTile: L-1 selectors {1} then {0} carrying S1 (S_(s+1))."""
    outs, _ = run_operator("FlatMap", {"fn": fn("filter_last_tile")},
                           {"ins": [[(int_tile(3), 0), (int_tile(1), 1)]]})
    assert show(outs[0]) == "{1} {1} {0} S1 {0} S2 D"


def test_flatmap_retile_streamify_pieces_are_sent_at_once():
    """2.18: all pieces are enqueued at the current tick (only the FIFO limits them)."""
    outs, _ = run_operator("FlatMap", {"fn": fn("retile_streamify")}, {"ins": [_split_tiles()]},
                           times={"ins": [[0, 7]]})
    assert times(outs[0]) == [1, 1, 8, 8]


def test_flatmap_cache_read_addr_one_address_per_cycle():
    pairs = [((int_tile(2), int_tile(3)), 0)]
    outs, _ = run_operator("FlatMap", {"fn": fn("cache_read_addr", row_offset=16)},
                           {"ins": [pairs]})
    assert show(outs[0]) == "32 33 34 S1 D"
    assert times(outs[0]) == [1, 2, 3]
