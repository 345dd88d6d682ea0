"""Benchmark: the default test suite, `python -m pytest` run once as the test command of
README.md runs it (every core through pytest-xdist, `-m 'not slow'` from pyproject.toml).

Prints the wall time, the CPU time of pytest and its workers (user + system), pytest's
own summary line (the counts of passed, skipped and failed tests) and the load average.
It takes minutes of every core: run it on a machine with nothing else to do.

    python benchmarks/bench_suite.py [PYTEST_ARGS ...]
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

from machine import machine_line

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           *sys.argv[1:]], cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = done.stdout.strip().splitlines()
    summary = lines[-1] if lines else done.stderr.strip()
    minutes, seconds = divmod(round(wall), 60)
    print(f"python -m pytest: wall {wall:.1f} s ({minutes} min {seconds} s), CPU "
          f"{(usage.ru_utime + usage.ru_stime) / 60:.1f} min")
    print(f"pytest: {summary}")
    print(machine_line())
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
