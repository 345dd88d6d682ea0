"""The memory-model fidelity table of docs/dram.md: the paper's SwiGLU sweep (Figure 8) on
the HDL-validation fabric under each off-chip memory model.

Only the region between the BEGIN/END GENERATED markers of docs/dram.md is rewritten.

    python -m stepc.fidelity            rewrite the generated table
    python -m stepc.fidelity --check    exit 1 if the table is stale (CI)
    python -m stepc.fidelity --print    print the table
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from stepc.frontend import compile_file
from stepc.hw import load_config
from stepc.sim.run import simulate

BEGIN = "<!-- BEGIN GENERATED: fidelity -->"
END = "<!-- END GENERATED: fidelity -->"
ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "dram.md"
POINTS = [(tb, ti) for tb in (16, 32, 64) for ti in (16, 32, 64, 128, 256)]
MODELS = {  # column -> (preset, overrides)
    "ref": ("hdl-validation", ()),
    "fluid": ("hdl-validation", ("hbm.model=fluid",)),
    "dram": ("hdl-validation-dram", ()),
    "dram, tiled": ("hdl-validation-dram", ("dram.layout=tiled",)),
}


def measure() -> list[dict]:
    """Cycles, row-hit rate and bandwidth of every point under every model."""
    configs = {name: load_config(p, sets) for name, (p, sets) in MODELS.items()}
    rows = []
    for tb, ti in POINTS:
        typed = compile_file(str(ROOT / "programs" / "swiglu.step"), {"TB": tb, "TI": ti}).typed
        row = {"TB": tb, "TI": ti}
        for name, hw in configs.items():
            r = simulate(typed, hw, functional=False)
            row[name] = {"cycles": r.cycles, "hits": r.row_hit_rate,
                         "bw": r.achieved_bw / hw.peak_bw}
        rows.append(row)
    return rows


def render(rows: list[dict] | None = None) -> str:
    rows = rows if rows is not None else measure()
    names = list(MODELS)
    head = ["TB", "TI"] + [f"{n} cycles" for n in names] + \
        ["dram / ref", "tiled / ref", "dram row hits", "tiled row hits", "dram BW"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ref = r["ref"]["cycles"]
        cells = [str(r["TB"]), str(r["TI"])] + [f"{r[n]['cycles']:,}" for n in names] + [
            f"{r['dram']['cycles'] / ref:.2f}", f"{r['dram, tiled']['cycles'] / ref:.2f}",
            f"{100 * r['dram']['hits']:.1f}%", f"{100 * r['dram, tiled']['hits']:.1f}%",
            f"{100 * r['dram']['bw']:.0f}%"]
        lines.append("| " + " | ".join(cells) + " |")
    ref = np.array([r["ref"]["cycles"] for r in rows], dtype=float)
    corr = ", ".join(f"{n} {np.corrcoef(ref, [r[n]['cycles'] for r in rows])[0, 1]:.3f}"
                     for n in names[1:])
    lines += ["", f"Pearson correlation of cycles with `ref` over the {len(rows)} points: "
              f"{corr}."]
    return "\n".join(lines) + "\n"


def splice(text: str, generated: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{generated}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m stepc.fidelity",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the table is stale")
    ap.add_argument("--print", action="store_true", help="print the table")
    ap.add_argument("--doc", default=str(DOC), help="the document to update")
    args = ap.parse_args(argv)
    table = render()
    if args.print:
        sys.stdout.write(table)
        return 0
    doc = Path(args.doc)
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        print(f"{doc}: no generated-region markers", file=sys.stderr)
        return 1
    new = splice(text, table)
    if args.check:
        if new != text:
            print(f"{doc} is stale: run `python -m stepc.fidelity`", file=sys.stderr)
            return 1
        return 0
    doc.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
