"""Benchmark: the front end as a user meets it, whole process (start, imports, work, exit).

Three jobs, each run `--repeat` times (default 5), medians and peak memory printed:

  analyze-trace  stepc analyze programs/moe_static.step --trace routing=<qwen_b64/032_012.npz>
                 -D TILE_N=16                                  (target: <= 0.8 s)
  analyze-sym    the same without --trace, fully symbolic      (target: <= 1.2 s)
  check-moe128   stepc check on the generated 128-expert MoE   (target: <= 0.5 s)

Peak memory target: <= 150 MiB for each. With `--baseline PATH_TO_STEPC` (another install's
`stepc` executable, e.g. an earlier commit in a second environment) every job also runs
there, alternating run by run so both see the same machine load, and the ratio
baseline / this is printed.

    python benchmarks/bench_front.py [--stepc PATH] [--baseline PATH] [--repeat 5]
        [--data DIR]   # the traces (default: ../shared/data beside the repository)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_moe import generate  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACE = os.path.join("expert_routing", "qwen_b64", "032_012.npz")
TARGETS = {"analyze-trace": 0.8, "analyze-sym": 1.2, "check-moe128": 0.5}
MEMORY_TARGET_MIB = 150


def jobs(stepc: str, data: str, moe128: str) -> dict[str, list[str]]:
    program = "programs/moe_static.step"
    return {
        "analyze-trace": [stepc, "analyze", program, "--trace",
                          f"routing={os.path.join(data, TRACE)}", "-D", "TILE_N=16"],
        "analyze-sym": [stepc, "analyze", program, "-D", "TILE_N=16"],
        "check-moe128": [stepc, "check", moe128],
    }


def measure(cmd: list[str]) -> tuple[float, float]:
    """One run in a fresh measuring process, so peak memory is this run's alone."""
    probe = ("import os, resource, subprocess, sys, time; t = time.perf_counter(); "
             "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, "
             "stderr=subprocess.PIPE); w = time.perf_counter() - t; "
             "m = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024; "
             "sys.stderr.write(r.stderr.decode()) if r.returncode else None; "
             "print(w, m, r.returncode)")
    out = subprocess.run([sys.executable, "-c", probe, *cmd], cwd=ROOT, capture_output=True,
                         text=True)
    wall, mem, code = out.stdout.split()
    if int(code) != 0:
        raise SystemExit(f"failed ({code}): {' '.join(cmd)}\n{out.stderr}")
    return float(wall), float(mem)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stepc", default=shutil.which("stepc"),
                    help="the stepc executable to measure (default: the one on PATH)")
    ap.add_argument("--baseline", default=None, metavar="PATH_TO_STEPC",
                    help="a second stepc executable to compare with")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data"))
    args = ap.parse_args()
    if args.stepc is None:
        raise SystemExit("no stepc on PATH: give --stepc")
    if not os.path.exists(os.path.join(args.data, TRACE)):
        raise SystemExit(f"trace {TRACE} not found under {args.data}: give --data DIR")
    with tempfile.TemporaryDirectory() as d:
        moe128 = os.path.join(d, "moe128.step")
        with open(moe128, "w") as f:
            f.write(generate(128))
        sides = {"this": jobs(args.stepc, args.data, moe128)}
        if args.baseline:
            sides["baseline"] = jobs(args.baseline, args.data, moe128)
        results: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for job in TARGETS:
            for _ in range(args.repeat):
                for side, cmds in sides.items():  # alternate: both see the same load
                    results.setdefault((side, job), []).append(measure(cmds[job]))
    print(f"median of {args.repeat} whole-process runs; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    head = f"{'job':<14} {'target':>7} {'this':>8} {'peak MiB':>9}"
    if args.baseline:
        head += f" {'baseline':>9} {'peak MiB':>9} {'ratio':>6}"
    print(head)
    for job, target in TARGETS.items():
        runs = results[("this", job)]
        line = (f"{job:<14} {target:>6.1f}s {statistics.median(w for w, _ in runs):>7.2f}s "
                f"{max(m for _, m in runs):>9.0f}")
        if args.baseline:
            base = results[("baseline", job)]
            ratio = statistics.median(w for w, _ in base) / statistics.median(
                w for w, _ in runs)
            line += (f" {statistics.median(w for w, _ in base):>8.2f}s "
                     f"{max(m for _, m in base):>9.0f} {ratio:>5.2f}x")
        print(line)
    print(f"peak memory target: <= {MEMORY_TARGET_MIB} MiB")


if __name__ == "__main__":
    main()
