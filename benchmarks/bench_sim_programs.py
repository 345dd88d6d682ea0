"""Simulation CPU time of the speed issue's three programs, beside an older source tree.

    python benchmarks/bench_sim_programs.py [--base OLD] [--repeat 3]

Programs: `decoder_dynamic` (a decoder layer), `moe_static` with Qwen3 dims at B = 64 and
TILE_N = 16, `attention_dynamic`; timing-only, the default hardware (`ref` HBM). Each
measurement is one process per tree (`PYTHONPATH` set to the tree; the programs are this
tree's files), compile outside the clock, then `simulate` timed by `time.process_time`;
trees take turns. It prints each tree's median CPU seconds, the ratio, and the cycles, and
exits 1 when the two trees' cycles differ.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_line  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS = [("decoder_dynamic", {}), ("moe_static", {"B": 64, "TILE_N": 16}),
            ("attention_dynamic", {})]


def measure(path: str, params: dict[str, int]) -> dict:
    """One simulation of `path` in this process: CPU seconds and cycles."""
    from stepc.frontend import compile_file
    from stepc.hw import load_config
    from stepc.sim.run import simulate
    typed = compile_file(path, params).typed
    hw = load_config(None, ())
    start = time.process_time()
    run = simulate(typed, hw, functional=False)
    return {"cpu": time.process_time() - start, "cycles": run.cycles}


def in_tree(tree: str, name: str, params: dict[str, int]) -> dict:
    """`measure` in a fresh process importing stepc from `tree`."""
    path = os.path.join(ROOT, "programs", f"{name}.step")
    env = {**os.environ, "PYTHONPATH": tree}
    out = subprocess.run([sys.executable, __file__, "--worker", path, json.dumps(params)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", help="an older source tree to time beside this one")
    ap.add_argument("--repeat", type=int, default=3, help="processes per program and tree")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(measure(args.worker[0], json.loads(args.worker[1]))))
        return
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    trees = {"this": ROOT} | ({"base": os.path.abspath(args.base)} if args.base else {})
    print(machine_line())
    differ = False
    for name, params in PROGRAMS:
        runs: dict[str, list[dict]] = {label: [] for label in trees}
        for _ in range(args.repeat):
            for label, tree in trees.items():
                runs[label].append(in_tree(tree, name, params))
        medians = {label: statistics.median(r["cpu"] for r in rs) for label, rs in runs.items()}
        cycles = {label: {r["cycles"] for r in rs} for label, rs in runs.items()}
        line = f"{name} {params or ''}: this {medians['this']:.2f} s"
        if "base" in trees:
            line += (f", base {medians['base']:.2f} s, base / this "
                     f"{medians['base'] / medians['this']:.2f}x")
        line += f"; cycles {', '.join(f'{c:,}' for c in sorted(set().union(*cycles.values())))}"
        print(line)
        if len(set().union(*cycles.values())) > 1:
            print(f"  cycles differ: {cycles}")
            differ = True
    print(machine_line())
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
