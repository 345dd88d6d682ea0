"""Benchmark: `stepc reproduce` of the paper's figures, each a whole command from an empty
output directory (`--fresh`), as a user runs it.

Prints per command the wall time, the CPU time of the command and its workers (user +
system), the largest process's peak resident memory, and from the figure's records the
number of points and the sum of their simulation times (a point that several figures
share is run once and counted in each); then the load average.

    python benchmarks/bench_reproduce.py [FIGURE ...] [--data DIR] [-j 2]

FIGURE defaults to `all` (one command for every figure, shared points run once).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import machine_line

ROOT = Path(__file__).resolve().parent.parent


def children_usage() -> tuple[float, float]:
    """(CPU seconds, peak resident MiB of the largest) of the children waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def points(out: Path) -> tuple[int, float]:
    """The points recorded under `out` (one results.jsonl per figure) and their seconds."""
    count, seconds = 0, 0.0
    for path in out.glob("fig*/results.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            count += 1
            seconds += record.get("wall_seconds", 0.0)
    return count, seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("figures", nargs="*", default=["all"], metavar="FIGURE")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"),
                    help="the paper's data (default: ../shared/data beside the repository)")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    if not Path(args.data).is_dir():
        print(f"no paper data under {args.data}", file=sys.stderr)
        return 2
    for figure in args.figures:
        with tempfile.TemporaryDirectory() as d:
            out = Path(d)
            cpu0, _ = children_usage()
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "stepc", "reproduce", figure,
                                   "--data", args.data, "--out", str(out), "--fresh",
                                   "-j", str(args.jobs)], capture_output=True, text=True)
            wall = time.perf_counter() - t0
            cpu1, peak = children_usage()
            if done.returncode != 0:
                print(done.stdout[-2000:] + done.stderr[-2000:], file=sys.stderr)
                return done.returncode
            count, seconds = points(out)
        print(f"stepc reproduce {figure} --fresh -j {args.jobs}: wall {wall:.1f} s, CPU "
              f"{cpu1 - cpu0:.1f} s, largest process so far {peak:.0f} MiB; {count} points "
              f"recorded, their simulations {seconds:.1f} s")
    print(machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
