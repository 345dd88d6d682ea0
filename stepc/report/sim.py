"""The one-screen text report of `stepc sim`: what a measured run counted, its busiest
operators."""

from __future__ import annotations

from typing import TYPE_CHECKING

import sympy
from rich.console import Console
from rich.table import Table

from stepc.tables import print_table
from stepc.types import natural_key

if TYPE_CHECKING:
    from stepc.measure import Measurement
    from stepc.sim.run import SimResult


def busiest(r: SimResult, n: int = 5):
    return sorted((o for o in r.ops if o.busy), key=lambda o: (-o.busy, o.name))[:n]


ENERGY_LABELS = {"compute": "compute", "sram": "SRAM", "fifo": "FIFOs", "fabric": "fabric",
                 "off_chip": "off-chip", "static": "static"}


def energy_lines(m: Measurement) -> list[str]:
    """The energy and area lines of a run's summary: totals, shares by component and the
    allocation (docs/energy.md)."""
    total, report = m["energy_j"], m.energy
    if not isinstance(total, float):
        return []
    shares = ", ".join(f"{label} {100 * m[f'energy_{k}_j'] / total:.0f}%"
                       for k, label in ENERGY_LABELS.items() if total)
    area = m["area_mm2"]
    sram = sympy.sympify(report.sram_mm2)
    return [f"{'energy:':<20}{total * 1e3:,.4g} mJ ({shares}); EDP {m['edp']:.4g} J*s",
            f"{'area:':<20}{area:,.4g} mm2 ({m['compute_units']:,} compute units, "
            f"{report.compute_mm2:,.4g} mm2; SRAM {float(sram):,.4g} mm2)"
            if isinstance(area, float) else f"{'area:':<20}{area} mm2"]


def render_text(m: Measurement, console: Console) -> None:
    """The one-screen summary of a measured run."""
    r, analysis_totals = m.simulation, m.analysis_totals
    def line(text: str) -> None:
        console.print(text, soft_wrap=True, highlight=False)
    mode = "functional" if r.functional else "timing-only"
    line(f"{r.program} on {r.hw.name} ({mode}, hbm model {r.hw.hbm.model})")
    line(f"  cycles:             {r.cycles:,}")
    peak = r.hw.peak_bw
    line(f"  off-chip traffic:   {r.useful_bytes:,} B of tiles "
         f"({r.request_bytes:,} B in {r.read_requests + r.write_requests:,} requests of "
         f"{r.hw.hbm.request_bytes} B)")
    line(f"  HBM bandwidth:      {r.achieved_bw:,.1f} B/cycle achieved of {peak:,.0f} peak "
         f"({100 * (m.bw_utilization or 0.0):.1f}%)")
    requests = r.read_requests + r.write_requests
    if requests:
        bw = r.channel_bw()  # the fluid model has no channels
        reach = r.hw.reachable_channels
        if reach < len(bw):  # the mapper reaches every (len / reach)-th channel
            bw = bw[::len(bw) // reach]
        over = f"{len(bw)} channels" if reach == r.hw.hbm.channels else \
            f"the {reach} of {r.hw.hbm.channels} channels the address mapping reaches"
        spread = f"; per channel {min(bw):,.1f} .. {max(bw):,.1f} B/cycle over {over}" \
            if bw else ""
        line(f"  requests:           {100 * r.read_requests / requests:.1f}% reads, "
             f"{100 * r.write_requests / requests:.1f}% writes{spread}")
    if r.row_hit_rate is not None:
        mem = r.memory
        line(f"  DRAM rows:          {100 * r.row_hit_rate:.1f}% hits ({mem.row_misses:,} "
             f"misses on closed banks, {mem.row_conflicts:,} conflicts), {mem.refreshes:,} "
             f"refreshes; {r.hw.dram.part}, {r.hw.dram.mapping}, {r.hw.dram.layout}")
    alloc = m.allocated_compute
    util = m.compute_utilization
    if util is not None:
        line(f"  compute:            {r.flops:,} FLOPs, {100 * util:.2f}% of {alloc:,} "
             "FLOP/cycle allocated")
    for key, label in (("on_chip_bytes", "on-chip, allocated"),
                       ("on_chip_bytes_on_demand", "on-chip, on demand")):
        v = analysis_totals.get(key)
        if v is not None:
            line(f"  {label + ':':<20}{_fmt(v)} B")
    line(f"  FIFOs, high water:  {r.fifo_bytes:,} B")
    for text in energy_lines(m):
        line(f"  {text}")
    fabric = r.hw.fabric
    if fabric.compute_capacity and alloc > fabric.compute_capacity:
        line(f"  warning: the program allocates {alloc:,} FLOP/cycle but the fabric has "
             f"{fabric.compute_capacity:,}")
    need = sympy.sympify(analysis_totals.get("on_chip_bytes_on_demand", 0))
    if fabric.onchip_capacity and need.is_number and need > fabric.onchip_capacity:
        line(f"  warning: the program needs {_fmt(need)} B on chip but the fabric has "
             f"{fabric.onchip_capacity:,}")
    for i, text in enumerate(_override_lines(r.overrides)):
        line(f"  {'program overrides:' if i == 0 else '':<20}{text}")
    if r.bindings:
        dims = sorted(r.bindings.items(), key=lambda kv: natural_key(kv[0]))
        shown = ", ".join(f"{k} = {_fmt(v)}" for k, v in dims[:8])
        more = f", ... ({len(r.bindings)} dims)" if len(r.bindings) > 8 else ""
        line(f"  dims of this run:   {shown}{more}")
    top = busiest(r)
    if top:
        table = Table(title="busiest operators", title_justify="left", box=None,
                      pad_edge=False)
        for col in ("operator", "op", "busy cycles", "busy"):
            table.add_column(col, justify="left" if col in ("operator", "op") else "right")
        print_table(console, table, [[o.name, o.op, f"{o.busy:,}",
                                      f"{100 * o.busy / max(r.cycles, 1):.1f}%"] for o in top])
    line(f"simulated in {r.wall_seconds:.2f} s")


def _fmt(v) -> str:
    v = sympy.sympify(v)
    if v.is_Integer:
        return f"{int(v):,}"
    if v.is_number:
        return f"{float(v):,.4g}"
    return str(v)


def _override_lines(overrides) -> list[str]:
    """One line per hardware key the program's operators set to another value: the values,
    each with its operators (named when they are few)."""
    by_key: dict[str, list] = {}
    for o in overrides:
        by_key.setdefault(o.key, []).append(o)
    out = []
    for key, group in by_key.items():
        parts = []
        for i, o in enumerate(sorted(group, key=lambda o: -len(o.nodes))):
            on = ", ".join(o.nodes) if len(o.nodes) <= 2 else f"{len(o.nodes)}" + (
                " operators" if i == 0 else "")
            parts.append(f"{o.attr + '=' if i == 0 else ''}{o.value} on {on}")
        out.append(f"{key} = {group[0].hw_value}, set to " + ", ".join(parts))
    return out
