"""The measured section of docs/fifo.md, generated from runs: `stepc fifo` on the bundled
MoE and attention programs and on `moe_static` at larger batches, each answer confirmed
by the run of the program with its depths written into the text.

    python -m stepc.fifo.measured            rewrite the generated region of docs/fifo.md
    python -m stepc.fifo.measured --check    exit 1 if it is stale
    python -m stepc.fifo.measured --print    print the generated region

Only the region between the BEGIN/END GENERATED markers (`fifo-measured`) is rewritten.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "fifo.md"
REGION = "fifo-measured"
HW = "paper-eval"
TOLERANCE = 0.01
CASES = (("moe_static.step", {}), ("moe_dynamic.step", {}), ("attention_dynamic.step", {}),
         ("moe_static.step", {"B": 256, "TILE_N": 16}),
         ("moe_static.step", {"B": 1024, "TILE_N": 16}))
DEEPEST = 6  # calls named per case, the most bytes first


@dataclass
class Case:
    """One program's search, its confirmation and what the depths cost."""

    label: str
    unbounded: int
    cycles: int
    within: bool
    uniform_cycles: int | None
    fifo_bytes: int
    uniform_bytes: int
    runs: int
    confirmed_cycles: int
    confirmed_bytes: int | None
    files: list[str]
    deepest: list[str]
    fan_outs: list[str]


def run_case(name: str, params: dict[str, int]) -> Case:
    """Search, confirm and price one program (`programs/<name>` under `params`)."""
    from stepc.fifo.confirm import confirm
    from stepc.fifo.search import element_bytes, search_depths
    from stepc.fifo.static import analyze_fifos
    from stepc.fifo.trials import default_jobs
    from stepc.frontend import compile_file
    from stepc.hw import load_config

    path = f"programs/{name}"
    compiled = compile_file(str(ROOT / path), params)
    if not compiled.ok:
        raise SystemExit(f"{path}: does not compile")
    hw = load_config(HW)
    typed = compiled.typed
    found = search_depths(analyze_fifos(typed), hw, tolerance=TOLERANCE, jobs=default_jobs())
    if not found.cycles:
        raise SystemExit(f"{path}: the search found no depths that complete")
    sizes = {c.key: [element_bytes(typed, k, found.bindings) for k in c.edges]
             for c in found.classes}
    if any(None in v for v in sizes.values()):
        raise SystemExit(f"{path}: a FIFO's element size stays symbolic")
    done = confirm(compiled, found.classes, hw)
    total = sum(c.depth * sum(sizes[c.key]) for c in found.classes)
    why = done.disagreement(found.cycles, total)
    if why is not None:
        raise SystemExit(f"{path}: not confirmed: {why}")
    preset = hw.fabric.fifo_depth
    label = f"`{name}`" + "".join(f" -D {k}={v}" for k, v in params.items())
    root = str(ROOT) + "/"
    return Case(label, found.unbounded_cycles, found.cycles, found.within_tolerance,
                found.uniform_cycles, total, sum(preset * sum(v) for v in sizes.values()),
                found.runs, done.cycles, done.fifo_bytes,
                sorted(f.removeprefix(root) for f in done.texts),
                _deepest(typed, found.classes, sizes, preset, root),
                [f"`{typed.program.nodes[n.edge[0]].port_label(n.edge[1])}` {n.held}"
                 for n in found.fan_outs])


def _deepest(typed, classes, sizes, preset, root) -> list[str]:
    """The calls whose FIFOs the search made deeper than the preset, the most bytes first:
    the consumer, where it is, its inputs' depths and their bytes."""
    calls: dict[str, list] = {}
    for c in classes:
        if c.settable and c.depth > preset:
            calls.setdefault(c.key[0], []).append(c)
    out = []
    for where, group in calls.items():
        depths = sorted({c.depth for c in group})
        spread = f"{depths[0]:,}" + (f" to {depths[-1]:,}" if len(depths) > 1 else "")
        node = typed.program.nodes[group[0].edges[0][2]]
        held = sum(c.depth * sum(sizes[c.key]) for c in group)
        fifos = sum(len(c.edges) for c in group)
        out.append((held, f"{node.op} at {where.removeprefix(root)}: {fifos:,} FIFO"
                    f"{'s' if fifos > 1 else ''} {spread} deep ({held:,} B)"))
    return [text for _held, text in sorted(out, key=lambda t: -t[0])[:DEEPEST]]


def render(cases: list[Case]) -> str:
    """The generated region: the table, then each case's deepest calls."""
    from stepc.hw import load_config
    preset = load_config(HW).fabric.fifo_depth
    lines = [f"| program | cycles, unbounded | searched (confirmed) | at depth {preset} | FIFO "
             f"bytes at depth {preset} | searched (confirmed) | saved | simulations |",
             "|---|---|---|---|---|---|---|---|"]
    for c in cases:
        uniform = "deadlock" if c.uniform_cycles == 0 else "stopped" \
            if c.uniform_cycles is None else f"{c.uniform_cycles:,}"
        saved = 100 * (c.uniform_bytes - c.fifo_bytes) / c.uniform_bytes
        change = f"{saved:.1f} %" if saved >= 0 else f"{-saved:.1f} % more"
        within = "" if c.within else " (over the tolerance)"
        lines.append(f"| {c.label} | {c.unbounded:,} | {c.cycles:,} ({c.confirmed_cycles:,})"
                     f"{within} | {uniform} | {c.uniform_bytes:,} | {c.fifo_bytes:,} "
                     f"({c.confirmed_bytes:,}) | {change} | {c.runs} |")
    lines.append("")
    for c in cases:
        lines.append(f"- {c.label}: depths written into {', '.join(c.files) or 'no file'}; "
                     + (f"deeper than {preset}: " + "; ".join(c.deepest) if c.deepest
                        else f"no FIFO deeper than {preset}")
                     + ("; fan-outs that must be deeper: " + ", ".join(c.fan_outs)
                        if c.fan_outs else "") + ".")
    return "\n".join(lines) + "\n"


def splice(text: str, generated: str) -> str:
    begin, end = f"<!-- BEGIN GENERATED: {REGION} -->", f"<!-- END GENERATED: {REGION} -->"
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{generated}{end}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m stepc.fifo.measured",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the region is stale")
    ap.add_argument("--print", action="store_true", help="print the generated region")
    ap.add_argument("--doc", default=str(DOC), help="the document to update")
    args = ap.parse_args(argv)
    doc = Path(args.doc)
    text = doc.read_text(encoding="utf-8")
    if f"<!-- BEGIN GENERATED: {REGION} -->" not in text:
        print(f"{doc}: no generated-region markers for {REGION}", file=sys.stderr)
        return 1
    generated = render([run_case(name, params) for name, params in CASES])
    if args.print:
        sys.stdout.write(generated)
        return 0
    new = splice(text, generated)
    if args.check:
        if new != text:
            print(f"{doc} is stale: run `python -m stepc.fifo.measured`", file=sys.stderr)
            return 1
        return 0
    doc.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
