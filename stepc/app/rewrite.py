"""The use case of `stepc rewrite`: a program file rewritten into a new, checked `.step`
program, and with `verify` the checks that both compute the same thing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stepc.app.inputs import hardware
from stepc.rewrite import REWRITES, RewriteError

if TYPE_CHECKING:
    from stepc.api import CheckReport
    from stepc.rewrite import Change
    from stepc.rewrite.verify import Verdict

__all__ = ["REWRITES", "RewriteError", "RewriteOutcome", "rewrite_file"]


@dataclass
class RewriteOutcome:
    """The checked program and, when it compiled without errors, its rewrite: the new
    program's `text`, the `changes` (one per operator rewritten or left) and, with
    verification, the `verdict`."""

    checked: CheckReport
    name: str
    text: str = ""
    changes: list[Change] | None = None
    verdict: Verdict | None = None

    def verification_lines(self) -> list[str]:
        """What the verification measured, a line per output, total and the cycles."""
        from stepc.report.rewrite import verdict_lines
        return [] if self.verdict is None else verdict_lines(self.verdict)

    def summary_lines(self, out: str | None) -> list[str]:
        """The operators rewritten and each one left, with why (`out`: the file written)."""
        from stepc.report.rewrite import summary_lines
        return summary_lines(self.name, self.changes or [], out)


def rewrite_file(name: str, path: str, defines: Mapping[str, int] | None = None, *,
                 tile: str | None = None, hw: str | None = None, split_memory: bool = True,
                 out_path: str | None = None, verify: bool = False,
                 seed: int = 0) -> RewriteOutcome:
    """Rewrite the program at `path` (`defines` override its params) with the rewrite
    `name`: downtile into the physical `tile` (`16x16`), else the `fabric.stream_tile` of
    `hw`; `out_path` is where the text will be written. With `verify`, both programs are
    simulated on `hw` with the inputs of `seed`. Raises RewriteError (`.kind`: usage,
    program or internal) and InputError."""
    from stepc.app.inputs import checked_program
    from stepc.rewrite import apply
    from stepc.rewrite.options import rewrite_options
    from stepc.rewrite.verify import verify as check_rewrite

    checked = checked_program(path, dict(defines or {}))
    if not checked.ok:
        return RewriteOutcome(checked, name)
    options = rewrite_options(name, tile, hw, split_memory, hardware)
    done = apply(name, checked.compiled, options, out_path)
    outcome = RewriteOutcome(checked, name, done.text, done.changes)
    if verify:
        outcome.verdict = check_rewrite(checked.compiled.typed, done.compiled.typed,
                                        done.changes, hardware(hw), seed)
    return outcome
