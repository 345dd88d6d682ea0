"""docs/energy.md's study: energy and area against cycles for the Figure 9 MoE layer (Qwen3,
B = 64: static tiling over TILE_N, dynamic tiling) and for decode attention (coarse,
interleaved and dynamic parallelisation over the region count R), on paper-eval with the
`ref` memory model.

    python benchmarks/energy_study.py [--data ../shared/data] [-j 2] [--out energy-study]

With `--data`, the paper's Qwen3 routing trace (`expert_routing/qwen_b64/`) and the
high-spread Azure KV-length window of Figure 14 (`azure_kv_trace/b64/conv_stdev1374_*`);
without it, the programs' seeded default traces. Prints one Markdown table per study
(energy by component in mJ, area, compute units) and the Pareto-optimal points over energy
and cycles; writes the sweeps to OUT/*.jsonl and the plots (energy vs cycles, area vs
cycles) to docs/images/energy-*.png.
"""

from __future__ import annotations

import argparse
import glob
from pathlib import Path

from stepc import sweep
from stepc.energy import COMPONENTS
from stepc.explore.pareto import pareto_front
from stepc.explore.plot import scatter

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
ROUTING = "expert_routing/qwen_b64/*.npz"
KV_LENS = "azure_kv_trace/b64/conv_stdev1374_*.npy"  # Figure 14's high-spread window
ADDER_LEAKAGE = 7.98  # mW/mm2: Aladdin's 32-bit adder (docs/energy.md)


def _trace(data: str | None, pattern: str, name: str) -> dict[str, str]:
    if data is None:
        return {}
    found = sorted(glob.glob(str(Path(data) / pattern)))
    if not found:
        raise SystemExit(f"--data {data}: no {pattern} in it")
    return {name: found[0]}


def _program(path: str) -> str:
    return str(ROOT / "programs" / path)


def moe(data: str | None, jobs: int, out: Path) -> list[dict]:
    """Static tiling over TILE_N and dynamic tiling (its own BW 6400, and 4096 as static's);
    TILE_N = 32 again with Aladdin's adder leakage in place of its multiplier's."""
    traces = _trace(data, ROUTING, "routing")
    runs = [sweep([_program("moe_static.step"), _program("moe_dynamic.step")],
                  grid={"TILE_N": [8, 16, 32, 64]}, traces=traces, jobs=jobs,
                  out=str(out / "moe.jsonl"), resume=True),
            sweep([_program("moe_dynamic.step")], params={"BW": 4096}, traces=traces,
                  jobs=jobs, out=str(out / "moe_equal_bw.jsonl"), resume=True),
            sweep([_program("moe_static.step")], params={"TILE_N": 32}, traces=traces,
                  set=[f"energy.leakage_mw_per_mm2={ADDER_LEAKAGE}"], jobs=jobs,
                  out=str(out / "moe_adder_leakage.jsonl"), resume=True)]
    return [r for run in runs for r in run.records]


def attention(data: str | None, jobs: int, out: Path) -> list[dict]:
    """The three parallelisations over R = 2 .. 16 (coarse in blocks of 4 requests, so
    that 16 blocks feed 16 regions)."""
    traces = _trace(data, KV_LENS, "kv_lens")
    grid = {"R": [2, 4, 8, 16]}
    runs = [sweep([_program("attention_coarse.step")], grid=grid, params={"NB": 4},
                  traces=traces, jobs=jobs, out=str(out / "attention_coarse.jsonl"),
                  resume=True),
            sweep([_program("attention_interleaved.step"), _program("attention_dynamic.step")],
                  grid=grid, traces=traces, jobs=jobs, out=str(out / "attention.jsonl"),
                  resume=True)]
    return [r for run in runs for r in run.records]


def _series(r: dict) -> str:
    """The program, with the params and settings it runs under beyond the swept one."""
    fixed = [f"{k}={v}" for k, v in r["params"].items() if k not in ("TILE_N", "R")]
    return " ".join([Path(r["program"]).stem, *fixed, *r["sets"]])


def _name(r: dict) -> str:
    swept = [f"{k}={v}" for k, v in r["params"].items() if k in ("TILE_N", "R")]
    return " ".join([_series(r), *swept])


def table(records: list[dict]) -> str:
    """One row per point: cycles, energy, its dynamic part and its components (mJ), area,
    compute units."""
    head = ["point", "cycles", "energy mJ", "dynamic", *COMPONENTS, "area mm2", "units"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        parts = [f"{r[f'energy_{c}_j'] * 1e3:.4g}" for c in COMPONENTS]
        rows.append(f"| {_name(r)} | {r['cycles']:,} | {r['energy_j'] * 1e3:.4g} | "
                    f"{r['energy_dynamic_j'] * 1e3:.4g} | "
                    + " | ".join(parts) + f" | {r['area_mm2']:,.1f} | {r['compute_units']:,} |")
    return "\n".join(rows)


def front(records: list[dict]) -> str:
    """The points no other beats in both energy and cycles."""
    best = pareto_front([(r["energy_j"], r["cycles"]) for r in records])
    return ", ".join(_name(records[i]) for i in sorted(best, key=lambda i: records[i]["cycles"]))


def plots(records: list[dict], stem: str, label: str) -> None:
    """Energy and area against cycles, one series per program and setting (the default
    coefficients only)."""
    shown = [{**r, "series": _series(r)} for r in records if not r["sets"]]
    for metric in ("energy_j", "area_mm2"):
        path = IMAGES / f"energy-{stem}-{metric.split('_')[0]}.png"
        scatter(shown, "cycles", metric, str(path), label=label, group="series", force=True)
        print(f"wrote {path.relative_to(ROOT)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="the paper's data folder (default: seeded traces)")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--out", default="energy-study", help="folder of the sweeps' records")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    IMAGES.mkdir(exist_ok=True)
    print(f"traces: {'the paper' if args.data else 'seeded defaults'}")
    for stem, label, study in (("moe", "TILE_N", moe), ("attention", "R", attention)):
        records = study(args.data, args.jobs, out)
        failed = [r for r in records if r["status"] != "ok"]
        if failed:
            raise SystemExit(f"{_name(failed[0])}: {failed[0].get('error')}")
        default = [r for r in records if not r["sets"]]
        print(f"\n## {stem}\n\n{table(records)}\n\nPareto-optimal over energy and cycles: "
              f"{front(default)}\n")
        plots(records, stem, label)


if __name__ == "__main__":
    main()
