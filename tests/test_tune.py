"""`stepc tune`: the space, the stages' soundness and counts, agreement with an exhaustive
simulation, traces aggregation, Pareto fronts, the sampler and the command line (small
spaces and synthetic traces; the paper's layers are in benchmarks/bench_tune.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from stepc.cli import main
from stepc.explore.runner import read_results
from stepc.frontend import compile_file
from stepc.hw import load_config
from stepc.sim.run import simulate
from stepc.tune import Budget, Constraint, Objective, Space, TuneError, tune
from stepc.tune.search import kendall_tau
from stepc.tune.space import aggregate, parse_amount

REPO = Path(__file__).resolve().parent.parent
SWIGLU = str(REPO / "programs" / "swiglu.step")
MOE_STATIC = str(REPO / "programs" / "moe_static.step")
MOE_DYNAMIC = str(REPO / "programs" / "moe_dynamic.step")
SMALL_MOE = {"B": 16, "D": 64, "F": 128, "E": 4, "K": 2, "TILE_F": 64}


def _routing(tmp_path, seed: int, name: str) -> str:
    rng = np.random.default_rng(seed)
    ids = np.stack([rng.choice(4, size=2, replace=False, p=[0.55, 0.25, 0.15, 0.05])
                    for _ in range(16)])
    path = tmp_path / name
    np.save(path, ids.astype(np.int64))
    return str(path)


# ---------------------------------------------------------------- the space
def test_amounts_constraints_and_aggregates():
    assert parse_amount("64MiB") == 64 * 2**20
    assert parse_amount("400k") == 400_000 and parse_amount("1e6") == 10**6
    with pytest.raises(TuneError):
        parse_amount("64 parsecs")
    c = Constraint.parse("TILE_F <= F and F % TILE_F == 0")
    assert c.names == {"TILE_F", "F"}
    assert c.holds({"TILE_F": 64, "F": 128}) and not c.holds({"TILE_F": 96, "F": 128})
    with pytest.raises(TuneError, match="only integers"):
        Constraint.parse("__import__('os')")
    assert aggregate([1, 3, 2], "max") == 3 and aggregate([1, 3, 2], "mean") == 2
    assert aggregate([1, 2, 3, 4, 5], "p50") == 3
    with pytest.raises(TuneError):
        aggregate([1], "p200")


def test_relative_budgets_parse_and_refuse():
    b = Budget.parse("cycles", "1.05*min")
    assert b.factor == 1.05 and "1.05 x min" in b.text()
    assert Budget.parse("cycles<", "min*1.1").factor == 1.1
    assert b.resolved(1000).limit == pytest.approx(1050)
    with pytest.raises(TuneError, match="at least 1"):
        Budget.parse("cycles", "0.9*min")
    with pytest.raises(TuneError, match="minimise"):
        Budget.parse("compute_utilization", "1.1*min")
    half = Budget.parse("allocated_compute", "0.5*max")
    assert (half.factor, half.relative_to) == (0.5, "max") and "0.5 x max" in half.text()
    assert Budget.parse("on_chip_bytes<", "max*0.25").resolved(4000).limit == 1000
    with pytest.raises(TuneError, match="analysis metric"):
        Budget.parse("cycles", "0.5*max")
    with pytest.raises(TuneError, match=r"\(0, 1\]"):
        Budget.parse("allocated_compute", "2*max")


def test_a_param_a_program_lacks_is_not_its_dimension():
    space = Space(["a.step", "b.step"], {"TILE_N": [8, 16], "TILE_F": [32, 64]},
                  {"hbm.channels": ["16", "32"]})
    cands = list(space.candidates({"a.step": {"TILE_N", "TILE_F"}, "b.step": {"TILE_F"}}))
    assert len(cands) == 2 * 2 * 2 + 2 * 2
    assert space.size({"a.step": {"TILE_N", "TILE_F"}, "b.step": {"TILE_F"}}) == 12
    assert {c.params for c in cands if c.program == "b.step"} == {(("TILE_F", 32),),
                                                                   (("TILE_F", 64),)}
    assert all(len(c.sets) == 1 for c in cands)


def test_kendall_tau():
    assert kendall_tau([1, 2, 3], [10, 20, 30]) == 1.0
    assert kendall_tau([1, 2, 3], [30, 20, 10]) == -1.0
    assert kendall_tau([1], [1]) is None


# ---------------------------------------------------------------- the stages
def _exhaustive(space_tb, space_ti, hw="hdl-validation"):
    config = load_config(hw, ("hbm.model=ref",))
    cycles = {}
    for tb in space_tb:
        for ti in space_ti:
            typed = compile_file(SWIGLU, {"TB": tb, "TI": ti}).typed
            cycles[(tb, ti)] = simulate(typed, config, functional=False).cycles
    return cycles


def test_tune_finds_the_exhaustive_best_and_its_bounds_hold(tmp_path):
    tbs, tis = [32, 64], [64, 128, 256]
    truth = _exhaustive(tbs, tis)
    res = tune(Space([SWIGLU], {"TB": tbs, "TI": tis}), objectives=[Objective("cycles")],
               hw="hdl-validation", out=str(tmp_path / "t"), jobs=1)
    best = min(truth, key=truth.get)
    assert (res.winner.overrides["TB"], res.winner.overrides["TI"]) == best
    assert res.winner.confirmed["cycles"] == truth[best]
    st = res.stages
    assert st["space"] == st["candidates"] == 6
    assert st["confirmed"] + st["pruned_by_roofline"] + st["screened_out_by_fluid"] + \
        st["not_confirmed"] == 6
    assert st["confirmed"] < 6
    for s in res.candidates:  # the roofline bound never exceeds a simulated cycle count
        assert s.lower_bound("max") <= truth[(s.overrides["TB"], s.overrides["TI"])]
    # confirmed runs are sweep records: stepc plot and sweep --resume read them
    recs = read_results(str(tmp_path / "t" / "results.jsonl"))
    assert len(recs) == st["confirm_points_simulated"] and all("seal" in r for r in recs)


def test_budgets_where_and_infeasible_points_are_counted(tmp_path):
    space = Space([SWIGLU], {"TB": [32, 64], "TI": [64, 128, 256, 100]},
                  where=[Constraint.parse("TI <= 2 * TB")])
    res = tune(space, objectives=[Objective("cycles")],
               budgets=[Budget("on_chip_bytes", 500_000)], hw="hdl-validation",
               out=str(tmp_path / "t"), jobs=1)
    st = res.stages
    assert st["excluded_by_where"] == 4  # TI 128, 256 and 100 for TB 32; TI 256 for TB 64
    assert st["infeasible"] >= 1  # TI = 100 does not tile the hidden size
    assert st["over_budget_analysis"] >= 1
    assert res.winner.confirmed["on_chip_bytes"] <= 500_000
    assert sum(st[k] for k in ("excluded_by_where", "infeasible", "over_budget_analysis",
                               "analyzed")) == st["candidates"]


def test_no_schedule_within_budget(tmp_path):
    res = tune(Space([SWIGLU], {"TB": [64], "TI": [256]}), objectives=[Objective("cycles")],
               budgets=[Budget("on_chip_bytes", 10)], hw="hdl-validation",
               out=str(tmp_path / "t"), jobs=1)
    assert res.winner is None and res.stages["over_budget_analysis"] == 1


def test_a_cycles_budget_prunes_by_the_bound_and_after_simulation(tmp_path):
    args = dict(objectives=[Objective("on_chip_bytes")], hw="hdl-validation", jobs=1)
    space = Space([SWIGLU], {"TB": [16, 64], "TI": [256]})
    res = tune(space, budgets=[Budget("cycles", 1)], out=str(tmp_path / "a"), **args)
    assert res.winner is None and res.stages["over_budget_analysis"] == 2
    truth = _exhaustive([16, 64], [256])
    limit = max(truth.values()) - 1  # the slower point is over the budget
    res = tune(space, budgets=[Budget("cycles", limit)], out=str(tmp_path / "b"),
               margin=10.0, **args)
    fast = min(truth, key=truth.get)
    assert (res.winner.overrides["TB"], res.winner.overrides["TI"]) == fast
    assert res.stages["over_budget_analysis"] + res.stages["over_budget_simulated"] == 1


@pytest.mark.slow  # several programs x traces, simulated
def test_programs_as_a_dimension_and_traces_aggregated(tmp_path):
    traces = [_routing(tmp_path, s, f"r{s}.npy") for s in (1, 2, 3)]
    space = Space([MOE_STATIC, MOE_DYNAMIC], {"TILE_N": [4, 8, 16]}, fixed=SMALL_MOE)
    res = tune(space, objectives=[Objective("cycles")], traces={"routing": traces},
               aggregate="max", out=str(tmp_path / "t"), jobs=1, margin=1.0)
    assert res.stages["space"] == 4  # three static tiles and the dynamic program
    per_point: dict = {}
    for rec in read_results(str(tmp_path / "t" / "results.jsonl")):
        key = (Path(rec["program"]).name, rec["params"].get("TILE_N"))
        per_point.setdefault(key, []).append(rec["cycles"])
    assert all(len(v) == 3 for v in per_point.values())
    w = res.winner
    assert w.confirmed["cycles"] == max(per_point[(Path(w.candidate.program).name,
                                                   w.overrides.get("TILE_N"))])
    assert w.confirmed["cycles"] == min(max(v) for v in per_point.values())


def test_pareto_front_of_two_objectives(tmp_path):
    res = tune(Space([SWIGLU], {"TB": [16, 64], "TI": [64, 256]}),
               objectives=[Objective("cycles"), Objective("on_chip_bytes")],
               hw="hdl-validation", out=str(tmp_path / "t"), jobs=1)
    front = [(s.confirmed["cycles"], s.confirmed["on_chip_bytes"]) for s in res.pareto]
    assert front
    for a in front:
        assert not any(b[0] <= a[0] and b[1] <= a[1] and b != a for b in front)


def test_resume_reuses_every_simulation(tmp_path):
    args = dict(objectives=[Objective("cycles")], hw="hdl-validation",
                out=str(tmp_path / "t"), jobs=1)
    space = Space([SWIGLU], {"TB": [32, 64], "TI": [128]})
    first = tune(space, **args)
    with pytest.raises(TuneError, match=r"resume=True"):
        tune(space, **args)
    again = tune(space, resume=True, **args)
    assert again.stages["screen_points_simulated"] == 0
    assert again.stages["confirm_points_simulated"] == 0
    assert again.winner.overrides == first.winner.overrides


def test_adaptive_confirm_reports_what_it_leaves_unconfirmed(tmp_path):
    """With a margin wide enough to keep every candidate, the adaptive policy confirms
    fewer than the margin policy, finds the same winner, and lists the rest with reasons."""
    space = Space([SWIGLU], {"TB": [32, 64], "TI": [64, 128, 256]})
    args = dict(objectives=[Objective("cycles")], hw="hdl-validation", jobs=1, margin=10.0)
    every = tune(space, confirm="margin", out=str(tmp_path / "m"), **args)
    adaptive = tune(space, out=str(tmp_path / "a"), **args)
    truth = _exhaustive([32, 64], [64, 128, 256])
    best = min(truth, key=truth.get)
    for res in (every, adaptive):
        assert (res.winner.overrides["TB"], res.winner.overrides["TI"]) == best
    assert adaptive.stages["confirmed"] < every.stages["confirmed"]
    assert every.stages["not_confirmed"] == 0
    assert adaptive.stages["not_confirmed"] == len(adaptive.unconfirmed) > 0
    for s in adaptive.unconfirmed:
        assert not s.confirmed and "per fluid" in s.reason
    doc = adaptive.to_dict()
    assert doc["confirm_policy"] == "adaptive" and len(doc["not_confirmed"]) == \
        adaptive.stages["not_confirmed"]
    from stepc.report.tune import markdown
    assert "## Not confirmed" in markdown(adaptive)
    with pytest.raises(TuneError, match="--confirm"):
        tune(space, confirm="some", out=str(tmp_path / "x"), **args)


TIMEMUX = {"moe_timemux.step": {"TILE_N": 4}, "moe_timemux_dynamic.step": {}}
# the dynamic program under -m slow: the tuner's choice is the same logic on either
TIMEMUX_PARAMS = ["moe_timemux.step",
                  pytest.param("moe_timemux_dynamic.step", marks=pytest.mark.slow)]
SMALL_TIMEMUX = {"B": 16, "D": 256, "F": 192, "E": 8, "K": 2, "TILE_F": 48, "BW": 1024}


@pytest.mark.parametrize("program", TIMEMUX_PARAMS)
def test_fewest_regions_within_a_factor_of_the_fastest(tmp_path, program):
    """`--objective allocated_compute --budget cycles=1.5*min` picks the region count with
    the least compute among those within 1.5x of the fastest, as an exhaustive simulation
    of every region count says."""
    path, fixed, trace, regions = *_small_timemux(program, tmp_path), [8, 4, 2, 1]
    cycles, compute = _every_region_count(path, fixed, trace, regions)
    fastest = min(cycles.values())
    want = min((r for r in regions if cycles[r] <= 1.5 * fastest), key=compute.get)
    res = tune(Space([path], {"R": regions}, fixed=fixed),
               objectives=[Objective("allocated_compute")],
               budgets=[Budget.parse("cycles", "1.5*min")], traces={"routing": [trace]},
               out=str(tmp_path / "t"), jobs=1)
    assert res.winner.overrides["R"] == want
    assert res.budgets[0].limit == pytest.approx(1.5 * fastest)
    assert res.winner.confirmed["cycles"] == cycles[want]


@pytest.mark.parametrize("program", TIMEMUX_PARAMS)
def test_fastest_regions_within_a_share_of_the_largest_compute(tmp_path, program):
    """`--budget allocated_compute=0.5*max` keeps the region counts allocating at most half
    the compute of the most expensive one and picks the fastest of them, as an exhaustive
    simulation says."""
    path, fixed, trace, regions = *_small_timemux(program, tmp_path), [8, 4, 2, 1]
    cycles, compute = _every_region_count(path, fixed, trace, regions)
    limit = 0.5 * max(compute.values())
    want = min((r for r in regions if compute[r] <= limit), key=cycles.get)
    res = tune(Space([path], {"R": regions}, fixed=fixed), objectives=[Objective("cycles")],
               budgets=[Budget.parse("allocated_compute", "0.5*max")],
               traces={"routing": [trace]}, out=str(tmp_path / "t"), jobs=1)
    assert res.budgets[0].limit == pytest.approx(limit)
    assert res.winner.overrides["R"] == want
    assert res.winner.confirmed["cycles"] == cycles[want]
    assert res.stages["over_budget_analysis"] == sum(compute[r] > limit for r in regions)


def _small_timemux(program: str, tmp_path) -> tuple[str, dict, str]:
    """A small time-multiplexed MoE program, its fixed params and an 8-expert trace."""
    return (str(REPO / "programs" / program), {**SMALL_TIMEMUX, **TIMEMUX[program]},
            _routing8(tmp_path))


def _every_region_count(path: str, fixed: dict, trace: str, regions: list[int]):
    """The exhaustive answer: `ref` cycles and allocated compute of every region count."""
    from stepc.analyze import analyze
    from stepc.traces import load_array
    config = load_config("paper-eval", ("hbm.model=ref",))
    cycles, compute = {}, {}
    for r in regions:
        typed = compile_file(path, {**fixed, "R": r}).typed
        cycles[r] = simulate(typed, config, {"routing": load_array(trace)},
                             functional=False).cycles
        compute[r] = analyze(typed, "artifact", config).allocated_compute
    return cycles, compute


def _routing8(tmp_path) -> str:
    rng = np.random.default_rng(3)
    p = np.array([.3, .2, .15, .1, .1, .07, .05, .03])
    ids = np.stack([rng.choice(8, size=2, replace=False, p=p) for _ in range(16)])
    path = tmp_path / "routing8.npy"
    np.save(path, ids.astype(np.int64))
    return str(path)


def test_sampler(tmp_path):
    pytest.importorskip("optuna")
    res = tune(Space([SWIGLU], {"TB": [16, 32, 64], "TI": [64, 128, 256]}),
               objectives=[Objective("cycles")], hw="hdl-validation", sampler="optuna",
               trials=4, out=str(tmp_path / "t"), jobs=1)
    assert res.stages["candidates"] <= 4 and res.winner is not None


def test_auto_samples_a_space_too_large_to_enumerate(tmp_path):
    """Four power-of-two dimensions (two params, two hardware keys): past --max-exhaustive
    `auto` hands the space to Optuna, which tries `trials` candidates, not the grid."""
    pytest.importorskip("optuna")
    space = Space([SWIGLU], {"TB": [8, 16, 32, 64], "TI": [32, 64, 128, 256]},
                  {"fabric.fifo_depth": ["1", "2", "4", "8"], "hbm.channels": ["8", "16"]})
    res = tune(space, objectives=[Objective("cycles")], hw="hdl-validation",
               max_exhaustive=64, trials=6, seed=1, out=str(tmp_path / "t"), jobs=1)
    st = res.stages
    assert st["space"] == 128 and st["sampled_trials"] == 6
    assert st["candidates"] <= 6 and st["confirmed"] >= 1
    assert res.winner.confirmed["cycles"] == min(s.confirmed["cycles"] for s in res.candidates
                                                 if s.status == "confirmed")
    assert len({s.candidate for s in res.candidates}) == st["candidates"]


# ---------------------------------------------------------------- the command
def test_cli_json_document(tmp_path):
    r = CliRunner().invoke(main, ["tune", SWIGLU, "--hw", "hdl-validation", "--space",
                                  "TB=32,64", "--space", "TI=128..256:pow2", "-j", "1",
                                  "--out", str(tmp_path / "t"), "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert set(doc["winner"]) >= {"program", "params", "metrics"}
    assert doc["stages"]["space"] == 4 and isinstance(doc["pareto"], list)
    assert doc["command"].startswith("stepc sim ")
    report = (tmp_path / "t" / "report.md").read_text()
    assert "## Winner" in report and "## Stages" in report and "stepc sim" in report


@pytest.mark.parametrize("args, message", [
    (["--space", "TX=1,2"], "no program of the search declares"),
    (["--budget", "joules=5"], "unknown metric"),
    (["--objective", "cycles,flops,off_chip_bytes"], "two for a Pareto front"),
    (["--where", "open('x')"], "only integers"),
    (["--aggregate", "median"], "--aggregate"),
    (["--space", "hbm.no_such_key=1"], "no_such_key"),
])
def test_cli_usage_errors(tmp_path, args, message):
    r = CliRunner().invoke(main, ["tune", SWIGLU, "--hw", "hdl-validation", "-j", "1",
                                  "--out", str(tmp_path / "t"), *args])
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output


# ---------------------------------------------------------------- the paper's layers
DATA = REPO.parent / "shared" / "data"
FIG9 = [("qwen_b64", {}), ("mixtral_b64", {"D": 4096, "F": 14336, "E": 8, "K": 2})]


@pytest.mark.slow
@pytest.mark.parametrize("traces, params", FIG9, ids=[t for t, _ in FIG9])
def test_figure9_best_static_tile_with_a_quarter_of_the_ref_runs(tmp_path, traces, params):
    """On the paper's routing traces tune finds the exhaustive grid's best static tile
    (TILE_N 8..64) with at most a quarter of the grid simulated with `ref`."""
    found = sorted((DATA / "expert_routing" / traces).glob("*.npz"))
    if not found:
        pytest.skip(f"no paper traces under {DATA} (../shared/data is absent)")
    from stepc.traces import load_array
    arrays = {"routing": load_array(str(found[0]))}
    config = load_config("paper-eval", ("hbm.model=ref",))
    tiles = [8, 16, 32, 64]
    truth = {t: simulate(compile_file(MOE_STATIC, {**params, "TILE_N": t}).typed, config,
                         arrays, functional=False).cycles for t in tiles}
    res = tune(Space([MOE_STATIC], {"TILE_N": tiles}, fixed=params),
               objectives=[Objective("cycles")], traces={"routing": [str(found[0])]},
               out=str(tmp_path / "t"), jobs=2)
    assert res.winner.overrides["TILE_N"] == min(truth, key=truth.get)
    assert res.stages["confirmed"] <= len(tiles) // 4


@pytest.mark.slow
@pytest.mark.parametrize("program", sorted(TIMEMUX))
def test_figure12_regions_by_the_relative_budget_rule(tmp_path, program):
    """Figure 12's space (Qwen3 B = 64, R = 128..4) on the paper's trace: "the least
    allocated compute within 5 % of the fastest schedule" picks what simulating every
    region count with `ref` says it should (see docs/tune.md for which R that is)."""
    found = sorted((DATA / "expert_routing" / "qwen_b64").glob("*.npz"))
    if not found:
        pytest.skip(f"no paper traces under {DATA} (../shared/data is absent)")
    from stepc.analyze import analyze
    from stepc.traces import load_array
    path = str(REPO / "programs" / program)
    fixed = {"TILE_F": 48, "BW": 1024, **({"TILE_N": 32} if "dynamic" not in program else {})}
    config = load_config("paper-eval", ("hbm.model=ref",))
    regions = [128, 64, 32, 16, 8, 4]
    cycles, compute = {}, {}
    for r in regions:
        typed = compile_file(path, {**fixed, "R": r}).typed
        cycles[r] = simulate(typed, config, {"routing": load_array(str(found[0]))},
                             functional=False).cycles
        compute[r] = analyze(typed, "artifact", config).allocated_compute
    want = min((r for r in regions if cycles[r] <= 1.05 * min(cycles.values())),
               key=compute.get)
    res = tune(Space([path], {"R": regions}, fixed=fixed),
               objectives=[Objective("allocated_compute")],
               budgets=[Budget.parse("cycles", "1.05*min")],
               traces={"routing": [str(found[0])]}, out=str(tmp_path / "t"), jobs=2)
    assert res.winner.overrides["R"] == want
    assert res.stages["confirmed"] <= 3


def test_help_has_examples_and_every_option_explained():
    r = CliRunner().invoke(main, ["tune", "--help"])
    assert r.exit_code == 0 and "Examples:" in r.output and "stepc tune " in r.output
    for param in main.commands["tune"].params:
        if param.param_type_name == "option" and not param.hidden:
            assert param.help, f"tune {param.opts[0]} has no help text"


def test_a_stream_given_no_trace_files_is_refused(tmp_path):
    """`traces={"routing": []}` left no case to run: a KeyError deep in the search."""
    with pytest.raises(TuneError, match=r"routing.*no trace file given"):
        tune(Space([SWIGLU], {"TB": [16, 32]}), objectives=[Objective("cycles")],
             traces={"routing": []}, out=str(tmp_path / "t"), jobs=1)
