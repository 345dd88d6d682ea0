"""Checks any rewrite can reuse: the new program computes what the old one did (both
simulated on the same random inputs, outputs compared within a stated tolerance), and its
analysis moves only as the rewrite's rules say: off-chip traffic unchanged, FLOPs and
on-chip memory changed by the sums of the changes' own deltas (each change computes its
deltas by the rewrite's rules, e.g. downtile's in rewrite/memory.py, not by analysing the
new program)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy

from stepc.analyze import analyze
from stepc.sim.run import simulate
from stepc.types import INT_DTYPES

# outputs agree when max |new - old| <= RELATIVE[dtype] * max |old| (sums of sub-tile
# products are added in another order, so float results differ in the last bits)
RELATIVE = {"f32": 1e-5, "bf16": 1e-2, "f16": 1e-3}
EXACT = 0.0  # integer and bool outputs must be equal


@dataclass
class Verdict:
    """What the checks found: each output's largest difference relative to its largest
    value and the tolerance it was held to, the analysis totals before and after with the
    change the rules predict, the cycles of both runs, and every failed check."""

    outputs: dict[str, tuple[float, float]] = field(default_factory=dict)
    totals: dict[str, tuple[Any, Any, Any]] = field(default_factory=dict)
    cycles: tuple[int, int] = (0, 0)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def random_inputs(typed, seed: int) -> dict[str, np.ndarray]:
    """Fresh random contents for every floating-point `input` and `weight` tensor (integer
    tensors, ids and lengths, keep their declared contents)."""
    rng = np.random.default_rng(seed)
    out = {}
    for t in typed.program.tensors.values():
        if t.role in ("input", "weight") and t.dtype not in INT_DTYPES and t.dtype != "bool":
            out[t.name] = rng.standard_normal(t.shape).astype(np.float32)
    return out


def equivalence(old, new, hw, verdict: Verdict, seed: int = 0,
                traces: dict[str, np.ndarray] | None = None) -> None:
    """Simulate both checked programs on `hw` with the same random inputs; compare every
    output tensor."""
    values = random_inputs(old, seed)
    a = simulate(old, hw, traces, functional=True, values=values)
    b = simulate(new, hw, traces, functional=True, values=values)
    verdict.cycles = (a.cycles, b.cycles)
    if b.deadlock and not a.deadlock:
        verdict.problems.append(f"the rewritten program deadlocks ({len(b.deadlock)} operators "
                                "cannot finish); the original does not")
        return
    for name, want in a.outputs.items():
        got = b.outputs.get(name)
        dtype = old.program.tensors[name].dtype
        tol = RELATIVE.get(dtype, EXACT)
        if got is None or got.shape != want.shape:
            verdict.problems.append(f"output `{name}` is missing or has another shape")
            continue
        scale = float(np.max(np.abs(want))) if want.size else 0.0
        diff = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
        rel = diff / scale if scale else diff
        verdict.outputs[name] = (rel, tol)
        if rel > tol or not np.all(np.isfinite(got) == np.isfinite(want)):
            verdict.problems.append(f"output `{name}` differs: max |new - old| is {rel:.3g} "
                                    f"of max |old| (tolerance {tol:g})")


def deltas(old, new, changes, verdict: Verdict) -> None:
    """The analysis totals of both programs against the rules: off-chip traffic equal,
    FLOPs and on-chip memory changed by the changes' own deltas."""
    before, after = analyze(old), analyze(new)
    rules = {"off_chip": sympy.Integer(0),
             "flops": sympy.sympify(sum((c.flops_delta for c in changes), sympy.Integer(0))),
             "on_chip": sympy.sympify(sum((c.on_chip_delta for c in changes),
                                          sympy.Integer(0)))}
    for attr, expected in rules.items():
        x, y = before.total(attr), after.total(attr)
        verdict.totals[attr] = (x, y, expected)
        if expected is not None and sympy.simplify(y - x - expected) != 0:
            verdict.problems.append(f"{attr.replace('_', '-')} moved by {y - x}, the rules say "
                                    f"{expected}")


def verify(old, new, changes, hw, seed: int = 0, traces=None, simulate_runs: bool = True
           ) -> Verdict:
    """Every check on a rewrite of `old` (checked programs) into `new`."""
    verdict = Verdict()
    deltas(old, new, changes, verdict)
    if simulate_runs:
        equivalence(old, new, hw, verdict, seed, traces)
    return verdict
