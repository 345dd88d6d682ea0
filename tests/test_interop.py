"""`stepc import` and `.pb` inputs: the reference toolchain's STeP IR graphs read as .step
programs, checked against the artifact frontend's own numbers (../shared/data/stepir)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import stepc
from stepc.cli import main
from stepc.frontend import import_graph_file as import_graph
from stepc.interop.read.reader import InteropError
from stepc.interop.schema import ProgramGraph

REPO = Path(__file__).resolve().parents[1]
GRAPHS = REPO.parent / "shared" / "data" / "stepir" / "graphs"
needs_graphs = pytest.mark.skipif(not GRAPHS.is_dir(),
                                  reason="the STeP IR corpus (../shared/data/stepir) is absent")


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)
    except TypeError:  # click >= 8.2 keeps stderr apart already
        return CliRunner()


def _meta(name: str) -> dict:
    return json.loads((GRAPHS / f"{name}.meta.json").read_text())


@needs_graphs
@pytest.mark.parametrize("pb", sorted(p.name for p in GRAPHS.glob("*.pb")) if GRAPHS.is_dir()
                         else [])
def test_schema_reads_and_rewrites_every_graph_byte_for_byte(pb):
    raw = (GRAPHS / pb).read_bytes()
    g = ProgramGraph()
    g.ParseFromString(raw)
    assert g.SerializeToString() == raw
    assert len(g.operators) == _meta(pb[:-3])["n_operators"]


@needs_graphs
@pytest.mark.parametrize("name", ["swiglu_hdl_b16_i64", "swiglu_hdl_b64_i256"])
def test_swiglu_graphs_check_clean_and_cost_what_the_artifact_says(name):
    prog = stepc.load(GRAPHS / f"{name}.pb")
    assert prog.diagnostics == []
    assert prog.operators == _meta(name)["n_operators"]
    totals = prog.analyze().totals
    meta = _meta(name)
    assert totals["off_chip_bytes"] == meta["off_chip_traffic_bytes"]
    assert totals["on_chip_bytes"] == meta["on_chip_requirement_bytes"]


@needs_graphs
@pytest.mark.parametrize("name, tb, ti", [("swiglu_hdl_b16_i64", 16, 64),
                                          ("swiglu_hdl_b64_i256", 64, 256)])
def test_swiglu_graphs_simulate_like_the_bundled_program(name, tb, ti):
    """The same cycles as swiglu.step at the graph's tiles, which are the reference
    simulator's published cycles for that point (Figure 8's data, when it is here)."""
    import csv
    graph = stepc.load(GRAPHS / f"{name}.pb").simulate(hw="hdl-validation", timing_only=True)
    own = stepc.load(REPO / "programs" / "swiglu.step", TB=tb, TI=ti).simulate(
        hw="hdl-validation", timing_only=True)
    assert graph.cycles == own.cycles
    published = REPO.parent / "shared" / "data" / "fig8" / "swiglu_paper_sim.csv"
    if published.is_file():
        with published.open() as f:
            rows = {(int(r["tile_b"]), int(r["tile_i"])): int(r["sim_cycles"])
                    for r in csv.DictReader(f)}
        assert graph.cycles == rows[(tb, ti)]


@needs_graphs
def test_imported_text_is_formatted_named_and_traced_to_op_ids():
    from stepc.grammar.format import format_source
    text = import_graph(str(GRAPHS / "swiglu_hdl_b16_i64.pb")).text
    assert format_source(text) == text
    assert "binary_map_accum_27 = Accum(broadcast_35[0], off_chip_load_25, fn=matmul" in text
    assert "# op 27" in text and "# op 35" in text


@needs_graphs
def test_import_command_writes_the_program_and_keeps_existing_files(tmp_path):
    out = tmp_path / "sw.step"
    r = _runner().invoke(main, ["import", str(GRAPHS / "swiglu_hdl_b16_i64.pb"), "-o",
                                str(out)])
    assert r.exit_code == 0, r.output
    assert stepc.load(out).analyze().totals["off_chip_bytes"] == 6_881_280
    r = _runner().invoke(main, ["import", str(GRAPHS / "swiglu_hdl_b16_i64.pb"), "-o",
                                str(out)])
    assert r.exit_code == 2 and "--force" in r.stderr


# ------------------------------------------------------------------ malformed graphs
def _graph(*ops) -> bytes:
    g = ProgramGraph(name="t")
    for op in ops:
        g.operators.add().CopyFrom(op)
    return g.SerializeToString()


def _load_op(id_: int, name: str = ""):
    from stepc.interop.schema import Operation
    op = Operation(id=id_, name=name or f"OffChipLoad_{id_}")
    m = op.off_chip_load
    m.tensor_shape_tiled[:] = [4, 1]
    m.stride[:] = [1, 1]
    m.out_shape_tiled[:] = [4, 1]
    m.tile_row, m.tile_col, m.n_byte = 16, 64, 4
    m.dtype.f32.SetInParent()
    return op


def _flatten_op(id_: int, src: int):
    from stepc.interop.schema import Operation
    op = Operation(id=id_, name=f"Flatten_{id_}")
    op.flatten.input_id, op.flatten.max_rank = src, 1
    op.flatten.dtype.f32.SetInParent()
    return op


def _check(tmp_path, data: bytes, name: str = "g.pb"):
    path = tmp_path / name
    path.write_bytes(data)
    return _runner().invoke(main, ["check", str(path)])


def test_a_small_graph_with_id_zero_and_operators_out_of_order_checks(tmp_path):
    r = _check(tmp_path, _graph(_flatten_op(3, 0), _load_op(0)))
    assert r.exit_code == 0, r.stderr


def test_truncated_file_is_a_located_error(tmp_path):
    data = _graph(_load_op(0), _flatten_op(1, 0))
    r = _check(tmp_path, data[:-7])
    assert r.exit_code == 1 and "g.pb" in r.stderr and "truncated" in r.stderr
    assert "Traceback" not in r.output + r.stderr


def test_unknown_op_number_names_the_operator_and_the_field(tmp_path):
    op = bytes([0x0A, 1, ord("X"), 0x10, 5]) + bytes([0xF2, 0x06, 0])  # field 110, empty
    data = bytes([0x12, len(op)]) + op
    r = _check(tmp_path, data)
    assert r.exit_code == 1 and "unknown op field number 110" in r.stderr, r.stderr


def test_dangling_input_id_names_the_reader(tmp_path):
    r = _check(tmp_path, _graph(_load_op(0), _flatten_op(1, 42)))
    assert r.exit_code == 1
    assert "operator 1 (`Flatten_1`): reads operator id 42" in r.stderr


def test_a_cycle_is_refused_with_its_operators(tmp_path):
    r = _check(tmp_path, _graph(_flatten_op(1, 2), _flatten_op(2, 1)))
    assert r.exit_code == 1 and "cycle" in r.stderr and "Flatten_1" in r.stderr


def test_missing_selector_file_is_named(tmp_path):
    from stepc.interop.schema import Operation
    sel = Operation(id=2, name="SelectGen_2")
    sel.select_gen.npy_path, sel.select_gen.is_multihot = "SelectGen_2.npy", True
    r = _check(tmp_path, _graph(sel))
    assert r.exit_code == 1 and "SelectGen_2.npy, which is missing" in r.stderr


def test_per_consumer_switch_cycles_that_differ_are_refused(tmp_path):
    import numpy as np

    from stepc.interop.schema import Operation
    np.save(tmp_path / "sel.npy", np.eye(2, dtype=np.int64)[[0, 1, 0, 1]])
    sel = Operation(id=2, name="SelectGen_2")
    sel.select_gen.npy_path, sel.select_gen.is_multihot = "sel.npy", True
    part = Operation(id=3, name="FlatPartition_3")
    p = part.flat_partition
    p.input_id, p.control_id, p.num_consumers = 1, 2, 2
    p.switch_cycles[:] = [1, 3]
    r = _check(tmp_path, _graph(_load_op(0), _flatten_op(1, 0), sel, part))
    assert r.exit_code == 1 and "switch_cycles differ" in r.stderr and "FlatPartition_3" in r.stderr
    p.switch_cycles[:] = [3, 3]
    assert "switch_cycles=3" in import_graph(_write(tmp_path, _graph(
        _load_op(0), _flatten_op(1, 0), sel, part))).text


def _write(tmp_path, data: bytes) -> str:
    path = tmp_path / "w.pb"
    path.write_bytes(data)
    return str(path)


def test_import_refuses_an_unreadable_graph_without_a_traceback(tmp_path):
    r = _runner().invoke(main, ["import", str(tmp_path / "absent.pb")])
    assert r.exit_code == 2 and "cannot read" in r.stderr  # the file: a usage error
    with pytest.raises(InteropError):
        import_graph(str(tmp_path / "absent.pb"))


# ------------------------------------------------------------------ the MoE graphs
@needs_graphs
@pytest.mark.slow
@pytest.mark.parametrize("name", ["qwen3_moe_b64_static16", "qwen3_moe_b64_dyntile",
                                  "qwen3_moe_b64_timeshare_r16"])
def test_moe_graphs_cost_what_the_artifact_says(name):
    meta = _meta(name)
    totals = stepc.load(GRAPHS / f"{name}.pb").analyze().totals
    assert totals["off_chip_bytes"] == meta["off_chip_traffic_bytes"]
    assert totals["on_chip_bytes"] == meta["on_chip_requirement_raw_bytes"]
    assert totals["on_chip_bytes_on_demand"] == meta["on_chip_requirement_bytes(sub)"]


# ------------------------------------------------------------------ external file= data
_ROUTED = """
param E = 4
tensor X : bf16[8, 64] input = random(seed=1)
stream route : Strm<MultiHot<E>, 1>[1, 8] = external("route", file="{file}"{extra})
x = LinearOffChipLoad(X, tile=[1, 64], stride=[0, 1, 1], shape=[1, 8, 1])
p = Partition(Flatten(x, min=0, max=1), route, rank=0, consumers=E, dim="n")
for e in 0..E {{
    Sink(p[e])
}}
"""


def _routed(tmp_path, name: str, arr, extra: str = "") -> dict:
    import numpy as np
    np.save(tmp_path / f"{name}.npy", np.asarray(arr))
    prog = tmp_path / f"{name}.step"
    prog.write_text(_ROUTED.format(file=f"{name}.npy", extra=extra))
    return stepc.load(prog).analyze().bindings


def test_external_file_data_binds_the_dims_it_decides(tmp_path):
    """`file=` (relative to the program) binds the per-target counts, and a different
    file binds different counts; `multihot=true` reads 0/1 rows, without the leading 1."""
    import numpy as np
    ids = [0, 0, 1, 2, 0, 3, 3, 0]
    assert _routed(tmp_path, "a", ids) == {"n_0": 4, "n_1": 1, "n_2": 1, "n_3": 2}
    assert _routed(tmp_path, "b", [1] * 8)["n_1"] == 8
    rows = np.eye(4, dtype=np.int64)[ids]
    assert _routed(tmp_path, "c", rows, ", multihot=true") == {"n_0": 4, "n_1": 1, "n_2": 1,
                                                                 "n_3": 2}


def test_external_file_multihot_needs_zero_one_rows(tmp_path):
    import numpy as np
    with pytest.raises(stepc.InputError, match="multihot=true needs a 0/1 array"):
        _routed(tmp_path, "d", np.full((8, 4), 2), ", multihot=true")


# ------------------------------------------------------------------ export
@pytest.mark.parametrize("tb, ti", [(16, 64), (64, 256)])
def test_export_then_import_keeps_analysis_and_cycles(tmp_path, tb, ti):
    out = tmp_path / "sw.pb"
    r = _runner().invoke(main, ["export", str(REPO / "programs" / "swiglu.step"), "-D",
                                f"TB={tb}", "-D", f"TI={ti}", "--hw", "hdl-validation", "-o",
                                str(out)])
    assert r.exit_code == 0, r.stderr
    own = stepc.load(REPO / "programs" / "swiglu.step", TB=tb, TI=ti)
    back = stepc.load(out)
    assert back.analyze().totals == own.analyze().totals
    hw = "hdl-validation"
    assert back.simulate(hw=hw, timing_only=True).cycles == \
        own.simulate(hw=hw, timing_only=True).cycles


def test_export_refuses_what_the_format_cannot_say(tmp_path):
    prog = tmp_path / "p.step"
    prog.write_text("tensor X : u64[16, 1] input\ntensor Y : u64[16, 1] output\n"
                    "x = LinearOffChipLoad(X, tile=[1, 1])\n"
                    "LinearOffChipStore(Map(x, fn=ceildiv_int(by=4)), Y)\n")
    r = _runner().invoke(main, ["export", str(prog), "-o", str(tmp_path / "p.pb")])
    assert r.exit_code == 1 and "ceildiv_int" in r.stderr
    assert not (tmp_path / "p.pb").exists()


# ------------------------------------------------------------------ decode attention
@needs_graphs
def test_coarse_attention_graph_checks_clean_and_binds_its_kv_lengths():
    """The artifact reports 131072 * CacheReadAddrGen_15 + 167936 (its symbol a request's
    KV tile count); the graph's own metadata (491 tiles over 16 requests) binds it."""
    prog = stepc.load(GRAPHS / "decode_attn_qwen_b16_coarse.pb")
    assert [d for d in prog.diagnostics if d.severity.value == "error"] == []
    assert prog.analyze().totals["off_chip_bytes"] == 131072 * 491 // 16 + 167936


@needs_graphs
@pytest.mark.slow
def test_dynamic_attention_loop_is_read_and_costs_what_the_artifact_says():
    """The dispatch loop closes at EagerMerge_10 (made before the regions' signals that feed
    it): its selector becomes a declared feedback stream. The artifact's traffic is
    8192 * CacheReadAddrGen_k * num_req_region_r + 9216 * num_req_region_r (+ 20480) per
    region r (K read ids 39 + 37 r); stepc counts the K and V reads (ids 39 + 37 r and
    53 + 37 r) apart, 4096 bytes a tile each, and every request signals once (one count is
    16 less the others). The on-chip bytes are the artifact's 189,728 less, per region, the
    two things the file does not say (docs/interop.md): 4 x 25,600."""
    import sympy as sp
    prog = stepc.load(GRAPHS / "decode_attn_qwen_b16_dynamic.pb")
    assert prog.diagnostics == []
    assert prog.streams["eager_merge_sel_10"].type == "Strm<MultiHot<4>, 0>[16]"
    totals = prog.analyze().totals
    meta = _meta("decode_attn_qwen_b16_dynamic")
    regions = {}
    for k in range(4):
        c, n = sp.Symbol(f"CacheReadAddrGen_{39 + 37 * k}"), sp.Symbol(f"num_req_region{k}")
        regions[sp.Symbol(f"cache_read_addr_gen_{39 + 37 * k}_L")] = c
        regions[sp.Symbol(f"cache_read_addr_gen_{53 + 37 * k}_L")] = c
        regions[sp.Symbol(f"flat_partition_{42 + 37 * k}_0")] = n
    ours = sp.sympify(str(totals["off_chip_bytes"])).subs(regions)
    counts = [sp.Symbol(f"num_req_region{k}") for k in range(4)]
    gone = [n for n in counts if n not in ours.free_symbols]  # 16 less the others
    assert len(gone) == 1
    theirs = sp.sympify(meta["off_chip_traffic_expr"]).subs(
        gone[0], 16 - sum(n for n in counts if n != gone[0]))
    assert sp.expand(ours - theirs) == 0
    assert totals["on_chip_bytes"] == meta["on_chip_requirement_bytes"] - 4 * (24_576 + 1_024)


@needs_graphs
@pytest.mark.parametrize("graph, program, params", [
    pytest.param("decode_attn_qwen_b16_dynamic", "attention_dynamic.step",
                 {"B": 16, "MAXN": 4672}, marks=pytest.mark.slow),
    pytest.param("decode_attn_qwen_b16_coarse", "attention_coarse.step",
                 {"B": 16, "R": 1, "MAXN": 4672}, marks=pytest.mark.slow)])
def test_attention_graphs_simulate_like_the_bundled_programs(graph, program, params):
    """The graphs read the KV lengths of the artifact's trace from their own metadata files,
    the programs from the trace: the same traffic (the artifact's formula at the trace,
    4,190,208 bytes) and cycles within 0.1 % (measured: dynamic 11,384 against 11,386,
    coarse 40,435 against 40,440)."""
    trace = REPO.parent / "shared" / "data" / "azure_kv_trace" / "b16" / \
        "conv_stdev0480_3799_3814.npy"
    ran = stepc.load(GRAPHS / f"{graph}.pb").simulate(timing_only=True)
    own = stepc.load(REPO / "programs" / program, **params).simulate(
        traces={"kv_lens": str(trace)}, timing_only=True)
    assert ran.off_chip_bytes == own.off_chip_bytes == 4_190_208
    assert abs(ran.cycles - own.cycles) <= 0.001 * own.cycles


def _merge_op(id_: int, srcs: list[int], idxs: list[int]):
    from stepc.interop.schema import Operation
    op = Operation(id=id_, name=f"EagerMerge_{id_}")
    op.eager_merge.input_id_list[:] = srcs
    op.eager_merge.input_stream_idx_list[:] = idxs
    op.eager_merge.dtype.f32.SetInParent()
    return op


def test_a_loop_closed_by_an_eager_merge_becomes_a_declared_feedback_stream(tmp_path):
    """Rows routed by the selector of an EagerMerge that merges the routed rows (made before
    them, as the reference builds its dispatch loop): the selector is declared, as long as
    the rows it routes, and the fact about it follows its producer."""
    from stepc.interop.schema import Operation
    part = Operation(id=2, name="FlatPartition_2")
    p = part.flat_partition
    p.input_id, p.control_id, p.control_stream_idx, p.num_consumers = 6, 3, 1, 2
    p.switch_cycles[:] = [1, 1]
    outs = [_flatten_op(4, 2), _flatten_op(5, 2)]
    for i, f in enumerate(outs):
        f.flatten.stream_idx, f.flatten.max_rank = i, 0
    data = _graph(_load_op(0), _flatten_op(1, 0), part, _merge_op(3, [4, 5], [-1, -1]), *outs,
                  _flatten_op(6, 1))
    r = _check(tmp_path, data)
    assert r.exit_code == 0 and "warning" not in r.stderr, r.stderr
    text = import_graph(_write(tmp_path, data)).text
    assert "stream eager_merge_sel_3 : Strm<MultiHot<2>, 0>[4]" in text
    assert text.index("= EagerMerge([flatten_4, flatten_5])") < \
        text.index("assume shape(eager_merge_sel_3) == shape(flatten_6)")


def test_a_loop_through_an_eager_merge_data_output_is_refused_naming_the_output(tmp_path):
    """An EagerMerge made before its cyclic input closes a loop, but only its selector's
    type can be declared from the format."""
    flat = _flatten_op(2, 1)
    flat.flatten.stream_idx = 0
    r = _check(tmp_path, _graph(_load_op(0), _merge_op(1, [0, 2], [-1, -1]), flat))
    assert r.exit_code == 1 and "EagerMerge_1" in r.stderr, r.stderr
    assert "output 0 read before" in r.stderr, r.stderr
    # made after its cyclic input: not a loop the reference builds, so a plain cycle
    r = _check(tmp_path, _graph(_load_op(0), _merge_op(3, [0, 2], [-1, -1]), _flatten_op(2, 3)))
    assert r.exit_code == 1 and "no EagerMerge closes" in r.stderr, r.stderr


@needs_graphs
@pytest.mark.slow
def test_folded_import_of_a_moe_graph_has_loops_of_loops(monkeypatch, tmp_path):
    """The 16-region graph's per-expert statements of each region fold into one nest (a flat
    array filled at 8 r + e), which lets the 128 statements that read them fold into one
    loop; the program analyzes and simulates exactly as with one level of loops (measured:
    837,998 cycles both; unfolded, the statements in the graph's order, 842,340: see
    docs/interop.md)."""
    from stepc.interop.read import fold
    graph = str(GRAPHS / "qwen3_moe_b64_timeshare_r16.pb")
    text = import_graph(graph, str(tmp_path)).text
    assert "for e in 0..128 {" in text and "for e in 0..16 {" in text
    assert "RANDOM_OFF_CHIP_LOAD_438[e]" in text  # the regions' weights, stacked
    assert "for r in 0..16 {\n    for e in 0..8 {\n        retile_streamify_630[8 * r + e] = " \
        "FlatMap(flat_partition_614[r][e]" in text
    assert "binary_map_759 = Map(flat_partition_758[e], retile_streamify_630[e]" in text
    assert len(text.splitlines()) < 60
    (tmp_path / "folded.step").write_text(text)
    monkeypatch.setattr(fold, "_blocks", lambda sigs, run_at, i, n: 1)  # one level of loops
    flat = import_graph(graph, str(tmp_path)).text
    assert "for r in" not in flat and len(flat.splitlines()) > 300
    (tmp_path / "flat.step").write_text(flat)
    nested, flat = (stepc.load(tmp_path / f"{n}.step") for n in ("folded", "flat"))
    assert nested.analyze().totals == flat.analyze().totals
    assert nested.simulate(timing_only=True).cycles == flat.simulate(timing_only=True).cycles


@needs_graphs
@pytest.mark.slow
@pytest.mark.parametrize("name, program, params", [
    ("qwen3_moe_b64_static16", "moe_static.step", {"TILE_N": 16}),
    ("qwen3_moe_b64_dyntile", "moe_dynamic.step", {})])
def test_moe_graphs_simulate_within_one_percent_of_the_bundled_programs(name, program, params):
    """Measured: static 711,872 against 710,146 cycles (+0.24 %), dynamic 581,966 against
    581,965; the graphs read the routing from their own selector files, the programs from
    the paper's trace (the same routing)."""
    trace = REPO.parent / "shared" / "data" / "expert_routing" / "qwen_b64" / "032_012.npz"
    graph = stepc.load(GRAPHS / f"{name}.pb").simulate(hw="paper-eval", timing_only=True)
    own = stepc.load(REPO / "programs" / program, **params).simulate(
        hw="paper-eval", traces={"routing": str(trace)}, timing_only=True)
    assert abs(graph.cycles - own.cycles) <= 0.01 * own.cycles


def test_export_hw_fills_in_what_the_program_leaves_to_the_hardware(tmp_path):
    bws = {}
    for hw in ("paper-eval", "hdl-validation"):
        out = tmp_path / f"{hw}.pb"
        r = _runner().invoke(main, ["export", str(REPO / "programs" / "swiglu.step"), "--hw",
                                    hw, "-o", str(out)])
        assert r.exit_code == 0, r.stderr
        g = ProgramGraph()
        g.ParseFromString(out.read_bytes())
        bws[hw] = {o.unarymap.compute_bw for o in g.operators if o.HasField("unarymap")}
    assert bws == {"paper-eval": {1024}, "hdl-validation": {4096}}


_SMALL_MOE = {"E": 4, "B": 8, "K": 2, "D": 64, "F": 128, "TILE_F": 64}


@pytest.mark.slow  # the same round trips as tests/test_interop_export.py, through the CLI
@pytest.mark.parametrize("program, params, slack", [
    ("moe_static.step", {"TILE_N": 4}, 0),
    # Promote goes out as Reshape(add_outer_dim) + Flatten and comes back as one Promote
    ("moe_dynamic.step", {}, 0),
    ("moe_timemux.step", {"E": 8, "R": 2, "F": 96, "TILE_F": 48, "TILE_N": 4}, 0)])
def test_export_then_import_of_a_routed_moe(tmp_path, program, params, slack):
    import re

    import numpy as np
    out = tmp_path / "moe.pb"
    defines = [a for k, v in {**_SMALL_MOE, **params}.items() for a in ("-D", f"{k}={v}")]
    r = _runner().invoke(main, ["export", str(REPO / "programs" / program), *defines, "-o",
                                str(out)])
    assert r.exit_code == 0, r.stderr
    ids = np.nonzero(np.load(tmp_path / "moe.npy" / "route.npy"))[1].reshape(8, 2)
    own = stepc.load(REPO / "programs" / program, **{**_SMALL_MOE, **params})
    back = stepc.load(out)
    # the import keeps the program's statement order (stepc's field of the graph), which
    # decides which memory requests are served first: the per-expert statements come back
    # expert by expert, as written, not folded stage by stage into loops over the experts
    text = import_graph(str(out)).text
    graph = ProgramGraph()
    graph.ParseFromString(out.read_bytes())
    position = {i: k for k, i in enumerate(graph.stepc_statement_order)}
    said = [position[int(m)] for m in re.findall(r"# op (\d+)", text) if int(m) in position]
    assert said == sorted(said) and "for e in" not in text
    assert back.analyze().totals == own.analyze(traces={"routing": ids}).totals
    cycles = own.simulate(timing_only=True, traces={"routing": ids}).cycles
    assert abs(back.simulate(timing_only=True).cycles - cycles) <= slack


def test_checking_a_step_program_does_not_import_protobuf():
    import subprocess
    import sys
    code = ("import sys\nfrom click.testing import CliRunner\nfrom stepc.cli import main\n"
            f"r = CliRunner().invoke(main, ['check', {str(REPO / 'programs' / 'swiglu.step')!r}])\n"
            "assert r.exit_code == 0, r.output\n"
            "print('google.protobuf' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, timeout=120, check=False)
    assert out.stdout.strip() == "False", out.stderr


def test_a_field_the_schema_does_not_know_is_refused_not_dropped(tmp_path):
    inner = _load_op(0).off_chip_load.SerializeToString() + bytes([0xF8, 0x01, 7])  # #31 = 7
    op = bytes([0x0A, 13]) + b"OffChipLoad_0" + bytes([0x62, len(inner)]) + inner  # name, #12
    r = _check(tmp_path, bytes([0x12, len(op)]) + op)
    assert r.exit_code == 1 and "field number 31 of `off_chip_load`" in r.stderr, r.stderr


@needs_graphs
def test_an_accumulator_tile_the_shape_rules_contradict_is_refused(tmp_path):
    g = ProgramGraph()
    g.ParseFromString((GRAPHS / "swiglu_hdl_b16_i64.pb").read_bytes())
    op = next(o for o in g.operators if o.id == 27)
    op.binarymap_accum.tile_col = 32  # the graph's tiles make [16, 64]
    r = _check(tmp_path, g.SerializeToString())
    assert r.exit_code == 1 and "tile_col = 32" in r.stderr and "BinaryMapAccum_27" in r.stderr


def test_export_trace_is_the_selector_data_written(tmp_path):
    import numpy as np
    ids = np.array([[0, 1], [2, 3], [0, 2], [1, 3], [0, 1], [2, 3], [0, 3], [1, 2]])
    np.save(tmp_path / "ids.npy", ids)
    defines = [a for k, v in {**_SMALL_MOE, "TILE_N": 4}.items() for a in ("-D", f"{k}={v}")]
    r = _runner().invoke(main, ["export", str(REPO / "programs" / "moe_static.step"), *defines,
                                "--trace", f"routing={tmp_path / 'ids.npy'}", "-o",
                                str(tmp_path / "moe.pb")])
    assert r.exit_code == 0, r.stderr
    route = np.load(tmp_path / "moe.npy" / "route.npy")
    assert route.shape == (8, 4) and (np.nonzero(route)[1].reshape(8, 2) == ids).all()
