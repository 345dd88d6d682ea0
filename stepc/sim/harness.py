"""Running one operator behavior on given token sequences (for tests and experiments).

    outs, ctx = run_operator("Repeat", {"count": 3}, {"in": [(a, 0), (b, 1)]})

Inputs are pre-filled, closed FIFOs; outputs are collected from deep FIFOs, as lists of
`(visible_time, payload, stop)`.
"""

from __future__ import annotations

from stepc.graph.program import OpNode
from stepc.hw import load_config
from stepc.ops import OPS
from stepc.ops.base import STREAMS, VARSTREAMS
from stepc.sim.behaviors import BEHAVIORS
from stepc.sim.fabric import SimEnv
from stepc.sim.hbm import make_memory
from stepc.sim.kernel import core
from stepc.source import Span


def run_operator(op: str, attrs: dict, inputs: dict, *, info_in: dict | None = None,
                 info_out: list | None = None, hw=None, functional: bool = True,
                 n_outputs: int | None = None, times: dict | None = None):
    """Run one operator; `inputs` maps parameter names to token lists (lists of lists for
    list parameters); `times` optionally gives each input token's visible time."""
    spec = OPS[op]
    full = {p.name: p.default for p in spec.all_params if not p.is_stream}
    full.update(attrs)
    outputs = spec.outputs(full)
    if n_outputs is not None:
        outputs = outputs[:n_outputs]
    node = OpNode(f"{op.lower()}", op, full, [], outputs, Span("<test>", 1, 1, 1, 1), {})
    kernel = core().Kernel()
    hw = hw or load_config()
    kernel.memory = make_memory(kernel, hw)
    env = SimEnv(hw, functional, kernel.memory)
    env.ports[node.name] = (0, 0)
    ins: dict = {}
    for p in spec.stream_params:
        if p.name not in inputs:
            continue
        seqs = inputs[p.name] if p.kind in (STREAMS, VARSTREAMS) else [inputs[p.name]]
        chans = []
        for k, seq in enumerate(seqs):
            ch = kernel.channel(f"{p.name}{k}", 1 << 30, "test", node.name)
            tt = (times or {}).get(p.name)
            for i, (val, stop) in enumerate(seq):
                t = tt[k][i] if isinstance(tt, list) and isinstance(tt[0], list) else \
                    (tt[i] if tt is not None else 0)
                ch.q.append((t, val, stop))
                ch.outstanding += 1
            ch.closed = True
            chans.append(ch)
        ins[p.name] = chans if p.kind in (STREAMS, VARSTREAMS) else chans[0]
    outs = [kernel.channel(f"out{i}", 1 << 30, node.name, "test") for i in range(len(outputs))]
    ctx = kernel.context(node.name, op)
    ctx.outs = outs
    info = {"in": info_in or {}, "out": info_out or [None] * len(outputs)}
    kernel.add(ctx, BEHAVIORS[op](ctx, node, ins, outs, env, info))
    kernel.run()
    return [list(ch.q) for ch in outs], ctx
