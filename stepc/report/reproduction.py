"""The text of a reproduction (`stepc reproduce`): one line per figure, its verdict on the
paper's claims and where its points came from. (Each figure's report.md is written by
stepc.reproduction as the figure finishes.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stepc.reproduction.report import Reproduced


def figure_line(figure: str, done: Reproduced) -> str:
    """How many of the figure's claims reproduced, its points reused, simulated, shared
    and failed, and its report."""
    judged = done.reproduced + done.not_reproduced
    checks = done.checks_met + done.checks_missed
    verdict = f"{done.reproduced} of {judged} claims reproduced" + (
        f" ({done.needs_data} need the paper's data: --data DIR)"
        if done.needs_data else "") + (
        f", {done.checks_met} of {checks} of stepc's own checks met (not "
        "reproductions)" if checks else "")
    points = f"{done.reused} points reused, {done.simulated} simulated" + (
        f", {done.shared} shared with other figures" if done.shared else "") + (
        f", {done.failed_points} FAILED" if done.failed_points else "")
    return f"figure {figure}: {verdict}; {points}: {done.report}"
