"""The row-wise library functions PyTorch lowering uses (`row_mean`, `affine`, `pow`,
`cast`, `relu`): a small program simulates each to numpy's result, and their FLOPs are counted."""

from __future__ import annotations

import numpy as np
import pytest

from stepc.analyze import analyze
from stepc.frontend import compile_source
from stepc.hw import load_config
from stepc.sim.run import simulate
from stepc.source import SourceFile

PROGRAM = """
tensor X : f32[8, 16] input = random(seed=1)
tensor M : f32[8, 1] output
tensor A : f32[8, 16] output
tensor P : f32[8, 16] output
tensor C : bf16[8, 16] output
tensor R : f32[8, 16] output

x = LinearOffChipLoad(X, tile=[4, 16], shape=[2])
LinearOffChipStore(Map(x, fn=row_mean), M)
LinearOffChipStore(Map(x, fn=affine(scale="-0.5", shift="1e-3")), A)
LinearOffChipStore(Map(x, fn=pow(exponent="3")), P)
LinearOffChipStore(Map(x, fn=cast, dtype=bf16), C)
LinearOffChipStore(Map(x, fn=relu), R)
"""


def test_rowwise_functions_compute_what_they_say():
    r = compile_source(SourceFile("fns.step", PROGRAM))
    assert r.ok, [str(d) for d in r.diagnostics.items]
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    out = simulate(r.typed, load_config(None, ()), values={"X": x}).outputs
    np.testing.assert_allclose(out["M"], x.mean(axis=1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(out["A"], x * -0.5 + 1e-3, rtol=1e-6)
    np.testing.assert_allclose(out["P"], x ** 3, rtol=1e-6)
    bf16 = (x.view(np.uint32) + 0x8000 & 0xFFFF0000).view(np.float32)  # round to nearest
    np.testing.assert_allclose(out["C"], bf16, rtol=2 ** -8)
    np.testing.assert_array_equal(out["R"], np.maximum(x, 0))
    flops = int(analyze(r.typed, "artifact").totals["flops"])
    assert flops == 8 * 16 * (1 + 2 + 2 + 0 + 1)  # row_mean 1, affine 2, pow 3: 2, cast 0, relu 1


POW_FLOPS = [("2", 1), ("2.0", 1), ("2e0", 1), ("0", 0), ("1", 0), ("3", 2), ("4", 2),
             ("8", 3), ("-1", 1), ("-2", 2), ("0.5", 4), ("2.5", 4)]


@pytest.mark.parametrize(("exponent", "per_elem"), POW_FLOPS)
def test_pow_is_costed_by_the_exponents_value(exponent, per_elem):
    """`pow` by value: the lowered norms' "2.0" costs what "2" does (one multiply);
    integers by square-and-multiply, negatives one division more, others 4."""
    src = ("tensor X : f32[8, 16] input = random(seed=1)\ntensor P : f32[8, 16] output\n"
           "x = LinearOffChipLoad(X, tile=[4, 16], shape=[2])\n"
           f'LinearOffChipStore(Map(x, fn=pow(exponent="{exponent}")), P)\n')
    r = compile_source(SourceFile("pow.step", src))
    assert r.ok, [str(d) for d in r.diagnostics.items]
    assert int(analyze(r.typed, "artifact").totals["flops"]) == 8 * 16 * per_elem
