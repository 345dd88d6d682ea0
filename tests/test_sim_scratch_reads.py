"""A functional run carries values through a scratch tensor: what a store writes, a load
issued after the store's acknowledgements reads (decoder stages exchange activations this
way); scratch tensors are not outputs."""

from __future__ import annotations

import numpy as np

from stepc.frontend import compile_source
from stepc.hw import load_config
from stepc.sim.run import simulate
from stepc.source import SourceFile

PROGRAM = """
param B = 4
param D = 8
tensor X   : f32[B, D] input = random(seed=1)
tensor IDS : u64[B] input = arange
tensor ONE : u64[1] input = ones
tensor H   : f32[B, D] scratch
tensor Y   : f32[B, D] output

graph all_done(s) {
    return Accum(Promote(s), fn=signal_req_all_read, rank=1)
}

x   = Flatten(LinearOffChipLoad(X, ref=MetadataGen(ONE), tile=[1, D]), min=0, max=2)
ack = RandomOffChipStore(MetadataGen(IDS), Map(x, x, fn=add), H)
h   = Flatten(LinearOffChipLoad(H, ref=all_done(ack), tile=[1, D]), min=0, max=2)
LinearOffChipStore(h, Y)
"""


def test_a_load_after_the_acknowledgements_reads_what_was_stored():
    r = compile_source(SourceFile("scratch.step", PROGRAM))
    assert r.ok, [str(d) for d in r.diagnostics.items]
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    run = simulate(r.typed, load_config(None, ()), {}, values={"X": x})
    assert run.deadlock is None
    assert sorted(run.outputs) == ["Y"]
    np.testing.assert_array_equal(run.outputs["Y"], 2 * x)
