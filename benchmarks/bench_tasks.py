"""Benchmark: `stepc tasks check` of each task's reference solution, seed 3, in one warm
Python process (the reference and the candidate run, inputs drawn, outputs compared), and
the same check of one task as a whole command (process start and imports added).

Prints each task's reference cycles and the CPU seconds of its first check (a second check
of the same seed reuses the reference's run), then the command's median wall and CPU time.

    python benchmarks/bench_tasks.py [--repeat 3] [--command-task rmsnorm]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time

from machine import machine_line

from stepc.tasks import check, load_task, task_names

SEED = 3


def children_cpu() -> float:
    """CPU seconds (user + system) of the child processes waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs of the command (median)")
    ap.add_argument("--command-task", default="rmsnorm", help="the task timed as a command")
    args = ap.parse_args()
    warm = load_task(args.command_task)  # imports and caches loaded, on another seed's run
    check(warm, warm.solution, seed=SEED + 1)
    print(f"{'task':24} {'reference cycles':>16} {'check CPU s':>12}")
    for name in task_names():
        task = load_task(name)
        t0 = time.process_time()
        result = check(task, task.solution, seed=SEED)
        cpu = time.process_time() - t0
        assert result.passed, (name, result.reason)
        cycles = result.reference.cycles if result.reference else 0
        print(f"{name:24} {cycles:16,} {cpu:12.2f}")
    walls, cpus = [], []
    for _ in range(args.repeat):
        task = load_task(args.command_task)
        before, t0 = children_cpu(), time.perf_counter()
        subprocess.run([sys.executable, "-m", "stepc", "tasks", "check", args.command_task,
                        str(task.solution), "--seed", str(SEED)], check=True,
                       capture_output=True)
        walls.append(time.perf_counter() - t0)
        cpus.append(children_cpu() - before)
    print(f"`stepc tasks check {args.command_task}` as a command: median wall "
          f"{statistics.median(walls):.2f} s, CPU {statistics.median(cpus):.2f} s")
    print(machine_line())


if __name__ == "__main__":
    main()
