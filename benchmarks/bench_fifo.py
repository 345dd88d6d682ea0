"""Benchmark: the throughput search of `stepc fifo` on the bundled MoE and attention
programs under `paper-eval` (target: under 30 s per program on 2 cores).

Compiles each program once, then times `Program.fifo` (static analysis and search) and
prints per program the median wall and CPU time over repeated runs (the confirmation run of
the program with the depths written included), the simulations the search made, and the
FIFO bytes it found against the preset's uniform depth. CPU time is the closer measure on
a loaded machine (the search runs on one core).

    python benchmarks/bench_fifo.py [--repeat 3] [--program moe_static.step ...]
                                    [-D B=256 -D TILE_N=16]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import stepc

PROGRAMS = ("moe_static.step", "moe_dynamic.step", "attention_dynamic.step")
TARGET_SECONDS = 30.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--program", action="append", help="a file under programs/ (repeatable)")
    ap.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--tolerance", type=float, default=1.0, help="percent")
    args = ap.parse_args()
    params = {k: int(v) for k, v in (d.split("=", 1) for d in args.defines)}
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "programs")
    for name in args.program or PROGRAMS:
        prog = stepc.load(os.path.join(root, name), **params)
        walls, cpus = [], []
        for _ in range(args.repeat):
            wall, cpu = time.perf_counter(), time.process_time()
            report = prog.fifo(hw="paper-eval", tolerance=args.tolerance / 100)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        label = name + "".join(f" -D {k}={v}" for k, v in params.items())
        print(f"{label}: median {wall:.1f} s wall, {cpu:.1f} s CPU (n={args.repeat}, "
              f"target {TARGET_SECONDS:.0f} s: {'met' if cpu < TARGET_SECONDS else 'MISSED'}); "
              f"{report.runs} simulations; cycles {report.cycles:,} vs "
              f"{report.unbounded_cycles:,} unbounded (confirmed: {report.confirmation.cycles:,}); "
              f"FIFO bytes {report.fifo_bytes:,} (confirmed: {report.confirmation.fifo_bytes:,}) "
              f"vs {report.uniform_bytes:,} at depth {report.preset_depth}"
              + (" (deadlocks)" if report.uniform_cycles == 0 else ""))


if __name__ == "__main__":
    main()
