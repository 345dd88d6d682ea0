"""Benchmark: the paper's MoE points in timing-only mode on `paper-eval` (targets: Qwen3-30B-A3B
at B=64 under 10 s, at B=1024 under 60 s; Mixtral-8x7B at B=64 under 30 s). Uses the
paper's routing traces from ../shared/data when present, seeded synthetic routing otherwise.

    python benchmarks/bench_workloads.py [--model ref|fluid|dram] [--repeat 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
from machine import machine_line

from stepc.frontend import compile_file
from stepc.hw import load_config
from stepc.sim.run import simulate
from stepc.traces import load_routing, synthetic_routing

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "expert_routing"
MIXTRAL = {"D": 4096, "F": 14336, "E": 8, "K": 2}
POINTS = [
    ("Qwen3-30B-A3B", "qwen_b64", "moe_static", {"TILE_N": 16}),
    ("Qwen3-30B-A3B", "qwen_b64", "moe_dynamic", {}),
    ("Qwen3-30B-A3B", "qwen_b1024", "moe_static", {"B": 1024, "TILE_N": 64}),
    ("Qwen3-30B-A3B", "qwen_b1024", "moe_dynamic", {"B": 1024}),
    ("Mixtral-8x7B", "mixtral_b64", "moe_static", {**MIXTRAL, "TILE_N": 16}),
    ("Mixtral-8x7B", "mixtral_b64", "moe_dynamic", MIXTRAL),
]


def routing(name: str, batch: int, experts: int, k: int) -> tuple[np.ndarray, str]:
    files = sorted((DATA / name).glob("*.npz"))
    if files:
        return load_routing(str(files[0]), experts), "paper trace"
    return synthetic_routing(batch, experts, k, seed=0), "synthetic"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="ref", choices=["ref", "fluid", "dram"])
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    for model, trace, program, overrides in POINTS:
        typed = compile_file(f"programs/{program}.step", overrides).typed
        p = typed.program.params
        # the artifact ran Qwen at B=1024 with unbounded (1024-deep) FIFOs, the rest at 2
        depth = 1024 if p["B"] == 1024 else 2
        hw = load_config(None, (f"hbm.model={args.model}", f"fabric.fifo_depth={depth}"))
        ids, source = routing(trace, p["B"], p["E"], p["K"])
        walls = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            run = simulate(typed, hw, {"routing": ids}, functional=False)
            walls.append(time.perf_counter() - t0)
        if run.deadlock:
            raise SystemExit(f"{model} {program}: deadlock")
        req = run.read_requests + run.write_requests
        print(f"{model} B={p['B']} {program} {overrides.get('TILE_N', '')} ({source}, "
              f"{args.model}): {statistics.median(walls):.2f} s, {run.cycles:,} cycles, "
              f"{req / 1e6:.1f} M requests")
    print(machine_line())


if __name__ == "__main__":
    main()
