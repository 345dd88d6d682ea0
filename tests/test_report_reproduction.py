"""A reproduced figure's report.md (stepc.report.reproduction) rendered from its evaluated
result (stepc.reproduction.report): what ran, the claims table, the reasons claims
failed (grouped when shared), the measures, the points' table and the plots."""

from __future__ import annotations

from types import SimpleNamespace

from stepc.report.reproduction import figure_report
from stepc.reproduction.figure_plots import Bars, Plot
from stepc.reproduction.report import (
    ClaimResult,
    FigureResult,
    MeasureResult,
    Reproduced,
    evaluate_figure,
)
from stepc.reproduction.spec import Expanded

SPEC = {
    "title": "Speed of a tiny kernel",
    "sweep": [{"program": "programs/tiny.step", "trace": {"kv": "lens"}}],
    "note": "A  note\n spread over lines.",
    "assumptions": ["The batch is 8."],
}
RECORDS = [
    {"tag": "fast", "status": "ok", "params": {"TB": 16}, "traces": {"kv": "t/w0.npy"},
     "labels": {"kv": "low"}, "cycles": 1234, "off_chip_bytes": 2.5},
    {"tag": "slow", "status": "error", "error": "boom", "params": {}, "traces": {}},
]


def _claim(text: str, holds: bool | None, verdict: str, failure: str = "",
           counts: bool = True) -> ClaimResult:
    return ClaimResult(text, "2", "1.8 to 2.2", "-" if holds is None else "1.5", verdict,
                       holds, counts, f"{text}: half the paper's spread", failure)


def test_a_small_result_renders_to_its_report():
    """Before: two points (one failed), five claims (one reproduced, two failing for one
    reason, one failing with no known quirk, one waiting for data, one of stepc's checks),
    two measures, synthetic traces, a bar plot and a plot not drawn. Expected: the
    report's lines, in order."""
    claims = [_claim("a holds", True, "reproduced"),
              _claim("b misses", False, "NOT reproduced", "the artifact rounds up"),
              _claim("c misses", False, "NOT reproduced", "the artifact rounds up"),
              _claim("d misses", False, "target missed", counts=False),
              _claim("e waits", None, "needs the paper's data (--data)")]
    measures = [MeasureResult("ratio", 0.123456, "", "of  two"),
                MeasureResult("missing", None, "no point `x`", "")]
    plots = [Plot("figure.png", "Speedups", Bars(["B", "x / y"], ["B=8", "B=16"],
                                                 {"x": [1.23456, None]}, ["x"])),
             Plot("figure-2.png", "Cycles", error="no matplotlib")]
    done = Reproduced("out/fig0/report.md", reused=1, simulated=1)
    result = FigureResult("0", SPEC, RECORDS, "ref", None, ["kv: seeded synthetic lengths"],
                          ["- `fast`: TB = 16"], {"new": 1}, "0.1.0+abc", claims, measures,
                          ("cycles", "off_chip_bytes"), plots, done)
    assert figure_report(result).splitlines() == [
        "# Figure 0: Speed of a tiny kernel",
        "",
        "- error: boom",
        "Points: 2 (1 ok). HBM model: `ref`. Data: synthetic where noted.",
        "Reused 1 point(s) from an earlier run in this directory (same program and imports, "
        "traces, hardware and stepc); simulated 1 now (1 new). stepc 0.1.0+abc.",
        "- kv: seeded synthetic lengths",
        "",
        "Params chosen from other figures' results:",
        "",
        "- `fast`: TB = 16",
        "",
        "A note spread over lines.",
        "",
        "| # | claim | paper | accepted | stepc | |",
        "|---|---|---|---|---|---|",
        "| 1 | a holds | 2 | 1.8 to 2.2 | 1.5 | reproduced |",
        "| 2 | b misses | 2 | 1.8 to 2.2 | 1.5 | NOT reproduced (synthetic data) |",
        "| 3 | c misses | 2 | 1.8 to 2.2 | 1.5 | NOT reproduced (synthetic data) |",
        "| 4 | d misses | 2 | 1.8 to 2.2 | 1.5 | target missed (synthetic data) |",
        "| 5 | e waits | 2 | 1.8 to 2.2 | - | needs the paper's data (--data) |",
        "",
        "Why each claim's accepted values are what they are:",
        "",
        "1. a holds: half the paper's spread",
        "2. b misses: half the paper's spread",
        "3. c misses: half the paper's spread",
        "4. d misses: half the paper's spread",
        "5. e waits: half the paper's spread",
        "",
        "The paper column holds only the paper's own numbers; a value from the artifact, its "
        "data or a target of stepc's is named in the accepted column. stepc's own targets "
        "and claims judged on the points a model was fitted on (in-sample) are checks, not "
        "reproductions: they are not counted among the claims reproduced.",
        "",
        "Why these claims are not reproduced or checks not met (likely reasons):",
        "",
        "- **b misses** (stepc 1.5); **c misses** (stepc 1.5): the artifact rounds up. This "
        "run also used synthetic stand-ins for the paper's traces.",
        "- **d misses** (stepc 1.5): no known artifact quirk explains it: a difference "
        "between stepc and the artifact to investigate. This run also used synthetic "
        "stand-ins for the paper's traces.",
        "",
        "Measured, with no claim of the paper to compare:",
        "",
        "| measure | stepc | note |",
        "|---|---|---|",
        "| ratio | 0.1235 | of two |",
        "| missing | - (no point `x`) |  |",
        "",
        "Assumptions (what the paper does not pin down):",
        "",
        "- The batch is 8.",
        "",
        "| series | point | cycles | off-chip bytes |",
        "|---|---|---|---|",
        "| fast | TB=16, kv=low | 1,234 | 2.5 |",
        "| slow | - | error | error |",
        "",
        "| B | x / y |",
        "|---|---|",
        "| B=8 | 1.235 |",
        "| B=16 | - |",
        "",
        "![Speedups](figure.png)",
        "(no plot figure-2.png: no matplotlib)",
    ]


def test_evaluating_a_figure_judges_and_counts_its_claims(tmp_path):
    """Before: a figure of two points and three claims (one holds, one misses with a quirk
    quoting the run, one is stepc's own target). Expected: each claim judged, the miss's
    reason filled in, the counts of the summary, and no report.md yet."""
    spec = {"title": "t", "sweep": [], "claim": [
        {"text": "faster", "value": "fast.cycles / slow.cycles", "paper": 0.5,
         "tolerance": {"rel": 0.1}, "tolerance_reason": "r"},
        {"text": "much faster", "value": "fast.cycles / slow.cycles", "paper": "< 0.1",
         "quirk": "slow ran {slow.cycles:.0f} cycles"},
        {"text": "on target", "value": "fast.cycles", "expected": 100, "source": "target",
         "tolerance": {"abs": 1}, "tolerance_reason": "r"}]}
    records = [{"tag": "fast", "status": "ok", "params": {}, "traces": {}, "cycles": 100,
                "program": str(tmp_path / "fast.step")},
               {"tag": "slow", "status": "ok", "params": {}, "traces": {}, "cycles": 200,
                "program": str(tmp_path / "slow.step")}]
    points = [SimpleNamespace(ident=r["tag"]) for r in records]
    outcome = SimpleNamespace(records=records, reused=0, ran=2, shared=0,
                              why_run={"new": 2})
    result = evaluate_figure("0", spec, Expanded(points), SimpleNamespace(points=points),
                             tmp_path, outcome, "ref", None)
    assert [(c.shown, c.verdict, c.failure) for c in result.claims] == [
        ("0.500", "reproduced", ""), ("0.5", "NOT reproduced", "slow ran 200 cycles"),
        ("100.0", "target met", "")]
    done = result.summary
    assert (done.reproduced, done.not_reproduced, done.checks_met, done.checks_missed,
            done.needs_data, done.simulated) == (1, 1, 1, 0, 0, 2)
    assert (tmp_path / "results.csv").is_file() and not (tmp_path / "report.md").exists()
