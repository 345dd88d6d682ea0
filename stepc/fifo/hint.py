"""What ends a simulated deadlock, from the FIFO analysis: which FIFO needs which depth, or
that no depth helps and why."""

from __future__ import annotations

from stepc.fifo.static import analyze_fifos

STARVING = ("empty input", "empty inputs")  # waits of an operator that needs a token
MAX_NAMED = 3  # FIFOs a hint names before "and N more"


def deadlock_hint(typed, hw, result) -> str | None:
    """The hint line of a deadlock report, or None when the analysis has nothing to add."""
    prog = typed.program
    blocked = {b.ctx: b for b in result.deadlock or ()}
    analysis = analyze_fifos(typed)
    for loop in analysis.loops:
        if blocked.keys() & set(loop.nodes):
            stream = prog.nodes[loop.feedback.src].port_label(loop.feedback.port)
            return (f"hint: {loop.feedback.span}: no FIFO depth helps: the loop through the "
                    f"feedback stream `{stream}` never starts: {loop.reason}; give the loop its "
                    "first elements (an EagerMerge of an initial chunk with the fed-back stream, "
                    "docs/language.md, Feedback streams)")

    cycle = _wait_cycle(blocked)
    if cycle and all(blocked[n].waiting in STARVING for n in cycle):
        return None  # the simulator's own hint names the feedback stream

    def depth_of(key) -> int:
        depth = prog.nodes[key[2]].attrs.get("depth")
        if isinstance(depth, list):
            depth = depth[key[3]] if key[3] < len(depth) else None
        return depth or hw.fabric.fifo_depth

    minima = analysis.minimum_depths(depth_of, dict(result.bindings))
    short = [(k, int(b)) for k, (b, _r) in minima.items()
             if b.is_number and int(b) > depth_of(k)]
    if short:
        named = [f"`{_label(prog, k)} -> {k[2]}` ({prog.nodes[k[2]].span}) needs depth >= {need} "
                 f"(has {depth_of(k)})" for k, need in short[:MAX_NAMED]]
        more = f" and {len(short) - MAX_NAMED} more" if len(short) > MAX_NAMED else ""
        return ("hint: a branch of a fork must hold what the other consumes before the join "
                "gets its first element: " + "; ".join(named) + more +
                " (`depth=` on the consumer; `stepc fifo` sizes every FIFO)")
    full = [b for b in blocked.values() if b.waiting == "full output"
            and blocked.get(b.partner) is not None and blocked[b.partner].waiting in STARVING]
    routed = {k for r in analysis.reconvergences if r.data_dependent for k in r.needs}
    critical = [b for b in full if any(_label(prog, k) + f" -> {k[2]}" == b.channel
                                       for k in routed)] or full
    if critical:
        named = [f"`{b.channel}` ({prog.nodes[b.partner].span})"
                 for b in critical[:MAX_NAMED]]
        more = f" and {len(critical) - MAX_NAMED} more" if len(critical) > MAX_NAMED else ""
        return ("hint: full FIFOs whose consumer waits for another input: " +
                ", ".join(named) + more + "; where selectors route the branches the depth "
                "needed depends on the data: `stepc fifo` finds depths that complete "
                "(`depth=` on the consumer)")
    return None


def _wait_cycle(blocked: dict) -> list[str]:
    """A cycle of operators each waiting for the next (the report's wait-for cycle)."""
    import networkx as nx
    g = nx.DiGraph()
    for b in blocked.values():
        for partner in b.partner.split(", "):
            if partner in blocked:
                g.add_edge(b.ctx, partner)
    try:
        return [u for u, _ in nx.find_cycle(g)]
    except nx.NetworkXNoCycle:
        return []


def _label(prog, key) -> str:
    return prog.nodes[key[0]].port_label(key[1])

