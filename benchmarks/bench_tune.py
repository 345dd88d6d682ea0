"""`stepc tune` against the exhaustive Figure 9 / 10 grids and Figure 12's region sweep, on
the paper's routing traces.

    python benchmarks/bench_tune.py --data ../shared/data [-j 2] [--out bench-tune]
        [--reuse]   use the reproductions already in OUT/repro (and their times) instead of
                    timing fresh ones
        [--pairs N] only time N back-to-back pairs: a fresh `stepc reproduce 10`, then the
                    fresh unbudgeted static-tile tunes of the B = 1024 layers; prints each
                    pair with the load average and the median ratios

Steps: time `stepc reproduce 10` (fresh) and run `stepc reproduce 9` for its grid; for each
MoE layer (Qwen3, Mixtral; B = 64 and 1024) read the best static tile of the exhaustive grid
under each budget; tune the same space (static tiling alone, then static and dynamic tiling
together) and compare. Budgets: none, and the on-chip bytes of each static tile but the
smallest (every step of the Pareto plot's memory axis); `ref` may simulate at most a quarter
of the grid's points in every run. Figure 12 (`stepc reproduce 12` for its grid): tune the
region count R with the general rule "the least allocated compute within a factor of the
fastest schedule" (`--objective allocated_compute --budget cycles=F*min`) and compare with
the rule applied to the grid; and as the fastest schedule within half of the largest
allocated compute (`--budget allocated_compute=0.5*max`). Optuna's sampler: a
4-dimensional power-of-two space, sampled against its exhaustive `ref` simulation.
Prints one Markdown table per question; exits 1 when tune disagrees with the grid or runs
`ref` on more than a quarter of a run's grid.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from machine import load_average, machine_line

from stepc.explore.runner import latest_records, read_results
from stepc.tune import Budget, Objective, Space, tune

ROOT = Path(__file__).resolve().parent.parent
MIXTRAL = {"D": 4096, "F": 14336, "E": 8, "K": 2}
CASES = [  # name, figure, series tag prefix, fixed params, static tiles, trace dir, sets
    ("Qwen3 B=64", "9", "qwen", {}, [8, 16, 32, 64], "qwen_b64", ()),
    ("Mixtral B=64", "9", "mixtral", MIXTRAL, [8, 16, 32, 64], "mixtral_b64", ()),
    ("Qwen3 B=1024", "10", "qwen", {"B": 1024}, [16, 32, 64, 128, 256, 512, 1024],
     "qwen_b1024", ("fabric.fifo_depth=1024",)),
    ("Mixtral B=1024", "10", "mixtral", {"B": 1024, **MIXTRAL},
     [16, 32, 64, 128, 256, 512, 1024], "mixtral_b1024", ("fabric.fifo_depth=1024",)),
]


def _amount(budget: float | None) -> str:
    return f"{budget:,}" if budget else "none"


def reproduce(figure: str, data: str, out: str, jobs: int) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "stepc", "reproduce", figure, "--data", data,
                    "--out", out, "--fresh", "-j", str(jobs)], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def grid_best(records: list[dict], tag: str, budget: float | None) -> tuple[int, int]:
    """The fastest static tile of a series within an on-chip budget: (TILE_N, cycles)."""
    fits = [r for r in records if r["tag"] == tag and r["status"] == "ok"
            and (budget is None or r["on_chip_bytes"] <= budget)]
    best = min(fits, key=lambda r: r["cycles"])
    return best["params"]["TILE_N"], best["cycles"]


def run_tune(programs, params, tiles, trace, sets, budget, jobs, out, resume):
    space = Space([str(ROOT / "programs" / p) for p in programs], {"TILE_N": tiles}, {}, [],
                  params)
    t0 = time.perf_counter()
    res = tune(space, objectives=[Objective("cycles")],
               budgets=[Budget("on_chip_bytes", budget)] if budget else [],
               traces={"routing": [trace]}, sets=sets, out=out, resume=resume, jobs=jobs)
    return res, time.perf_counter() - t0


FACTOR = 1.05  # "within 5 % of the fastest schedule"


def st_ref_share_ok(stages: dict, grid: int) -> bool:
    """The issue's target: `ref` simulates at most a quarter of the grid's points."""
    return stages["confirmed"] <= grid / 4


def rule_pick(records: list[dict], factor: float) -> int:
    """The grid's answer to "the least allocated compute within `factor` of the fastest"."""
    fastest = min(r["cycles"] for r in records)
    return min((r for r in records if r["cycles"] <= factor * fastest),
               key=lambda r: (r["allocated_compute"], r["cycles"]))["params"]["R"]


def factors_picking(records: list[dict], region: int) -> str:
    """The range of factors for which the rule picks `region` on the grid."""
    fastest = min(r["cycles"] for r in records)
    steps = sorted({r["cycles"] / fastest for r in records})
    hits = [f for f in steps if rule_pick(records, f) == region]
    if not hits:
        return "none"
    after = [f for f in steps if f > max(hits)]
    return f"{min(hits):.3f} to {after[0]:.3f} (exclusive)" if after else f">= {min(hits):.3f}"


def figure12(args, repro: str, routing: Path, factor: float) -> bool:
    """Tune Figure 12's region count with the relative-budget rule; compare with the grid."""
    print(f"\nFigure 12 (Qwen3 B=64, regions R, TILE_F 48, BW 1024): the least allocated "
          f"compute within {factor:g}x the fastest schedule's cycles\n")
    print("| program | grid: cycles / fastest by R | rule on grid | tune picks | ref runs "
          "of 6 | tune s | factors picking R = 32 |")
    print("|---|---|---|---|---|---|---|")
    records = latest_records(read_results(os.path.join(repro, "fig12", "results.jsonl")))
    trace = sorted(glob.glob(str(routing / "qwen_b64" / "*.npz")))[0]
    ok = True
    for tag, program, extra in (("static", "moe_timemux.step", {"TILE_N": 32}),
                                ("dynamic", "moe_timemux_dynamic.step", {})):
        grid = [r for r in records if r["tag"] == tag and r["status"] == "ok"]
        fastest = min(r["cycles"] for r in grid)
        shape = ", ".join(f"{r['params']['R']}: {r['cycles'] / fastest:.3f}"
                          for r in sorted(grid, key=lambda r: -r["params"]["R"]))
        space = Space([str(ROOT / "programs" / program)], {"R": [128, 64, 32, 16, 8, 4]},
                      {}, [], {"TILE_F": 48, "BW": 1024, **extra})
        t0 = time.perf_counter()
        res = tune(space, objectives=[Objective("allocated_compute")],
                   budgets=[Budget("cycles", factor=factor)], traces={"routing": [trace]},
                   out=os.path.join(args.out, f"fig12-{tag}"), jobs=args.jobs)
        got = res.winner.overrides["R"] if res.winner else None
        want = rule_pick(grid, factor)
        ok &= got == want
        print(f"| {program} | {shape} | R = {want} | R = {got} | {res.stages['confirmed']} | "
              f"{time.perf_counter() - t0:.1f} | {factors_picking(grid, 32)} |")
    return ok


COMPUTE_SHARE = 0.5  # "free at least half of the most expensive region count's compute"


def figure12_compute_budget(args, repro: str, routing: Path) -> bool:
    """Tune Figure 12's region count as the fastest schedule within a share of the largest
    allocated compute (`--budget allocated_compute=0.5*max`), for each program and both
    together; compare with the same rule applied to the grid."""
    print(f"\nFigure 12 (Qwen3 B=64): the fastest schedule allocating at most "
          f"{COMPUTE_SHARE:g} x the largest compute in the space\n")
    print("| programs | rule on grid | tune picks | ref runs / points | tune s |")
    print("|---|---|---|---|---|")
    records = latest_records(read_results(os.path.join(repro, "fig12", "results.jsonl")))
    trace = sorted(glob.glob(str(routing / "qwen_b64" / "*.npz")))[0]
    programs = {"static": "moe_timemux.step", "dynamic": "moe_timemux_dynamic.step"}
    ok = True
    for tags in (["static"], ["dynamic"], ["static", "dynamic"]):
        grid = [r for r in records if r["tag"] in tags and r["status"] == "ok"]
        limit = COMPUTE_SHARE * max(r["allocated_compute"] for r in grid)
        best = min((r for r in grid if r["allocated_compute"] <= limit),
                   key=lambda r: r["cycles"])
        want = (programs[best["tag"]], best["params"]["R"])
        space = Space([str(ROOT / "programs" / programs[t]) for t in tags],
                      {"R": [128, 64, 32, 16, 8, 4]}, {}, [],
                      {"TILE_F": 48, "BW": 1024, **({"TILE_N": 32} if "static" in tags else {})})
        t0 = time.perf_counter()
        res = tune(space, objectives=[Objective("cycles")],
                   budgets=[Budget.parse("allocated_compute", f"{COMPUTE_SHARE}*max")],
                   traces={"routing": [trace]},
                   out=os.path.join(args.out, f"fig12-compute-{'-'.join(tags)}"),
                   jobs=args.jobs)
        w = res.winner
        got = (os.path.basename(w.candidate.program), w.overrides["R"]) if w else None
        ok &= got == want
        print(f"| {' + '.join(programs[t] for t in tags)} | {want[0]} R = {want[1]} | "
              f"{got[0] + ' R = ' + str(got[1]) if got else 'none'} | "
              f"{res.stages['confirmed']} / {len(grid)} | {time.perf_counter() - t0:.1f} |")
    return ok


SAMPLER_SPACE = {"TB": [8, 16, 32, 64], "TI": [32, 64, 128, 256]}
SAMPLER_HW = {"fabric.fifo_depth": ["1", "2", "4", "8", "16"],
              "hbm.channels": ["8", "16", "32", "64"]}


def sampler_vs_exhaustive(args) -> bool:
    """Optuna's TPE sampler on a 4-dimensional power-of-two space (320 points of SwiGLU on
    the HDL-validation hardware) against simulating every point with `ref`."""
    from stepc.explore.runner import Point, Sweep
    program = str(ROOT / "programs" / "swiglu.step")
    space = Space([program], dict(SAMPLER_SPACE), dict(SAMPLER_HW))
    cands = list(space.candidates({program: set(SAMPLER_SPACE)}))
    t0 = time.perf_counter()
    points = [Point(program, c.params, "hdl-validation", c.sets + ("hbm.model=ref",), (),
                    True, "exhaustive") for c in cands]
    path = os.path.join(args.out, "sampler-exhaustive.jsonl")
    if os.path.exists(path):
        os.remove(path)
    outcome = Sweep(points, path, args.jobs).run()
    exhaustive_s = time.perf_counter() - t0
    done = sorted((r for r in outcome.records if r["status"] == "ok"),
                  key=lambda r: r["cycles"])
    rank = {(tuple(sorted(r["params"].items())), tuple(r["sets"])): i
            for i, r in enumerate(done)}
    print(f"\nOptuna TPE sampler, SwiGLU on hdl-validation, {len(cands)} points (TB, TI, "
          f"fabric.fifo_depth, hbm.channels, powers of two); exhaustive `ref`: best "
          f"{done[0]['cycles']:,} cycles, {exhaustive_s:.1f} s\n")
    print("| trials | seed | candidates | ref runs | best found (cycles) | rank in the grid | "
          "/ best | tune s |")
    print("|---|---|---|---|---|---|---|---|")
    ok = True
    for trials in (16, 32, 64):
        for seed in (0, 1, 2):
            t0 = time.perf_counter()
            res = tune(space, objectives=[Objective("cycles")], hw="hdl-validation",
                       sampler="optuna", trials=trials, seed=seed, jobs=args.jobs,
                       out=os.path.join(args.out, f"sampler-{trials}-{seed}"))
            w = res.winner
            key = (tuple(sorted(w.overrides.items())), tuple(w.candidate.sets) +
                   ("hbm.model=ref",))
            ok &= w is not None
            print(f"| {trials} | {seed} | {res.stages['candidates']} | "
                  f"{res.stages['confirmed']} | {w.confirmed['cycles']:,.0f} | "
                  f"{rank.get(key, -1) + 1} of {len(done)} | "
                  f"{w.confirmed['cycles'] / done[0]['cycles']:.3f} | "
                  f"{time.perf_counter() - t0:.1f} |")
    return ok


def pairs(args, routing: Path, count: int) -> None:
    """Tune's time over `stepc reproduce 10`'s, measured back to back `count` times."""
    print("| pair | reproduce 10 s | load after | layer | tune s | load after | / reproduce 10 |")
    print("|---|---|---|---|---|---|---|")
    ratios: dict[str, list[float]] = {}
    for i in range(count):
        base = reproduce("10", args.data, os.path.join(args.out, "pairs-repro"), args.jobs)
        after = load_average()
        for name, _, _, params, tiles, tdir, sets in CASES[2:]:
            trace = sorted(glob.glob(str(routing / tdir / "*.npz")))[0]
            out = os.path.join(args.out, f"pairs-{tdir}")
            shutil.rmtree(out, ignore_errors=True)
            _, secs = run_tune(["moe_static.step"], params, tiles, trace, sets, None,
                               args.jobs, out, resume=False)
            ratios.setdefault(name, []).append(secs / base)
            print(f"| {i + 1} | {base:.1f} | {after} | {name} | {secs:.1f} | "
                  f"{load_average()} | {secs / base:.3f} |")
    print("\nmedian tune / reproduce 10: " + ", ".join(
        f"{name} {statistics.median(r):.3f}" for name, r in ratios.items()))


def main() -> int:
    sys.stdout.reconfigure(line_buffering=True)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--out", default="bench-tune")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--pairs", type=int, default=0)
    args = ap.parse_args()
    routing = Path(args.data) / "expert_routing"
    if not routing.is_dir():
        print(f"no paper traces under {args.data}", file=sys.stderr)
        return 2
    if args.pairs:
        os.makedirs(args.out, exist_ok=True)
        pairs(args, routing, args.pairs)
        print(machine_line())
        return 0
    repro = os.path.join(args.out, "repro")
    times_path = os.path.join(args.out, "reproduce_times.json")
    times = json.loads(Path(times_path).read_text()) \
        if args.reuse and os.path.exists(times_path) else {}
    os.makedirs(args.out, exist_ok=True)
    for figure in ("10", "9", "12"):
        if figure not in times:
            times[figure] = reproduce(figure, args.data, repro, args.jobs)
    Path(times_path).write_text(json.dumps(times))
    print(f"stepc reproduce 10 (fresh, -j {args.jobs}): {times['10']:.1f} s; "
          f"reproduce 9: {times['9']:.1f} s; reproduce 12: {times['12']:.1f} s\n")
    ok = True
    ref_runs = grid_points = 0
    print("| layer | budget (on-chip B) | grid best | tune best | ref runs / grid | "
          "not confirmed | fluid runs | roofline pruned | tune s | / reproduce 10 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, fig, model, params, tiles, tdir, sets in CASES:
        records = latest_records(read_results(os.path.join(repro, f"fig{fig}",
                                                           "results.jsonl")))
        trace = sorted(glob.glob(str(routing / tdir / "*.npz")))[0]
        mem = {r["params"]["TILE_N"]: r["on_chip_bytes"] for r in records
               if r["tag"] == f"{model}_static"}
        out = os.path.join(args.out, f"tune-{tdir}")
        for i, budget in enumerate([None] + sorted(mem[t] for t in tiles[1:])):
            want = grid_best(records, f"{model}_static", budget)
            res, secs = run_tune(["moe_static.step"], params, tiles, trace, sets, budget,
                                 args.jobs, out, resume=i > 0)
            got = res.winner.overrides.get("TILE_N") if res.winner else None
            ok &= got == want[0] and st_ref_share_ok(res.stages, len(tiles))
            st = res.stages
            ref_runs += st["confirmed"]
            grid_points += len(tiles)
            print(f"| {name} | {_amount(budget)} | {want[0]} ({want[1]:,}) | {got} | "
                  f"{st['confirmed']} / {len(tiles)} | {st['not_confirmed']} | "
                  f"{st['screened']} | "
                  f"{st['pruned_by_roofline']} | {secs:.1f}"
                  + ("" if i else " (fresh)") + f" | {secs / times['10']:.2f} |")
    print(f"\n`ref` simulated {ref_runs} of {grid_points} grid points over these runs "
          f"({ref_runs / grid_points:.0%}).")
    print("\nStatic or dynamic tiling (both programs, one categorical dimension):\n")
    print("| layer | budget | grid best | tune picks | ref runs / grid | tune s |")
    print("|---|---|---|---|---|---|")
    for name, fig, model, params, tiles, tdir, sets in CASES:
        records = latest_records(read_results(os.path.join(repro, f"fig{fig}",
                                                           "results.jsonl")))
        trace = sorted(glob.glob(str(routing / tdir / "*.npz")))[0]
        dyn = next(r for r in records if r["tag"] == f"{model}_dynamic")
        out = os.path.join(args.out, f"both-{tdir}")
        for i, budget in enumerate([None, dyn["on_chip_bytes"]]):
            pool = [r for r in records if r["tag"].startswith(model) and r["status"] == "ok"
                    and (budget is None or r["on_chip_bytes"] <= budget)]
            best = min(pool, key=lambda r: r["cycles"])
            want = f"{best['tag'].split('_')[1]} {best['params'].get('TILE_N', '')}".strip()
            res, secs = run_tune(["moe_static.step", "moe_dynamic.step"], params, tiles,
                                 trace, sets, budget, args.jobs, out, resume=i > 0)
            w = res.winner
            got = ("dynamic" if "dynamic" in w.candidate.program else
                   f"static {w.overrides['TILE_N']}") if w else "none"
            ok &= got == want
            print(f"| {name} | {_amount(budget)} | {want} ({best['cycles']:,}) | {got} | "
                  f"{res.stages['confirmed']} / {len(tiles) + 1} | {secs:.1f} |")
    ok &= figure12(args, repro, routing, FACTOR)
    ok &= figure12_compute_budget(args, repro, routing)
    ok &= sampler_vs_exhaustive(args)
    print("\nall agree with the grid" if ok else "\nDISAGREEMENT with the grid")
    print(machine_line())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
