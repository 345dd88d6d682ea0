"""Energy and area by a second route: each bundled program family's energy and area derived
by hand from the program's own text (its tensors, tiles and operators, the FLOPs of the
function docs) and the rules of stepc/energy.py and stepc/analyze/access.py, with the
default coefficients written out here, against the measured metrics."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from stepc.frontend import compile_file, compile_source
from stepc.grammar.parse import decode_source
from stepc.hw import load_config
from stepc.measure import measure

REPO = Path(__file__).resolve().parent.parent
PROGRAMS = REPO / "programs"
REL = 1e-9

# The default coefficients of the [energy] and [area] tables (stepc/hw/config.py), 45 nm:
# arithmetic energies, 64-bit SRAM accesses and arithmetic areas from Horowitz, "Computing's
# energy problem", ISSCC 2014; the SRAM bit cell from Intel's 45 nm process (0.346 um2);
# the off-chip energy per bit of HBM2 (O'Connor et al., MICRO 2017); the wire energy and
# the logic leakage are the tables' own defaults.
MUL_PJ, ADD_PJ = {"fp16": 1.1, "fp32": 3.7}, {"fp16": 0.4, "fp32": 0.9}


def flop_pj(mul: str, add: str = "") -> float:
    """Half a multiply on the inputs' type plus half an add into the output's (a FLOP is
    half a fused multiply-add)."""
    return (MUL_PJ[mul] + ADD_PJ[add or mul]) / 2



SRAM_8KIB_PJ_PER_BYTE = 10.0 / 8  # 64-bit access of an 8 KiB SRAM
SRAM_32KIB_PJ_PER_BYTE = 20.0 / 8
SRAM_1MIB_PJ_PER_BYTE = 100.0 / 8
WIRE_PJ_PER_BIT_MM = 0.121
OFF_CHIP_PJ_PER_BIT = 3.97
LEAKAGE_MW_PER_MM2 = 11.35
MUL_UM2, ADD_UM2 = {"fp16": 1640.0, "fp32": 7700.0}, {"fp16": 1360.0, "fp32": 4184.0}


def lane_um2(mul: str, add: str = "") -> float:
    """A multiplier on the inputs' type and an adder on the output's."""
    return MUL_UM2[mul] + ADD_UM2[add or mul]



SRAM_BIT_UM2 = 0.346
UNIT_FLOPS, UNIT_BYTES = 1024, 512 * 1024  # a compute unit, an on-chip memory unit
CLOCK_HZ = 1000e6  # dram.accel_clock_mhz's default
# one fabric hop: the side of a square of one bf16 compute unit (512 fp16 lanes) and one
# 512 KiB memory unit
HOP_MM = math.sqrt(UNIT_FLOPS / 2 * lane_um2("fp16") / 1e6 + UNIT_BYTES * 8 * SRAM_BIT_UM2 / 1e6)
FIFO_PJ_PER_BYTE = 2 * SRAM_8KIB_PJ_PER_BYTE  # an enqueue and a dequeue in the smallest SRAM
FABRIC_PJ_PER_BYTE = 8 * WIRE_PJ_PER_BIT_MM * HOP_MM


@dataclass
class Op:
    """One operator as derived by hand: FLOPs and the precision classes it multiplies (its
    input tiles') and adds into (its output tiles'), the FLOPs/cycle it
    allocates, the bytes its input streams deliver, the bytes it writes and reads in its
    on-chip memory (all 8 KiB or smaller here), its allocation and its off-chip bytes."""
    flops: int = 0
    mul: str = "fp32"
    add: str = "fp32"
    bw: int = 0
    streamed: int = 0
    sram: int = 0
    on_chip: int = 0
    off_chip: int = 0


def hand_priced(ops: list[Op]) -> dict[str, float]:
    """The dynamic energy (J) by component, the compute units and the area (mm2)."""
    pj = {"compute": sum(o.flops * flop_pj(o.mul, o.add) for o in ops),
          "sram": sum(o.sram for o in ops) * SRAM_8KIB_PJ_PER_BYTE,
          "fifo": sum(o.streamed for o in ops) * FIFO_PJ_PER_BYTE,
          "fabric": sum(o.streamed for o in ops) * FABRIC_PJ_PER_BYTE,
          "off_chip": sum(o.off_chip for o in ops) * 8 * OFF_CHIP_PJ_PER_BIT}
    out = {k: v * 1e-12 for k, v in pj.items()}
    units = [math.ceil(o.bw / UNIT_FLOPS) for o in ops]
    out["compute_units"] = sum(units)
    out["compute_mm2"] = sum(u * UNIT_FLOPS / 2 * lane_um2(o.mul, o.add) / 1e6
                             for u, o in zip(units, ops))
    out["sram_mm2"] = sum(o.on_chip for o in ops) * 8 * SRAM_BIT_UM2 / 1e6
    return out


def load(off_bytes: int, tile_bytes: int, streamed: int = 0) -> Op:
    """An off-chip load or store: each byte staged in its tile buffer (written, read)."""
    return Op(streamed=streamed, sram=2 * off_bytes, on_chip=tile_bytes, off_chip=off_bytes)


def assert_matches(m, hand: dict[str, float]) -> None:
    for k in ("compute", "sram", "fifo", "fabric", "off_chip"):
        assert m[f"energy_{k}_j"] == pytest.approx(hand[k], rel=REL), k
    dynamic = sum(hand[k] for k in ("compute", "sram", "fifo", "fabric", "off_chip"))
    assert m.energy_dynamic_j == pytest.approx(dynamic, rel=REL)
    seconds = m.cycles / CLOCK_HZ
    static = LEAKAGE_MW_PER_MM2 * 1e-3 * hand["compute_mm2"] * seconds
    assert m.energy_static_j == pytest.approx(static, rel=REL)
    assert m.energy_j == pytest.approx(dynamic + static, rel=REL)
    assert m.edp == pytest.approx((dynamic + static) * seconds, rel=REL)
    assert m.compute_units == hand["compute_units"]
    assert m.area_mm2 == pytest.approx(hand["compute_mm2"] + hand["sram_mm2"], rel=REL)


def run(name: str, dims: dict[str, int], preset: str = "paper-eval", sets=(), traces=None):
    typed = compile_file(str(PROGRAMS / name), dims).typed
    return measure(typed, load_config(preset, tuple(sets)), traces, functional=False)


# ---------------------------------------------------------------- SwiGLU


def test_swiglu_by_hand():
    """programs/swiglu.step, f32 throughout, compute_bw 1024 (paper-eval) per operator."""
    B, H, INTER, TB, TI = 32, 32, 64, 16, 32  # the program's B, H, I, TB, TI
    MT, NT = B // TB, INTER // TI  # 2 batch tiles, 2 intermediate tiles
    xt, wt, ht, yt = TB * H * 4, H * TI * 4, TB * TI * 4, TB * H * 4  # tile bytes
    x_bytes = MT * NT * xt  # x: [MT, NT, 1] of [TB, H], each row tile re-read per TI tile
    w_bytes = MT * NT * wt  # each weight tile re-read per batch tile
    h_bytes = MT * NT * ht  # gate, up, act, prod: [MT, NT] of [TB, TI]
    mm = 2 * TB * H * TI  # FLOPs of one [TB, H] x [H, TI] product
    ops = [
        load(x_bytes, xt),
        Op(streamed=x_bytes),  # x.bcast: x feeds gate and up
        load(w_bytes, wt), load(w_bytes, wt),  # wg, wu
        # gate, up: accumulators of one [TB, TI] tile, written with what they take in,
        # read out once per output tile
        *[Op(MT * NT * mm, bw=1024, streamed=x_bytes + w_bytes,
             sram=x_bytes + w_bytes + h_bytes, on_chip=ht) for _ in range(2)],
        Op(8 * MT * NT * TB * TI, bw=1024, streamed=h_bytes),  # act: silu, 8 FLOPs/element
        Op(MT * NT * TB * TI, bw=1024, streamed=2 * h_bytes),  # prod: mul, 1 FLOP/element
        Op(streamed=h_bytes),  # pr: Reshape
        load(MT * NT * wt, wt),  # wd: [MT, 1, NT] of [TI, H]
        # down: accumulates NT products into one [TB, H] tile per batch tile
        Op(MT * NT * 2 * TB * TI * H, bw=1024, streamed=h_bytes + MT * NT * wt,
           sram=h_bytes + MT * NT * wt + MT * yt, on_chip=yt),
        load(MT * yt, yt, streamed=MT * yt),  # the store of Y
    ]
    m = run("swiglu.step", dict(B=B, H=H, I=INTER, TB=TB, TI=TI))
    assert len(ops) == len(m.analysis.ops)
    assert m.flops == sum(o.flops for o in ops)
    assert_matches(m, hand_priced(ops))


# ---------------------------------------------------------------- MoE


def moe_ops(tiles: int, rows: int, bw: int, pack_bw: int) -> list[Op]:
    """programs/moe_*.step (lib/moe.step) with B=4, D=32, F=32, E=K=2, TILE_F=16: every
    token routed to both experts, each expert's B rows packed into `tiles` tiles of `rows`
    rows. Loads bf16, accumulators and output f32."""
    B, D, F, E, K, TF = 4, 32, 32, 2, 2, 16
    NF = F // TF
    n = B  # tokens per expert
    x_row = D * 2  # a [1, D] bf16 token row
    xt = rows * D * 4  # an expert's packed [rows, D] f32 token tile
    w_tile = D * TF * 2  # [D, TF] and [TF, D] bf16 weight tiles
    w_bytes = tiles * NF * w_tile  # the weights streamed once per token tile
    h = tiles * NF * rows * TF * 4  # up, gate, act, h: [tiles, NF] of [rows, TF] f32
    expert = [
        Op(streamed=n * x_row),  # rows: Flatten of the expert's partition
        Op(streamed=n * x_row),  # tiles (Reshape) or group (Promote)
        # xt: Accum retile_row of bf16 rows into f32 (0 FLOPs, its compute_bw allocated
        # all the same: bf16 multipliers, f32 adders)
        Op(bw=pack_bw, mul="fp16", streamed=n * x_row, sram=n * x_row + tiles * xt,
           on_chip=xt),
        Op(streamed=tiles * xt),  # xt.bcast: xr and the three weight loads' ref
        Op(streamed=tiles * xt, sram=tiles * xt + NF * tiles * xt, on_chip=xt),  # xr: Repeat
        Op(streamed=NF * tiles * xt),  # xr.bcast: up and gate
        *[load(w_bytes, w_tile, streamed=tiles * xt) for _ in range(3)],  # ref=xt
        *[Op(streamed=w_bytes) for _ in range(3)],  # wu, wg, wd: Flatten
        *[Op(2 * n * D * F, bw=bw, streamed=NF * tiles * xt + w_bytes)
          for _ in range(2)],  # up, gate: Map matmul
        Op(8 * n * F, bw=bw, streamed=h),  # act: silu
        Op(n * F, bw=bw, streamed=2 * h),  # h: mul
        Op(2 * n * F * D, bw=bw, streamed=h + w_bytes, sram=h + w_bytes + tiles * xt,
           on_chip=xt),  # down: Accum matmul over the NF tiles
        Op(streamed=tiles * xt),  # out: FlatMap retile_streamify
        # y: Map mul of the routing weights ([1, 1] bf16) and the [1, D] f32 rows
        Op(n * D, mul="fp16", bw=bw, streamed=n * 2 + n * D * 4),  # bf16 weights first
    ]
    return [
        load(B * x_row, x_row),  # x
        Op(streamed=B * x_row + B * E),  # p: Partition of x by route (MultiHot<E>: E bytes)
        load(B * K * 2, 2),  # w: the routing weights, [1, 1] bf16 tiles
        Op(streamed=B * K * 2 + B * K * E),  # pw: Partition of w by wsel
        *expert, *expert,
        Op(streamed=E * n * D * 4 + B * E),  # ys: Reassemble by merge
        Op(B * K * D, bw=bw, streamed=B * K * D * 4, sram=B * K * D * 4 + B * D * 4,
           on_chip=D * 4),  # sum: Accum add of each token's K rows
        load(B * D * 4, D * 4, streamed=B * D * 4),  # the store of Y
        Op(), Op(), Op(),  # route, wsel, merge: External
    ]


MOE_DIMS = dict(B=4, D=32, F=32, E=2, K=2, TILE_F=16)


@pytest.mark.parametrize("program, dims, tiles, rows, bw, pack_bw", [
    ("moe_static.step", {"TILE_N": 2}, 2, 2, 4096, 4096),  # ceil(4 / 2) tiles of 2 rows
    ("moe_dynamic.step", {}, 1, 4, 6400, 1024),  # one tile of all 4 rows
])
def test_moe_by_hand(program, dims, tiles, rows, bw, pack_bw):
    ops = moe_ops(tiles, rows, bw, pack_bw)
    m = run(program, {**MOE_DIMS, **dims})
    assert len(ops) == len(m.analysis.ops)
    assert m.flops == sum(o.flops for o in ops)
    assert_matches(m, hand_priced(ops))


# ---------------------------------------------------------------- attention, decoder


def test_attention_compute_off_chip_and_area_by_hand():
    """programs/attention_dynamic.step: two requests of 3 and 6 cached rows in one region.
    The compute, off-chip energy and compute area by hand; the SRAM area from the measured
    allocation; FIFO and fabric energy in the ratio of their per-byte prices."""
    B, HD, QPK, TN = 2, 16, 2, 4
    lens = [3, 6]
    kv_tiles = sum(-(-(n + 1) // TN) for n in lens)  # ceil((len + 1) / TILE_N): 1 + 2
    # each operator's FLOPs, the type it multiplies (its first input's) and adds into
    # (its output's): scores and exp in bf16, the f32 accumulators of bf16 inputs, the
    # f32 denominators, the bf16 output divided from f32
    per_op = {"s": (2 * QPK * HD * TN * kv_tiles, "fp16", "fp16"),  # q x k^T per KV tile
              "e": (4 * QPK * TN * kv_tiles, "fp16", "fp16"),  # exp, 4 per element
              "num": (2 * QPK * TN * HD * kv_tiles, "fp16", "fp32"),  # Accum e x v
              "es": (QPK * TN * kv_tiles, "fp16", "fp32"),  # Accum row_sum of e
              "den": (B * QPK * 4, "fp32", "fp32"),  # 4 per [QPK, 1] row
              "out": (B * QPK * HD, "fp32", "fp16")}  # num / den
    tile = TN * HD * 2  # a [TN, HD] bf16 KV tile
    off_chip = (B * QPK * HD * 2  # q
                + 2 * B * HD * 2  # the new key and value rows
                + 2 * kv_tiles * tile  # the K and V tiles read
                + 2 * B * tile  # each request's last K and V tile written back
                + B * QPK * HD * 2)  # the output
    m = run("attention_dynamic.step", dict(B=B, R=1, HEAD_DIM=HD, QPK=QPK, TILE_N=TN,
                                           MAXN=16), traces={"kv_lens": np.array(lens)})
    assert m.flops == sum(f for f, _, _ in per_op.values())
    compute = sum(f * flop_pj(mul, add) for f, mul, add in per_op.values()) * 1e-12
    assert m.energy_compute_j == pytest.approx(compute, rel=REL)
    assert m.energy_off_chip_j == pytest.approx(off_chip * 8 * OFF_CHIP_PJ_PER_BIT * 1e-12,
                                                rel=REL)
    # s, e, num, es, den, out at BW = 2048: two units each, of their own lanes
    units = 2
    compute_mm2 = sum(units * UNIT_FLOPS / 2 * lane_um2(mul, add) / 1e6
                      for _, mul, add in per_op.values())
    assert m.compute_units == 6 * units
    assert m.area_mm2 == pytest.approx(
        compute_mm2 + m.on_chip_bytes * 8 * SRAM_BIT_UM2 / 1e6, rel=REL)
    assert m.energy_fabric_j / m.energy_fifo_j == pytest.approx(
        FABRIC_PJ_PER_BYTE / FIFO_PJ_PER_BYTE, rel=REL)


DECODER_DIMS = dict(B=4, R=2, D=32, HQ=4, HKV=2, HEAD_DIM=16, F=32, E=2, TOPK=2, TILE_P=16,
                    TILE_F=16, TILE_N=4, MAXN=16, PROJ_BW=1024, BW=1024, MOE_BW=1024)


def test_decoder_layers_add_equal_energy():
    """programs/decoder_dynamic.step: every layer sees the same KV lengths and routing and
    does the same work, so each layer adds the same compute, SRAM and off-chip energy and
    the same compute units and area; a layer after the first adds the same bytes streamed
(the first one's barrier differs)."""
    lens = {"kv_lens": np.array([3, 6, 1, 9])}
    m1, m2, m3 = (run("decoder_dynamic.step", {**DECODER_DIMS, "L": n}, traces=lens)
                  for n in (1, 2, 3))
    for k in ("energy_compute_j", "energy_sram_j", "energy_off_chip_j", "compute_units"):
        assert m2[k] == pytest.approx(2 * m1[k], rel=REL), k
        assert m3[k] == pytest.approx(3 * m1[k], rel=REL), k
    assert m3.energy_fifo_j - m2.energy_fifo_j == pytest.approx(
        m2.energy_fifo_j - m1.energy_fifo_j, rel=1e-6)
    # each layer allocates its own operators and buffers
    assert m2.area_mm2 == pytest.approx(2 * m1.area_mm2, rel=REL)


# ---------------------------------------------------------------- the rules one by one

PIPE = """
tensor X : {dtype}[{rows}, {cols}] input = zeros
tensor Y : {dtype}[{rows}, {cols}] output
x = LinearOffChipLoad(X, tile=[{rows}, {cols}])
y = Map(x, fn=relu)
LinearOffChipStore(y, Y)
"""


def pipe(dtype: str, rows: int = 16, cols: int = 64, sets=(), text=PIPE):
    typed = compile_source(decode_source("t.step", text.format(
        dtype=dtype, rows=rows, cols=cols).encode())).typed
    return measure(typed, load_config("paper-eval", tuple(sets)), functional=False)


def test_bf16_is_charged_as_fp16():
    bf16, f16, f32 = (pipe(t) for t in ("bf16", "f16", "f32"))
    flops = 16 * 64  # relu: one per element
    assert bf16.energy_compute_j == f16.energy_compute_j == pytest.approx(
        flops * flop_pj("fp16") * 1e-12, rel=REL)
    assert f32.energy_compute_j == pytest.approx(flops * flop_pj("fp32") * 1e-12, rel=REL)
    lane_mm2 = UNIT_FLOPS / 2 / 1e6  # one relu unit
    assert bf16.area_mm2 - bf16.on_chip_bytes * 8 * SRAM_BIT_UM2 / 1e6 == pytest.approx(
        lane_mm2 * lane_um2("fp16"), rel=REL)


@pytest.mark.parametrize("cols, pj_per_byte", [
    (2048, SRAM_8KIB_PJ_PER_BYTE),  # a [1, 2048] f32 tile: 8 KiB exactly
    (2049, SRAM_32KIB_PJ_PER_BYTE),  # 8 KiB + 4 bytes
    (8192, SRAM_32KIB_PJ_PER_BYTE),  # 32 KiB exactly
    (8193, SRAM_1MIB_PJ_PER_BYTE),
    (2**18 + 1, SRAM_1MIB_PJ_PER_BYTE),  # beyond 1 MiB: the largest class
])
def test_sram_class_at_its_boundaries(cols, pj_per_byte):
    m = pipe("f32", rows=1, cols=cols)
    # the load and the store stage their one tile each: written once, read once
    assert m.energy_sram_j == pytest.approx(2 * 2 * cols * 4 * pj_per_byte * 1e-12, rel=REL)


def test_sram_class_at_one_byte_past_8_kib():
    """bool tiles (1 byte an element) reach 8 KiB + 1 exactly: the 32 KiB class."""
    text = PIPE.replace("y = Map(x, fn=relu)\nLinearOffChipStore(y, Y)",
                        "LinearOffChipStore(x, Y)")
    for cols, pj_per_byte in ((8192, SRAM_8KIB_PJ_PER_BYTE), (8193, SRAM_32KIB_PJ_PER_BYTE)):
        m = pipe("bool", rows=1, cols=cols, text=text)
        assert m.energy_sram_j == pytest.approx(2 * 2 * cols * pj_per_byte * 1e-12, rel=REL)


BUFFERS = """
tensor X : bf16[64, 64] input = zeros
tensor Y : bf16[64, 64] output
x = LinearOffChipLoad(X, tile=[16, 16])
b = Bufferize(x, rank=1)
s = Streamify(b)
LinearOffChipStore(s, Y)
"""


def test_a_buffer_in_a_stream_counts_8_bytes():
    m = pipe("bf16", text=BUFFERS)
    tiles, tile = 16, 16 * 16 * 2  # X in [16, 16] bf16 tiles
    # Bufferize takes the 16 tiles, Streamify 4 buffer references of 8 bytes (one address),
    # the store the 16 tiles again
    streamed = tiles * tile + 4 * 8 + tiles * tile
    assert m.energy_fifo_j == pytest.approx(streamed * FIFO_PJ_PER_BYTE * 1e-12, rel=REL)
    assert m.energy_fabric_j == pytest.approx(streamed * FABRIC_PJ_PER_BYTE * 1e-12, rel=REL)


@pytest.mark.parametrize("model", ["ref", "dram"])
def test_row_activations_are_priced_under_the_dram_model_only(model):
    sets = ("hbm.model=dram",) if model == "dram" else ()
    base = pipe("f32", rows=64, sets=sets)
    priced = pipe("f32", rows=64, sets=(*sets, "energy.activation_pj=1000"))
    activations = priced.result.memory.row_misses + priced.result.memory.row_conflicts
    extra = priced.energy_off_chip_j - base.energy_off_chip_j
    if model == "dram":
        assert activations > 0
        assert extra == pytest.approx(activations * 1000e-12, rel=REL)
    else:
        assert extra == 0
    assert priced.energy_dynamic_j - base.energy_dynamic_j == pytest.approx(extra, abs=1e-18)
