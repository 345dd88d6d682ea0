"""Figure 17's reproduction (stepc/reproduction/experiments/fig17.toml): the static baselines'
MoE tiles are chosen from Figure 9's results, Figure 9 runs first when it was not asked for,
and the report puts the paper's eight numbers beside stepc's with the assumptions."""

import copy
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import stepc.api
import stepc.reproduction.run as rp
from stepc.cli import main
from stepc.measure import finish_cycles
from stepc.reproduction.claims import PLACEHOLDER, fill_measured
from stepc.reproduction.spec import SpecError, check_claims, choose, expand_spec, load_spec
from stepc.sim.run import OpStats

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data"
SMALL_LAYER = {"L": 1, "B": 8, "R": 2, "D": 64, "HQ": 4, "HKV": 2, "HEAD_DIM": 32,
               "TILE_P": 32, "F": 64, "TILE_F": 32, "E": 4, "TOPK": 2, "MAXN": 256, "MR": 2}
SMALL_MOE = {"B": 8, "D": 64, "F": 64, "TILE_F": 32, "E": 4, "K": 2}
LENS = {"batch": 8, "synthetic": {"kind": "kv_lengths", "mean": 60, "max_len": 200},
        "windows": [{"label": "med", "file": "absent.npy", "std": 30, "seed": 3}]}


def _record(tag: str, tile, cycles: int, on_chip: int, on_demand: int | None = None) -> dict:
    return {"tag": tag, "status": "ok", "params": {"TILE_N": tile} if tile else {},
            "cycles": cycles, "on_chip_bytes": on_chip,
            "on_chip_bytes_on_demand": on_chip if on_demand is None else on_demand}


def test_matched_tiles_are_the_front_points_closest_to_dynamic_along_each_axis():
    spec = {"choose": {
        "mem": {"figure": "9", "static": "s", "dynamic": "d", "param": "TILE_N",
                "axis": "memory"},
        "perf": {"figure": "9", "static": "s", "dynamic": "d", "param": "TILE_N",
                 "axis": "performance"}}}
    records = [_record("s", 8, 1000, 100), _record("s", 16, 700, 200),
               _record("s", 24, 800, 300),  # dominated by tile 16: never chosen
               _record("s", 32, 450, 400), _record("s", 64, 300, 800),
               _record("d", None, 420, 900, on_demand=190)]
    chosen, lines = choose(spec, {"9": records})
    # on demand 190: tile 16's 200 is closest (tile 24, 300, is off the front);
    # cycles 420: tile 32's 450 is closest in ratio (tile 64's 300 is 1.4x away)
    assert chosen == {"mem": 16, "perf": 32}
    assert "TILE_N = 16" in lines[0] and "8, 16, 32, 64" in lines[0]
    records[-1] = {**records[-1], "status": "error", "error": "boom"}
    with pytest.raises(SpecError, match="boom"):
        choose(spec, {"9": records})


def test_a_param_naming_no_choice_is_refused():
    spec = copy.deepcopy(load_spec("17"))
    spec["sweep"][0]["params"]["MOE_TILE"] = "@nowhere"
    with pytest.raises(SpecError, match=r"no `\[choose.nowhere\]`"):
        expand_spec(spec, None, "ref")


def _small(figure: str) -> dict:
    """The figure's spec at toy sizes with synthetic traces (a few seconds a point)."""
    spec = copy.deepcopy(REAL_SPEC(figure))
    for sw in spec["sweep"]:
        small = SMALL_MOE if figure == "9" else SMALL_LAYER
        keep = {k: v for k, v in sw.get("params", {}).items() if str(v).startswith("@")}
        sw["params"] = {**{k: v for k, v in small.items()
                           if k != "MR" or "timemux" in sw["program"]}, **keep}
        if "grid" in sw:
            sw["grid"] = {"TILE_N": [2, 4, 8]}
        sw["trace"] = {"kv_lens": "@lens"} if figure == "17" else {}
    if figure == "17":
        spec["trace_set"] = {"lens": LENS}
    return spec


REAL_SPEC = load_spec


@pytest.mark.slow  # an experiment check: Figure 17 (and 9) end to end
def test_reproduce_17_chooses_from_figure_9_and_reports_the_eight_numbers(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setattr(rp, "load_spec", _small)
    done = list(stepc.api.reproduce(["17"], None, str(tmp_path), jobs=2))
    assert len(done) == 1 and done[0].failed_points == 0, done
    assert (tmp_path / "fig9" / "results.jsonl").is_file()  # kept for `reproduce 9`
    assert not (tmp_path / "fig9" / "report.md").exists()  # not asked for
    report = Path(done[0].report).read_text()
    for name in ("qwen_memory", "qwen_performance", "mixtral_memory", "mixtral_performance"):
        assert f"- `{name}`: TILE_N = " in report
    for paper in ("| 1.27 |", "| 1.15 |", "| 0.69 |", "| 0.54 |", "| 0.2 |", "| 0.88 |",
                  "| 1.05 |", "| 1.14 |"):
        assert paper in report, paper
    assert done[0].reproduced + done[0].not_reproduced == 10
    why = report.split("Why these claims are not reproduced")[-1].split("Measured, with")[0]
    assert "n/a" not in why and "{" not in why  # every measured reason filled in
    assert "Assumptions (what the paper does not pin down):" in report
    assert "Layer count" in report and "QKV tiling" in report
    # the static points ran at the chosen tiles
    chosen = {line.split("`")[1]: int(line.split("TILE_N = ")[1].split()[0])
              for line in report.splitlines() if line.startswith("- `")
              and "TILE_N = " in line}
    rows = [r for r in report.splitlines() if r.startswith("| qwen_memory |")]
    assert f"MOE_TILE={chosen['qwen_memory']}" in rows[0]
    # a second run reuses every point of both figures
    again = list(stepc.api.reproduce(["9", "17"], None, str(tmp_path), jobs=2))
    assert [d.simulated for d in again] == [0, 0]
    assert (tmp_path / "fig9" / "report.md").is_file()


@pytest.mark.slow
def test_reproduce_17_with_the_papers_traces(tmp_path):
    if not (DATA / "expert_routing").is_dir() or not (DATA / "azure_kv_trace").is_dir():
        pytest.skip(f"no paper traces under {DATA} (../shared/data is absent)")
    r = CliRunner().invoke(main, ["reproduce", "17", "--data", str(DATA), "--out",
                                  str(tmp_path), "-j", "2"])
    assert r.exit_code == 0, r.output
    report = (tmp_path / "fig17" / "report.md").read_text()
    # the direction of the paper's result: the optimised layer is the fastest and smallest
    for claim in ("is the fastest of the three", "uses less on-chip memory than each baseline"):
        row = next(line for line in report.splitlines() if claim in line)
        assert row.endswith("| reproduced |"), row


def test_every_missable_claim_states_a_measured_reason():
    """Each speedup and compute claim's quirk (shown when it misses) quotes numbers of the
    run itself (`{expr}` placeholders over the points: stage cycles, allocations), and
    those expressions check."""
    spec = load_spec("17")
    assert check_claims(spec) == []
    judged = [c for c in spec["claim"] if not isinstance(c["paper"], str)
              and (".cycles" in c["value"] or "allocated_compute" in c["value"])]
    assert len(judged) == 5
    for c in judged:
        assert PLACEHOLDER.search(c["quirk"]), c["text"]


def test_measured_reasons_and_milestones_fill_from_records():
    ops = [OpStats("done[1].qkv.y", "Map", 5, 40, 0), OpStats("done[1].qkv", "Accum", 1, 42, 0),
           OpStats("done[1].qkvx", "Map", 1, 99, 0), OpStats("done[1].att.a", "Map", 1, 70, 0)]
    assert finish_cycles(ops, {"qkv": "done[1].qkv", "att": "done[1].att", "no": "x"}) == \
        {"qkv": 42, "att": 70, "no": None}
    recs = [{"tag": "a", "status": "ok", "params": {}, "cycles": 100,
             "finished": {"qkv": 42, "att": 70}}]
    text = "MoE {a.cycles - a.finished_att:,.0f} cycles, {a.finished_qkv / a.cycles:.0%}"
    assert fill_measured(text, recs) == "MoE 30 cycles, 42%"
    assert fill_measured("{a.finished_nothing}", recs) == "n/a"


def _lock_step_bounds(tiles: list[int], regions: int) -> tuple[float, float]:
    """Interleaved attention's bounds over the balanced time sum(tiles) / regions: lock-step
    (each round of `regions` tokens as long as its longest) and the round-robin split alone
    (the busiest region's share)."""
    balanced = sum(tiles) / regions
    rounds = sum(max(tiles[i:i + regions]) for i in range(0, len(tiles), regions))
    busiest = max(sum(tiles[r::regions]) for r in range(regions))
    return rounds / balanced, busiest / balanced


def test_lock_step_bounds_quoted_in_the_report_are_the_traces():
    """The report quotes two properties of Figure 17's KV window (no run measures them):
    recompute them, in KV tiles ceil((len + 1) / 32) over R = 4 regions, from the trace."""
    trace = DATA / "azure_kv_trace" / "b64" / "conv_stdev0995_3123_3186.npy"
    if not trace.is_file():
        pytest.skip(f"no KV trace {trace.name} (../shared/data is absent)")
    lens = np.load(trace).astype(int).ravel().tolist()
    tiles = [-(-(n + 1) // 32) for n in lens]
    lock, split = _lock_step_bounds(tiles, 4)
    spec = REPO / "stepc" / "reproduction" / "experiments" / "fig17.toml"
    text = " ".join(spec.read_text().split())
    docs = " ".join((REPO / "docs" / "reproduce.md").read_text().split())
    quoted = f"is {lock:.2f}x the balanced time and the round-robin split alone {split:.2f}x"
    assert text.count(quoted) == 3, quoted
    assert f"is {lock:.2f}x the balanced time, the round-robin split alone {split:.2f}x" in docs


def test_lock_step_bounds_of_a_small_batch():
    assert _lock_step_bounds([1, 3, 3, 1], 2) == (1.5, 1.0)    # balanced split, rounds of 3
    assert _lock_step_bounds([1, 3, 1, 3], 2) == (1.5, 1.5)    # region 1 gets both 3s
