"""The Markdown report of a tuning search (`stepc tune`, its report.md): the winner and
how to reproduce it, the runners-up, the Pareto front, what each stage removed, and the
agreement of the fluid screen."""

from __future__ import annotations

import os

from stepc.tune.result import Scored, TuneResult

_STAGES = [
    ("space", "points in the search space"),
    ("candidates", "candidates considered (all of the space, or the sampler's)"),
    ("excluded_by_where", "excluded by --where"),
    ("infeasible", "infeasible (do not check, or a trace does not fit)"),
    ("over_budget_analysis", "over budget by the analysis (exact)"),
    ("pruned_by_roofline", "pruned by the roofline bound or an exact objective (cannot "
     "beat the incumbent)"),
    ("screened", "simulated with the fluid model"),
    ("screened_out_by_fluid", "screened out by the fluid model"),
    ("not_confirmed", "within the margin per fluid, not confirmed"),
    ("confirmed", "confirmed with the chosen model"),
    ("over_budget_simulated", "over a budget on a simulated metric"),
    ("failed", "failed to simulate (error or deadlock)"),
]


def _value(v) -> str:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"
    return "-" if v is None else str(v)


def _row(s: Scored, metrics: list[str], model: str) -> str:
    params = ", ".join(f"{k}={v}" for k, v in sorted(s.overrides.items())) or "-"
    hw = ", ".join(s.candidate.sets) or "-"
    vals = " | ".join(_value(s.metrics.get(m)) for m in metrics)
    model = model if s.confirmed else "fluid"
    return f"| {os.path.basename(s.candidate.program)} | {params} | {hw} | {model} | {vals} |"


def _table(rows: list[Scored], metrics: list[str], model: str) -> list[str]:
    head = ["program", "params", "hardware", "model"] + metrics
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + \
        [_row(s, metrics, model) for s in rows]


def markdown(result: TuneResult) -> str:
    """The report as Markdown text."""
    metrics = list(dict.fromkeys([o.metric for o in result.objectives] +
                                 [b.metric for b in result.budgets] +
                                 ["cycles", "on_chip_bytes", "off_chip_bytes"]))
    lines = ["# stepc tune", ""]
    lines.append(f"Objective: {', '.join(o.text() for o in result.objectives)} "
                 f"({result.aggregate} over traces); budgets: "
                 f"{', '.join(b.text() for b in result.budgets) or 'none'}"
                 + ("; on-chip bytes count the FIFOs at their depths" if result.fifo_bytes
                    else "") + "; confirmed with "
                 f"the `{result.model}` memory model (`{result.policy}` policy, margin "
                 f"{result.margin:.0%}). Wall time {result.wall_seconds:.1f} s ("
                 + ", ".join(f"{name} {result.stage_seconds.get(key, 0):.1f} s" for key, name
                             in (("analyze", "analysis"), ("screen", "fluid"),
                                 ("confirm", result.model))) + ").")
    lines += ["", "## Winner", ""]
    if result.winner is None:
        lines.append("No schedule satisfies the budgets.")
    else:
        lines += _table([result.winner], metrics, result.model)
        lines += ["", "Reproduce it (first trace):", "", "```sh", result.command, "```"]
    if result.runners_up:
        lines += ["", "## Runners-up", "", "Rows measured by `fluid` were screened out or "
                  "pruned, never confirmed.", ""]
        lines += _table(result.runners_up, metrics, result.model)
    if result.unconfirmed:
        lines += ["", "## Not confirmed", "", f"The fluid screen puts these within "
                  f"{result.margin:.0%} of the winner, but they were not simulated with "
                  f"`{result.model}`: fluid's error observed on the confirmed points of their "
                  "program says they cannot win, or --max-confirm was reached (the reason "
                  "of each is below; `--confirm margin` confirms them). Their numbers are "
                  "fluid's.", ""]
        lines += _table(result.unconfirmed, metrics, result.model)
        lines += [""] + [f"- {os.path.basename(s.candidate.program)} "
                         f"{', '.join(f'{k}={v}' for k, v in sorted(s.overrides.items()))}: "
                         f"{s.reason}" for s in result.unconfirmed]
    if result.pareto:
        over = [o.metric for o in result.objectives]
        if len(over) == 1:
            over.append("on_chip_bytes")
        lines += ["", f"## Pareto front over {' and '.join(over)} (confirmed points)", ""]
        lines += _table(result.pareto, list(dict.fromkeys(over + metrics)), result.model)
    lines += ["", "## Stages", "", "| stage | count |", "|---|---|"]
    lines += [f"| {text} | {result.stages.get(key, 0):,} |" for key, text in _STAGES]
    lines += [f"| simulation points run (fluid / {result.model}) | "
              f"{result.stages.get('screen_points_simulated', 0):,} / "
              f"{result.stages.get('confirm_points_simulated', 0):,} |",
              f"| simulation points reused from an earlier run (fluid / {result.model}) | "
              f"{result.stages.get('screen_points_reused', 0):,} / "
              f"{result.stages.get('confirm_points_reused', 0):,} |"]
    agree = result.rank_agreement
    tau = agree.get("kendall_tau")
    lines += ["", "Rank agreement of fluid and "
              f"{result.model} on the confirmed points ({agree.get('metric')}): "
              + (f"Kendall tau {tau:.3f} over {agree['points']} points." if tau is not None
                 else f"not defined over {agree.get('points', 0)} point(s).")]
    return "\n".join(lines) + "\n"
