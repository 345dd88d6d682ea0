"""How close each hardware model comes to the paper's measurements: the SwiGLU sweep of
Figure 8 under every model, against the reference simulator's published cycles (15
points) and the HDL's (the 5 public points), and the calibration of the `hdl-like`
preset. The measurements are read from the paper's data directory (`fig8/`), never copied
into stepc.

    python -m stepc.reproduction.fidelity              rewrite the tables of docs/dram.md
    python -m stepc.reproduction.fidelity --check      exit 1 if they are stale
    python -m stepc.reproduction.fidelity --print      print the fidelity tables
    python -m stepc.reproduction.fidelity --calibrate  print the calibration of hdl-like
    python -m stepc.reproduction.fidelity --choices    print hdl-like's discrete choices
    --data DIR                                         the paper's data (../shared/data)

Only the regions between the BEGIN/END GENERATED markers of docs/dram.md are rewritten.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stepc.frontend import compile_file
from stepc.hw import load_config
from stepc.measure import measure as measure_run

ROOT = Path(__file__).resolve().parents[2]  # the repository
DOC = ROOT / "docs" / "dram.md"
DATA = ROOT.parent / "shared" / "data"
POINTS = [(tb, ti) for tb in (16, 32, 64) for ti in (16, 32, 64, 128, 256)]
MODELS = {  # column -> (preset, overrides)
    "ref": ("hdl-validation", ()),
    "fluid": ("hdl-validation", ("hbm.model=fluid",)),
    "dram": ("hdl-validation-dram", ()),
    "hdl-like": ("hdl-like", ()),
}
FITTED = "hbm.outstanding"  # the one fitted parameter of hdl-like, and its grid
GRID = (64, 96, 112, 128, 144, 160, 192, 256, 320, 384, 512, 0)
SENSITIVITY = {  # hdl-like with one choice changed -> the overrides
    "whole tiles (no streaming)": ("fabric.stream_tile=0",),
    "single-buffered ports": ("hbm.tile_buffers=1",),
    "no arbiter": ("hbm.arbiter_grants=0",),
    "no outstanding limit": ("hbm.outstanding=0",),
    "blocked layout (16 x 16 blocks)": ("dram.layout=blocked",),
    "row-major layout": ("dram.layout=row-major",),
    "packed placement": ("dram.placement=packed",),
    "16 channels, 64 B mapper": ("hbm.channels=16", "dram.mapper_bytes=64"),
    "4 Gb dies (nRFC 260 ns)": ("dram.nRFC=260",),
    "2 Gb dies (nRFC 160 ns)": ("dram.nRFC=160",),
}

# The discrete choices of hdl-like made against the same 5 public points as the fitted
# parameter: (choice, the source of the shipped value, the shipped value, the alternatives
# as (label, overrides)).
CHOICES = (
    ("channels", "8 HBM2 stacks of 8 channels (paper 4.5)", "64", (
        ("8", ("hbm.channels=8",)), ("16", ("hbm.channels=16",)),
        ("32", ("hbm.channels=32",)))),
    ("mapper granularity", "Ramulator 2.0's HBM2 transaction size (prefetch 2 x 64 bits)",
     "16 B", (("32 B", ("dram.mapper_bytes=32",)), ("64 B", ("dram.mapper_bytes=64",)))),
    ("address mapping", "Ramulator 2.0's default", "RoBaRaCoCh", (
        ("RoCoBaRaCh", ("dram.mapping=RoCoBaRaCh",)),
        ("ChRaBaRoCo", ("dram.mapping=ChRaBaRoCo",)))),
    ("tensor layout", "none: what an accelerator compiler would do", "tiled", (
        ("row-major", ("dram.layout=row-major",)), ("blocked", ("dram.layout=blocked",)),
        ("reference", ("dram.layout=reference",)))),
    ("tensor placement", "none: what an accelerator compiler would do", "staggered", (
        ("packed", ("dram.placement=packed",)),)),
    ("arbiter", "the HDL artifact's RamulatorArbiter.bsv (one round-robin arbiter)",
     "1 port per cycle", (("none", ("hbm.arbiter_grants=0",)),
                          ("2 ports per cycle", ("hbm.arbiter_grants=2",)))),
    ("port buffers", "paper 4.2: two tiles per off-chip operator", "2 tiles", (
        ("1 tile", ("hbm.tile_buffers=1",)),)),
    ("fabric granularity", "paper 4.5: 16 x 16 physical tiles", "16 x 16 streamed", (
        ("whole tiles", ("fabric.stream_tile=0",)),)),
    ("die density (refresh)", "none: HBM2's common 8 Gb dies (nRFC 350 ns)", "8 Gb", (
        ("4 Gb", ("dram.nRFC=260",)), ("2 Gb", ("dram.nRFC=160",)))),
)


@dataclass
class Measured:
    """The paper's numbers for the sweep: reference-simulator and HDL cycles by point."""

    sim: dict[tuple[int, int], int]
    hdl: dict[tuple[int, int], int]


def load_measured(data: Path) -> Measured | None:
    """The published Figure 8 cycles under `data/fig8/`, or None without them."""
    def read(name: str, column: str) -> dict[tuple[int, int], int]:
        with open(data / "fig8" / name, newline="", encoding="utf-8") as f:
            return {(int(r["tile_b"]), int(r["tile_i"])): int(r[column])
                    for r in csv.DictReader(f)}
    try:
        return Measured(read("swiglu_paper_sim.csv", "sim_cycles"),
                        read("swiglu_hdl.csv", "hdl_cycles"))
    except (OSError, KeyError, ValueError):
        return None


def measure(model: str | tuple, points=POINTS) -> dict[tuple[int, int], int]:
    """Cycles of the sweep's points under a model (a MODELS key or (preset, sets))."""
    preset, sets = MODELS[model] if isinstance(model, str) else model
    hw = load_config(preset, tuple(sets))
    out = {}
    for tb, ti in points:
        typed = compile_file(str(ROOT / "programs" / "swiglu.step"), {"TB": tb, "TI": ti}).typed
        out[(tb, ti)] = measure_run(typed, hw).cycles
    return out


def agreement(ours: dict, theirs: dict) -> dict:
    """MAPE, largest error, Pearson correlation and fastest point over their points."""
    pts = sorted(theirs)
    a = np.array([ours[p] for p in pts], dtype=float)
    b = np.array([theirs[p] for p in pts], dtype=float)
    err = (a - b) / b
    return {"mape": float(np.mean(np.abs(err))), "max": float(np.max(np.abs(err))),
            "pearson": float(np.corrcoef(a, b)[0, 1]), "fastest": min(pts, key=ours.get),
            "their_fastest": min(pts, key=theirs.get)}


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def render(measured: Measured) -> str:
    """Per-point cycles and errors, then one agreement line per model and reference."""
    runs = {name: measure(name) for name in MODELS}
    names = list(MODELS)
    head = ["TB", "TI"] + [f"{n}" for n in names] + [f"{n} vs sim" for n in names] + \
        ["hdl-like vs HDL"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in POINTS:
        sim = measured.sim[p]
        cells = [str(p[0]), str(p[1])] + [f"{runs[n][p]:,}" for n in names] + \
            [_pct(runs[n][p] / sim - 1) for n in names]
        cells.append(_pct(runs["hdl-like"][p] / measured.hdl[p] - 1) if p in measured.hdl
                     else "")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| model | vs | points | MAPE | max error | Pearson | fastest point "
              "(theirs) |", "|---|---|---|---|---|---|---|"]
    for ref_name, ref in (("reference simulator", measured.sim), ("HDL", measured.hdl)):
        for n in names:
            g = agreement(runs[n], ref)
            lines.append(f"| {n} | {ref_name} | {len(ref)} | {100 * g['mape']:.2f}% | "
                         f"{100 * g['max']:.2f}% | {g['pearson']:.4f} | "
                         f"TB={g['fastest'][0]}, TI={g['fastest'][1]} "
                         f"(TB={g['their_fastest'][0]}, TI={g['their_fastest'][1]}) |")
    return "\n".join(lines) + "\n"


_fits: dict[tuple, dict] = {}  # hdl-like overrides -> agreement with the HDL (one process)


def hdl_fit(measured: Measured, sets: tuple = ()) -> dict:
    """hdl-like's agreement with the HDL's public points under `sets`, measured once."""
    if sets not in _fits:
        pts = sorted(measured.hdl)
        _fits[sets] = agreement(measure(("hdl-like", sets), pts), measured.hdl)
    return _fits[sets]


def calibrate(measured: Measured) -> str:
    """The fit of hdl-like's one free parameter on the HDL points, and how the fit moves
    when each structural choice of the preset is changed."""
    pts = sorted(measured.hdl)
    lines = [f"| `{FITTED}` | MAPE | max error | Pearson |", "|---|---|---|---|"]
    for value in GRID:
        g = agreement(measure(("hdl-like", (f"{FITTED}={value}",)), pts), measured.hdl)
        lines.append(f"| {value or 'no limit'} | {100 * g['mape']:.2f}% | "
                     f"{100 * g['max']:.2f}% | {g['pearson']:.4f} |")
    lines += ["", "| hdl-like with | MAPE | max error | Pearson |", "|---|---|---|---|"]
    for label, sets in {"(as shipped)": (), **SENSITIVITY}.items():
        g = hdl_fit(measured, sets)
        lines.append(f"| {label} | {100 * g['mape']:.2f}% | {100 * g['max']:.2f}% | "
                     f"{g['pearson']:.4f} |")
    return "\n".join(lines) + "\n"


def choices(measured: Measured) -> str:
    """Each discrete choice of hdl-like: the shipped value and every alternative tried, with
    the error on the 5 public HDL points (at the fitted value), and what supports it."""
    def row(choice: str, value: str, sets: tuple, source: str) -> str:
        g = hdl_fit(measured, sets)
        return (f"| {choice} | {value} | {100 * g['mape']:.2f}% | {100 * g['max']:.2f}% | "
                f"{g['pearson']:.4f} | {source} |")
    lines = ["| choice | value | MAPE | max error | Pearson | support |",
             "|---|---|---|---|---|---|"]
    for choice, source, shipped, alternatives in CHOICES:
        lines.append(row(choice, f"**{shipped}** (shipped)", (), source))
        lines += [row("", label, sets, "") for label, sets in alternatives]
    return "\n".join(lines) + "\n"


def splice(text: str, region: str, generated: str) -> str:
    begin, end = f"<!-- BEGIN GENERATED: {region} -->", f"<!-- END GENERATED: {region} -->"
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{generated}{end}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m stepc.reproduction.fidelity",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the tables are stale")
    ap.add_argument("--print", action="store_true", help="print the fidelity tables")
    ap.add_argument("--calibrate", action="store_true", help="print the calibration")
    ap.add_argument("--choices", action="store_true",
                    help="print the discrete choices of hdl-like and their alternatives")
    ap.add_argument("--data", default=str(DATA), help="the paper's data directory")
    ap.add_argument("--doc", default=str(DOC), help="the document to update")
    args = ap.parse_args(argv)
    measured = load_measured(Path(args.data))
    if measured is None:
        print(f"{args.data}: no fig8/swiglu_paper_sim.csv and fig8/swiglu_hdl.csv (the "
              "paper's data); give --data DIR", file=sys.stderr)
        return 2
    if args.print or args.calibrate or args.choices:
        make = calibrate if args.calibrate else choices if args.choices else render
        sys.stdout.write(make(measured))
        return 0
    doc = Path(args.doc)
    text = doc.read_text(encoding="utf-8")
    new = text
    for region, make in (("fidelity", render), ("calibration", calibrate),
                         ("choices", choices)):
        if f"<!-- BEGIN GENERATED: {region} -->" not in text:
            print(f"{doc}: no generated-region markers for {region}", file=sys.stderr)
            return 1
        new = splice(new, region, make(measured))
    if args.check:
        if new != text:
            print(f"{doc} is stale: run `python -m stepc.reproduction.fidelity`", file=sys.stderr)
            return 1
        return 0
    doc.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
