"""Every operator's error conditions, tested through small .step programs with the location
each diagnostic must carry (the prelude, helpers and conventions: tests/shape_prelude.py)."""

from __future__ import annotations

import pytest
from shape_prelude import Prog, expect_error

from stepc.ops import FUNCTIONS, OPS

# ------------------------------------------------------------------ error conditions (table)
# (id, body with a » marker where the diagnostic must point, code)
ERROR_CASES = [
    # ---- LinearOffChipLoad
    ("LinearOffChipLoad-1d-tensor", "w = LinearOffChipLoad(»V, tile=[1, 16])", "E0320"),
    ("LinearOffChipLoad-tile-not-two-ints", "w = LinearOffChipLoad(A, »tile=[64])", "E0204"),
    ("LinearOffChipLoad-tile-zero", "w = LinearOffChipLoad(A, »tile=[0, 64])", "E0204"),
    ("LinearOffChipLoad-tile-does-not-divide", "w = LinearOffChipLoad(A, »tile=[64, 48])",
     "E0320"),
    ("LinearOffChipLoad-stride-without-shape",
     "w = LinearOffChipLoad(A, tile=[64, 64], »stride=[4, 1])", "E0201"),
    ("LinearOffChipLoad-stride-shape-lengths",
     "w = LinearOffChipLoad(A, tile=[64, 64], »stride=[1], shape=[1, 4])", "E0321"),
    ("LinearOffChipLoad-shape-zero", "w = LinearOffChipLoad(A, tile=[64, 64], »shape=[0, 4])",
     "E0204"),
    ("LinearOffChipLoad-negative-stride",
     "w = LinearOffChipLoad(A, tile=[64, 64], »stride=[-1, 1], shape=[1, 4])", "E0204"),
    ("LinearOffChipLoad-view-out-of-range",
     "w = LinearOffChipLoad(A, tile=[64, 64], »shape=[2, 4])", "E0322"),
    ("LinearOffChipLoad-strided-view-out-of-range",
     "w = LinearOffChipLoad(A, tile=[64, 64], stride=[0, 2], »shape=[1, 3])", "E0322"),
    # ---- LinearOffChipStore
    ("LinearOffChipStore-not-tiles", "LinearOffChipStore(»sel, Y)", "E0303"),
    ("LinearOffChipStore-dynamic-tiles", "LinearOffChipStore(»dyn, Y)", "E0303"),
    ("LinearOffChipStore-dtype", "LinearOffChipStore(»LinearOffChipLoad(A32, tile=[64, 64]), Y)",
     "E0304"),
    ("LinearOffChipStore-1d-tensor", "LinearOffChipStore(x, »V)", "E0320"),
    ("LinearOffChipStore-tile-does-not-divide",
     "LinearOffChipStore(»LinearOffChipLoad(W, tile=[64, 128]), K)", "E0320"),
    ("LinearOffChipStore-count", "LinearOffChipStore(»LinearOffChipLoad(W, tile=[64, 64]), Y)",
     "E0323"),
    # ---- RandomOffChipLoad
    ("RandomOffChipLoad-float-addresses", "t = RandomOffChipLoad(»ta, K, tile=[16, 16])",
     "E0305"),
    ("RandomOffChipLoad-selector-addresses", "t = RandomOffChipLoad(»sel, K, tile=[16, 16])",
     "E0305"),
    ("RandomOffChipLoad-tile-does-not-divide",
     "t = RandomOffChipLoad(ka, K, »tile=[16, 32])", "E0320"),
    ("RandomOffChipLoad-1d-tensor", "t = RandomOffChipLoad(ka, »V, tile=[1, 16])", "E0320"),
    # ---- RandomOffChipStore
    ("RandomOffChipStore-bad-addresses",
     "a = RandomOffChipStore(»ta, ta, Y)", "E0305"),
    ("RandomOffChipStore-data-not-tiles",
     "a = RandomOffChipStore(idx, »sel, Y)", "E0303"),
    ("RandomOffChipStore-dtype", "a = RandomOffChipStore(idx, »t32, Y)", "E0304"),
    ("RandomOffChipStore-count",
     "a = RandomOffChipStore(MetadataGen(ADR), »LinearOffChipLoad(A, tile=[16, 16], "
     "shape=[14]), Y)", "E0302"),
    # ---- Bufferize
    ("Bufferize-not-tiles", "b = Bufferize(»Promote(sel), rank=1)", "E0303"),
    ("Bufferize-dynamic-tiles", "b = Bufferize(»dyn, rank=1)", "E0303"),
    ("Bufferize-rank0", "b = Bufferize(ta, »rank=0)", "E0330"),
    ("Bufferize-rank-too-large", "b = Bufferize(ta, »rank=2)", "E0330"),
    ("Bufferize-ragged-inner-dim", "b = Bufferize(»kt, rank=2)", "E0331"),
    # ---- Streamify
    ("Streamify-not-buffers", "s = Streamify(»ta)", "E0303"),
    ("Streamify-affine-dynamic-buffer", "s = Streamify(Bufferize(d3, rank=1), »shape=[2])",
     "E0332"),
    ("Streamify-affine-out-of-range",
     "s = Streamify(Bufferize(ta, rank=1), stride=[2], »shape=[3])", "E0322"),
    ("Streamify-affine-stride-without-shape", "s = Streamify(Bufferize(ta, rank=1), »stride=[1])",
     "E0201"),
    ("Streamify-ref-and-repeat",
     "s = Streamify(Bufferize(ta, rank=1), ref=ta, »repeat=[2])", "E0205"),
    ("Streamify-ref-rank-too-small", "s = Streamify(Bufferize(d3, rank=1), »ref=r)", "E0301"),
    ("Streamify-ref-dims-differ", "s = Streamify(Bufferize(ta, rank=1), »ref=Repeat(x, count=2))",
     "E0302"),
    ("Streamify-repeat-zero", "s = Streamify(Bufferize(ta, rank=1), »repeat=[0])", "E0204"),
    # ---- Partition
    ("Partition-zero-consumers", "p = Partition(x, sel, rank=1, »consumers=0)", "E0204"),
    ("Partition-rank-too-large", "p = Partition(x, sel, »rank=2, consumers=2)", "E0301"),
    ("Partition-rank-negative", "p = Partition(x, sel, »rank=-1, consumers=2)", "E0301"),
    ("Partition-sel-not-selector", "p = Partition(x, »x, rank=1, consumers=2)", "E0306"),
    ("Partition-sel-width", "p = Partition(x, »sel, rank=1, consumers=3)", "E0306"),
    ("Partition-sel-rank", "p = Partition(x, »sel, rank=0, consumers=2)", "E0301"),
    ("Partition-sel-shape", "p = Partition(ta, »SelectGen(IDS, n=2), rank=1, consumers=2)",
     "E0302"),
    # ---- Reassemble
    ("Reassemble-no-inputs", "m = Reassemble(»[], sel, rank=0)", "E0201"),
    ("Reassemble-elem-types", "m = Reassemble([ta, »t32], sel, rank=1)", "E0304"),
    ("Reassemble-input-ranks", "m = Reassemble([Flatten(d3, min=0, max=1), »d3], sel, rank=1)",
     "E0301"),
    ("Reassemble-inner-dim-mismatch",
     "m = Reassemble([x, »Expand(x, sizes=[2])], sel, rank=1)", "E0302"),
    ("Reassemble-rank-mismatch", "m = Reassemble([»x, x], sel, rank=0)", "E0301"),
    ("Reassemble-sel-width", "m = Reassemble([x, x, x], »sel, rank=1)", "E0306"),
    ("Reassemble-sel-not-selector", "m = Reassemble([x, x], »x, rank=1)", "E0306"),
    # ---- EagerMerge
    ("EagerMerge-no-inputs", "e, s = EagerMerge(»[])", "E0201"),
    ("EagerMerge-elem-types", "e, s = EagerMerge([ta, »t32])", "E0304"),
    ("EagerMerge-ranks", "e, s = EagerMerge([Flatten(d3, min=0, max=1), »d3])", "E0301"),
    ("EagerMerge-inner-dims", "e, s = EagerMerge([x, »Expand(x, sizes=[2])])", "E0302"),
    ("EagerMerge-rank-param", "e, s = EagerMerge([»x, x], rank=0)", "E0301"),
    # ---- Parallelize
    ("Parallelize-zero-consumers", "o = Parallelize(x, »consumers=0)", "E0204"),
    ("Parallelize-rank-too-large", "o = Parallelize(x, consumers=2, »rank=2)", "E0301"),
    ("Parallelize-rank-negative", "o = Parallelize(x, consumers=2, »rank=-1)", "E0301"),
    # ---- Broadcast
    ("Broadcast-zero-consumers", "b = Broadcast(x, »consumers=0)", "E0204"),
    # ---- Map and the function library
    ("Map-unknown-function", "y = Map(ta, tb, »fn=matmull)", "E0103"),
    ("Map-function-not-for-map", "y = Map(ta, »fn=retile_row)", "E0307"),
    ("Map-matmul-arity", "y = Map(ta, »fn=matmul)", "E0307"),
    ("Map-silu-arity", "y = Map(ta, tb, »fn=silu)", "E0307"),
    ("Map-matmul-mismatch", "y = Map(ta, tc, »fn=matmul)", "E0310"),
    ("Map-matmul-transpose-mismatch", "y = Map(ta, tb, »fn=matmul(transpose=true))", "E0310"),
    ("Map-matmul-not-tiles", "y = Map(Zip(ta, tb), tb, »fn=matmul)", "E0305"),
    ("Map-add-broadcast-mismatch", "y = Map(ta, tb, »fn=add)", "E0311"),
    ("Map-sub-broadcast-mismatch", "y = Map(ta, tc, »fn=sub)", "E0311"),
    ("Map-mul-broadcast-mismatch", "y = Map(row1, tb, »fn=mul)", "E0311"),
    ("Map-div-broadcast-mismatch", "y = Map(col, tc, »fn=div)", "E0311"),
    ("Map-max-broadcast-mismatch", "y = Map(tb, tc, »fn=max)", "E0311"),
    ("Map-unary-not-tiles", "y = Map(sel, »fn=exp)", "E0305"),
    ("Map-unary-over-zip", "y = Map(Zip(ta, tb), »fn=silu)", "E0305"),
    ("Map-lockstep-rank", "y = Map(ta, »d3, fn=add)", "E0301"),
    ("Map-lockstep-shape", "y = Map(ta, »Repeat(Flatten(ta, min=0, max=1), count=2), fn=add)",
     "E0302"),
    ("Map-unknown-fn-attribute", "y = Map(ta, tb, »fn=matmul(transpose=true, bias=1))",
     "E0202"),
    ("Map-fn-attribute-type", "y = Map(ta, tb, »fn=matmul(transpose=1))", "E0204"),
    ("Map-affine-not-a-number", 'y = Map(ta, »fn=affine(scale="half"))', "E0204"),
    ("Map-pow-not-finite", 'y = Map(ta, »fn=pow(exponent="inf"))', "E0204"),
    ("Map-fn-required-attribute", "y = Map(idx, lens, »fn=cache_write_addr)", "E0201"),
    ("Map-cache_write_addr-float",
     'stream f11 : Strm<Tile<f32, [1, 1]>, 1>[2, 2] = external("f11")\n'
     "y = Map(f11, lens, »fn=cache_write_addr(row_offset=2))", "E0305"),
    ("Map-set_offset-float-count", "y = Map(ta, tb, »fn=set_offset)", "E0305"),
    ("Map-row_append-cols", "y = Map(ta, tb, »fn=row_append)", "E0311"),
    # ---- Accum
    ("Accum-rank0", "y = Accum(ta, fn=add, »rank=0)", "E0330"),
    ("Accum-rank-too-large", "y = Accum(ta, fn=add, »rank=2)", "E0330"),
    ("Accum-unknown-init", "y = Accum(ta, fn=add, rank=1, »init=zeros)", "E0103"),
    ("Accum-unknown-function", "y = Accum(ta, »fn=retile_rows, rank=1)", "E0103"),
    ("Accum-matmul-mismatch", "y = Accum(ta, tc, »fn=matmul, rank=1)", "E0310"),
    ("Accum-matmul-arity", "y = Accum(ta, »fn=matmul, rank=1)", "E0307"),
    ("Accum-lockstep", "y = Accum(ta, »Repeat(tb, count=2), fn=matmul, rank=1)", "E0301"),
    ("Accum-retile-not-tiles", "y = Accum(Promote(sel), »fn=retile_row, rank=1)", "E0305"),
    # ---- Scan
    ("Scan-rank0", "y = Scan(ta, fn=add, »rank=0)", "E0330"),
    ("Scan-rank-too-large", "y = Scan(ta, fn=add, »rank=3)", "E0330"),
    ("Scan-unknown-init", "y = Scan(ta, fn=add, rank=1, »init=ones)", "E0103"),
    ("Scan-arity", "y = Scan(ta, tb, »fn=add, rank=1)", "E0307"),
    # ---- FlatMap
    ("FlatMap-arity", "y = FlatMap(ta, tb, »fn=retile_streamify)", "E0307"),
    ("FlatMap-retile_streamify-split", 'y = FlatMap(ta, »fn=retile_streamify(split="diag"))',
     "E0206"),
    ("FlatMap-retile_streamify-filter-type", "y = FlatMap(ta, »fn=retile_streamify(filter=1))",
     "E0204"),
    ("FlatMap-retile_streamify-not-tiles", "y = FlatMap(sel, »fn=retile_streamify)", "E0305"),
    ("FlatMap-expert_addr-not-selector", "y = FlatMap(ta, »fn=expert_addr(tiles=4))", "E0305"),
    ("FlatMap-expert_addr-tiles-zero", "y = FlatMap(sel, »fn=expert_addr(tiles=0))", "E0206"),
    ("FlatMap-expert_addr-missing-tiles", "y = FlatMap(sel, »fn=expert_addr)", "E0201"),
    ("FlatMap-cache_read_addr-not-zip", "y = FlatMap(idx, »fn=cache_read_addr(row_offset=4))",
     "E0305"),
    ("FlatMap-cache_read_addr-float-zip",
     "y = FlatMap(Zip(ta, ta), »fn=cache_read_addr(row_offset=4))", "E0305"),
    ("FlatMap-filter_last_tile-float", "y = FlatMap(ta, »fn=filter_last_tile)", "E0305"),
    # ---- Flatten
    ("Flatten-max-too-large", "y = Flatten(ta, min=0, »max=2)", "E0340"),
    ("Flatten-min-above-max", "y = Flatten(d3, »min=2, max=1)", "E0340"),
    ("Flatten-negative-min", "y = Flatten(d3, »min=-1, max=1)", "E0340"),
    # ---- Reshape
    ("Reshape-buffers", "y = Reshape(»Bufferize(ta, rank=1), chunk=1)", "E0303"),
    ("Reshape-chunk-zero", "y = Reshape(ta, »chunk=0)", "E0204"),
    ("Reshape-rank-too-large", "y = Reshape(ta, chunk=2, »rank=2)", "E0301"),
    ("Reshape-dynamic-outer-dim", "y = Reshape(Repeat(r, count=2), chunk=2, »rank=1)", "E0341"),
    ("Reshape-not-divisible", "y = Reshape(ta, »chunk=3, rank=1)", "E0342"),
    ("Reshape-needs-pad-static", "y = Reshape(x, »chunk=3)", "E0343"),
    ("Reshape-needs-pad-dynamic", "y = Reshape(r, »chunk=4)", "E0343"),
    # ---- Promote
    ("Promote-rank-too-large", "y = Promote(ta, »rank=3)", "E0301"),
    ("Promote-rank-negative", "y = Promote(ta, »rank=-1)", "E0301"),
    # ---- Expand
    ("Expand-ref-and-sizes", "y = Expand(x, ref=ta, »sizes=[2])", "E0205"),
    ("Expand-neither", "y = »Expand(x)", "E0201"),
    ("Expand-sizes-too-many", "y = Expand(x, »sizes=[2, 2])", "E0301"),
    ("Expand-rank-too-large", "y = Expand(x, ref=x, »rank=1)", "E0301"),
    ("Expand-tail-not-one", "y = Expand(»ta, sizes=[2])", "E0344"),
    ("Expand-ref-tail-not-one", "y = Expand(»ta, ref=tb)", "E0344"),
    ("Expand-sizes-zero", "y = Expand(x, »sizes=[0])", "E0204"),
    ("Expand-ref-rank", "y = Expand(x, »ref=d3)", "E0301"),
    ("Expand-ref-outer-dims",
     "xr = Reshape(Accum(ta, fn=add, rank=1), chunk=1)\ny = Expand(xr, »ref=x)", "E0302"),
    # ---- Repeat
    ("Repeat-count-zero", "y = Repeat(x, »count=0)", "E0204"),
    # ---- Zip
    ("Zip-ranks", "y = Zip(ta, »d3)", "E0301"),
    ("Zip-shapes", "y = Zip(ta, »x)", "E0302"),
    # ---- sources
    ("SelectGen-float-tensor", "s = SelectGen(»FLT, n=2)", "E0304"),
    ("SelectGen-n-zero", "s = SelectGen(IDS, »n=0)", "E0204"),
    ("SelectGen-1d-ids", "tensor I1 : i32[4] input\ns = SelectGen(»I1, n=2)", "E0320"),
    ("MetadataGen-float-tensor", "m = MetadataGen(»FLT)", "E0304"),
]


@pytest.mark.parametrize("body,code", [pytest.param(*c[1:], id=c[0]) for c in ERROR_CASES])
def test_error_condition(body, code):
    expect_error(body, code)


def test_every_operator_has_an_error_case():
    covered = set()
    for c in ERROR_CASES:
        covered |= {c[0].split("-")[0]}
    # External and Sink have no error conditions in their rules.
    assert set(OPS) - covered == {"External", "Sink"}


# ---- functions used where they are not allowed: every (function, operator) pair
_NOT_ALLOWED = [(fn, op) for fn, spec in sorted(FUNCTIONS.items())
                for op in ("Map", "Accum", "Scan", "FlatMap")
                if {"Map": "map", "Accum": "accum", "Scan": "scan", "FlatMap": "flatmap"}[op]
                not in spec.arity]


@pytest.mark.parametrize("fn,op", _NOT_ALLOWED, ids=[f"{op}-{fn}" for fn, op in _NOT_ALLOWED])
def test_function_not_allowed_in_operator(fn, op):
    rank = ", rank=1" if op in ("Accum", "Scan") else ""
    p = expect_error(f"y = {op}(ta, »fn={fn}{rank})", "E0307")
    msg = next(d.message for d in p.errors if d.code == "E0307")
    assert fn in msg and op in msg


def test_every_function_is_disallowed_somewhere_or_allowed_everywhere():
    # sanity of the parametrisation above: no function is usable in all four operators
    assert {fn for fn, _ in _NOT_ALLOWED} == set(FUNCTIONS)


def test_unknown_function_suggests_the_nearest():
    p = expect_error("y = Map(ta, tb, »fn=matmull)", "E0103")
    assert "did you mean `matmul`" in p.errors[0].message


def test_matmul_mismatch_message_names_the_shapes():
    p = expect_error("y = Map(ta, tc, »fn=matmul)", "E0310")
    msg = p.errors[0].message
    assert "[16, 64]" in msg and "[32, 64]" in msg


def test_error_in_loop_body_points_at_each_iteration_source():
    p = Prog("""
        for i in 0..2 {
            y[i] = Map(ta, tc, »fn=matmul)
        }
    """)
    errs = [d for d in p.errors if d.code == "E0310"]
    assert errs and all((d.span.line, d.span.col) == p.mark for d in errs)


def test_errors_do_not_cascade_to_consumers():
    p = Prog("""
        y = Map(ta, tc, »fn=matmul)
        z = Map(y, fn=silu)
        Sink(z)
    """)
    assert [d.code for d in p.errors] == ["E0310"], p.report()


# ------------------------------------------------------------------ defects found (fixed)
@pytest.mark.parametrize("op", ["Zip(a, »b)", "Map(a, »b, fn=add)",
                                "Accum(a, »b, fn=matmul, rank=1)"], ids=["Zip", "Map", "Accum"])
def test_lockstep_mismatch_after_an_undecidable_dim_is_an_error(op):
    expect_error(f"""
        stream a : Strm<Tile<bf16, [16, 16]>, 1>[P, 4] = external("a")
        stream b : Strm<Tile<bf16, [16, 16]>, 1>[Q, 5] = external("b")
        y = {op}
    """, "E0302")


def test_reshape_unknown_pad_initialiser():
    expect_error("y = Reshape(r, chunk=4, »pad=banana)", "E0103")


def test_initialiser_with_unknown_attribute():
    expect_error("y = Accum(ta, fn=add, rank=1, »init=zero(v=3))", "E0202")


def test_declared_negative_dim_is_an_error():
    expect_error('stream e : »Strm<Tile<bf16, [1, 1]>, 0>[-3] = external("e")', "E0360")


def test_partition_zero_consumers_reports_one_error():
    p = expect_error("p = Partition(x, sel, rank=1, »consumers=0)", "E0204")
    assert [d.code for d in p.errors] == ["E0204"], p.report()
