"""Benchmarks of the simulator: the 15-point SwiGLU sweep (target: under 5 s in total; the
`dram` memory model at most 3x the time of `ref`; also the `hdl-like` preset) and
throughput on a generated MoE layer (operator firings/s and 64-byte requests/s).

    python benchmarks/bench_sim.py [--repeat 5] [--experts 128]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_moe import generate  # noqa: E402
from machine import machine_line  # noqa: E402

from stepc.frontend import compile_file  # noqa: E402
from stepc.hw import load_config  # noqa: E402
from stepc.sim.run import simulate  # noqa: E402

SWEEP = [(tb, ti) for tb in (16, 32, 64) for ti in (16, 32, 64, 128, 256)]


PRESETS = {"ref": ("hdl-validation", ()), "fluid": ("hdl-validation", ("hbm.model=fluid",)),
           "dram": ("hdl-validation-dram", ()), "hdl-like": ("hdl-like", ())}


def swiglu_sweep(functional: bool, model: str = "ref") -> float:
    hw = load_config(*PRESETS[model])
    t0 = time.perf_counter()
    for tb, ti in SWEEP:
        typed = compile_file("programs/swiglu.step", {"TB": tb, "TI": ti}).typed
        simulate(typed, hw, functional=functional)
    return time.perf_counter() - t0


def moe(experts: int, model: str):
    hw = load_config(None, (f"hbm.model={model}",))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "moe.step")
        with open(path, "w") as f:
            f.write(generate(experts))
        typed = compile_file(path).typed
    t0 = time.perf_counter()
    r = simulate(typed, hw, functional=False)
    return time.perf_counter() - t0, r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5,
                    help="runs per measurement (benchmarks/README.md reports their median)")
    ap.add_argument("--experts", type=int, default=128)
    args = ap.parse_args()
    medians = {}
    for functional, model in ((False, "ref"), (False, "fluid"), (False, "dram"),
                              (False, "hdl-like"), (True, "ref")):
        runs = [swiglu_sweep(functional, model) for _ in range(args.repeat)]
        mode = "functional" if functional else "timing-only"
        medians[(functional, model)] = statistics.median(runs)
        print(f"swiglu 15-point sweep ({mode}, {PRESETS[model][0]}, {model}): median "
              f"{statistics.median(runs):.2f} s (min {min(runs):.2f}, n={args.repeat})")
    print(f"dram / ref wall time on the sweep: "
          f"{medians[(False, 'dram')] / medians[(False, 'ref')]:.2f}x (target: at most 3x)")
    moe_medians = {}
    for model in ("ref", "fluid", "dram"):
        walls, last = [], None
        for _ in range(args.repeat):
            wall, r = moe(args.experts, model)
            walls.append(wall)
            last = r
        r = last
        wall = moe_medians[model] = statistics.median(walls)
        requests = r.read_requests + r.write_requests
        elements = sum(n for _, _, n in r.fifo.values())
        print(f"moe {args.experts} experts (B=64, timing-only, {model}): median {wall:.2f} s, "
              f"{r.cycles:,} cycles, {requests:,} requests ({requests / wall / 1e6:.2f} M/s), "
              f"{elements:,} stream elements ({elements / wall / 1e3:.0f} k/s), "
              f"{r.cycles / wall / 1e3:.0f} k cycles/s")
    print(f"fluid against ref on the MoE layer: {moe_medians['ref'] / moe_medians['fluid']:.1f}x "
          f"faster")
    print(machine_line())


if __name__ == "__main__":
    main()
