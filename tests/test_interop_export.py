"""`stepc export` then `stepc import`: every bundled program comes back with the same
analysis totals and the same simulated cycles; what the format cannot say is refused,
naming the operator and what the format lacks."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import stepc
from stepc.frontend import import_graph_file as import_graph
from stepc.hw import load_config
from stepc.interop.read.reader import InteropError
from stepc.interop.schema import ProgramGraph
from stepc.interop.write.export import export_program

REPO = Path(__file__).resolve().parents[1]
PROGRAMS = sorted(p.stem for p in (REPO / "programs").glob("*.step"))
TOTALS = ("off_chip_bytes", "on_chip_bytes", "on_chip_bytes_on_demand", "flops")

_MOE = {"E": 4, "B": 8, "K": 2, "D": 64, "F": 128, "TILE_F": 64}
_TIMEMUX = {"E": 8, "R": 2, "B": 8, "K": 2, "D": 64, "F": 96, "TILE_F": 48}
# program -> small parameters for a fast round trip
ROUND_TRIP = {
    "swiglu": {"B": 64, "I": 256, "TB": 16, "TI": 64},
    "moe_simple": {},
    "moe_static": {**_MOE, "TILE_N": 4},
    "moe_dynamic": _MOE,
    "moe_timemux": {**_TIMEMUX, "TILE_N": 4},
    "moe_timemux_dynamic": _TIMEMUX,
}
_ATTN = {"HEAD_DIM": 16, "TILE_N": 8, "MAXN": 64}
_DECODER = {"L": 1, "B": 8, "R": 2, "D": 64, "HQ": 4, "HKV": 2, "HEAD_DIM": 32, "TILE_P": 32,
            "F": 64, "TILE_F": 32, "E": 4, "TOPK": 2, "MAXN": 256, "TILE_N": 32}
# program -> (small parameters, KV lengths): the KV tile counts go out as MetadataGen files
# computed from the lengths
TRACED = {"attention_interleaved": ({**_ATTN, "B": 4, "R": 2, "MAXN": 32},
                                    np.array([7, 15, 30, 3])),
          "attention_coarse": ({**_ATTN, "B": 16, "R": 1}, np.arange(0, 64, 4))}
# program -> (small parameters, KV lengths): each region's counts are routed at run time
# (decoder_static: dealt statically, and its barriers Promote what a source streams), so
# they go out as the reference's dynamic attention graph carries them (a MetadataGen of
# every request's values, partitioned by the run's selector)
ROUTED = {"attention_dynamic": ({**_ATTN, "B": 8, "R": 2}, np.array([7, 15, 30, 3, 60, 22, 41, 9])),
          "decoder_static": (_DECODER, np.array([7, 100, 30, 3, 200, 22, 41, 9])),
          "decoder_dynamic": (_DECODER, np.array([7, 100, 30, 3, 200, 22, 41, 9])),
          "decoder_timemux": ({**_DECODER, "MR": 2}, np.array([7, 100, 30, 3, 200, 22, 41, 9]))}


def _export(tmp_path: Path, prog, hw: str = "paper-eval", traces: dict | None = None) -> Path:
    """Write `prog` as `tmp_path/graph.pb` with its side files, as `stepc export` does."""
    out = tmp_path / "graph.pb"
    data, files = export_program(prog, str(out), load_config(hw), traces)
    side = tmp_path / "graph.npy"
    for name, arr in files.items():
        side.mkdir(exist_ok=True)
        np.save(side / name, arr)
    out.write_bytes(data)
    return out


def _round_trip(tmp_path: Path, program: str, params: dict,
                traces: dict | None = None) -> tuple[object, object]:
    own = stepc.load(REPO / "programs" / f"{program}.step", **params)
    back = stepc.load(_export(tmp_path, own, traces=traces))
    assert [d for d in back.diagnostics if d.severity.value == "error"] == []
    return (own.simulate(timing_only=True, traces=traces), back.simulate(timing_only=True))


def test_every_bundled_program_is_round_tripped():
    assert sorted({*ROUND_TRIP, *TRACED, *ROUTED}) == PROGRAMS


@pytest.mark.parametrize("program", sorted(TRACED))
def test_kv_counts_go_out_precomputed_and_keep_totals_and_cycles(tmp_path, program):
    """`ceildiv_int` (and `cache_write_addr` by a negative offset) over the KV lengths is
    `Map(x, values, fn=cache_write_addr(row_offset=0))` with the values in a MetadataGen
    file: the same totals and, since the Map still waits for `x`, the same cycles."""
    params, lens = TRACED[program]
    own, back = _round_trip(tmp_path, program, params, {"kv_lens": lens})
    assert {k: back.totals[k] for k in TOTALS} == {k: own.totals[k] for k in TOTALS}
    assert back.cycles == own.cycles
    g = ProgramGraph()
    g.ParseFromString((tmp_path / "graph.pb").read_bytes())
    ntiles = next(o for o in g.operators if o.name in ("ntiles", "ntiles[0]"))  # region 0
    assert ntiles.binarymap.func.cache_write_addr_gen.offset_per_idx == 0
    values = np.load(tmp_path / "graph.npy" / f"{ntiles.name}.npy")
    assert (values == -(-(lens + 1) // params["TILE_N"])).all()  # ceil((len + 1) / TILE_N)
    assert {o.parallel_factor for o in g.operators} == {1}
    assert sum(o.HasField("parallelize") for o in g.operators) == \
        {"attention_interleaved": 6, "attention_coarse": 1}[program]


@pytest.mark.parametrize("program", [
    "attention_dynamic",
    *(pytest.param(p, marks=pytest.mark.slow)  # the import alone takes some 8 s quiet
      for p in ("decoder_static", "decoder_dynamic", "decoder_timemux"))])
def test_counts_routed_at_run_time_round_trip(tmp_path, program):
    """A region's counts (`lastidx`, over the requests the run routes to it) go out as the
    reference's dynamic attention graph carries its regions' counts: every request's
    values in one MetadataGen, routed by a FlatPartition reading the same selector. Same
    totals and cycles; the decoders' barriers (Promote of what a source streams, after
    its leading 1 is flattened away where it streams it) come back too."""
    params, lens = ROUTED[program]
    own, back = _round_trip(tmp_path, program, params, {"kv_lens": lens})
    assert {k: back.totals[k] for k in TOTALS} == {k: own.totals[k] for k in TOTALS}
    assert (back.off_chip_bytes, back.flops) == (own.off_chip_bytes, own.flops)
    assert back.cycles == own.cycles
    g = ProgramGraph()
    g.ParseFromString((tmp_path / "graph.pb").read_bytes())
    by_id = {o.id: o for o in g.operators}
    routed = [o for o in g.operators if o.name.endswith("lastidx.routed")]
    # one per KV cache (K, V), shared by the regions; none where requests are dealt
    assert len(routed) == (0 if program == "decoder_static" else 2)
    for o in routed:
        m = o.flat_partition
        assert m.num_consumers == params["R"] and by_id[m.control_id].HasField("broadcast")
        source = by_id[m.input_id]
        if source.HasField("flatten"):  # the selector has no leading 1: nor do the values
            source = by_id[source.flatten.input_id]
        values = np.load(tmp_path / "graph.npy" / source.metadata_gen.npy_path)
        ntiles = -(-(lens + 1) // params["TILE_N"])  # ceil((len + 1) / TILE_N)
        if program != "attention_dynamic":
            ntiles = np.repeat(ntiles, params["HKV"])  # one request per (token, KV head)
        assert (values.reshape(-1) == ntiles - 1).all()  # the last tile's number


def test_the_dynamic_loop_and_the_sources_are_said_as_the_reference_says_them(tmp_path):
    """The EagerMerge whose selector closes the dispatch loop comes before the loop (a
    smaller id than the signals it merges), as in the reference's graph, and the import
    reads the loop back with the stream's length from its out_stream_shape. A source whose
    leading 1 would meet a stream without it goes out with a Flatten of the 1 right after
    it, which the import reads back as the source without the 1: no extra pipeline stage
    (a Flatten before each Partition cost attention_dynamic a cycle)."""
    params, lens = ROUTED["attention_dynamic"]
    own = stepc.load(REPO / "programs" / "attention_dynamic.step", **params)
    pb = _export(tmp_path, own, traces={"kv_lens": lens})
    g = ProgramGraph()
    g.ParseFromString(pb.read_bytes())
    by_id = {o.id: o for o in g.operators}
    merge = next(o for o in g.operators if o.name == "regs.done")
    assert min(merge.eager_merge.input_id_list) > merge.id
    assert [d.static for d in merge.out_stream_shape] == [params["B"]]
    flats = {by_id[o.flatten.input_id].name for o in g.operators if o.name.endswith(".flat")}
    assert {"q", "kn", "vn", "idx", "kv_lens"} <= flats
    imported = import_graph(str(pb))
    assert re.search(r"stream regs_done_sel : Strm<MultiHot<2>, 0>\[8\]", imported.text)
    # the shapes the exported program stated, the graph states: the import checks clean
    assert "assume shape(regs_keep) == [4]  # the graph's out_stream_shape" in imported.text
    assert not imported.compiled.diagnostics.items
    p = imported.compiled.typed.program
    assert not [n for n, node in p.nodes.items() if node.op == "Flatten" and
                p.nodes[p.in_edges(n)[0].src].op in ("LinearOffChipLoad", "External")]


def test_a_loop_no_eager_merge_closes_is_refused(tmp_path):
    prog = tmp_path / "p.step"
    prog.write_text("tensor X : f32[4, 64] input = random(seed=1)\n"
                    "stream fb : Strm<Tile<f32, [1, 64]>, 0>[4]\n"
                    "x = LinearOffChipLoad(X, tile=[1, 64], shape=[4])\n"
                    "y = Map(x, fb, fn=add)\n"
                    "fb = Map(y, fn=exp)\n")
    with pytest.raises(InteropError, match=r"the loop through `y`, `fb` is closed by no "
                       "EagerMerge whose selector output carries it back"):
        export_program(stepc.load(prog), str(tmp_path / "g.pb"), load_config("paper-eval"))


def test_every_operator_the_exporter_claims_is_a_stepc_operator_of_one_family():
    from stepc.interop.write import kv_cache, operators
    from stepc.interop.write.export import HANDLERS
    from stepc.ops import OPS
    assert set(HANDLERS) <= set(OPS)
    assert not set(operators.HANDLERS) & set(kv_cache.HANDLERS)
    assert len(HANDLERS) == len(operators.HANDLERS) + len(kv_cache.HANDLERS)


def test_an_operator_no_family_claims_is_refused_by_name(tmp_path):
    from stepc.interop.write.export import HANDLERS
    assert "Bufferize" not in HANDLERS
    prog = tmp_path / "p.step"
    prog.write_text("tensor X : bf16[64, 64] input\n"
                    "tensor Y : bf16[64, 64] output\n"
                    "x = LinearOffChipLoad(X, tile=[16, 16])\n"
                    "b = Bufferize(x, rank=1)\n"
                    "LinearOffChipStore(Streamify(b), Y)\n")
    out = tmp_path / "g.pb"
    with pytest.raises(InteropError) as e:
        export_program(stepc.load(prog), str(out), load_config("paper-eval"))
    assert str(e.value) == (f"{out}: operator `b` (Bufferize): the format has no operator "
                            "for it (yet)")


def test_counts_routed_by_a_selector_read_nowhere_else_are_refused(tmp_path):
    prog = tmp_path / "p.step"
    prog.write_text("tensor X : u64[4] input = arange\n"
                    "tensor IDS : u64[4] input = random(seed=3, high=2)\n"
                    "stream n : Strm<Tile<u64, [1, 1]>, 0>[4] = external(\"n\", mean=9, std=2)\n"
                    "p = Partition(n, SelectGen(IDS, n=2, onehot=true), rank=0, consumers=2, "
                    "dim=\"k\")\n"
                    "for r in 0..2 {\n    Sink(Map(p[r], fn=ceildiv_int(by=2, plus=1)))\n}\n")
    with pytest.raises(InteropError, match=r"\(Map\): the selector of `p`, which routes this "
                       "Map's input, has no other reader"):
        export_program(stepc.load(prog), str(tmp_path / "g.pb"), load_config("paper-eval"))


@pytest.mark.slow
@pytest.mark.parametrize("program", ["attention_interleaved", "attention_coarse",
                                     "attention_dynamic"])
def test_full_size_attention_round_trip(tmp_path, program):
    """At the program's own sizes and default KV lengths (B 64, R 4)."""
    own, back = _round_trip(tmp_path, program, {})
    assert {k: back.totals[k] for k in TOTALS} == {k: own.totals[k] for k in TOTALS}
    assert back.cycles == own.cycles


AZURE_B16 = REPO.parent / "shared" / "data" / "azure_kv_trace" / "b16" / \
    "conv_stdev0480_3799_3814.npy"


@pytest.mark.slow
@pytest.mark.skipif(not AZURE_B16.is_file(), reason="the Azure KV trace (../shared/data) is "
                    "absent")
def test_dynamic_attention_round_trip_on_the_azure_trace(tmp_path):
    """The reference's own dynamic attention point (B 16, MAXN 4672, the artifact's trace):
    the exported graph routes each request's counts as the reference's graph does and runs
    as the program (11,386 cycles, 4,190,208 off-chip bytes)."""
    lens = np.load(AZURE_B16)
    own, back = _round_trip(tmp_path, "attention_dynamic", {"B": 16, "MAXN": 4672},
                            {"kv_lens": lens})
    assert {k: back.totals[k] for k in TOTALS} == {k: own.totals[k] for k in TOTALS}
    assert back.off_chip_bytes == own.off_chip_bytes == 4_190_208
    assert back.cycles == own.cycles


def test_the_precomputed_counts_follow_the_trace(tmp_path):
    """Other KV lengths give other counts, and the graph runs as the program does on them;
    a stream whose data the program does not declare needs a trace, and one it declares
    is noted."""
    params, lens = TRACED["attention_interleaved"]
    own = stepc.load(REPO / "programs" / "attention_interleaved.step", **params)
    longer = lens + 1
    back = stepc.load(_export(tmp_path, own, traces={"kv_lens": longer}))
    assert back.simulate(timing_only=True).cycles == \
        own.simulate(timing_only=True, traces={"kv_lens": longer}).cycles
    assert (np.load(tmp_path / "graph.npy" / "ntiles.npy") ==
            -(-(longer + 1) // params["TILE_N"])).all()
    prog = tmp_path / "p.step"
    prog.write_text("stream n : Strm<Tile<u64, [1, 1]>, 0>[4] = external(\"n\")\n"
                    "Sink(Map(n, fn=ceildiv_int(by=2, plus=1)))\n")
    with pytest.raises(InteropError, match=r"over the external stream `n`, whose data the "
                       r"program does not declare.*pass its data: --trace n=LENS.npy"):
        export_program(stepc.load(prog), str(tmp_path / "g.pb"), load_config("paper-eval"))
    prog.write_text(prog.read_text().replace('external("n")', 'external("n", mean=9, std=2)'))
    notes: list[str] = []
    export_program(stepc.load(prog), str(tmp_path / "g.pb"), load_config("paper-eval"),
                   notes=notes)
    assert notes == ["`n`: no --trace, so the counts computed from it are those of the "
                     "program's default data (mean=9, std=2); pass --trace n=LENS.npy for "
                     "others"]


@pytest.mark.parametrize("program", sorted(ROUND_TRIP))
def test_export_then_import_keeps_totals_and_cycles(tmp_path, program):
    """The analysis bound at each run's dims (the routing the export wrote is the one the
    program's own run draws) and the cycles are the program's."""
    own, back = _round_trip(tmp_path, program, ROUND_TRIP[program])
    assert {k: back.totals[k] for k in TOTALS} == {k: own.totals[k] for k in TOTALS}
    assert (back.off_chip_bytes, back.flops) == (own.off_chip_bytes, own.flops)
    assert back.cycles == own.cycles


@pytest.mark.slow
@pytest.mark.parametrize("program", ["moe_static", "moe_dynamic", "moe_timemux",
                                     "moe_timemux_dynamic"])
def test_full_size_moe_round_trip(tmp_path, program):
    own, back = _round_trip(tmp_path, program, {})
    assert {k: back.totals[k] for k in TOTALS} == {k: own.totals[k] for k in TOTALS}
    assert back.cycles == own.cycles


def test_a_bf16_store_is_written_in_the_formats_two_byte_float_and_read_back_bf16(tmp_path):
    prog = tmp_path / "p.step"
    prog.write_text("tensor X : bf16[32, 64] input\ntensor Y : bf16[32, 64] output\n"
                    "x = LinearOffChipLoad(X, tile=[16, 64])\n"
                    "LinearOffChipStore(Map(x, x, fn=add), Y)\n")
    own = stepc.load(prog)
    pb = _export(tmp_path, own)
    g = ProgramGraph()
    g.ParseFromString(pb.read_bytes())
    kinds = {o.WhichOneof("op_type"): o for o in g.operators}
    assert kinds["off_chip_load"].off_chip_load.n_byte == 2
    assert kinds["binarymap"].binarymap.dtype_out.WhichOneof("type") == "f16"
    assert kinds["off_chip_store"].off_chip_store.dtype.WhichOneof("type") == "f16"
    text = import_graph(str(pb)).text
    assert not re.search(r"\bf16\b", text) and ": bf16[32, 64] output" in text
    assert stepc.load(pb).analyze().totals["off_chip_bytes"] == 2 * 32 * 64 * 2  # load, store


def test_promote_is_one_operator_again_after_the_round_trip(tmp_path):
    """The format says Promote as Reshape(chunk 1, add_outer_dim) + Flatten; the import
    reads the pair back as one Promote (it was two extra stages, 912 vs 910 cycles)."""
    own = stepc.load(REPO / "programs" / "moe_dynamic.step", **_MOE)
    pb = _export(tmp_path, own)
    g = ProgramGraph()
    g.ParseFromString(pb.read_bytes())
    pairs = [o for o in g.operators if o.HasField("reshape") and o.reshape.add_outer_dim]
    assert len(pairs) == _MOE["E"]
    back = stepc.load(pb)
    promotes = [n for n in back.typed.program.nodes.values() if n.op == "Promote"]
    assert len(promotes) == _MOE["E"] and back.operators == own.operators


def _shape(op) -> list:
    return [d.static if d.HasField("static") else "?" for d in op.out_stream_shape]


@pytest.mark.parametrize("program", ["swiglu", pytest.param("moe_timemux_dynamic",
                                                     marks=pytest.mark.slow)])
def test_out_stream_shape_is_the_shape_the_format_reads(tmp_path, program):
    """Each operation's out_stream_shape (newer schema) is the shape stepc's checker infers
    for the graph as the format reads it (the imported program): same rank, same static
    dims, a symbolic dim where it is symbolic."""
    params = {**ROUND_TRIP[program], "TB": 32} if program == "swiglu" else ROUND_TRIP[program]
    pb = _export(tmp_path, stepc.load(REPO / "programs" / f"{program}.step", **params))
    g = ProgramGraph()
    g.ParseFromString(pb.read_bytes())
    by_id = {o.id: o for o in g.operators}
    assert {o.parallel_factor for o in g.operators} == {1}
    back = stepc.load(pb)
    lines = import_graph(str(pb)).text.splitlines()
    checked = 0
    for (node, port), t in back.typed.types.items():
        n = back.typed.program.nodes[node]
        found = re.search(r"# op (\d+)$", lines[n.span.line - 1]) if n.span else None
        if port or not found or n.op in ("Sink", "LinearOffChipStore"):
            continue
        op = by_id[int(found.group(1))]
        if not op.out_stream_shape or n.op == "Reshape" and op.HasField("flatten"):
            continue
        bound = [int(d) if d.is_Integer else "?" for d in t.shape]
        assert _shape(op) == bound, (op.name, node)
        checked += 1
    assert checked >= 10


def test_promote_of_what_a_source_streams_round_trips(tmp_path):
    """The source's leading 1 is flattened away where it streams it, so the Promote reads a
    stream without it (the format's Promote pair takes rank-0 streams only)."""
    prog = tmp_path / "p.step"
    prog.write_text("tensor X : f32[16, 64] input\n"
                    "x = Flatten(LinearOffChipLoad(X, tile=[1, 64]), min=0, max=1)\n"
                    "Sink(Accum(Promote(x), fn=add, rank=1))\n")
    own = stepc.load(prog)
    pb = _export(tmp_path, own)
    g = ProgramGraph()
    g.ParseFromString(pb.read_bytes())
    by_id = {o.id: o for o in g.operators}
    flats = [o for o in g.operators if o.name.endswith(".flat")]
    assert len(flats) == 1 and by_id[flats[0].flatten.input_id].HasField("off_chip_load")
    back = stepc.load(pb)
    assert back.operators == own.operators
    assert back.simulate(timing_only=True).cycles == own.simulate(timing_only=True).cycles


# op kind -> the field of its output's DataType, and the fields of its inputs' (in order)
_OUT = {"off_chip_load": "dtype", "dyn_off_chip_load": "dtype", "random_off_chip_load": "dtype",
        "binarymap": "dtype_out", "unarymap": "dtype_b", "accum": "dtype_b",
        "binarymap_accum": "dtype_b", "flat_partition": "input_dtype",
        "flat_reassemble": "input_dtype"}
_IN = {"binarymap": ("dtype_a", "dtype_b"), "unarymap": ("dtype_a",), "accum": ("dtype_a",),
       "binarymap_accum": ("dtype_a",), "flat_partition": ("input_dtype",),
       "off_chip_store": ("dtype",), "dyn_off_chip_load": ("ref_dtype",)}
_MOVERS = ("flatten", "broadcast", "repeat_static", "reshape", "retile_streamify", "expand_ref",
           "eager_merge", "consumer_context")


@pytest.mark.parametrize("program, computed_bf16", [("moe_simple", True),
                                                    ("moe_dynamic", False)])
def test_every_edge_has_one_element_type_at_both_ends(tmp_path, program, computed_bf16):
    """The reference builds its channels by element type: what a producer says it makes is
    what each reader says it reads (2-byte computed tiles are f16 all the way)."""
    pb = _export(tmp_path, stepc.load(REPO / "programs" / f"{program}.step",
                                      **ROUND_TRIP[program]))
    g = ProgramGraph()
    g.ParseFromString(pb.read_bytes())
    ops = {o.id: o for o in g.operators}

    def made(op) -> str | None:
        kind = op.WhichOneof("op_type")
        field = _OUT.get(kind, "dtype" if kind in _MOVERS else None)
        return getattr(getattr(op, kind), field).WhichOneof("type") if field else None

    checked = 0
    for op in g.operators:
        kind = op.WhichOneof("op_type")
        m = getattr(op, kind)
        fields = _IN.get(kind, ("dtype",) if kind in _MOVERS else ())
        if not fields:
            continue
        ids = [m.input_id1, m.input_id2] if kind in ("binarymap", "binarymap_accum") else \
            [m.ref_id] if kind == "dyn_off_chip_load" else \
            list(m.input_id_list) if kind == "eager_merge" else [m.input_id]
        for field, src in zip(fields, ids):
            said = made(ops[src])
            if said is not None:
                assert getattr(m, field).WhichOneof("type") == said, (op.name, field)
                checked += 1
    assert checked > 20
    assert ("f16" in {made(o) for o in g.operators}) == computed_bf16  # moe_dynamic: f32 sums


def _stock_program_graph():
    """ProgramGraph as a reader of the plain schema builds it: without stepc's fields."""
    from google.protobuf import descriptor_pool, message_factory

    from stepc.interop import schema
    fd = schema._file()
    op = next(m for m in fd.message_type if m.name == "Operation")
    keep = [f for f in op.field if f.number < 9000]
    del op.field[:]
    op.field.extend(keep)
    pool = descriptor_pool.DescriptorPool()
    return message_factory.GetMessages([fd], pool=pool)[f"{schema.PACKAGE}.ProgramGraph"]


@pytest.mark.parametrize("knob, said", [("depth=4", [4]), ("depth=[3]", [3]),
                                        ("depth=[2, 5]", [2, 5])])
def test_fifo_depths_go_in_stepcs_extension_fields_and_come_back(tmp_path, knob, said):
    """Operation fields 9001 (FIFO depth per input) and 9002 (write buffer depth): a reader
    of the plain schema parses the graph and skips them; stepc's import reads them back."""
    prog = tmp_path / "p.step"
    prog.write_text("tensor X : f32[64, 64] input\n"
                    "x = LinearOffChipLoad(X, tile=[16, 64])\n"
                    f"Sink(Map(x, x, fn=add, {knob}))\n")
    pb = _export(tmp_path, stepc.load(prog))
    g = ProgramGraph()
    g.ParseFromString(pb.read_bytes())
    add = next(o for o in g.operators if o.HasField("binarymap"))
    assert list(add.stepc_fifo_depth) == said and add.stepc_buffer_depth == 0
    stock = _stock_program_graph()()
    stock.ParseFromString(pb.read_bytes())
    plain = next(o for o in stock.operators if o.HasField("binarymap"))
    assert plain.binarymap.input_id1 == add.binarymap.input_id1 and \
        not hasattr(plain, "stepc_fifo_depth")
    back = stepc.load(pb)
    node = next(n for n in back.typed.program.nodes.values() if n.op == "Map")
    assert node.attrs["depth"] == (said[0] if len(said) == 1 else said)


def test_a_write_buffer_depth_comes_back_and_moves_the_on_chip_bytes(tmp_path):
    prog = tmp_path / "kv.step"
    prog.write_text(_KV.replace("Sink(RandomOffChipStore(waddr, kn, KOUT))",
                                "Sink(RandomOffChipStore(waddr, kn, KOUT, buffer_depth=4))"))
    own = stepc.load(prog)
    pb = _export(tmp_path, own, traces={"ntiles": np.array([2, 3, 1, 4])})
    g = ProgramGraph()
    g.ParseFromString(pb.read_bytes())
    assert [o.stepc_buffer_depth for o in g.operators if o.stepc_buffer_depth] == [4]
    back = stepc.load(pb)
    assert back.analyze().totals["on_chip_bytes"] == own.analyze().totals["on_chip_bytes"]
    prog.write_text(_KV)
    assert stepc.load(prog).analyze().totals["on_chip_bytes"] != \
        back.analyze().totals["on_chip_bytes"]


def test_the_import_refuses_a_replicated_operator(tmp_path):
    pb = _export(tmp_path, stepc.load(REPO / "programs" / "swiglu.step",
                                      **ROUND_TRIP["swiglu"]))
    g = ProgramGraph()
    g.ParseFromString(pb.read_bytes())
    g.operators[0].parallel_factor = 2
    pb.write_bytes(g.SerializeToString())
    with pytest.raises(InteropError, match=r"operator 0 \(`[^`]+`\): parallel_factor 2: stepc "
                       "runs each operator once"):
        import_graph(str(pb))


def test_the_export_command_refuses_with_exit_1_and_writes_nothing(tmp_path):
    from click.testing import CliRunner

    from stepc.cli import main
    prog = tmp_path / "p.step"
    prog.write_text("tensor X : u64[4, 1] input = arange\n"
                    "x = LinearOffChipLoad(X, tile=[1, 1])\n"
                    "Sink(Map(x, fn=ceildiv_int(by=2, plus=1)))\n")
    out = tmp_path / "out"
    out.mkdir()
    r = CliRunner().invoke(main, ["export", str(prog), "-o", str(out / "g.pb")])
    assert r.exit_code == 1 and "error[E0005]" in r.output and "ceildiv_int" in r.output
    assert "over a stream computed by `x`" in r.output
    assert "Traceback" not in r.output and list(out.iterdir()) == []


_KV = """
param B = 4
param TILE_N = 8
param HEAD_DIM = 16
param RO = 64 // TILE_N

tensor K    : bf16[B * 64, HEAD_DIM] input = random(seed=1)
tensor KOUT : bf16[B * 64, HEAD_DIM] output
tensor KNEW : bf16[B, HEAD_DIM] input = random(seed=2)
tensor IDX  : u64[B] input = arange

stream ntiles : Strm<Tile<u64, [1, 1]>, 0>[B] = external("ntiles")

idx   = MetadataGen(IDX)
addr  = FlatMap(Zip(idx, ntiles), fn=cache_read_addr(row_offset=RO))
raw   = RandomOffChipLoad(addr, K, tile=[TILE_N, HEAD_DIM])
last  = FlatMap(ntiles, fn=filter_last_tile)
assume shape(last) == shape(raw)
part  = Partition(raw, last, rank=0, consumers=2, dim="t")
kn    = LinearOffChipLoad(KNEW, tile=[1, HEAD_DIM], shape=[B])
waddr = Map(idx, ntiles, fn=cache_write_addr(row_offset=RO))
Sink(RandomOffChipStore(waddr, kn, KOUT))
Sink(part[0])
Sink(part[1])
Sink(Accum(raw, fn=signal_req_all_read, rank=1))
"""


def test_integer_streams_and_the_kv_cache_operators_round_trip(tmp_path):
    """MetadataGen (a tensor's and an external stream's integers), CacheReadAddrGen (the
    Zip goes with it), FilterLastTile, cache_write_addr, RandomOffChipStore and
    signal_req_all_read, as the reference's attention graphs use them."""
    prog = tmp_path / "kv.step"
    prog.write_text(_KV)
    own = stepc.load(prog)
    lens = np.array([2, 3, 1, 4])
    out = tmp_path / "graph.pb"
    data, files = export_program(own, str(out), load_config("paper-eval"), {"ntiles": lens})
    assert sorted(files) == ["idx.npy", "ntiles.npy"] and (files["ntiles.npy"] == lens).all()
    (tmp_path / "graph.npy").mkdir()
    for name, arr in files.items():
        np.save(tmp_path / "graph.npy" / name, arr)
    out.write_bytes(data)
    g = ProgramGraph()
    g.ParseFromString(data)
    kinds = [o.WhichOneof("op_type") for o in g.operators]
    assert kinds.count("metadata_gen") == 2 and "cache_read_addr_gen" in kinds
    assert len(g.operators) == own.operators - 1  # the Zip is inside CacheReadAddrGen
    mine = own.simulate(timing_only=True, traces={"ntiles": lens})
    back = stepc.load(out).simulate(timing_only=True)
    assert {k: back.totals[k] for k in TOTALS} == {k: mine.totals[k] for k in TOTALS}
    assert back.cycles == mine.cycles


def test_a_selectgen_of_a_tensor_routes_as_before(tmp_path):
    prog = tmp_path / "sel.step"
    prog.write_text("tensor X : f32[8, 64] input = random(seed=1)\n"
                    "tensor IDS : u64[8] input = random(seed=3, high=4)\n"
                    "x = LinearOffChipLoad(X, tile=[1, 64])\n"
                    "p = Partition(x, SelectGen(IDS, n=4, onehot=true), rank=1, consumers=4, "
                    "dim=\"n\")\n"
                    "for e in 0..4 {\n    Sink(Map(p[e], fn=exp))\n}\n")
    own = stepc.load(prog)
    pb = _export(tmp_path, own)
    g = ProgramGraph()
    g.ParseFromString(pb.read_bytes())
    assert sum(o.HasField("select_gen") for o in g.operators) == 1
    mine, back = own.simulate(timing_only=True), stepc.load(pb).simulate(timing_only=True)
    assert {k: back.totals[k] for k in TOTALS} == {k: mine.totals[k] for k in TOTALS}
    assert back.cycles == mine.cycles
