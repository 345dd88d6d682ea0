"""Benchmark: the throughput search of `stepc fifo` on the bundled MoE and attention
programs under `paper-eval` (target: under 30 s per program on 2 cores), optionally
against another checkout of stepc (`--old PATH`) in the same session.

Each measurement is one process: it compiles the program, then times `Program.fifo`
(static analysis, search and the confirmation run of the program with the depths
written) and prints the wall and CPU time (its worker processes' CPU included), the
simulations the search made, the cycles and the FIFO bytes. With `--old`, the old and
the new code run interleaved, program by program, `--repeat` times each; the medians are
printed with the load average at the start and the end.

    python benchmarks/bench_fifo.py [--repeat 3] [--program moe_static.step ...]
                                    [-D B=256 -D TILE_N=16] [--old PATH] [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PROGRAMS = ("moe_static.step", "moe_dynamic.step", "attention_dynamic.step")
TARGET_SECONDS = 30.0
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def measure_once(path: str, params: dict[str, int], tolerance: float,
                 jobs: int | None) -> dict:
    """One search of `path` in this process: times, simulations, cycles and bytes."""
    import stepc

    prog = stepc.load(path, **params)
    options = {} if jobs is None else {"jobs": jobs}
    start, wall = os.times(), time.perf_counter()
    report = prog.fifo(hw="paper-eval", tolerance=tolerance, **options)
    end = os.times()
    cpu = sum(end[:4]) - sum(start[:4])  # this process's and its finished workers'
    return {"wall": time.perf_counter() - wall, "cpu": cpu, "runs": report.runs,
            "cycles": report.cycles, "unbounded": report.unbounded_cycles,
            "bytes": report.fifo_bytes, "confirmed": report.confirmation.cycles,
            "uniform_bytes": report.uniform_bytes,
            "depths": sorted((r.location, r.slot, r.depth) for r in report.rows)}


def measured(tree: str, name: str, args, jobs: int | None) -> dict:
    """`measure_once` in a fresh process importing stepc from `tree`."""
    command = [sys.executable, os.path.abspath(__file__), "--one", name,
               "--tolerance", str(args.tolerance)] + \
        [f"-D{d}" for d in args.defines] + (["--jobs", str(jobs)] if jobs else [])
    env = {**os.environ, "PYTHONPATH": tree}
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--program", action="append", help="a file under programs/ (repeatable)")
    ap.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--tolerance", type=float, default=1.0, help="percent")
    ap.add_argument("--old", metavar="PATH", help="another checkout of stepc to time first")
    ap.add_argument("--jobs", type=int, help="the new code's -j (default: its own)")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # a single measurement, as JSON
    args = ap.parse_args()
    params = {k: int(v) for k, v in (d.split("=", 1) for d in args.defines)}
    if args.one:
        path = os.path.join(ROOT, "programs", args.one)
        print(json.dumps(measure_once(path, params, args.tolerance / 100, args.jobs)))
        return
    trees = ([("old", os.path.abspath(args.old))] if args.old else []) + [("new", ROOT)]
    print(f"load average at the start: {os.getloadavg()[0]:.2f} "
          f"({os.cpu_count()} cores)")
    for name in args.program or PROGRAMS:
        label = name + "".join(f" -D {k}={v}" for k, v in params.items())
        runs: dict[str, list[dict]] = {tag: [] for tag, _ in trees}
        for _ in range(args.repeat):  # old and new interleaved
            for tag, tree in trees:
                runs[tag].append(measured(tree, name, args,
                                          None if tag == "old" else args.jobs))
        for tag, results in runs.items():
            last = results[-1]
            wall = statistics.median(r["wall"] for r in results)
            cpu = statistics.median(r["cpu"] for r in results)
            print(f"{label} [{tag}]: median {wall:.1f} s wall, {cpu:.1f} s CPU "
                  f"(n={args.repeat}, target {TARGET_SECONDS:.0f} s: "
                  f"{'met' if wall < TARGET_SECONDS else 'MISSED'}); {last['runs']} "
                  f"simulations; cycles {last['cycles']:,} vs {last['unbounded']:,} unbounded "
                  f"(confirmed: {last['confirmed']:,}); FIFO bytes {last['bytes']:,} vs "
                  f"{last['uniform_bytes']:,} at the uniform depth")
        if len(trees) == 2:
            old, new = runs["old"][-1], runs["new"][-1]
            changed = [(o, n) for o, n in zip(old["depths"], new["depths"]) if o != n]
            print(f"{label}: {len(changed)} rows of other depths than the old code's")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
