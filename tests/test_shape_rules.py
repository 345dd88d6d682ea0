"""Every operator's shape rule and error conditions, tested through small .step programs.

Each test compiles a short program (a shared prelude of tensors and external streams plus a
body) with `compile_source` and reads inferred stream types from `typed.types`. Expected
shapes are written as sympy expressions over the program's own symbols (created with
integer=True, nonnegative=True) and compared with `stepc.types.equal`. Error tests mark the
expected diagnostic location with `»` in the source: the marker is removed before
compiling and the diagnostic must carry the expected code at exactly that line and column.

Operator rules follow the paper (Section 3 and the Appendix tables) and
shared/reference/semantics.md with its errata (the errata win).
"""

from __future__ import annotations

import re
import textwrap

import pytest
import sympy

from stepc.frontend import compile_source
from stepc.ops import FUNCTIONS, OPS
from stepc.source import SourceFile
from stepc.types import Buffer, Scalar, Select, Tile, equal, fmt_shape
from typed_lookup import Compiled

MARK = "»"

# Tensors and streams every test program can use. `L` is a ragged dim ([2, 2, L]: the KV
# tiles of each of 2 x 2 requests), `R` and `N` are dynamic-regular dims of external streams.
PRELUDE = """\
tensor A   : bf16[64, 256] input
tensor A32 : f32[64, 256] input
tensor W   : bf16[2, 64, 256] weight
tensor V   : bf16[1024] input
tensor K   : bf16[256, 16] input
tensor Y   : bf16[64, 256] output
tensor IDS : i32[10, 1] input
tensor S2  : i32[2, 1] input
tensor S4  : i32[4, 1] input
tensor LEN : i32[2, 2] input
tensor ADR : u64[3, 5] input
tensor FLT : f32[2, 2] input
stream r    : Strm<Tile<bf16, [1, 1]>, 0>[R] = external("r")
stream x    : Strm<Tile<bf16, [1, 64]>, 1>[10, 1] = external("x")
stream sel  : Strm<MultiHot<2>, 0>[10] = external("sel")
stream n    : Strm<Tile<bf16, [1, 64]>, 1>[4, N] = external("n")
stream d3   : Strm<Tile<bf16, [16, 16]>, 2>[4, 2, N] = external("d3")
stream ta   : Strm<Tile<bf16, [16, 64]>, 1>[4, 4] = external("ta")
stream tb   : Strm<Tile<bf16, [64, 32]>, 1>[4, 4] = external("tb")
stream tc   : Strm<Tile<bf16, [32, 64]>, 1>[4, 4] = external("tc")
stream col  : Strm<Tile<bf16, [16, 1]>, 1>[4, 4] = external("col")
stream row1 : Strm<Tile<bf16, [1, 64]>, 1>[4, 4] = external("row1")
stream t32  : Strm<Tile<f32, [16, 64]>, 1>[4, 4] = external("t32")
stream off  : Strm<Tile<u32, [1, 1]>, 1>[4, 4] = external("off")
stream dyn  : Strm<Tile<bf16, [N, 64]>, 1>[4, 4] = external("dyn")
idx = MetadataGen(LEN)
lens = MetadataGen(LEN)
ka = FlatMap(Zip(idx, lens), fn=cache_read_addr(row_offset=4), dim="L")
kt = RandomOffChipLoad(ka, K, tile=[16, 16])
"""


# ------------------------------------------------------------------ helpers
class Prog(Compiled):
    """A compiled test program, with lookups by stream label."""

    def __init__(self, body: str, overrides: dict | None = None, prelude: bool = True):
        text = (PRELUDE if prelude else "") + textwrap.dedent(body).strip("\n") + "\n"
        self.mark = None
        if MARK in text:
            assert text.count(MARK) == 1, "at most one location marker per program"
            i = text.index(MARK)
            line = text.count("\n", 0, i) + 1
            col = i - (text.rfind("\n", 0, i) + 1) + 1
            self.mark = (line, col)
            text = text.replace(MARK, "")
        self.text = text
        super().__init__(compile_source(SourceFile("t.step", text), overrides or {}))

    def parse(self, expr: str):
        """A shape/dim written in sympy syntax over this program's symbols."""
        names = dict(self.c.typed.symbols.symbols)
        val = sympy.sympify(expr, locals={**names, "ceil": sympy.ceiling})
        items = val if isinstance(val, (list, tuple)) else [val]
        for it in items:
            unknown = {s.name for s in sympy.sympify(it).free_symbols} - set(names)
            assert not unknown, f"expected shape uses unknown symbols {unknown}"
        return val

    def expect_shape(self, label: str, expected: str) -> None:
        got = self.shape(label)
        want = tuple(sympy.sympify(d) for d in self.parse(expected))
        assert len(got) == len(want) and all(equal(a, b) is True for a, b in zip(got, want)), \
            f"`{label}`: expected {fmt_shape(want)}, got {fmt_shape(got)}"

    def fresh_ragged(self, dim, not_in=()) -> sympy.Symbol:
        """`dim` is a bare ragged symbol distinct from the given dims."""
        assert isinstance(dim, sympy.Symbol), f"expected a fresh symbol, got {dim}"
        assert self.kind(dim) == "ragged", f"{dim} should be ragged, is {self.kind(dim)}"
        for other in not_in:
            assert dim != other, f"{dim} should be a fresh symbol"
        return dim


def expect_error(body: str, code: str, overrides: dict | None = None) -> Prog:
    """The program has an error `code` located exactly at the `»` marker."""
    p = Prog(body, overrides)
    assert p.mark is not None, "error tests need a » location marker"
    matching = [d for d in p.errors if d.code == code]
    assert matching, f"expected error {code}, got:\n{p.report()}"
    locs = [(d.span.line, d.span.col) for d in matching if d.span is not None]
    assert p.mark in locs, (f"error {code} expected at {p.mark[0]}:{p.mark[1]}, reported at "
                            f"{locs}\n{p.report()}")
    assert matching[0].span.file == "t.step"
    return p


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


def test_declared_negative_dim_is_an_error():
    expect_error('stream e : »Strm<Tile<bf16, [1, 1]>, 0>[-3] = external("e")', "E0360")


def test_partition_zero_consumers_reports_one_error():
    p = expect_error("p = Partition(x, sel, rank=1, »consumers=0)", "E0204")
    assert [d.code for d in p.errors] == ["E0204"], p.report()
