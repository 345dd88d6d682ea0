"""Benchmark: the CPU time (user + system) of short `stepc` commands, each a whole process
(interpreter start, imports, work, exit), against an older source tree measured in the
same run, runs interleaved; and the bare interpreter's start, which every command pays.

    python benchmarks/bench_startup.py --baseline OLD_TREE [--repeat 9]

OLD_TREE is a checkout of the code to compare with (say `git worktree add --detach OLD
COMMIT`); each tree runs as `python -m stepc` from its root, first on PYTHONPATH. Prints
medians, the ratio new/old of the whole command and of its part above the interpreter's
start, and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

JOBS = {  # name -> stepc arguments
    "--help": ["--help"],
    "check swiglu": ["check", "programs/swiglu.step"],
    "check --types swiglu": ["check", "--types", "programs/swiglu.step"],
    "check moe_dynamic (symbolic)": ["check", "programs/moe_dynamic.step"],
}
INTERPRETER = "python -c pass"


def cpu_seconds(argv: list[str], tree: Path) -> float:
    """User + system CPU seconds of one process run from the root of `tree` (`python -m`
    puts the working directory first on the module path)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed stepc runs from bytecode caches
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            cwd=tree, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(argv)} (PYTHONPATH={tree}): exit "
                 f"{os.waitstatus_to_exitcode(status)}\n{err}")
    return usage.ru_utime + usage.ru_stime


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, type=Path,
                    help="a source tree of the older code (its root holds `stepc/`)")
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    if not (args.baseline / "stepc" / "__init__.py").is_file():
        sys.exit(f"--baseline {args.baseline}: no stepc/__init__.py there")
    trees = {"new": ROOT, "old": args.baseline.resolve()}
    print(f"load average before: {load_average()}")
    runs: dict[tuple[str, str], list[float]] = {}
    for stepc_args in JOBS.values():  # a first run of each writes the bytecode caches
        for tree in trees.values():
            cpu_seconds([sys.executable, "-m", "stepc", *stepc_args], tree)
    for _ in range(args.repeat):  # interleaved: every variant sees the same machine state
        runs.setdefault((INTERPRETER, "new"), []).append(
            cpu_seconds([sys.executable, "-c", "pass"], ROOT))
        for name, stepc_args in JOBS.items():
            for label, tree in trees.items():
                runs.setdefault((name, label), []).append(
                    cpu_seconds([sys.executable, "-m", "stepc", *stepc_args], tree))
    start = statistics.median(runs[INTERPRETER, "new"])
    print(f"\nmedian CPU (user + system) of {args.repeat} runs each; "
          f"`{INTERPRETER}`: {start:.3f} s\n")
    print("| command | new | old | new / old | above the interpreter's start: new / old |")
    print("|---|---|---|---|---|")
    for name in JOBS:
        new, old = (statistics.median(runs[name, label]) for label in ("new", "old"))
        print(f"| `stepc {' '.join(JOBS[name])}` | {new:.3f} s | {old:.3f} s | "
              f"{new / old:.2f}x | {(new - start) / (old - start):.2f}x |")
    print(f"\nload average after: {load_average()}")


if __name__ == "__main__":
    main()
