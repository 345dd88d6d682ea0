"""`stepc tune` against the exhaustive Figure 9 / 10 grids and Figure 12's region sweep, on
the paper's routing traces.

    python benchmarks/bench_tune.py --data ../shared/data [-j 2] [--out bench-tune]
        [--reuse]   use the reproduction already in OUT/repro instead of timing a fresh one

Steps: time `stepc reproduce 10` (fresh) and run `stepc reproduce 9` for its grid; for each
MoE layer (Qwen3, Mixtral; B = 64 and 1024) read the best static tile of the exhaustive grid
under each budget; tune the same space (static tiling alone, then static and dynamic tiling
together) and compare. Budgets: none, and the on-chip bytes of each static tile but the
smallest (every step of the Pareto plot's memory axis). Figure 12: tune the region count R
of the time-multiplexed layer under a compute budget, and for compute utilisation.
Prints one Markdown table per question; exits 1 when tune disagrees with the grid.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from stepc.sweep.runner import latest_records, read_results
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


def main() -> int:
    sys.stdout.reconfigure(line_buffering=True)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--out", default="bench-tune")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--reuse", action="store_true")
    args = ap.parse_args()
    routing = Path(args.data) / "expert_routing"
    if not routing.is_dir():
        print(f"no paper traces under {args.data}", file=sys.stderr)
        return 2
    repro = os.path.join(args.out, "repro")
    times_path = os.path.join(args.out, "reproduce_times.json")
    if args.reuse and os.path.exists(times_path):
        times = json.loads(Path(times_path).read_text())
    else:
        os.makedirs(args.out, exist_ok=True)
        times = {f: reproduce(f, args.data, repro, args.jobs) for f in ("10", "9")}
        Path(times_path).write_text(json.dumps(times))
    print(f"stepc reproduce 10 (fresh, -j {args.jobs}): {times['10']:.1f} s; "
          f"reproduce 9: {times['9']:.1f} s\n")
    ok = True
    print("| layer | budget (on-chip B) | grid best | tune best | ref runs / grid | "
          "fluid runs | roofline pruned | tune s | / reproduce 10 |")
    print("|---|---|---|---|---|---|---|---|---|")
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
            ok &= got == want[0]
            st = res.stages
            print(f"| {name} | {_amount(budget)} | {want[0]} ({want[1]:,}) | {got} | "
                  f"{st['confirmed']} / {len(tiles)} | {st['screened']} | "
                  f"{st['pruned_by_roofline']} | {secs:.1f}"
                  + ("" if i else " (fresh)") + f" | {secs / times['10']:.2f} |")
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
    print("\nFigure 12 (Qwen3 B=64, time-multiplexed regions R, TILE_F 48, BW 1024):\n")
    trace = sorted(glob.glob(str(routing / "qwen_b64" / "*.npz")))[0]
    for program, extra in (("moe_timemux.step", {"TILE_N": 32}),
                           ("moe_timemux_dynamic.step", {})):
        space = Space([str(ROOT / "programs" / program)], {"R": [128, 64, 32, 16, 8, 4]}, {},
                      [], {"TILE_F": 48, "BW": 1024, **extra})
        out = os.path.join(args.out, f"fig12-{program.removesuffix('.step')}")
        for i, (goal, budgets) in enumerate(
                [(Objective("cycles"), [Budget("allocated_compute", 450_000)]),
                 (Objective("compute_utilization", maximise=True), [])]):
            t0 = time.perf_counter()
            res = tune(space, objectives=[goal], budgets=budgets,
                       traces={"routing": [trace]}, out=out, resume=i > 0, jobs=args.jobs)
            w = res.winner
            print(f"- {program}: {goal.text()}"
                  + (f" under {budgets[0].text()}" if budgets else "")
                  + f": R = {w.overrides['R'] if w else None} "
                  f"({res.stages['confirmed']} ref runs of 6, "
                  f"{time.perf_counter() - t0:.1f} s)")
    print("\nall agree with the grid" if ok else "\nDISAGREEMENT with the grid")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
