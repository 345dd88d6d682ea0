"""Energy and area by hand, continued (tests/test_energy.py's helpers and coefficients):
decode attention under dynamic and static interleaved dispatch, and the configuration
time-multiplexed MoE, every operator's FLOPs, streamed bytes and on-chip accesses derived
from the program's text and the rules of stepc/energy.py and stepc/analyze/access.py."""

from __future__ import annotations

import numpy as np
import pytest
from test_energy import Op, assert_matches, hand_priced, load, run

# ---------------------------------------------------------------- decode attention

HD, QPK, TN = 16, 2, 4  # HEAD_DIM, QPK, TILE_N
ATTENTION_DIMS = dict(HEAD_DIM=HD, QPK=QPK, TILE_N=TN, MAXN=16)
BW = 2048  # the programs' default compute_bw of every compute operator
META = 8  # a [1, 1] u64 metadata tile (idx, ntiles, off, addresses, signals)
Q_TILE = QPK * HD * 2  # a request's [QPK, HEAD_DIM] bf16 query (and output) tile
KV_TILE = TN * HD * 2  # a [TILE_N, HEAD_DIM] bf16 KV tile
ROW = HD * 2  # a new [1, HEAD_DIM] bf16 key or value row
LAST_SEL = 2  # filter_last_tile's selector over Partition's 2 consumers: MultiHot<2>
ACK = 1  # a RandomOffChipStore acknowledgement: one bool


def kv_tiles(n: int) -> int:
    """KV tiles a request with `n` cached rows reads: ceil((n + 1) / TILE_N)."""
    return -(-(n + 1) // TN)


def kv_ops(n: int, t: int) -> list[Op]:
    """kv_load and kv_append (lib/attention.step) of `n` requests reading `t` KV tiles."""
    return [
        Op(streamed=2 * n * META),  # Zip(idx, ntiles)
        Op(streamed=n * 2 * META),  # addr: FlatMap cache_read_addr over the pairs
        load(t * KV_TILE, KV_TILE, streamed=t * META),  # RandomOffChipLoad, one address a tile
        Op(streamed=n * META),  # last: FlatMap filter_last_tile of ntiles
        Op(streamed=t * LAST_SEL),  # last.bcast: part and full
        Op(streamed=t * KV_TILE + t * LAST_SEL),  # part: Partition by last
        Op(streamed=n * KV_TILE + n * META),  # tile: Map set_offset of part[0] and off
        Op(streamed=n * KV_TILE + n * ROW),  # app: Map row_append of the new row
        Op(streamed=n * KV_TILE),  # app.bcast: the store and full
        Op(streamed=n * META),  # lastidx
        Op(streamed=2 * n * META),  # waddr: Map cache_write_addr of idx and lastidx
        # ack: RandomOffChipStore of the n updated tiles, staged in 4 tile buffers
        Op(streamed=n * META + n * KV_TILE, sram=2 * n * KV_TILE, on_chip=4 * KV_TILE,
           off_chip=n * KV_TILE),
        Op(streamed=n * ACK),  # Sink(ack)
        Op(streamed=n * KV_TILE + (t - n) * KV_TILE + t * LAST_SEL),  # full: Reassemble
        Op(streamed=t * KV_TILE),  # Flatten
    ]


def region_ops(lens: list[int]) -> list[Op]:
    """One region's operators (kv_load of V and attention_region, lib/attention.step, the
    K cache load, the broadcasts of its idx, ntiles and off, the Sink of its acks) for
    requests with `lens` cached rows. The scores and exp are bf16, the accumulators f32 of
    bf16 inputs, the denominator f32, the output bf16 divided from f32."""
    n, t = len(lens), sum(kv_tiles(x) for x in lens)
    score = QPK * TN * 2  # a [QPK, TILE_N] bf16 score tile
    acc, sums = QPK * HD * 4, QPK * TN * 4  # the f32 num and es tiles
    return [
        *[Op(streamed=n * META) for _ in range(3)],  # idx, ntiles, off: Broadcast
        *kv_ops(n, t),  # K
        Op(streamed=t * KV_TILE),  # k.bcast: qe's ref and s
        *kv_ops(n, t),  # V
        # qe: Expand of each query over its t tiles, ref k: writes what it takes in, reads
        # a query tile per KV tile
        Op(streamed=n * Q_TILE + t * KV_TILE, sram=n * Q_TILE + t * KV_TILE + t * Q_TILE,
           on_chip=Q_TILE),
        Op(2 * QPK * HD * TN * t, "fp16", "fp16", BW,
           streamed=t * Q_TILE + t * KV_TILE),  # s: q x k^T
        Op(4 * QPK * TN * t, "fp16", "fp16", BW, streamed=t * score),  # e: exp, 4 FLOPs
        Op(streamed=t * score),  # e.bcast: num and es
        Op(2 * QPK * TN * HD * t, "fp16", "fp32", BW, streamed=t * score + t * KV_TILE,
           sram=t * score + t * KV_TILE + n * acc, on_chip=acc),  # num: Accum e x v
        Op(QPK * TN * t, "fp16", "fp32", BW, streamed=t * score,
           sram=t * score + n * sums, on_chip=sums),  # es: Accum add
        Op(4 * QPK * n, "fp32", "fp32", BW, streamed=n * sums),  # den: row_sum, 4 a row
        Op(QPK * HD * n, "fp32", "fp16", BW, streamed=n * acc + n * QPK * 4),  # out: div
        load(n * Q_TILE, Q_TILE, streamed=n * META + n * Q_TILE),  # the store at idx
        Op(streamed=n * ACK),  # the program's Sink of the acks
    ]


def front_ops(b: int) -> list[Op]:
    """The metadata Maps and the loads of Q and the new rows of `b` requests."""
    return [
        Op(),  # kv_lens: External
        Op(streamed=b * META),  # kv_lens.bcast: ntiles, lastrow, off
        Op(streamed=b * META), Op(streamed=b * META),  # ntiles, lastrow
        Op(streamed=2 * b * META),  # off: Map of lastrow and kv_lens
        Op(),  # idx: MetadataGen
        load(b * Q_TILE, Q_TILE), load(b * ROW, ROW), load(b * ROW, ROW),  # q, kn, vn
    ]


def attention_off_chip(lens: list[int]) -> int:
    """Off-chip bytes by the program's tensors: Q, the new rows, the KV tiles read, each
    request's last K and V tile written back, the output."""
    b, t = len(lens), sum(kv_tiles(x) for x in lens)
    return b * Q_TILE + 2 * b * ROW + 2 * t * KV_TILE + 2 * b * KV_TILE + b * Q_TILE


def check(m, ops: list[Op]) -> None:
    assert len(ops) == len(m.analysis.ops)
    assert m.flops == sum(o.flops for o in ops)
    assert_matches(m, hand_priced(ops))


def split(lens: list[int], r: int) -> list[Op]:
    """The ops of `r` regions, request i on region i mod r."""
    return [o for k in range(r) for o in region_ops(lens[k::r])]


def signal_ops(lens: list[int]) -> list[Op]:
    """A dynamic region's kraw.bcast (the region and its signal) and sig, an Accum
    signal_req_all_read over the K tiles of requests with `lens` rows: a u64 signal each."""
    t = sum(kv_tiles(x) for x in lens)
    return [Op(streamed=t * KV_TILE),
            Op(streamed=t * KV_TILE, sram=t * KV_TILE + len(lens) * META, on_chip=META)]


@pytest.mark.parametrize("lens, r", [([3, 6], 1), ([3, 6, 1, 9], 2)])
def test_attention_dynamic_by_hand(lens, r):
    """programs/attention_dynamic.step: requests of `lens` cached rows dispatched to `r`
    regions by the feedback loop of lib/attention.step (test_energy's case: 3 and 6 rows
    in one region). Which region a request lands on is the run's, but every total is a sum
    over requests and KV tiles (and per region terms that do not depend on them), so any
    split gives the same totals."""
    b = len(lens)
    who = r  # a dispatch selector: MultiHot<R>, R bytes
    dispatch = [
        # the six Partitions by `free`: each request's data and its selector
        Op(streamed=b * Q_TILE + b * who), Op(streamed=b * ROW + b * who),
        Op(streamed=b * ROW + b * who),
        *[Op(streamed=b * META + b * who) for _ in range(3)],  # idx, ntiles, off
        *[o for k in range(r) for o in signal_ops(lens[k::r])],
        Op(streamed=b * META),  # done, who: EagerMerge of the signals
        Op(streamed=b * META),  # Sink(done)
        Op(),  # MetadataGen(ONE)
        Op(streamed=META), Op(streamed=META),  # nchunks, its FlatMap filter_last_tile
        Op(streamed=b // r * LAST_SEL),  # keep: Flatten of the b / R selectors
        Op(streamed=b * who),  # Reshape(who) into chunks of R
        Op(streamed=b * who + b // r * LAST_SEL),  # kp: Partition by keep
        Op(streamed=r * who),  # Sink(kp[0]): the last chunk of R
        Op(),  # init: SelectGen
        Op(streamed=r * who + (b // r - 1) * r * who),  # sel: EagerMerge of init and kp[1]
        Op(streamed=b * who), Op(streamed=b * who),  # free: Flatten, its Broadcast
    ]
    ops = front_ops(b) + dispatch + split(lens, r)
    m = run("attention_dynamic.step", dict(B=b, R=r, **ATTENTION_DIMS),
            traces={"kv_lens": np.array(lens)})
    check(m, ops)
    assert sum(o.off_chip for o in ops) == attention_off_chip(lens)


def test_attention_interleaved_by_hand():
    """programs/attention_interleaved.step: four requests of 3, 6, 1 and 9 cached rows,
    request i on region i mod 2 (regions of 3, 1 and of 6, 9 rows)."""
    lens, r = [3, 6, 1, 9], 2
    b = len(lens)
    deal = [Op(streamed=b * Q_TILE), Op(streamed=b * ROW), Op(streamed=b * ROW),
            *[Op(streamed=b * META) for _ in range(3)]]  # the six Parallelizes
    ops = front_ops(b) + deal + split(lens, r)
    m = run("attention_interleaved.step", dict(B=b, R=r, **ATTENTION_DIMS),
            traces={"kv_lens": np.array(lens)})
    check(m, ops)
    assert sum(o.off_chip for o in ops) == attention_off_chip(lens)


def test_attention_coarse_by_hand():
    """programs/attention_coarse.step: four requests of 3, 6, 1 and 9 cached rows in blocks
    of NB = 2, block k on region k (one block each: region_ids is one MetadataGen), each
    region with its own metadata Maps and loads."""
    lens, r, nb = [3, 6, 1, 9], 2, 2
    b = len(lens)
    deal = [Op(),  # kv_lens: External
            Op(streamed=b * META),  # Reshape into blocks of NB
            Op(streamed=b * META)]  # blocks: Parallelize
    per_region = [
        Op(streamed=nb * META),  # lens: Flatten of the region's block
        Op(streamed=nb * META),  # lens.bcast: ntiles, lastrow, off
        Op(streamed=nb * META), Op(streamed=nb * META),  # ntiles, lastrow
        Op(streamed=2 * nb * META),  # off
        Op(),  # idx: MetadataGen of IDX[0][r]
        load(nb * Q_TILE, Q_TILE), load(nb * ROW, ROW), load(nb * ROW, ROW),  # q, kn, vn
    ]
    ops = deal + [o for k in range(r) for o in per_region + region_ops(lens[k * nb:][:nb])]
    m = run("attention_coarse.step", dict(B=b, R=r, NB=nb, **ATTENTION_DIMS),
            traces={"kv_lens": np.array(lens)})
    check(m, ops)
    assert sum(o.off_chip for o in ops) == attention_off_chip(lens)


# ---------------------------------------------------------------- time-multiplexed MoE


def test_moe_timemux_by_hand():
    """programs/moe_timemux.step with B=4, D=32, F=32, E=K=2, TILE_N=2, TILE_F=16 and one
    region (R=1) of both experts: every token routed to both, each expert's 4 rows packed
    into 2 tiles of 2, the region's SwiGLU taking the S = 4 tiles of both. Loads bf16,
    accumulators and output f32; every compute operator at 1024 FLOPs/cycle."""
    B, D, F, E, K, TN_, TF, G = 4, 32, 32, 2, 2, 2, 16, 2
    NF, n, mw = F // TF, B, 1024  # weight F-tiles, tokens per expert, compute_bw
    tiles = -(-n // TN_)  # an expert's token tiles
    S = E * tiles  # the region's token tiles
    x_row, xt = D * 2, TN_ * D * 4  # a bf16 token row, a packed [TILE_N, D] f32 tile
    w_tile = D * TF * 2  # [D, TF] and [TF, D] bf16 weight tiles
    w_bytes = S * NF * w_tile  # NF weight tiles of the selected expert per token tile
    h = S * NF * TN_ * TF * 4  # up, gate, act, h: [S, NF] of [TILE_N, TF] f32
    pack = [
        Op(streamed=n * x_row),  # rows: Flatten of the expert's partition
        Op(streamed=n * x_row),  # tiles: Reshape into chunks of TILE_N
        # xt: Accum retile_row of bf16 rows into f32 tiles (0 FLOPs, BW allocated)
        Op(bw=mw, mul="fp16", streamed=n * x_row, sram=n * x_row + tiles * xt, on_chip=xt),
    ]
    region = [
        Op(streamed=S * xt),  # mx, sel: EagerMerge of the experts' tiles
        Op(streamed=S * G),  # sel.bcast (MultiHot<G>): addr and back
        Op(streamed=S * xt, sram=S * xt + NF * S * xt, on_chip=xt),  # xr: Repeat NF
        Op(streamed=NF * S * xt),  # xr.bcast: up and gate
        Op(streamed=S * G),  # addr: FlatMap expert_addr
        Op(streamed=S * NF * 8),  # addr.bcast: the three loads (u64 tile ids)
        *[o for _ in range(3)  # W_up, W_gate, W_down: RandomOffChipLoad, Flatten
          for o in (load(w_bytes, w_tile, streamed=S * NF * 8), Op(streamed=w_bytes))],
        # up, gate: Map matmul, multiplying the f32 token tiles (their first input)
        *[Op(2 * S * TN_ * D * TF * NF, bw=mw, streamed=NF * S * xt + w_bytes)
          for _ in range(2)],
        Op(8 * S * TN_ * F, bw=mw, streamed=h),  # act: silu, 8 FLOPs an element
        Op(S * TN_ * F, bw=mw, streamed=2 * h),  # h: mul
        Op(2 * S * TN_ * F * D, bw=mw, streamed=h + w_bytes, sram=h + w_bytes + S * xt,
           on_chip=xt),  # down: Accum matmul over the NF tiles
        Op(streamed=S * xt + S * G),  # back: Partition by sel
    ]
    unpack = [
        Op(streamed=tiles * xt),  # out: FlatMap retile_streamify
        # y: Map mul of the routing weights ([1, 1] bf16, first) and the [1, D] f32 rows
        Op(n * D, mul="fp16", bw=mw, streamed=n * 2 + n * D * 4),
    ]
    ops = [
        Op(), Op(), Op(),  # route, wsel, merge: External
        load(B * x_row, x_row),  # x
        Op(streamed=B * x_row + B * E),  # p: Partition of x by route (MultiHot<E>)
        load(B * K * 2, 2),  # w: the routing weights, [1, 1] bf16 tiles
        Op(streamed=B * K * 2 + B * K * E),  # pw: Partition of w by wsel
        *pack, *pack, *region, *unpack, *unpack,
        Op(streamed=E * n * D * 4 + B * E),  # ys: Reassemble by merge
        Op(B * K * D, bw=mw, streamed=B * K * D * 4, sram=B * K * D * 4 + B * D * 4,
           on_chip=D * 4),  # sum: Accum add of each token's K rows
        load(B * D * 4, D * 4, streamed=B * D * 4),  # the store of Y
    ]
    m = run("moe_timemux.step", dict(B=B, D=D, F=F, E=E, K=K, R=1, TILE_N=TN_, TILE_F=TF))
    check(m, ops)
