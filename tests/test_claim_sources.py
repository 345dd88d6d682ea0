"""A report's paper column holds only the paper's numbers: a claim judged on the artifact's,
its data's or stepc's own value names that source, and stepc's targets and claims judged
on the points a model was fitted on (in-sample) are checks, not reproductions."""

from __future__ import annotations

from stepc.reproduction.claims import Claim, claim_problems
from stepc.reproduction.spec import available_figures, load_spec

PAPER_SAYS = {  # the numbers the paper prints, where the artifact's are sharper
    ("9", "Mixtral: dynamic uses 1.33x less on-chip memory than tile 32"): 1.33,
    ("9", "Qwen: dynamic uses 2.1x less on-chip memory than tile 8"): 2.1,
    ("9", "Qwen: Pareto Improvement Distance of dynamic tiling is 2.11"): 2.11,
}


def test_a_value_that_is_not_the_papers_names_its_source():
    base = {"text": "t", "value": "a.cycles", "tolerance_reason": "why"}
    assert any("needs `expected`" in p for p in claim_problems(
        {**base, "paper": 1.5, "source": "artifact", "tolerance": {"abs": 0.1}}))
    assert any("give its `source`" in p for p in claim_problems(
        {**base, "expected": 1.5, "tolerance": {"abs": 0.1}}))
    assert claim_problems({**base, "expected": 1.5, "source": "artifact",
                           "tolerance": {"abs": 0.1}}) == []
    claim = Claim.from_spec({**base, "paper": 1.33, "expected": 1.333, "source": "artifact",
                             "tolerance": {"abs": 0.0005}})
    assert claim.paper_shown() == "1.33" and "the artifact's 1.333" in claim.accepted()
    assert claim.holds(1.3332) and not claim.holds(1.33) and claim.counts


def test_targets_and_in_sample_claims_are_not_reproductions():
    target = Claim.from_spec({"text": "t", "value": "v", "expected": "< 0.04",
                              "source": "target", "in_sample": True, "tolerance_reason": "w"})
    assert not target.counts and target.paper_shown() == "-"
    assert target.verdict(True) == "in-sample target met"
    assert target.verdict(False) == "in-sample target missed"


def test_every_figure_keeps_the_paper_column_for_the_paper():
    for fig in available_figures():
        for c in load_spec(fig)["claim"]:
            assert claim_problems(c) == [], (fig, c["text"])
            if (fig, c["text"]) in PAPER_SAYS:
                assert c["paper"] == PAPER_SAYS[(fig, c["text"])] and "expected" in c
    fig8 = {c["text"]: c for c in load_spec("8")["claim"]}
    assert all(c.get("source") == "target" and c.get("in_sample")
               for t, c in fig8.items() if t.startswith("HDL-like model"))
    assert all("paper" not in c for c in fig8.values() if c.get("source") in ("data",
                                                                             "artifact"))


def test_figure_9_has_the_papers_qwen_parity_claim():
    [claim] = [c for c in load_spec("9")["claim"] if "+0.76%" in c["text"]]
    assert claim["paper"] == 1.0076
    assert claim["value"] == "qwen_dynamic.cycles / qwen_static[TILE_N=64].cycles"
