"""The STeP paper's type examples, checked on stepc's inferred types (no stop tokens).

* Section 3.3 (simplified MoE) through programs/moe_simple.step, stage by stage.
* The LinearOffChipLoad figure: a [64, 256] tensor read in [64, 64] tiles D_1 times.
* The Bufferize/Streamify figure: [2, D_ragged, 2] bufferized at rank 2, re-read through a
  reference stream a dynamic number of times.
* The hierarchical-tiling figure of the appendix (Bufferize, Repeat, Streamify, Map, Accum).
* Section 3.1's absorbing-rule example (flatten [2, 2, D0] -> [2, D0']).
* programs/swiglu.step (Section 4.5) at several TB/TI points of the Figure 8 sweep.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import sympy
from typed_lookup import Compiled

from stepc.frontend import compile_file, compile_source
from stepc.source import SourceFile
from stepc.types import Buffer, Tile, equal, fmt_shape

PROGRAMS = Path(__file__).resolve().parent.parent / "programs"
MOE = PROGRAMS / "moe_simple.step"
SWIGLU = PROGRAMS / "swiglu.step"


class Typed(Compiled):
    """Lookups of inferred types by stream label in a compiled program."""

    def expect(self, label: str, shape, tile=None) -> None:
        got = self.shape(label)
        want = tuple(sympy.sympify(d) for d in shape)
        assert len(got) == len(want) and all(equal(a, b) is True for a, b in zip(got, want)), \
            f"`{label}`: expected {fmt_shape(want)}, got {fmt_shape(got)}"
        if tile is not None:
            e = self.type(label).elem
            assert isinstance(e, Tile), f"`{label}` carries {e}, not tiles"
            assert (e.rows, e.cols) == tuple(sympy.sympify(v) for v in tile), \
                f"`{label}`: expected [{tile[0]}, {tile[1]}] tiles, got {e}"


def compile_text(text: str, overrides=None) -> Typed:
    return Typed(compile_source(SourceFile("t.step", textwrap.dedent(text)), overrides or {}))


# ------------------------------------------------------------------ Section 3.3: simplified MoE
@pytest.fixture(scope="module")
def moe() -> Typed:
    return Typed(compile_file(str(MOE))).ok()


def test_moe_route_input_is_10x1_of_1x64_tiles(moe):
    """'Partition takes in a [10,64] tensor, which is streamed as a [10,1]-shaped stream of
    [1,64] tiles.'"""
    moe.expect("x", [10, 1], tile=[1, 64])
    moe.expect("route", [10])
    assert moe.type("route").rank == 0


@pytest.mark.parametrize("i", [0, 1])
def test_moe_partition_outputs_are_dynamic_per_branch(moe, i):
    """'The output stream shapes are expressed symbolically as [D_i,1].'"""
    D = moe.sym(f"D_{i}")
    assert moe.kind(D) == "dynamic"
    moe.expect(f"p[{i}]", [D, 1], tile=[1, 64])


def test_moe_branches_have_distinct_symbols(moe):
    assert moe.sym("D_0") != moe.sym("D_1")
    assert moe.shape("p[0]")[0] != moe.shape("p[1]")[0]


@pytest.mark.parametrize("i", [0, 1])
def test_moe_pack_to_tile(moe, i):
    """Flatten + Reshape: [D_i,1] -> [D_i] -> [ceil(D_i/4),4]; Accum(RetileRow) packs
    [1,64] tiles into [4,64] tiles: [ceil(D_i/4)]."""
    D = moe.sym(f"D_{i}")
    c = sympy.ceiling(D / 4)
    moe.expect(f"rows[{i}]", [D], tile=[1, 64])
    moe.expect(f"tiles[{i}]", [c, 4], tile=[1, 64])
    moe.expect(f"packed[{i}]", [c], tile=[4, 64])


@pytest.mark.parametrize("i", [0, 1])
def test_moe_load_weight(moe, i):
    """'reading the weight tensor ceil(D_i/4) times as a [1,4] stream of [64,64] tiles',
    flattened to [ceil(D_i/4),4]."""
    c = sympy.ceiling(moe.sym(f"D_{i}") / 4)
    moe.expect(f"w[{i}]", [c, 1, 4], tile=[64, 64])
    moe.expect(f"wf[{i}]", [c, 4], tile=[64, 64])


@pytest.mark.parametrize("i", [0, 1])
def test_moe_broadcast_and_compute(moe, i):
    """Reshape and Expand: [ceil(D_i/4)] -> [ceil(D_i/4),1] -> [ceil(D_i/4),4]; Map(matmul)
    [4,64] x [64,64] -> [4,64]."""
    c = sympy.ceiling(moe.sym(f"D_{i}") / 4)
    moe.expect(f"xr[{i}]", [c, 1], tile=[4, 64])
    moe.expect(f"xe[{i}]", [c, 4], tile=[4, 64])
    moe.expect(f"y[{i}]", [c, 4], tile=[4, 64])


@pytest.mark.parametrize("i", [0, 1])
def test_moe_pack_and_unpack_tile(moe, i):
    """Accum packs four [4,64] tiles into [4,256]; FlatMap(RetileStreamify) splits rows back
    into [1,256] tiles, dropping the padding rows (D_i rows, via the assume)."""
    D = moe.sym(f"D_{i}")
    moe.expect(f"cols[{i}]", [sympy.ceiling(D / 4)], tile=[4, 256])
    moe.expect(f"out[{i}]", [D], tile=[1, 256])


def test_moe_reassemble_output_equals_the_input_shape(moe):
    """'output.stream.shape = in_stream.stream.shape': [10, n] with n := 1 by the assume."""
    moe.expect("merged", [10, 1], tile=[1, 256])
    assert moe.type("merged").rank == moe.type("x").rank == 1


def test_moe_without_assumes_reassemble_is_selector_shape_plus_ragged_n():
    text = MOE.read_text(encoding="utf-8")
    stripped = re.sub(r"^\s*assume .*$", "", text, flags=re.M)
    assert stripped != text
    t = Typed(compile_source(SourceFile("moe_noassume.step", stripped))).ok()
    ten, n = t.shape("merged")
    assert ten == 10 and isinstance(n, sympy.Symbol) and t.kind(n) == "ragged"
    for i in (0, 1):
        rows, = t.shape(f"out[{i}]")
        # filtered RetileStreamify: a fresh ragged dim, not 4*ceil(D_i/4) and not D_i
        assert isinstance(rows, sympy.Symbol) and t.kind(rows) == "ragged"
        assert rows != t.sym(f"D_{i}")


@pytest.mark.parametrize("chunk,tile_n", [(2, 64), (4, 128), (8, 32), (1, 256)])
def test_moe_sweep_chunk_and_tile(chunk, tile_n):
    t = Typed(compile_file(str(MOE), {"CHUNK": chunk, "TILE_N": tile_n})).ok()
    for i in (0, 1):
        D = t.sym(f"D_{i}")
        c = sympy.ceiling(D / chunk)
        k = 256 // tile_n
        t.expect(f"tiles[{i}]", [c, chunk], tile=[1, 64])
        t.expect(f"packed[{i}]", [c], tile=[chunk, 64])
        t.expect(f"w[{i}]", [c, 1, k], tile=[64, tile_n])
        t.expect(f"xe[{i}]", [c, k], tile=[chunk, 64])
        t.expect(f"y[{i}]", [c, k], tile=[chunk, tile_n])
        t.expect(f"cols[{i}]", [c], tile=[chunk, 256])
        t.expect(f"out[{i}]", [D], tile=[1, 256])
    t.expect("merged", [10, 1], tile=[1, 256])


@pytest.mark.parametrize("rows", [1, 10, 33])
def test_moe_sweep_rows(rows):
    t = Typed(compile_file(str(MOE), {"ROWS": rows})).ok()
    t.expect("x", [rows, 1], tile=[1, 64])
    t.expect("merged", [rows, 1], tile=[1, 256])


# ------------------------------------------------------------------ LinearOffChipLoad figure
def test_offchip_figure_reads_the_tensor_d1_times():
    """'The stored tensor is read in a row-major order D_1 times ... the output stream shape
    is [D_1, 64//64, 256//64] = [D_1, 1, 4].'"""
    t = compile_text("""
        tensor T : bf16[64, 256] input
        stream ref : Strm<Tile<bf16, [1, 1]>, 0>[D_1] = external("ref")
        out = LinearOffChipLoad(T, ref=ref, tile=[64, 64], stride=[4, 1], shape=[1, 4])
        Sink(out)
    """).ok()
    D1 = t.sym("D_1")
    assert t.kind(D1) == "dynamic"
    t.expect("out", [D1, 1, 4], tile=[64, 64])
    assert t.type("out").rank == 2  # |tiled_out_shape| + b = 2 + 0 (errata 8)


def test_offchip_figure_without_ref_is_the_view():
    t = compile_text("""
        tensor T : bf16[64, 256] input
        out = LinearOffChipLoad(T, tile=[64, 64])
        Sink(out)
    """).ok()
    t.expect("out", [1, 4], tile=[64, 64])


# ------------------------------------------------------------------ Bufferize/Streamify figure
BUFFER_FIGURE = """
    tensor LEN : i32[2] input
    tensor KV  : bf16[1024, 64] input
    # [2, D_ragged]: two requests with a data-dependent number of KV tiles each
    idx = MetadataGen(LEN)
    lens = MetadataGen(LEN)
    addr = FlatMap(Zip(idx, lens), fn=cache_read_addr(row_offset=8), dim="Dr")
    kv = RandomOffChipLoad(addr, KV, tile=[16, 32])
    inp = Repeat(kv, count=2)                       # [2, D_ragged, 2]
    buf = Bufferize(inp, rank=2)                    # [2] of Buffer[D_ragged, 2]
    stream ref : Strm<Tile<bf16, [1, 1]>, 1>[2, T] = external("ref")
    out = Streamify(buf, ref=ref)                   # each buffer read T times
    Sink(out)
"""


def test_bufferize_figure_input_is_2_by_ragged_by_2():
    t = compile_text(BUFFER_FIGURE).ok()
    Dr = t.sym("Dr")
    assert t.kind(Dr) == "ragged"
    t.expect("inp", [2, Dr, 2], tile=[16, 32])


def test_bufferize_figure_rank2_gives_rank0_stream_of_buffers():
    t = compile_text(BUFFER_FIGURE).ok()
    st = t.type("buf")
    assert st.rank == 0 and st.shape == (2,)
    assert isinstance(st.elem, Buffer)
    assert st.elem.shape == (t.sym("Dr"), 2)
    assert st.elem.tile == Tile("bf16", sympy.Integer(16), sympy.Integer(32))


def test_streamify_figure_reads_each_buffer_a_dynamic_number_of_times():
    t = compile_text(BUFFER_FIGURE).ok()
    T = t.sym("T")
    assert t.kind(T) == "dynamic"
    t.expect("out", [2, T, t.sym("Dr"), 2], tile=[16, 32])


def test_streamify_figure_with_ragged_reference_count():
    """The reference stream's dims may be of any kind, ragged included."""
    t = compile_text(BUFFER_FIGURE.replace(
        'stream ref : Strm<Tile<bf16, [1, 1]>, 1>[2, T] = external("ref")',
        'ref = FlatMap(lens, fn=filter_last_tile, dim="Rr")')).ok()
    Rr = t.sym("Rr")
    assert t.kind(Rr) == "ragged"
    t.expect("ref", [2, Rr])
    t.expect("out", [2, Rr, t.sym("Dr"), 2], tile=[16, 32])


# ------------------------------------------------------------------ hierarchical tiling
HIER = """
    tensor XA : bf16[4, 16, 256] input
    tensor XB : bf16[4, 32, 256] input
    # the original node: [4] of [16,256] x ([4] of [32,256])^T -> [4] of [16,32]
    a_big = LinearOffChipLoad(XA, tile=[16, 256], shape=[4])
    b_big = LinearOffChipLoad(XB, tile=[32, 256], shape=[4])
    big = Map(a_big, b_big, fn=matmul(transpose=true))
    Sink(big)
    # after hierarchical tiling with [16, 16] physical tiles
    a = LinearOffChipLoad(XA, tile=[16, 16])        # [4, 1, 16]
    b = LinearOffChipLoad(XB, tile=[16, 16])        # [4, 2, 16]
    ba = Bufferize(a, rank=1)
    ra = Repeat(ba, count=2)
    sa = Streamify(ra)
    bb = Bufferize(b, rank=2)
    rb = Repeat(bb, count=1)
    sb = Streamify(rb)
    m = Map(sa, sb, fn=matmul(transpose=true))
    acc = Accum(m, fn=add, rank=1)
    Sink(acc)
"""


def test_hierarchical_tiling_original_map():
    t = compile_text(HIER).ok()
    t.expect("a_big", [4], tile=[16, 256])
    t.expect("b_big", [4], tile=[32, 256])
    t.expect("big", [4], tile=[16, 32])


def test_hierarchical_tiling_inputs():
    t = compile_text(HIER).ok()
    t.expect("a", [4, 1, 16], tile=[16, 16])
    t.expect("b", [4, 2, 16], tile=[16, 16])


def test_hierarchical_tiling_left_branch_bufferize_rank1_repeat2():
    t = compile_text(HIER).ok()
    assert t.shape("ba") == (4, 1) and t.type("ba").elem.shape == (16,)
    assert t.shape("ra") == (4, 1, 2)
    t.expect("sa", [4, 1, 2, 16], tile=[16, 16])


def test_hierarchical_tiling_right_branch_bufferize_rank2_repeat1():
    t = compile_text(HIER).ok()
    assert t.shape("bb") == (4,) and t.type("bb").elem.shape == (2, 16)
    assert t.shape("rb") == (4, 1)
    t.expect("sb", [4, 1, 2, 16], tile=[16, 16])


def test_hierarchical_tiling_map_and_accum():
    t = compile_text(HIER).ok()
    t.expect("m", [4, 1, 2, 16], tile=[16, 16])
    t.expect("acc", [4, 1, 2], tile=[16, 16])


# ------------------------------------------------------------------ Section 3.1 absorbing rule
def test_absorbing_rule_example_flatten_2_2_d0():
    """'when the inner-two dimensions are flattened in example (1), the resulting stream shape
    is [2, D0'] instead of [2, 2 x D0]'."""
    t = compile_text("""
        tensor LEN : i32[2, 2] input
        tensor KV  : bf16[256, 16] input
        idx = MetadataGen(LEN)
        lens = MetadataGen(LEN)
        s = RandomOffChipLoad(FlatMap(Zip(idx, lens), fn=cache_read_addr(row_offset=4),
                                      dim="D0"), KV, tile=[16, 16])
        f = Flatten(s, min=0, max=1)
        Sink(f)
    """).ok()
    D0 = t.sym("D0")
    assert t.kind(D0) == "ragged"
    t.expect("s", [2, 2, D0])
    two, d = t.shape("f")
    assert two == 2
    assert isinstance(d, sympy.Symbol) and t.kind(d) == "ragged" and d != D0
    assert equal(d, 2 * D0) is not True


# ------------------------------------------------------------------ SwiGLU (Section 4.5)
SWEEP = [(tb, ti) for tb in (16, 32, 64) for ti in (16, 32, 64, 128, 256)]


@pytest.mark.parametrize("tb,ti", SWEEP, ids=[f"TB{tb}-TI{ti}" for tb, ti in SWEEP])
def test_swiglu_shapes(tb, ti):
    t = Typed(compile_file(str(SWIGLU), {"TB": tb, "TI": ti})).ok()
    mt, nt = 64 // tb, 512 // ti
    t.expect("x", [mt, nt, 1], tile=[tb, 256])
    t.expect("wg", [mt, nt, 1], tile=[256, ti])
    t.expect("wu", [mt, nt, 1], tile=[256, ti])
    for s in ("gate", "up", "act", "prod"):
        t.expect(s, [mt, nt], tile=[tb, ti])
    t.expect("pr", [mt, 1, nt], tile=[tb, ti])
    t.expect("wd", [mt, 1, nt], tile=[ti, 256])
    t.expect("down", [mt, 1], tile=[tb, 256])
    assert all(t.type(s).elem.dtype == "f32" for s in ("x", "gate", "down"))
    assert not t.warnings


def test_swiglu_default_params():
    t = Typed(compile_file(str(SWIGLU))).ok()
    t.expect("x", [4, 8, 1], tile=[16, 256])
    t.expect("down", [4, 1], tile=[16, 256])


def test_swiglu_tile_that_does_not_divide_is_an_error():
    t = Typed(compile_file(str(SWIGLU), {"TB": 48}))
    assert any(d.code == "E0320" for d in t.errors), t.report()
