"""Every operator's shape rule, tested through small .step programs (the prelude, helpers and
conventions: tests/shape_prelude.py)."""

from __future__ import annotations

import re

import pytest
import sympy
from shape_prelude import PRELUDE, Prog

from stepc.ops import FUNCTIONS, OPS
from stepc.types import Buffer, Scalar, Select, Tile, equal


# ------------------------------------------------------------------ the prelude itself
def test_prelude_compiles_cleanly():
    p = Prog("").ok()
    p.expect_shape("ka", "[2, 2, L]")
    assert p.kind(p.sym("L")) == "ragged"
    assert p.kind(p.sym("R")) == "dynamic"
    assert p.kind(p.sym("N")) == "dynamic"
    p.expect_shape("kt", "[2, 2, L]")
    assert p.type("kt").elem == Tile("bf16", sympy.Integer(16), sympy.Integer(16))


# ------------------------------------------------------------------ shape rules (table)
# (id, body, stream label, expected shape over the program's symbols, expected element type)
SHAPE_CASES = [
    # ---- LinearOffChipLoad: without ref the output is the view's shape (default: the tiled
    # tensor); with a ref of shape [D_b..D_0] it is ref shape ++ view shape.
    ("LinearOffChipLoad-default-view", "w = LinearOffChipLoad(A, tile=[64, 64])",
     "w", "[1, 4]", "Tile<bf16, [64, 64]>"),
    ("LinearOffChipLoad-3d-tensor", "w = LinearOffChipLoad(W, tile=[64, 64])",
     "w", "[2, 1, 4]", "Tile<bf16, [64, 64]>"),
    ("LinearOffChipLoad-strided-view",
     "w = LinearOffChipLoad(A, tile=[16, 256], stride=[1, 0, 1], shape=[4, 8, 1])",
     "w", "[4, 8, 1]", "Tile<bf16, [16, 256]>"),
    ("LinearOffChipLoad-ref-paper-figure",
     "w = LinearOffChipLoad(A, ref=r, tile=[64, 64], shape=[1, 4])",
     "w", "[R, 1, 4]", "Tile<bf16, [64, 64]>"),
    ("LinearOffChipLoad-ref-rank1-slice", "w = LinearOffChipLoad(W[1], ref=x, tile=[64, 64])",
     "w", "[10, 1, 1, 4]", "Tile<bf16, [64, 64]>"),
    ("LinearOffChipLoad-ref-ragged", "w = LinearOffChipLoad(A, ref=ka, tile=[64, 256])",
     "w", "[2, 2, L, 1, 1]", "Tile<bf16, [64, 256]>"),
    # ---- RandomOffChipLoad: the address stream's shape
    ("RandomOffChipLoad", "t = RandomOffChipLoad(MetadataGen(ADR), K, tile=[16, 16])",
     "t", "[3, 5]", "Tile<bf16, [16, 16]>"),
    ("RandomOffChipLoad-ragged", "t = RandomOffChipLoad(ka, A, tile=[64, 64])",
     "t", "[2, 2, L]", "Tile<bf16, [64, 64]>"),
    # ---- RandomOffChipStore: one bool ack per address, shaped like waddr
    ("RandomOffChipStore",
     "ack = RandomOffChipStore(MetadataGen(ADR), LinearOffChipLoad(A, tile=[16, 16], "
     "shape=[15]), Y)", "ack", "[3, 5]", "bool"),
    # ---- Bufferize: [D_a..D_b, D_b-1..D_0] -> [D_a..D_b] of Buffer[D_b-1..D_0]
    ("Bufferize-rank1",
     "b = Bufferize(LinearOffChipLoad(A, ref=r, tile=[64, 64], shape=[1, 4]), rank=1)",
     "b", "[R, 1]", "Buffer<Tile<bf16, [64, 64]>, [4]>"),
    ("Bufferize-rank2",
     "b = Bufferize(LinearOffChipLoad(A, ref=r, tile=[64, 64], shape=[1, 4]), rank=2)",
     "b", "[R]", "Buffer<Tile<bf16, [64, 64]>, [1, 4]>"),
    ("Bufferize-whole-stream", "b = Bufferize(LinearOffChipLoad(A, tile=[64, 64]), rank=1)",
     "b", "[1]", "Buffer<Tile<bf16, [64, 64]>, [4]>"),
    ("Bufferize-dynamic-regular-inner", "b = Bufferize(d3, rank=2)",
     "b", "[4]", "Buffer<Tile<bf16, [16, 16]>, [2, N]>"),
    ("Bufferize-ragged-outermost-buffered-dim", "b = Bufferize(kt, rank=1)",
     "b", "[2, 2]", "Buffer<Tile<bf16, [16, 16]>, [L]>"),
    # ---- Streamify: ref shape ++ buffer (or view) shape; without ref in ++ repeat ++ buffer
    ("Streamify-plain",
     "s = Streamify(Bufferize(LinearOffChipLoad(A, ref=r, tile=[64, 64], shape=[1, 4]), "
     "rank=1))", "s", "[R, 1, 4]", "Tile<bf16, [64, 64]>"),
    ("Streamify-repeat",
     "s = Streamify(Bufferize(LinearOffChipLoad(A, ref=r, tile=[64, 64], shape=[1, 4]), "
     "rank=1), repeat=[3])", "s", "[R, 1, 3, 4]", "Tile<bf16, [64, 64]>"),
    ("Streamify-repeat-two-factors",
     "s = Streamify(Bufferize(LinearOffChipLoad(A, ref=r, tile=[64, 64], shape=[1, 4]), "
     "rank=1), repeat=[2, 3])", "s", "[R, 1, 2, 3, 4]", "Tile<bf16, [64, 64]>"),
    ("Streamify-ref",
     "b = Bufferize(LinearOffChipLoad(A, ref=r, tile=[64, 64], shape=[1, 4]), rank=2)\n"
     "s = Streamify(b, ref=Repeat(r, count=3))", "s", "[R, 3, 1, 4]", "Tile<bf16, [64, 64]>"),
    ("Streamify-ref-same-rank",
     "b = Bufferize(LinearOffChipLoad(A, ref=r, tile=[64, 64], shape=[1, 4]), rank=2)\n"
     "s = Streamify(b, ref=r)", "s", "[R, 1, 4]", "Tile<bf16, [64, 64]>"),
    ("Streamify-affine",
     "b = Bufferize(LinearOffChipLoad(A, ref=r, tile=[64, 64], shape=[1, 4]), rank=2)\n"
     "s = Streamify(b, stride=[1, 2], shape=[2, 2])", "s", "[R, 2, 2]",
     "Tile<bf16, [64, 64]>"),
    ("Streamify-affine-with-ref",
     "b = Bufferize(LinearOffChipLoad(A, ref=r, tile=[64, 64], shape=[1, 4]), rank=2)\n"
     "s = Streamify(b, ref=Repeat(r, count=3), shape=[4])", "s", "[R, 3, 4]",
     "Tile<bf16, [64, 64]>"),
    ("Streamify-dynamic-buffer", "s = Streamify(Bufferize(d3, rank=2), repeat=[2])",
     "s", "[4, 2, 2, N]", "Tile<bf16, [16, 16]>"),
    # ---- Partition: output i = [D_i, inner dims]
    ("Partition-rank1-out0", 'p = Partition(x, sel, rank=1, consumers=2, dim="D")',
     "p[0]", "[D_0, 1]", "Tile<bf16, [1, 64]>"),
    ("Partition-rank1-out1", 'p = Partition(x, sel, rank=1, consumers=2, dim="D")',
     "p[1]", "[D_1, 1]", "Tile<bf16, [1, 64]>"),
    ("Partition-rank0", "p = Partition(Flatten(x, min=0, max=1), sel, rank=0, consumers=2)",
     "p[1]", "[p_1]", "Tile<bf16, [1, 64]>"),
    ("Partition-rank2-static-inner",
     "p = Partition(d3, SelectGen(tensor=S4, n=3), rank=2, consumers=3)",
     "p[2]", "[p_2, 2, N]", "Tile<bf16, [16, 16]>"),
    # ---- Reassemble: sel shape ++ [n] ++ the inputs' inner dims (n checked separately)
    # ---- EagerMerge: [sum_i D_i, inner] and a selector [sum_i D_i]
    ("EagerMerge-data", 'p = Partition(x, sel, rank=1, consumers=2, dim="D")\n'
     "e, es = EagerMerge(p, rank=1)", "e", "[D_0 + D_1, 1]", "Tile<bf16, [1, 64]>"),
    ("EagerMerge-selector", 'p = Partition(x, sel, rank=1, consumers=2, dim="D")\n'
     "e, es = EagerMerge(p, rank=1)", "es", "[D_0 + D_1]", "MultiHot<2>"),
    ("EagerMerge-default-rank", "e, es = EagerMerge([x, x, x])",
     "e", "[30, 1]", "Tile<bf16, [1, 64]>"),
    ("EagerMerge-three-inputs-selector", "e, es = EagerMerge([x, x, x])",
     "es", "[30]", "MultiHot<3>"),
    # ---- Parallelize: output i gets ceil((N - i) / P) chunks
    ("Parallelize-static-0", "o = Parallelize(x, consumers=3)", "o[0]", "[4, 1]",
     "Tile<bf16, [1, 64]>"),
    ("Parallelize-static-1", "o = Parallelize(x, consumers=3)", "o[1]", "[3, 1]",
     "Tile<bf16, [1, 64]>"),
    ("Parallelize-static-2", "o = Parallelize(x, consumers=3)", "o[2]", "[3, 1]",
     "Tile<bf16, [1, 64]>"),
    ("Parallelize-rank0-chunks", "o = Parallelize(x, consumers=4, rank=0)", "o[3]", "[2]",
     "Tile<bf16, [1, 64]>"),
    ("Parallelize-dynamic-0", "o = Parallelize(r, consumers=2)", "o[0]", "[ceiling(R/2)]",
     "Tile<bf16, [1, 1]>"),
    ("Parallelize-dynamic-1", "o = Parallelize(r, consumers=2)", "o[1]",
     "[ceiling((R - 1)/2)]", "Tile<bf16, [1, 1]>"),
    # ---- Broadcast: identical copies
    ("Broadcast", "b = Broadcast(x, consumers=3)", "b[2]", "[10, 1]", "Tile<bf16, [1, 64]>"),
    ("Broadcast-buffers", "b = Broadcast(Bufferize(kt, rank=1), consumers=2)", "b[1]",
     "[2, 2]", "Buffer<Tile<bf16, [16, 16]>, [L]>"),
    # ---- Map: shape unchanged, element from the function
    ("Map-matmul", "y = Map(ta, tb, fn=matmul)", "y", "[4, 4]", "Tile<bf16, [16, 32]>"),
    ("Map-matmul-transpose", "y = Map(ta, tc, fn=matmul(transpose=true))", "y", "[4, 4]",
     "Tile<bf16, [16, 32]>"),
    ("Map-matmul-over-zip", "y = Map(Zip(ta, tb), fn=matmul)", "y", "[4, 4]",
     "Tile<bf16, [16, 32]>"),
    ("Map-matmul-dynamic-tile", "y = Map(dyn, tb, fn=matmul)", "y", "[4, 4]",
     "Tile<bf16, [N, 32]>"),
    ("Map-matmul-dtype", "y = Map(ta, tb, fn=matmul, dtype=f32)", "y", "[4, 4]",
     "Tile<f32, [16, 32]>"),
    ("Map-add-broadcast-cols", "y = Map(ta, col, fn=add)", "y", "[4, 4]",
     "Tile<bf16, [16, 64]>"),
    ("Map-mul-broadcast-left", "y = Map(col, ta, fn=mul)", "y", "[4, 4]",
     "Tile<bf16, [16, 64]>"),
    ("Map-sub-broadcast-rows", "y = Map(row1, ta, fn=sub)", "y", "[4, 4]",
     "Tile<bf16, [16, 64]>"),
    ("Map-div-same", "y = Map(ta, ta, fn=div)", "y", "[4, 4]", "Tile<bf16, [16, 64]>"),
    ("Map-max-outer-product", "y = Map(col, row1, fn=max)", "y", "[4, 4]",
     "Tile<bf16, [16, 64]>"),
    ("Map-silu", "y = Map(x, fn=silu)", "y", "[10, 1]", "Tile<bf16, [1, 64]>"),
    ("Map-relu", "y = Map(dyn, fn=relu)", "y", "[4, 4]", "Tile<bf16, [N, 64]>"),
    ("Map-exp", "y = Map(ta, fn=exp, dtype=f32)", "y", "[4, 4]", "Tile<f32, [16, 64]>"),
    ("Map-sigmoid", "y = Map(dyn, fn=sigmoid)", "y", "[4, 4]", "Tile<bf16, [N, 64]>"),
    ("Map-tanh", "y = Map(kt, fn=tanh)", "y", "[2, 2, L]", "Tile<bf16, [16, 16]>"),
    ("Map-rsqrt", "y = Map(ta, fn=rsqrt)", "y", "[4, 4]", "Tile<bf16, [16, 64]>"),
    ("Map-gelu", "y = Map(ta, fn=gelu(approximate=\"tanh\"))", "y", "[4, 4]",
     "Tile<bf16, [16, 64]>"),
    ("Map-rms_inv", "y = Map(ta, fn=rms_inv(eps=\"1e-5\"))", "y", "[4, 4]",
     "Tile<bf16, [16, 1]>"),
    ("Map-row_sum", "y = Map(ta, fn=row_sum)", "y", "[4, 4]", "Tile<bf16, [16, 1]>"),
    ("Map-row_max", "y = Map(dyn, fn=row_max)", "y", "[4, 4]", "Tile<bf16, [N, 1]>"),
    ("Map-row_mean", "y = Map(ta, fn=row_mean)", "y", "[4, 4]", "Tile<bf16, [16, 1]>"),
    ("Map-affine", "y = Map(ta, fn=affine(scale=\"0.5\", shift=\"1e-6\"))", "y", "[4, 4]",
     "Tile<bf16, [16, 64]>"),
    ("Map-pow", "y = Map(dyn, fn=pow(exponent=\"3\"))", "y", "[4, 4]", "Tile<bf16, [N, 64]>"),
    ("Map-cast", "y = Map(ta, fn=cast, dtype=f32)", "y", "[4, 4]", "Tile<f32, [16, 64]>"),
    ("Map-set_offset", "y = Map(ta, off, fn=set_offset)", "y", "[4, 4]",
     "Tile<bf16, [16, 64]>"),
    ("Map-row_append", "y = Map(ta, row1, fn=row_append)", "y", "[4, 4]",
     "Tile<bf16, [16, 64]>"),
    ("Map-cache_write_addr", "y = Map(idx, lens, fn=cache_write_addr(row_offset=202))",
     "y", "[2, 2]", "Tile<u64, [1, 1]>"),
    ("Map-ceildiv_int", "y = Map(lens, fn=ceildiv_int(by=32, plus=1))",
     "y", "[2, 2]", "Tile<i32, [1, 1]>"),
    ("Map-mod_int", "y = Map(lens, fn=mod_int(by=32))", "y", "[2, 2]", "Tile<i32, [1, 1]>"),
    # ---- Accum: reduces the innermost `rank` dims
    ("Accum-add-rank1", "y = Accum(ta, fn=add, rank=1)", "y", "[4]", "Tile<bf16, [16, 64]>"),
    ("Accum-add-rank2", "y = Accum(d3, fn=add, rank=2)", "y", "[4]", "Tile<bf16, [16, 16]>"),
    ("Accum-add-init", "y = Accum(ta, fn=add, rank=1, init=zero)", "y", "[4]",
     "Tile<bf16, [16, 64]>"),
    ("Accum-mul", "y = Accum(ta, fn=mul, rank=1)", "y", "[4]", "Tile<bf16, [16, 64]>"),
    ("Accum-max", "y = Accum(kt, fn=max, rank=1)", "y", "[2, 2]", "Tile<bf16, [16, 16]>"),
    ("Accum-matmul", "y = Accum(ta, tb, fn=matmul, rank=1)", "y", "[4]",
     "Tile<bf16, [16, 32]>"),
    ("Accum-matmul-f32", "y = Accum(ta, tb, fn=matmul, rank=1, dtype=f32)", "y", "[4]",
     "Tile<f32, [16, 32]>"),
    ("Accum-matmul-transpose", "y = Accum(ta, tc, fn=matmul(transpose=true), rank=1)", "y",
     "[4]", "Tile<bf16, [16, 32]>"),
    ("Accum-retile_row-static", "y = Accum(ta, fn=retile_row, rank=1)", "y", "[4]",
     "Tile<bf16, [64, 64]>"),
    ("Accum-retile_row-dynamic-reduced-dim", "y = Accum(n, fn=retile_row, rank=1)", "y",
     "[4]", "Tile<bf16, [N, 64]>"),
    ("Accum-retile_row-rank2", "y = Accum(d3, fn=retile_row, rank=2)", "y", "[4]",
     "Tile<bf16, [32*N, 16]>"),
    ("Accum-retile_col", "y = Accum(ta, fn=retile_col, rank=1)", "y", "[4]",
     "Tile<bf16, [16, 256]>"),
    ("Accum-signal_req_all_read", "y = Accum(kt, fn=signal_req_all_read, rank=1)", "y",
     "[2, 2]", "Tile<u64, [1, 1]>"),
    # ---- Scan: the input's shape
    ("Scan-add", "y = Scan(ta, fn=add, rank=1)", "y", "[4, 4]", "Tile<bf16, [16, 64]>"),
    ("Scan-mul-rank2", "y = Scan(d3, fn=mul, rank=2)", "y", "[4, 2, N]",
     "Tile<bf16, [16, 16]>"),
    ("Scan-max-ragged", "y = Scan(kt, fn=max, rank=1, dtype=f32)", "y", "[2, 2, L]",
     "Tile<f32, [16, 16]>"),
    # ---- FlatMap: [.., D_0] -> [.., D_0 * D'_b, D'_b-1..]
    ("FlatMap-retile_streamify-rows",
     "y = FlatMap(Accum(ta, fn=retile_row, rank=1), fn=retile_streamify)", "y", "[256]",
     "Tile<bf16, [1, 64]>"),
    ("FlatMap-retile_streamify-cols", 'y = FlatMap(ta, fn=retile_streamify(split="col"))',
     "y", "[4, 256]", "Tile<bf16, [16, 1]>"),
    ("FlatMap-retile_streamify-dynamic-tile",
     "y = FlatMap(Accum(n, fn=retile_row, rank=1), fn=retile_streamify)", "y", "[4*N]",
     "Tile<bf16, [1, 64]>"),
    ("FlatMap-expert_addr", "y = FlatMap(sel, fn=expert_addr(tiles=16))", "y",
     "[10, 16, 1]", "Tile<u64, [1, 1]>"),
    ("FlatMap-expert_addr-base", "y = FlatMap(sel, fn=expert_addr(tiles=4, base=100))", "y",
     "[10, 4, 1]", "Tile<u64, [1, 1]>"),
    ("FlatMap-cache_read_addr-over-zip", "", "ka", "[2, 2, L]", "Tile<u64, [1, 1]>"),
    ("FlatMap-filter_last_tile", 'y = FlatMap(lens, fn=filter_last_tile, dim="T")', "y",
     "[2, 2, T]", "MultiHot<2>"),
    # ---- Flatten: dims min..max merged into their product
    ("Flatten-0-1", "y = Flatten(x, min=0, max=1)", "y", "[10]", "Tile<bf16, [1, 64]>"),
    ("Flatten-dynamic", "y = Flatten(LinearOffChipLoad(A, ref=r, tile=[64, 64]), min=0, max=1)",
     "y", "[R, 4]", "Tile<bf16, [64, 64]>"),
    ("Flatten-1-2",
     "y = Flatten(LinearOffChipLoad(A, tile=[16, 256], stride=[1, 0, 1], shape=[4, 8, 1]), "
     "min=1, max=2)", "y", "[32, 1]", "Tile<bf16, [16, 256]>"),
    ("Flatten-all",
     "y = Flatten(LinearOffChipLoad(A, tile=[16, 256], stride=[1, 0, 1], shape=[4, 8, 1]), "
     "min=0, max=2)", "y", "[32]", "Tile<bf16, [16, 256]>"),
    ("Flatten-dynamic-regular-product", "y = Flatten(d3, min=0, max=1)", "y", "[4, 2*N]",
     "Tile<bf16, [16, 16]>"),
    ("Flatten-static-above-ragged", "y = Flatten(kt, min=1, max=2)", "y", "[4, L]",
     "Tile<bf16, [16, 16]>"),
    # ---- Reshape: [.., D_b, ..] -> [.., ceil(D_b/S), S, ..]
    ("Reshape-pad", "y, pd = Reshape(Flatten(x, min=0, max=1), chunk=4, pad=zero)", "y",
     "[3, 4]", "Tile<bf16, [1, 64]>"),
    ("Reshape-pad-stream", "y, pd = Reshape(Flatten(x, min=0, max=1), chunk=4, pad=zero)",
     "pd", "[3, 4]", "bool"),
    ("Reshape-divisible-no-pad", "y = Reshape(Flatten(x, min=0, max=1), chunk=5)", "y",
     "[2, 5]", "Tile<bf16, [1, 64]>"),
    ("Reshape-dynamic-ceil", "y = Reshape(r, chunk=4, pad=zero)", "y",
     "[ceiling(R/4), 4]", "Tile<bf16, [1, 1]>"),
    ("Reshape-chunk1-dynamic", "y = Reshape(r, chunk=1)", "y", "[R, 1]",
     "Tile<bf16, [1, 1]>"),
    ("Reshape-rank1", "y = Reshape(ta, chunk=2, rank=1)", "y", "[2, 2, 4]",
     "Tile<bf16, [16, 64]>"),
    ("Reshape-rank1-chunk1", "y = Reshape(ta, chunk=1, rank=1)", "y", "[4, 1, 4]",
     "Tile<bf16, [16, 64]>"),
    ("Reshape-rank2", "y = Reshape(d3, chunk=2, rank=2)", "y", "[2, 2, 2, N]",
     "Tile<bf16, [16, 16]>"),
    # ---- Promote: new outermost (1 if D_a > 0 else 0); rank=p inserts a 1
    ("Promote-static", "y = Promote(x)", "y", "[1, 10, 1]", "Tile<bf16, [1, 64]>"),
    ("Promote-dynamic", "y = Promote(r)", "y", "[Piecewise((1, R > 0), (0, True)), R]",
     "Tile<bf16, [1, 1]>"),
    ("Promote-rank-a-plus-1", "y = Promote(x, rank=2)", "y", "[1, 10, 1]",
     "Tile<bf16, [1, 64]>"),
    ("Promote-rank0", "y = Promote(x, rank=0)", "y", "[10, 1, 1]", "Tile<bf16, [1, 64]>"),
    ("Promote-rank1", "y = Promote(ta, rank=1)", "y", "[4, 1, 4]", "Tile<bf16, [16, 64]>"),
    # ---- Expand: the ref's shape; static sizes replace trailing 1s
    ("Expand-ref", "xr = Reshape(Accum(ta, fn=add, rank=1), chunk=1)\ny = Expand(xr, ref=tb)",
     "y", "[4, 4]", "Tile<bf16, [16, 64]>"),
    ("Expand-ref-rank1",
     "xr = Reshape(Accum(ta, fn=add, rank=1), chunk=1)\ny = Expand(Promote(xr, rank=0), "
     "ref=Repeat(Repeat(Accum(tb, fn=add, rank=1), count=3), count=2), rank=1)", "y",
     "[4, 3, 2]", "Tile<bf16, [16, 64]>"),
    ("Expand-ref-dynamic", "rr = Reshape(r, chunk=1)\ny = Expand(rr, ref=Repeat(r, count=5))", "y",
     "[R, 5]", "Tile<bf16, [1, 1]>"),
    ("Expand-ref-ragged", "y = Expand(Promote(Accum(kt, fn=add, rank=1), rank=0), ref=kt)",
     "y", "[2, 2, L]", "Tile<bf16, [16, 16]>"),
    ("Expand-sizes", "y = Expand(x, sizes=[5])", "y", "[10, 5]", "Tile<bf16, [1, 64]>"),
    ("Expand-sizes-two", "y = Expand(Promote(x, rank=0), sizes=[3, 2])", "y", "[10, 3, 2]",
     "Tile<bf16, [1, 64]>"),
    # ---- Repeat: appends a static innermost dim
    ("Repeat", "y = Repeat(x, count=3)", "y", "[10, 1, 3]", "Tile<bf16, [1, 64]>"),
    ("Repeat-buffers", "y = Repeat(Bufferize(kt, rank=1), count=2)", "y", "[2, 2, 2]",
     "Buffer<Tile<bf16, [16, 16]>, [L]>"),
    # ---- Zip: a stream of pairs
    ("Zip", "y = Zip(ta, tb)", "y", "[4, 4]",
     "(Tile<bf16, [16, 64]>, Tile<bf16, [64, 32]>)"),
    ("Zip-ragged", "y = Zip(kt, ka)", "y", "[2, 2, L]",
     "(Tile<bf16, [16, 16]>, Tile<u64, [1, 1]>)"),
    # ---- sources
    ("External", "", "x", "[10, 1]", "Tile<bf16, [1, 64]>"),
    ("SelectGen-multihot", "s = SelectGen(IDS, n=2)", "s", "[10]", "MultiHot<2>"),
    ("SelectGen-onehot", "s = SelectGen(IDS, n=4, onehot=true)", "s", "[10, 1]",
     "MultiHot<4>"),
    ("MetadataGen", "m = MetadataGen(ADR)", "m", "[3, 5]", "Tile<u64, [1, 1]>"),
]


@pytest.mark.parametrize("body,label,shape,elem",
                         [pytest.param(*c[1:], id=c[0]) for c in SHAPE_CASES])
def test_shape_rule(body, label, shape, elem):
    p = Prog(body).ok()
    p.expect_shape(label, shape)
    assert str(p.type(label).elem) == elem


def _ops_in(text: str) -> set[str]:
    return {m for m in re.findall(r"\b([A-Z][A-Za-z]+)\(", text) if m in OPS}


def test_every_operator_has_a_shape_case():
    """Every operator in OPS is exercised by the table or a dedicated test below."""
    covered = set()
    for c in SHAPE_CASES:
        covered |= _ops_in(c[1]) | {c[0].split("-")[0]}
    covered |= _ops_in(PRELUDE) | {"External", "LinearOffChipStore", "Sink", "Reassemble"}
    assert set(OPS) - covered == set()


def test_every_function_is_used_in_a_shape_case():
    used = set()
    for c in SHAPE_CASES + [("prelude", PRELUDE)]:
        used |= set(re.findall(r"fn=([a-z_]+)", c[1]))
    assert set(FUNCTIONS) - used == set()


# ------------------------------------------------------------------ dedicated shape tests
def test_linear_offchip_store_has_no_output_and_accepts_any_shape_with_the_right_count():
    p = Prog("""
        LinearOffChipStore(LinearOffChipLoad(A, tile=[64, 64]), Y)
        st = LinearOffChipLoad(A, tile=[16, 256], stride=[2, 1], shape=[2, 2])
        LinearOffChipStore(st, Y)
    """).ok()
    stores = [nd for nd in p.c.typed.program.nodes.values() if nd.op == "LinearOffChipStore"]
    assert len(stores) == 2 and all(nd.outputs == [] for nd in stores)


def test_linear_offchip_store_of_dynamic_count_warns():
    p = Prog("st = LinearOffChipLoad(A, ref=r, tile=[64, 64])\nLinearOffChipStore(»st, Y)")
    assert not p.errors, p.report()
    w = [d for d in p.warnings if d.code == "W0301"]
    assert w and (w[0].span.line, w[0].span.col) == p.mark


def test_sink_consumes_without_output():
    p = Prog("Sink(x)\nSink(kt)").ok()
    sinks = [nd for nd in p.c.typed.program.nodes.values() if nd.op == "Sink"]
    assert len(sinks) == 2 and all(nd.outputs == [] for nd in sinks)
    assert not any(d.code == "W0001" and "`x`" in d.message for d in p.warnings)


def test_external_declared_symbols_are_dynamic_regular():
    p = Prog("").ok()
    assert p.type("n").shape[1] == p.sym("N")
    assert p.c.typed.symbols.infos["N"].kind == "dynamic"
    assert p.type("dyn").elem.rows == p.sym("N")


def test_partition_shares_symbols_for_the_same_selector():
    p = Prog("""
        p = Partition(x, sel, rank=1, consumers=2)
        q = Partition(Map(x, fn=silu), sel, rank=1, consumers=2)
        y = Map(p[1], q[1], fn=add)
    """).ok()
    assert p.shape("p[0]")[0] == p.shape("q[0]")[0]
    assert p.shape("p[1]")[0] == p.shape("q[1]")[0]
    assert p.shape("p[0]")[0] != p.shape("p[1]")[0]
    assert p.kind(p.shape("p[0]")[0]) == "dynamic"
    # lockstep Map of the two partitions' outputs is provably well-shaped: no W0301
    assert not [d for d in p.warnings if d.code == "W0301"], p.report()


def test_partition_with_different_selectors_gets_distinct_symbols():
    p = Prog("""
        stream sel2 : Strm<MultiHot<2>, 0>[10] = external("sel2")
        p = Partition(x, sel, rank=1, consumers=2)
        q = Partition(x, sel2, rank=1, consumers=2)
    """).ok()
    dims = {p.shape(s)[0] for s in ("p[0]", "p[1]", "q[0]", "q[1]")}
    assert len(dims) == 4


def test_partition_shares_symbols_through_explicit_broadcast():
    p = Prog("""
        sb = Broadcast(sel, consumers=2)
        p = Partition(x, sb[0], rank=1, consumers=2)
        q = Partition(x, sb[1], rank=1, consumers=2)
    """).ok()
    assert p.shape("p[0]")[0] == p.shape("q[0]")[0]


def test_partition_ragged_inner_dim_is_fresh_per_output():
    p = Prog("p = Partition(kt, SelectGen(S2, n=3), rank=2, consumers=3)").ok()
    L = p.sym("L")
    dims = []
    for i in range(3):
        d_i, two, inner = p.shape(f"p[{i}]")
        assert two == 2 and p.kind(d_i) == "dynamic"
        dims.append(p.fresh_ragged(inner, not_in=[L] + dims))


def test_reassemble_rank0_output_is_selector_shape_plus_n():
    p = Prog("""
        p = Partition(Flatten(x, min=0, max=1), sel, rank=0, consumers=2)
        m = Reassemble(p, sel, rank=0)
    """).ok()
    ten, nn = p.shape("m")
    assert ten == 10
    p.fresh_ragged(nn)
    assert p.type("m").rank == 1


def test_reassemble_rank1_keeps_inner_dims():
    p = Prog("""
        p = Partition(x, sel, rank=1, consumers=2)
        m = Reassemble([p[0], p[1]], sel, rank=1, dim="G")
    """).ok()
    p.expect_shape("m", "[10, G, 1]")
    p.fresh_ragged(p.sym("G"))


def test_reassemble_rank1_selector_rank1():
    p = Prog("""
        stream s1 : Strm<MultiHot<3>, 1>[2, 5] = external("s1")
        stream a : Strm<Tile<bf16, [16, 16]>, 2>[P, 2, 8] = external("a")
        m = Reassemble([a, a, a], s1, rank=2)
    """).ok()
    d0, d1, nn, two, eight = p.shape("m")
    assert (d0, d1, two, eight) == (2, 5, 2, 8)
    p.fresh_ragged(nn)
    assert p.type("m").rank == 4  # a + b + 1 with a = 2, b = 1


def test_reassemble_assume_resolves_n():
    p = Prog("""
        p = Partition(Flatten(x, min=0, max=1), sel, rank=0, consumers=2)
        m = Reassemble(p, sel, rank=0)
        assume shape(m) == shape(x)
    """).ok()
    p.expect_shape("m", "[10, 1]")


def test_eager_merge_of_ragged_counts_is_a_fresh_ragged_dim():
    p = Prog("""
        f = Flatten(kt, min=0, max=2)
        g = Flatten(kt, min=0, max=2)
        e, es = EagerMerge([f, g])
    """).ok()
    f, = p.shape("f")
    g, = p.shape("g")
    p.fresh_ragged(f)
    p.fresh_ragged(g, not_in=[f])
    total, = p.shape("e")
    p.fresh_ragged(total, not_in=[f, g])
    assert p.shape("es") == (total,)


def test_parallelize_static_counts_sum_to_the_input():
    for n_cons in range(1, 12):
        p = Prog(f"o = Parallelize(x, consumers={n_cons})").ok()
        total = sum(int(p.shape(f"o[{i}]")[0]) for i in range(n_cons))
        assert total == 10, n_cons


def test_accum_retile_row_over_a_ragged_dim_is_a_fresh_ragged_tile_dim():
    p = Prog("y = Accum(kt, fn=retile_row, rank=1)").ok()
    p.expect_shape("y", "[2, 2]")
    t = p.type("y").elem
    assert t.cols == 16
    p.fresh_ragged(t.rows, not_in=[p.sym("L")])


def test_flatmap_retile_streamify_filter_gives_fresh_ragged_dim():
    p = Prog("""
        y = FlatMap(Accum(ta, fn=retile_row, rank=1), fn=retile_streamify(filter=true))
    """).ok()
    d, = p.shape("y")
    p.fresh_ragged(d)
    assert p.type("y").elem == Tile("bf16", sympy.Integer(1), sympy.Integer(64))


def test_flatmap_of_ragged_input_absorbs():
    p = Prog("y = FlatMap(kt, fn=retile_streamify)").ok()
    two, two2, d = p.shape("y")
    assert (two, two2) == (2, 2)
    p.fresh_ragged(d, not_in=[p.sym("L")])


def test_flatmap_filter_last_tile_default_symbol_is_ragged():
    p = Prog("y = FlatMap(lens, fn=filter_last_tile)").ok()
    a, b, d = p.shape("y")
    assert (a, b) == (2, 2)
    p.fresh_ragged(d, not_in=[p.sym("L")])
    assert p.type("y").elem == Select(2)


def test_flatten_of_ragged_dim_is_fresh_ragged_not_a_product():
    """The paper's absorbing rule: flatten [2, 2, D0] (D0 ragged) -> [2, D0'], not [2, 2*D0]."""
    p = Prog('y = Flatten(kt, min=0, max=1, dim="Lf")').ok()
    two, d = p.shape("y")
    assert two == 2
    assert d == p.sym("Lf")
    p.fresh_ragged(d, not_in=[p.sym("L")])
    assert equal(d, 2 * p.sym("L")) is not True


def test_reshape_of_ragged_innermost_dim_is_fresh_ragged():
    p = Prog("y = Reshape(kt, chunk=4, pad=zero)").ok()
    a, b, c, four = p.shape("y")
    assert (a, b, four) == (2, 2, 4)
    p.fresh_ragged(c, not_in=[p.sym("L")])
    assert p.shape("y.pad") == p.shape("y")
    assert p.type("y.pad").elem == Scalar("bool")


def test_reshape_ceil_and_padding_over_params():
    for rows in (1, 4, 7, 8, 9):
        p = Prog(f"""
            tensor Q : bf16[{rows}, 64] input
            y = Reshape(Flatten(LinearOffChipLoad(Q, tile=[1, 64]), min=0, max=1), chunk=4,
                        pad=zero)
        """).ok()
        assert p.shape("y") == (sympy.Integer(-(-rows // 4)), 4)


def test_promote_zero_outer_dim_gives_zero():
    p = Prog("""
        stream e0 : Strm<Tile<bf16, [1, 1]>, 0>[0] = external("e0")
        y = Promote(e0)
    """).ok()
    p.expect_shape("y", "[0, 0]")


def test_promote_outer_dim_evaluates_per_value():
    p = Prog("y = Promote(r)").ok()
    outer = p.shape("y")[0]
    R = p.sym("R")
    assert outer.subs(R, 0) == 0
    assert outer.subs(R, 1) == 1
    assert outer.subs(R, 17) == 1


def test_zip_of_unprovably_equal_shapes_warns():
    p = Prog("""
        p = Partition(x, sel, rank=1, consumers=2)
        z = Zip(p[0], »p[1])
    """)
    assert not p.errors, p.report()
    w = [d for d in p.warnings if d.code == "W0301"]
    assert w and (w[0].span.line, w[0].span.col) == p.mark


def test_map_lockstep_of_unprovably_equal_shapes_warns():
    p = Prog("""
        p = Partition(x, sel, rank=1, consumers=2)
        z = Map(p[0], »p[1], fn=add)
    """)
    assert not p.errors, p.report()
    w = [d for d in p.warnings if d.code == "W0301"]
    assert w and (w[0].span.line, w[0].span.col) == p.mark


def test_multi_output_binding_names_both_ports():
    p = Prog("y, pd = Reshape(r, chunk=4, pad=zero)").ok()
    assert p.type("pd").elem == Scalar("bool")
    assert isinstance(p.type("y").elem, Tile)


def test_buffer_elem_type_of_bufferize():
    p = Prog("b = Bufferize(d3, rank=1)").ok()
    e = p.type("b").elem
    assert isinstance(e, Buffer)
    assert e.shape == (p.sym("N"),)
    p.expect_shape("b", "[4, 2]")


# ------------------------------------------------------------------ defects found (fixed)
@pytest.mark.parametrize("call,shape", [("Expand(one, ref=r)", "[R]"),
                                        ("Expand(one, sizes=[5])", "[5]")], ids=["ref", "sizes"])
def test_expand_of_a_single_element_stream(call, shape):
    p = Prog(f"""
        one = LinearOffChipLoad(A, tile=[64, 256], shape=[1])
        y = {call}
    """).ok()
    p.expect_shape("y", shape)


@pytest.mark.parametrize("body,label", [
    ("o = Parallelize(kt, consumers=2, rank=0)", "o[1]"),
    ("y = Promote(Flatten(kt, min=0, max=2))", "y"),
], ids=["Parallelize", "Promote"])
def test_dims_over_ragged_symbols_are_absorbed(body, label):
    p = Prog(body).ok()
    outer = p.shape(label)[0]
    p.fresh_ragged(outer, not_in=[p.sym("L")])
