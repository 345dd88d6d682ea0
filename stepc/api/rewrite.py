"""Program rewrites (`stepc rewrite`): a checked program in, a new checked program out, with
its text, a record of what changed and the checks that it computes the same thing."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stepc.api.program import Program, check
from stepc.rewrite.draft import RewriteError

if TYPE_CHECKING:
    from stepc.hw import HardwareConfig

__all__ = ["RewriteError", "Rewritten", "rewrite", "rewrites"]


def rewrites() -> dict[str, str]:
    """The rewrites stepc knows, each with one line on what it does."""
    from stepc.rewrite import REWRITES
    return {name: rw.summary for name, rw in REWRITES.items()}


@dataclass
class Rewritten:
    """A rewritten program: `text` (formatted `.step`, a comment on each statement naming
    where it came from), `changes` (one `Change` per operator rewritten or left), the new
    `program` (checked again) and the `original`."""

    name: str
    text: str
    changes: list = field(repr=False)
    program: Program = field(repr=False)
    original: Program = field(repr=False)

    def verify(self, hw: str | HardwareConfig | None = None, seed: int = 0,
               traces: dict[str, Any] | None = None, simulate: bool = True):
        """Check the rewrite: both programs simulated on `hw` (default paper-eval) with the
        same random inputs, outputs equal within the tolerance of their type; analysis
        totals moved as the rules say. A `stepc.rewrite.verify.Verdict` (`.ok`,
        `.problems`)."""
        from stepc.api.inputs import hardware, trace_arrays
        from stepc.rewrite.verify import verify
        config, _ = hardware(hw)
        arrays = trace_arrays(traces) if traces else None
        return verify(self.original.typed, self.program.typed, self.changes, config, seed,
                      arrays, simulate)

    @property
    def rewritten(self) -> list:
        """The changes that rewrote an operator (the others say why it was left)."""
        return [c for c in self.changes if c.action == "rewritten"]

    def summary(self) -> str:
        """One line per operator the rewrite changed or left with a reason (and per stream
        it packed back or split on chip)."""
        return "\n".join(f"{c.node} ({c.op}): {c.action}: {c.detail}" for c in self.changes)


def rewrite(program: Program | str | os.PathLike, name: str, *,
            tile: tuple[int, int] | str | None = None,
            hw: str | HardwareConfig | None = None, split_memory: bool = True,
            out_path: str | None = None, **params: int) -> Rewritten:
    """Rewrite a program (a `Program`, or a file with `params` overriding its `param`s).

    `downtile` splits tiles into the physical tile `tile` (`(16, 16)` or `"16x16"`), or
    the `fabric.stream_tile` of `hw` when no tile is given; `split_memory=False` keeps the
    logical tiles of off-chip loads. `out_path`: where the text will be written (file
    sources are made relative to it). Raises `RewriteError` (`.kind`: usage, program or
    internal) and, for a program with errors, StepError."""
    from stepc.api.inputs import hardware
    from stepc.rewrite import apply
    from stepc.rewrite.options import rewrite_options
    original = program if isinstance(program, Program) else \
        check(os.fspath(program), **params).program()
    options = rewrite_options(name, tile, hw, split_memory, lambda given: hardware(given)[0])
    done = apply(name, original._compiled, options, out_path)
    return Rewritten(name, done.text, done.changes, Program(done.compiled), original)
