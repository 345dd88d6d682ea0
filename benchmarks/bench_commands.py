"""Benchmark: the interactive-speed targets, each a whole `stepc` process as a user runs it
(process start, imports, work, exit): median wall time and peak memory over repeated runs,
and the ratio to a baseline stepc (an earlier commit installed in a second environment)
measured in the same run, runs of the two interleaved.

    python benchmarks/bench_commands.py [--repeat 5] [--baseline /path/to/old/bin/stepc]...
        [--data ../shared/data] [--only sim-qwen,sim-mixtral] [--reproduce]

`--baseline` may be given more than once (say, the code before all speed work and the
last release): each gets its own median and speedup columns.

Jobs that need the paper's traces are skipped when `--data` has no such file. `--reproduce`
adds `stepc reproduce all` (minutes per run; run once each unless `--repeat` says more).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from gen_moe import generate  # noqa: E402

QWEN = "expert_routing/qwen_b64/032_012.npz"
MIXTRAL = "expert_routing/mixtral_b64/008_010.npz"
MIXTRAL_DIMS = ["-D", "D=4096", "-D", "F=14336", "-D", "E=8", "-D", "K=2"]


def jobs(data: Path, moe128: str, out: str) -> dict[str, tuple[str, list[str], str | None]]:
    """name -> (target, stepc arguments, trace the job needs or None)."""
    static = str(ROOT / "programs" / "moe_static.step")
    sim = ["sim", static, "--timing-only", "-D", "TILE_N=16"]
    return {
        "analyze-trace": ("<= 0.8 s", ["analyze", static, "--trace",
                                       f"routing={data / QWEN}", "-D", "TILE_N=16"], QWEN),
        "analyze-symbolic": ("<= 1.2 s", ["analyze", static, "-D", "TILE_N=16"], None),
        "check-128": ("<= 0.5 s", ["check", moe128], None),
        "sim-qwen": ("<= 1.0 s", sim + ["--trace", f"routing={data / QWEN}"], QWEN),
        "sim-mixtral": ("<= 3.0 s", sim + MIXTRAL_DIMS + ["--trace",
                                                          f"routing={data / MIXTRAL}"],
                        MIXTRAL),
        "reproduce-all": ("<= 180 s", ["reproduce", "all", "--data", str(data), "-j", "2",
                                       "--fresh", "--out", out], QWEN),
    }


def run_once(stepc: str, args: list[str]) -> tuple[float, float, float]:
    """Wall seconds, peak resident MiB and CPU seconds (user + system) of one whole process
    (on a shared machine the CPU time says what the wall time cannot)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([stepc, *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):  # 1: a reproduce with claims not reproduced is still a run
        sys.exit(f"{stepc} {' '.join(args)}: exit {code}\n{proc.stderr.read().decode()}")
    proc.stderr.close()
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--baseline", action="append", default=[],
                    help="another stepc executable to compare with (repeatable)")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--only", help="comma-separated job names")
    ap.add_argument("--reproduce", action="store_true", help="add `stepc reproduce all`")
    args = ap.parse_args()
    stepc = shutil.which("stepc") or sys.exit("stepc is not installed")
    data = Path(args.data)
    with tempfile.TemporaryDirectory() as tmp:
        moe128 = os.path.join(tmp, "moe128.step")
        Path(moe128).write_text(generate(128))
        table = jobs(data, moe128, os.path.join(tmp, "reproduction"))
        names = args.only.split(",") if args.only else [
            n for n in table if n != "reproduce-all" or args.reproduce]
        extra = "".join(f" baseline {i + 1} median (CPU) | speedup {i + 1} |"
                        for i in range(len(args.baseline)))
        print(f"| job | target | median (CPU) | peak MiB |{extra}")
        print("|---|---|---|---|" + "---|---|" * len(args.baseline))
        for name in names:
            target, argv, needs = table[name]
            if needs and not (data / needs).exists():
                print(f"| {name} | {target} | skipped: no {needs} under --data |")
                continue
            repeat = 1 if name == "reproduce-all" and args.repeat == 5 else args.repeat
            ours: list[tuple[float, float, float]] = []
            base: list[list[tuple[float, float, float]]] = [[] for _ in args.baseline]
            for _ in range(repeat):  # interleaved: all see the same machine state
                ours.append(run_once(stepc, argv))
                for runs, other in zip(base, args.baseline, strict=True):
                    runs.append(run_once(other, argv))
            wall = statistics.median(w for w, _, _ in ours)
            cpu = statistics.median(c for _, _, c in ours)
            peak = max(m for _, m, _ in ours)
            row = f"| {name} | {target} | {wall:.2f} s ({cpu:.2f} s) | {peak:.0f} |"
            for runs in base:
                bwall = statistics.median(w for w, _, _ in runs)
                bcpu = statistics.median(c for _, _, c in runs)
                row += f" {bwall:.2f} s ({bcpu:.2f} s) | {bwall / wall:.2f}x |"
            print(row, flush=True)


if __name__ == "__main__":
    main()
