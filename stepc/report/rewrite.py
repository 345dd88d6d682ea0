"""The text `stepc rewrite` writes beside the new program: what the verification measured
and which operators were rewritten or left."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stepc.rewrite import Change
    from stepc.rewrite.verify import Verdict


def verdict_lines(verdict: Verdict) -> list[str]:
    """Each output's largest difference, each analysis total before and after, the cycles."""
    lines = [f"verify: output {tensor}: max |new - old| = {rel:.2g} of max |old| "
             f"(tolerance {tol:g})" for tensor, (rel, tol) in verdict.outputs.items()]
    for attr, (old, new, rule) in verdict.totals.items():
        said = "reported" if rule is None else f"rule: +{rule}"
        lines.append(f"verify: {attr.replace('_', '-')}: {old} -> {new} ({said})")
    lines.append(f"verify: cycles: {verdict.cycles[0]} -> {verdict.cycles[1]}")
    return lines


def summary_lines(name: str, changes: list[Change], out: str | None) -> list[str]:
    """How many operators the rewrite `name` rewrote, and each one it left with why."""
    rewritten = sum(c.action == "rewritten" for c in changes)
    kept = [c for c in changes if c.action == "kept"]
    return [f"{name}: {rewritten} operators rewritten, {len(kept)} left"
            + (f"; wrote {out}" if out else "")] + \
        [f"  {c.node} ({c.op}): {c.action}: {c.detail}" for c in kept]
