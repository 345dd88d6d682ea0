"""Benchmark: `stepc check` on a generated 128-expert MoE layer (target: median < 2 s).

Measures the whole command as a user runs it (process start, parse, elaborate, check) and
the in-process front end alone, and prints medians over repeated runs.

    python benchmarks/bench_check.py [--experts 128] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_moe import generate  # noqa: E402
from machine import machine_line  # noqa: E402

from stepc.frontend import compile_file  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, f"moe{args.experts}.step")
        with open(path, "w") as f:
            f.write(generate(args.experts))
        result = compile_file(path)
        assert result.ok, "generated program must check clean"
        n_nodes = len(result.typed.program.nodes)
        cli, inproc = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "stepc", "check", path], check=True)
            cli.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            compile_file(path)
            inproc.append(time.perf_counter() - t0)
    print(f"program: {args.experts} experts, {n_nodes} operator instances")
    print(f"stepc check (CLI):   median {statistics.median(cli):.3f} s  "
          f"(min {min(cli):.3f}, max {max(cli):.3f}, n={args.repeat})")
    print(f"front end in-process: median {statistics.median(inproc):.3f} s  "
          f"(min {min(inproc):.3f}, max {max(inproc):.3f})")
    print(machine_line())


if __name__ == "__main__":
    main()
