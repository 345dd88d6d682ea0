"""Reporting a simulation: a one-screen text summary, JSON, and a Chrome/Perfetto trace."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import sympy
from rich.console import Console
from rich.table import Table

from stepc.schemas import schema
from stepc.sim.run import SimResult
from stepc.tables import print_table
from stepc.types import dim_json, natural_key

if TYPE_CHECKING:
    from stepc.measure import Measurement


def busiest(r: SimResult, n: int = 5):
    return sorted((o for o in r.ops if o.busy), key=lambda o: (-o.busy, o.name))[:n]


def render_text(m: Measurement, console: Console) -> None:
    """The one-screen summary of a measured run."""
    r, analysis_totals = m.result, m.analysis_totals
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


def to_json(m: Measurement) -> dict:
    """The document of `stepc sim --format json` (without its `deadlock`): the run's
    counters and the measured analysis, on-chip peak and compute utilization."""
    out = run_json(m.result)
    out["analysis"] = {k: dim_json(v) for k, v in m.analysis_totals.items()}
    out["on_chip_peak_bytes"] = m.on_chip_bytes_on_demand
    out["compute_utilization"] = m.compute_utilization
    return out


def run_json(r: SimResult) -> dict:
    """What the simulator counted in a run, as the sim document holds it."""
    return {
        "schema": schema("sim"),
        "program": r.program,
        "hw": r.hw.name,
        "mode": "functional" if r.functional else "timing-only",
        "cycles": r.cycles,
        "off_chip": {"useful_bytes": r.useful_bytes, "request_bytes": r.request_bytes,
                     "read_requests": r.read_requests, "write_requests": r.write_requests,
                     "achieved_bw": r.achieved_bw, "peak_bw": r.hw.peak_bw,
                     "model": r.hw.hbm.model, "channel_bw": r.channel_bw(),
                     "read_fraction": (r.read_requests / (r.read_requests + r.write_requests)
                                       if r.read_requests + r.write_requests else None),
                     "row_hit_rate": r.row_hit_rate,
                     "row_hits": r.memory.row_hits, "row_misses": r.memory.row_misses,
                     "row_conflicts": r.memory.row_conflicts,
                     "refreshes": r.memory.refreshes},
        "off_chip_bytes": r.useful_bytes,
        "flops": r.flops,
        "fifo_high_water_bytes": r.fifo_bytes,
        "overrides": [{"attr": o.attr, "value": o.value, "hw_key": o.key,
                       "hw_value": o.hw_value, "operators": list(o.nodes)}
                      for o in r.overrides],
        "dims": {k: dim_json(v) for k, v in sorted(r.bindings.items())},
        "ops": [{"name": o.name, "op": o.op, "busy_cycles": o.busy, "finish": o.finish,
                 "busy_fraction": o.busy / r.cycles if r.cycles else 0.0}
                for o in r.ops],
        "heat": {o.name: {"fraction": o.busy / r.cycles if r.cycles else 0.0,
                          "note": f"busy {100 * o.busy / max(r.cycles, 1):.1f}%"}
                 for o in r.ops if o.busy},
        "fifos": {name: {"high_water": hw, "capacity": cap, "elements": n}
                  for name, (hw, cap, n) in sorted(r.fifo.items())},
    }


def perfetto_trace(r: SimResult) -> dict:
    """Chrome trace-event JSON (opens in ui.perfetto.dev): one track per operator, one
    complete event per busy interval; time unit: cycles (shown as microseconds)."""
    events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": r.program}}]
    for tid, o in enumerate(r.ops, start=1):
        events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid,
                       "args": {"name": f"{o.name} ({o.op})"}})
        for start, dur, label in r.trace.get(o.name, []):
            events.append({"ph": "X", "pid": 1, "tid": tid, "ts": start, "dur": dur,
                           "name": label or o.op})
    for name, log in sorted(r.fifo_logs.items()):  # FIFO occupancy: back-pressure at a glance
        level = 0
        for t, delta in sorted(log):
            level += delta
            events.append({"ph": "C", "pid": 2, "ts": t, "name": f"fifo {name}",
                           "args": {"elements": level}})
    if r.fifo_logs:
        events.append({"ph": "M", "name": "process_name", "pid": 2,
                       "args": {"name": "FIFO occupancy"}})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"cycles": r.cycles, "hw": r.hw.name}}


def write_atomic(path: str, write) -> None:
    """Write a file through a temporary sibling and a rename: never a half-written file."""
    import os
    import tempfile
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".stepc-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        umask = os.umask(0)  # mkstemp makes the file 0600: give it the mode open() would
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: str, doc: dict) -> None:
    write_atomic(path, lambda f: f.write(json.dumps(doc, indent=1, sort_keys=True).encode()))


def deadlock_text(r: SimResult, nodes, edges=(), hint: str | None = None) -> str:
    """Which operators are stuck, on which FIFOs, and the wait-for cycle (if one exists);
    `edges`, the program's, let the hint name a feedback loop that never got a token;
    `hint`, the FIFO analysis's, replaces the generic one."""
    import networkx as nx

    blocked = {b.ctx: b for b in r.deadlock}
    g = nx.DiGraph()
    for b in r.deadlock:
        for partner in b.partner.split(", "):
            if partner in blocked:
                g.add_edge(b.ctx, partner)
    lines = [f"deadlock: {len(blocked)} operators cannot finish (at cycle "
             f"{max((o.finish for o in r.ops if o.name in blocked), default=0):,})"]
    try:
        cycle = [u for u, _ in nx.find_cycle(g)]
    except nx.NetworkXNoCycle:
        cycle = []
    order = cycle + [b for b in blocked if b not in cycle]
    if cycle:
        lines.append("wait-for cycle: " + " -> ".join(cycle + cycle[:1]))
    for name in order[:12]:
        b = blocked[name]
        span = nodes[name].span if name in nodes else None
        where = f"{span}: " if span else ""
        what = {"empty input": f"waits for input on `{b.channel}` (empty; producer "
                               f"`{b.partner}`)",
                "full output": f"waits to send on `{b.channel}` (full {b.occupancy}; "
                               f"consumer `{b.partner}`)",
                "empty inputs": f"waits for any of `{b.channel}`",
                "memory": "waits for memory"}.get(b.waiting, b.waiting)
        lines.append(f"  {where}`{name}` ({b.op}) {what}")
    if len(order) > 12:
        lines.append(f"  ... and {len(order) - 12} more")
    lines.append(hint or _deadlock_hint(cycle, blocked, nodes, edges))
    return "\n".join(lines) + "\n"


STARVING = ("empty input", "empty inputs")  # waits of an operator that needs a token


def _deadlock_hint(cycle: list[str], blocked: dict, nodes, edges) -> str:
    """What may end the deadlock. A wait-for cycle through a feedback stream in which every
    operator waits for input has no token in it: no FIFO depth can start it."""
    on_cycle = set(cycle)
    loop = [e for e in edges if e.feedback and e.src in on_cycle and e.dst in on_cycle]
    if loop and all(blocked[n].waiting in STARVING for n in cycle):
        e = loop[0]
        stream = nodes[e.src].port_label(e.port) if e.src in nodes else e.src
        return (f"hint: the wait-for cycle runs through the feedback stream `{stream}` and "
                "every operator on it waits for input: no element ever enters the loop, so "
                "no FIFO depth helps; give the loop its first elements (e.g. an EagerMerge "
                "of an initial chunk with the fed-back stream, as in docs/language.md, "
                "Feedback streams)")
    return ("hint: a fan-out whose branches are consumed at different rates needs a deeper "
            "FIFO on the slow branch (`depth=` on the consumer) or a separate source stream")


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
