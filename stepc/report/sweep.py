"""The text of a sweep (`stepc sweep`): the table of its points, what a resumed sweep
reruns, and the Pareto front with each point's distance to a baseline front."""

from __future__ import annotations

from collections import Counter

from stepc.explore.points import point_label, point_order


def resume_line(out: str, points: int, reusable: int, why_rerun: dict) -> str:
    """What a resumed sweep skips and why it reruns the others."""
    rerun = Counter(why_rerun.values())
    rerun["new"] = points - reusable - sum(rerun.values())
    why = ", ".join(f"{n} {w}" for w, n in sorted(rerun.items()) if n)
    return (f"resuming {out}: skipping {reusable} finished point(s), running "
            f"{points - reusable}" + (f" ({why})" if why else ""))


def written_line(ran: int, reused: int, out: str) -> str:
    """What the sweep added to its results file."""
    if not ran:
        return f"nothing to run: every point's record is in {out}"
    return (f"wrote {ran} record{'s' if ran != 1 else ''} to {out}"
            + (f" ({reused} reused from it)" if reused else ""))


def points_table(records: list[dict], console) -> None:
    """One row per point, in point order: status, cycles and bytes (row hits under dram)."""
    from rich.table import Table

    from stepc.tables import print_table
    table = Table(title=f"{len(records)} points", title_justify="left")
    dram = any(rec.get("row_hit_rate") is not None for rec in records)
    cols = ["point", "status", "cycles", "off-chip B", "on-chip B", "on demand B"]
    for col in cols + (["row hits"] if dram else []):
        table.add_column(col, justify="left" if col in ("point", "status") else "right")

    def cell(rec: dict, key: str) -> str:
        v = rec.get(key)
        return f"{v:,}" if isinstance(v, int) else ("-" if v is None else str(v))

    rows = []
    for rec in sorted(records, key=point_order):
        hits = rec.get("row_hit_rate")
        rows.append([point_label(rec), rec["status"],
                     *(cell(rec, k) for k in ("cycles", "off_chip_bytes", "on_chip_bytes",
                                              "on_chip_bytes_on_demand")),
                     *([f"{100 * hits:.1f}%" if hits is not None else "-"] if dram else [])])
    print_table(console, table, rows)


def error_lines(records: list[dict]) -> list[str]:
    """One line per point that failed with an error, in point order."""
    return [f"error in {point_label(rec)}: {rec.get('error')}"
            for rec in sorted(records, key=point_order) if rec["status"] == "error"]


def _shown(value) -> str:
    """A front's value: integers with thousands separators, other numbers to 4 digits."""
    return f"{value:,}" if isinstance(value, int) else f"{value:,.4g}"


def pareto_lines(ok: list[dict], metrics: list[str], fields: list[dict[str, str]],
                 front: list[int], chosen: str | None,
                 distances: dict[int, float] | None) -> list[str]:
    """The Pareto front of the `ok` records over `metrics` (`fields[i][m]`: the field of
    point i that metric m reads; `chosen`: the --on-demand selection, if any), then each
    point off the baseline front with its distance to it."""
    lines = []
    if chosen is not None:
        charged = sum(any(f != m for m, f in row.items()) for row in fields)
        lines.append(f"on_chip_bytes of the {charged} point(s) with {chosen}: "
                     "on_chip_bytes_on_demand (the buffers in use); the others: allocated")
    lines.append(f"Pareto-optimal over ({', '.join(metrics)}):")
    for i in front:
        lines.append(f"  {point_label(ok[i])}: " + ", ".join(
            f"{fields[i][m]}={_shown(ok[i][fields[i][m]])}" for m in metrics))
    if distances is not None:
        lines.append("Pareto Improvement Distance to the baseline front "
                     "(> 1: beyond it, 1: on it, < 1: dominated):")
        lines += [f"  {point_label(ok[i])}: PID {d:.3f}" for i, d in distances.items()]
    return lines
