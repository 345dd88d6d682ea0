"""Benchmark: the front end's compile (parse, elaborate, type/shape-check) of bundled
programs, in-process: the first compile of each program in a fresh process (warmed with a
one-line program, as the MCP worker is; median over `--fresh` processes) and the median
of repeated compiles of the same text (which reuse its syntax trees, as the test suite and
the servers do), wall and CPU.

With `--base DIR` (a checkout of an earlier commit, e.g. `git worktree add /tmp/base
HEAD~3`), the same programs are compiled by that tree's stepc in the same run, the two
trees' processes taking turns, and the table gives the CPU-time ratios (base / this).

    python benchmarks/bench_compile.py [--base DIR] [--fresh 3] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from machine import machine_line

REPO = Path(__file__).resolve().parents[1]
PROGRAMS = (  # (label, program, params): the 128-expert MoE first, at its defaults
    ("moe_dynamic (128 experts)", "programs/moe_dynamic.step", {}),
    ("moe_static (128 experts)", "programs/moe_static.step", {}),
    ("attention_dynamic", "programs/attention_dynamic.step", {}),
    ("decoder_dynamic (a layer)", "programs/decoder_dynamic.step", {}),
    ("swiglu", "programs/swiglu.step", {}),
)

# Run in a child process whose stepc is the tree under test, once per program: prints
# {"first": [wall, cpu], "rest": [[wall, cpu], ...]}.
_CHILD = """
import json, sys, time
from stepc.frontend import compile_file, compile_source
from stepc.source import SourceFile
compile_source(SourceFile("<warm-up>", "param N = 1\\n"))
path, params, repeat = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
times = []
for _ in range(repeat + 1):
    wall, cpu = time.perf_counter(), time.process_time()
    compiled = compile_file(path, params)
    times.append([time.perf_counter() - wall, time.process_time() - cpu])
    assert compiled.ok, path
print(json.dumps({"first": times[0], "rest": times[1:]}))
"""


def measure(tree: Path, path: str, params: dict, repeat: int) -> dict:
    """The compile times of one program by the stepc in `tree`, in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", _CHILD, str(REPO / path), json.dumps(params),
                          str(repeat)], env=env, cwd=str(tree), capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"compiling {path} with {tree} failed:\n{out.stderr}")
    return json.loads(out.stdout)


def median(times: list[list[float]], which: int) -> float:
    return statistics.median(t[which] for t in times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", type=Path, default=None, metavar="DIR",
                    help="an earlier source tree to compare with (its stepc package)")
    ap.add_argument("--fresh", type=int, default=3, help="fresh processes per program")
    ap.add_argument("--repeat", type=int, default=5, help="compiles after the first")
    args = ap.parse_args()
    if args.repeat < 1 or args.fresh < 1:
        ap.error("--fresh and --repeat: at least 1")
    if args.base is not None and not (args.base / "stepc" / "frontend.py").is_file():
        ap.error(f"--base {args.base}: not a stepc source tree")
    print(f"compile times, seconds: the first in a fresh process (median of {args.fresh}), "
          f"and the median of {args.repeat} more in each")
    head = f"{'program':<28}{'first':>7}{'cpu':>7}{'repeat':>8}{'cpu':>7}"
    if args.base:
        head += f"{'base first cpu':>16}{'repeat cpu':>12}{'ratio first':>13}{'repeat':>8}"
    print(head)
    trees = [REPO] + ([args.base.resolve()] if args.base else [])
    for label, path, params in PROGRAMS:
        runs: dict[Path, list[dict]] = {tree: [] for tree in trees}
        for _ in range(args.fresh):
            for tree in trees:
                runs[tree].append(measure(tree, path, params, args.repeat))
        (first, rest), *base = [([r["first"] for r in rs], [t for r in rs for t in r["rest"]])
                                for rs in runs.values()]
        row = (f"{label:<28}{median(first, 0):>7.3f}{median(first, 1):>7.3f}"
               f"{median(rest, 0):>8.3f}{median(rest, 1):>7.3f}")
        if base:
            b_first, b_rest = base[0]
            row += (f"{median(b_first, 1):>16.3f}{median(b_rest, 1):>12.3f}"
                    f"{median(b_first, 1) / median(first, 1):>12.2f}x"
                    f"{median(b_rest, 1) / median(rest, 1):>7.2f}x")
        print(row, flush=True)
    print(machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
