"""A simulation as documents: its JSON, a Chrome/Perfetto trace and the deadlock report (the
one-screen text summary is drawn by stepc.report.sim)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from stepc.schemas import schema
from stepc.sim.run import SimResult
from stepc.types import dim_json


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


def perfetto_trace(r: SimResult, power: Power | None = None) -> dict:
    """Chrome trace-event JSON (opens in ui.perfetto.dev): one track per operator, one
    complete event per busy interval, FIFO occupancy counters and, with `power`, a power
    and an energy counter; time unit: cycles (shown as microseconds)."""
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
    if power is not None:
        events += power_counters(r, power)
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"cycles": r.cycles, "hw": r.hw.name}}


@dataclass(frozen=True)
class Power:
    """What the energy counters of a trace need: each operator's dynamic joules (spread
    evenly over its busy cycles), the static watts, and the clock."""

    op_joules: dict[str, float]
    static_watts: float
    clock_hz: float


def power_counters(r: SimResult, power: Power) -> list[dict]:
    """Counter events of the run's power (W: the busy operators' dynamic power and the
    static power) and its energy so far (mJ), at every change of the busy set; an operator
    that is never busy has its energy spread over the whole run."""
    steps: dict[int, float] = {0: 0.0}  # cycle -> change of dynamic joules per cycle
    for o in r.ops:
        intervals = r.trace.get(o.name, [])
        busy = sum(dur for _, dur, _ in intervals)
        joules = power.op_joules.get(o.name, 0.0)
        if not busy and r.cycles:  # never busy (a memory operator's traffic): the whole run
            intervals, busy = [(0, r.cycles, "")], r.cycles
        if not busy or not joules:
            continue
        rate = joules / busy
        for start, dur, _ in intervals:
            steps[start] = steps.get(start, 0.0) + rate
            steps[start + dur] = steps.get(start + dur, 0.0) - rate
    steps.setdefault(r.cycles, 0.0)
    events, rate, spent, last = [], 0.0, 0.0, 0
    static_per_cycle = power.static_watts / power.clock_hz
    for t in sorted(steps):
        spent += (rate + static_per_cycle) * (t - last)
        rate, last = max(rate + steps[t], 0.0), t
        events.append({"ph": "C", "pid": 3, "ts": t, "name": "power (W)",
                       "args": {"dynamic": rate * power.clock_hz,
                                "static": power.static_watts}})
        events.append({"ph": "C", "pid": 3, "ts": t, "name": "energy (mJ)",
                       "args": {"energy": spent * 1e3}})
    events.append({"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "energy"}})
    return events


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
