"""Benchmark: `stepc mcp` answering `check` on the bundled 128-expert MoE layer
(programs/moe_dynamic.step), driven over stdio by the MCP SDK's client as an agent drives
it. The first call of a session compiles the program in the worker (a real first compile:
the worker has loaded the front end, nothing of this program); the later ones are
answered from its cache of checked programs. Each session starts a fresh server; the
first call is made as soon as the server has answered `initialize`.

Prints each session's first call and the median of the rest, the medians over sessions,
and the CPU time of the same first call in-process (a fresh process, the worker's tools
warmed as the worker warms them): wall times on a loaded machine run well above it.

    python benchmarks/bench_mcp.py [--sessions 3] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import anyio
from machine import machine_line
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

REPO = Path(__file__).resolve().parents[1]
TARGET = 1.5  # seconds the first check of the 128-expert program may take on a quiet machine
CALL = ("check", {"path": "programs/moe_dynamic.step"})

# The worker's first call, in-process: its wall and CPU seconds.
_IN_PROCESS = """
import os, time
from stepc.mcp.tools import Tools
from stepc.mcp.workspace import Workspace
tools = Tools(Workspace(os.getcwd()))
tools.warm()
wall, cpu = time.perf_counter(), time.process_time()
assert tools.check({"path": "programs/moe_dynamic.step"})["ok"]
print(time.perf_counter() - wall, time.process_time() - cpu)
"""


async def session(repeat: int) -> list[float]:
    server = StdioServerParameters(command=sys.executable, args=["-m", "stepc", "mcp"],
                                   env={"PYTHONPATH": str(REPO)}, cwd=str(REPO))
    times = []
    async with stdio_client(server) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        for _ in range(repeat + 1):
            start = time.perf_counter()
            result = await client.call_tool(*CALL)
            times.append(time.perf_counter() - start)
            assert not result.is_error and result.structured_content["ok"]
    return times


def in_process() -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", _IN_PROCESS], cwd=str(REPO), check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                         text=True)
    wall, cpu = map(float, out.stdout.split())
    return wall, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=3, help="fresh servers, one after another")
    ap.add_argument("--repeat", type=int, default=5, help="cached calls after the first")
    args = ap.parse_args()
    if args.sessions < 1 or args.repeat < 1:
        ap.error("--sessions and --repeat: at least 1")
    firsts, cached = [], []
    for i in range(args.sessions):
        first, *rest = anyio.run(session, args.repeat)
        firsts.append(first)
        cached.append(statistics.median(rest))
        print(f"session {i + 1}: first {first:.3f} s, cached {cached[-1]:.3f} s "
              f"(median of {len(rest)})")
    local = [in_process() for _ in range(args.sessions)]
    first = statistics.median(firsts)
    print(f"check moe_dynamic.step (128 experts) over MCP: first {first:.3f} s, cached "
          f"{statistics.median(cached):.3f} s (medians of {args.sessions} sessions); "
          f"target {TARGET} s")
    print(f"the same first check in-process: wall {statistics.median(w for w, _ in local):.3f}"
          f" s, CPU {statistics.median(c for _, c in local):.3f} s")
    print(machine_line())
    return 0 if first < TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
