"""Simulation CPU time of the speed issue's three programs, beside an older source tree.

    python benchmarks/bench_sim_programs.py [--base OLD] [--repeat 3] [--data DIR]

Programs: `decoder_dynamic` (a decoder layer), `moe_static` with Qwen3 dims at B = 64 and
TILE_N = 16, `attention_dynamic`; timing-only, the default hardware (`ref` HBM). With
`--data` (the paper's traces), also two Qwen3-30B-A3B layers lowered from the model's
config (`stepc from-torch --hf-config ... --layers 2`, as docs/torch.md runs them) with
the paper's KV lengths and routing. Each measurement is one process per tree and core
(`PYTHONPATH` set to the tree; the programs are this tree's files), compile outside the
clock, then `simulate` timed by `time.process_time`; they take turns. `this` runs this
tree's native core when built (`python hatch_build.py`), `this-python` the same tree with
`STEPC_PURE_PYTHON=1`. It prints each one's median CPU seconds, the ratios to this, and
the cycles, and exits 1 when cycles differ.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_line  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS = [("decoder_dynamic", {}), ("moe_static", {"B": 64, "TILE_N": 16}),
            ("attention_dynamic", {})]
MODEL = "qwen3-30b-a3b, 2 layers"  # from its config, with the paper's traces (--data)
KV_LENS = "azure_kv_trace/b64/conv_stdev0754_0181_0244.npy"
ROUTING = "expert_routing/qwen_b64/032_012.npz"


def model_program(data: str):
    """The two Qwen3-30B-A3B layers of docs/torch.md's "At real dims" and their traces."""
    import importlib.util

    from stepc.frontend import compile_text
    from stepc.torch import from_hf_config
    from stepc.traces import load_array, load_routing
    spec = importlib.util.spec_from_file_location(
        "published", os.path.join(ROOT, "tests", "test_torch_hf_decoder.py"))
    published = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(published)
    prog = from_hf_config(published.QWEN3_30B_A3B, layers=2, verify=False, batch=64,
                          past=6463, dtype="bf16",
                          schedule={"tiling": "dynamic", "attn_TILE_N": 32})
    routing = load_routing(os.path.join(data, ROUTING))
    traces = {"kv_lens": load_array(os.path.join(data, KV_LENS)), "routing_0": routing,
              "routing_1": routing}
    return compile_text(prog.text, "qwen2l.step").typed, traces


def measure(path: str, params: dict) -> dict:
    """One simulation of `path` (or of the model, with `params["data"]`) in this process:
    CPU seconds and cycles."""
    from stepc.frontend import compile_file
    from stepc.hw import load_config
    from stepc.sim.run import simulate
    if path == MODEL:
        typed, traces = model_program(params["data"])
    else:
        typed, traces = compile_file(path, params).typed, None
    hw = load_config(None, ())
    start = time.process_time()
    run = simulate(typed, hw, traces, functional=False)
    return {"cpu": time.process_time() - start, "cycles": run.cycles}


def in_tree(tree: str, name: str, params: dict, extra_env: dict[str, str]) -> dict:
    """`measure` in a fresh process importing stepc from `tree`."""
    path = name if name == MODEL else os.path.join(ROOT, "programs", f"{name}.step")
    env = {**os.environ, "PYTHONPATH": tree, **extra_env}
    out = subprocess.run([sys.executable, __file__, "--worker", path, json.dumps(params)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", help="an older source tree to time beside this one")
    ap.add_argument("--repeat", type=int, default=3, help="processes per program and tree")
    ap.add_argument("--data", help="the paper's traces (adds the two Qwen3 layers)")
    ap.add_argument("--only", help="comma-separated program names (the model: model)")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(measure(args.worker[0], json.loads(args.worker[1]))))
        return
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    sys.path.insert(0, ROOT)
    from stepc.sim.native import PURE_PYTHON_VARIABLE
    trees = {"this": (ROOT, {}), "this-python": (ROOT, {PURE_PYTHON_VARIABLE: "1"})}
    if args.base:
        trees["base"] = (os.path.abspath(args.base), {PURE_PYTHON_VARIABLE: "1"})
    programs = PROGRAMS + ([(MODEL, {"data": os.path.abspath(args.data)})] if args.data else [])
    if args.only:
        wanted = set(args.only.split(","))
        programs = [(n, p) for n, p in programs if (n if n != MODEL else "model") in wanted]
    print(machine_line())
    differ = False
    for name, params in programs:
        runs: dict[str, list[dict]] = {label: [] for label in trees}
        for _ in range(args.repeat):
            for label, (tree, extra_env) in trees.items():
                runs[label].append(in_tree(tree, name, params, extra_env))
        medians = {label: statistics.median(r["cpu"] for r in rs) for label, rs in runs.items()}
        cycles = {label: {r["cycles"] for r in rs} for label, rs in runs.items()}
        shown = {k: v for k, v in params.items() if k != "data"}
        line = f"{name} {shown or ''}: this {medians['this']:.2f} s" + "".join(
            f", {label} {medians[label]:.2f} s ({medians[label] / medians['this']:.2f}x)"
            for label in trees if label != "this")
        line += f"; cycles {', '.join(f'{c:,}' for c in sorted(set().union(*cycles.values())))}"
        print(line)
        if len(set().union(*cycles.values())) > 1:
            print(f"  cycles differ: {cycles}")
            differ = True
    print(machine_line())
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
