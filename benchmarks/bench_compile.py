"""Benchmark: the front end's compile (parse, elaborate, type/shape-check) of bundled
programs, in-process, first compile and median of the repeats, wall and CPU time.

With `--base DIR` (a checkout of an earlier commit, e.g. `git worktree add /tmp/base
HEAD~3`), the same programs are compiled by that tree's stepc in the same run, and the
table gives the ratio (base / this). Each tree runs in its own fresh process.

    python benchmarks/bench_compile.py [--base DIR] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROGRAMS = (  # (label, program, params): the 128-expert MoE first, at its defaults
    ("moe_dynamic (128 experts)", "programs/moe_dynamic.step", {}),
    ("moe_static (128 experts)", "programs/moe_static.step", {}),
    ("attention_dynamic", "programs/attention_dynamic.step", {}),
    ("decoder_dynamic (a layer)", "programs/decoder_dynamic.step", {}),
    ("swiglu", "programs/swiglu.step", {}),
)

# Run in a child process whose stepc is the tree under test: prints one JSON line per
# program, {"first": [wall, cpu], "rest": [[wall, cpu], ...]}.
_CHILD = """
import json, sys, time
from stepc.frontend import compile_file
repeat, jobs = int(sys.argv[1]), json.loads(sys.argv[2])
for path, params in jobs:
    times = []
    for _ in range(repeat + 1):
        wall, cpu = time.perf_counter(), time.process_time()
        compiled = compile_file(path, params)
        times.append([time.perf_counter() - wall, time.process_time() - cpu])
        assert compiled.ok, path
    print(json.dumps({"first": times[0], "rest": times[1:]}), flush=True)
"""


def measure(tree: Path, repeat: int) -> list[dict]:
    """The compile times of every program by the stepc in `tree`."""
    jobs = [[str(REPO / path), params] for _, path, params in PROGRAMS]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", _CHILD, str(repeat), json.dumps(jobs)],
                         env=env, cwd=str(tree), capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"compiling with {tree} failed:\n{out.stderr}")
    return [json.loads(line) for line in out.stdout.splitlines()]


def median(times: list[list[float]], which: int) -> float:
    return statistics.median(t[which] for t in times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", type=Path, default=None, metavar="DIR",
                    help="an earlier source tree to compare with (its stepc package)")
    ap.add_argument("--repeat", type=int, default=5, help="compiles after the first")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat: at least 1")
    if args.base is not None and not (args.base / "stepc" / "frontend.py").is_file():
        ap.error(f"--base {args.base}: not a stepc source tree")
    this = measure(REPO, args.repeat)
    base = measure(args.base.resolve(), args.repeat) if args.base else None
    print(f"compile times, seconds (median of {args.repeat} after the first; load "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs)")
    head = f"{'program':<28}{'first':>8}{'cpu':>8}{'median':>8}{'cpu':>8}"
    if base:
        head += f"{'base med':>10}{'cpu':>8}{'ratio(cpu)':>12}"
    print(head)
    for i, (label, _, _) in enumerate(PROGRAMS):
        t = this[i]
        row = (f"{label:<28}{t['first'][0]:>8.3f}{t['first'][1]:>8.3f}"
               f"{median(t['rest'], 0):>8.3f}{median(t['rest'], 1):>8.3f}")
        if base:
            b = base[i]
            row += (f"{median(b['rest'], 0):>10.3f}{median(b['rest'], 1):>8.3f}"
                    f"{median(b['rest'], 1) / median(t['rest'], 1):>11.2f}x")
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
