"""`stepc reproduce` specs (experiments/fig*.toml): every spec parses and every claim term
selects exactly one point (a static check, no simulation); trace sets sweep over windows,
cut prefixes and fall back to seeded synthetic stand-ins; a shrunken Figure 14 runs end to
end on synthetic traces; a claim that is not reproduced shows its quirk note in the report.
The real traces, when ../shared/data is present, are all found by the specs."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest

from stepc.sweep import reproduce as rp
from stepc.sweep.reproduce import (SpecError, available_figures, check_claims, evaluate_claim,
                                   expand_spec, load_spec, spec_points)

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data"
NEW = ["12", "13", "14", "15", "21"]
ALL = ["8", "9", "10", *NEW]


@pytest.fixture(autouse=True)
def _at_repo(monkeypatch):
    monkeypatch.chdir(REPO)


def test_every_figure_has_a_spec():
    assert set(ALL) <= set(available_figures())


@pytest.mark.parametrize("fig", ALL)
def test_spec_parses_and_every_claim_term_selects_one_point(fig):
    spec = load_spec(fig)
    assert spec["figure"] == fig and spec.get("claim")
    points, _ = spec_points(spec, None, "ref")
    assert points and len({p.key for p in points}) == len(points)  # no duplicate points
    for p in points:
        assert Path(p.program).exists(), p.program
    assert check_claims(spec) == []


@pytest.mark.parametrize("fig", ALL)
def test_every_claim_and_figure_carries_quirk_notes(fig):
    """A claim that is not reproduced must say why: every claim has a `quirk`, and every
    figure lists the artifact quirks it touches."""
    spec = load_spec(fig)
    assert spec.get("quirks"), fig
    for c in spec["claim"]:
        assert c.get("quirk", "").strip(), (fig, c["text"])


def test_check_claims_finds_bad_terms():
    spec = copy.deepcopy(load_spec("12"))
    spec["claim"] = [
        {"text": "two points", "value": "static.cycles", "paper": 1},
        {"text": "no point", "value": "static[R=3].cycles", "paper": 1},
        {"text": "bad metric", "value": "static[R=4].speed", "paper": 1},
        {"text": "bad call", "value": "open(static[R=4].cycles)", "paper": 1},
        {"text": "bad bound", "value": "static[R=4].cycles", "paper": "about 1"},
    ]
    problems = "\n".join(check_claims(spec))
    assert "`static.cycles` selects 6 points" in problems
    assert "`static[R=3].cycles` selects 0 points" in problems
    assert "unknown metric `speed`" in problems
    assert "bad call: claim expression" in problems
    assert "bad bound: paper `about 1`" in problems


def test_unknown_spec_keys_are_errors():
    spec = copy.deepcopy(load_spec("13"))
    spec["claim"][0]["quirks"] = "a typo for quirk"
    with pytest.raises(SpecError, match="unknown key"):
        rp.validate_spec(spec)


def test_claim_expressions_with_windows_and_functions():
    recs = [{"tag": "s", "params": {"B": 4}, "labels": {"kv": f"w{i}"}, "status": "ok",
             "cycles": c} for i, c in enumerate((200, 400, 800))]
    recs += [{"tag": "d", "params": {"B": 4}, "labels": {"kv": f"w{i}"}, "status": "ok",
              "cycles": 100} for i in range(3)]
    ratios = [f"s[B=4,kv=w{i}].cycles / d[kv=w{i}].cycles" for i in range(3)]
    assert evaluate_claim(f"geomean({', '.join(ratios)})", recs) == pytest.approx(4.0)
    assert evaluate_claim(f"min({', '.join(ratios)})", recs) == 2.0
    assert evaluate_claim(f"max({', '.join(ratios)}) ** 0.5", recs) == pytest.approx(math.sqrt(8))
    assert evaluate_claim("(s[kv=w0].cycles\n  / d[kv=w0].cycles)", recs) == 2.0  # multi-line
    for bad in ("__import__('os')", "s[kv=w0].cycles.real", "min(s[kv=w0].cycles, key=1)",
                "'a' * 2", "s[kv=w0].cycles / (d[kv=w0].cycles - 100)"):
        with pytest.raises(SpecError):
            evaluate_claim(bad, recs)


# ---------------------------------------------------------------- trace sets
def _set_spec(program: str) -> dict:
    return {"figure": "x", "title": "t",
            "trace_set": {"s": {"batch": 8, "synthetic": {"mean": 40, "max_len": 63},
                                "windows": [
                                    {"label": "a", "group": "g", "std": 10,
                                     "file": "kv/b8/a.npy"},
                                    {"label": "a4", "first": 4, "std": 10, "seed": 0,
                                     "file": "kv/b8/a.npy"},
                                    {"label": "b", "group": "g", "std": 20,
                                     "file": "kv/b8/b.npy"}]}},
            "sweep": [{"program": program, "name": "p", "params": {"B": 8},
                       "trace": {"kv_lens": "@s"}}]}


def test_trace_sets_sweep_windows_cut_prefixes_and_fall_back_to_synthetic(tmp_path):
    data = tmp_path / "data"
    (data / "kv" / "b8").mkdir(parents=True)
    lens = np.arange(8) * 3 + 1
    np.save(data / "kv" / "b8" / "a.npy", lens)  # b.npy is missing
    spec = _set_spec("programs/attention_dynamic.step")
    exp = expand_spec(spec, str(data), "ref", tmp_path / "traces")
    assert len(exp.points) == 3
    labels = [exp.labels[p.key] for p in exp.points]
    assert labels == [{"kv_lens": "a", "kv_lens.group": "g"}, {"kv_lens": "a4"},
                      {"kv_lens": "b", "kv_lens.group": "g"}]
    paths = [dict(p.traces)["kv_lens"] for p in exp.points]
    assert paths[0] == str(data / "kv" / "b8" / "a.npy")  # used in place
    writes = {str(p): a for p, a in exp.writes}
    np.testing.assert_array_equal(writes[paths[1]], lens[:4])  # a prefix, written out
    assert paths[2].endswith("s_b.synthetic.npy") and len(writes[paths[2]]) == 8
    assert writes[paths[2]].max() <= 63
    assert len(exp.notes) == 1 and "b" in exp.notes[0] and "synthetic" in exp.notes[0]
    # without data every window is a synthetic stand-in; the same seed gives a prefix
    exp = expand_spec(spec, None, "ref", tmp_path / "traces")
    arrays = [a for _, a in exp.writes]
    np.testing.assert_array_equal(arrays[1], arrays[0][:4])
    with pytest.raises(SpecError, match="no trace set"):
        expand_spec({**spec, "sweep": [{**spec["sweep"][0], "trace": {"kv_lens": "@t"}}]},
                    None, "ref")


def _small_fig14() -> dict:
    """The real Figure 14 spec at a tiny size: 8 requests of at most 63 cached rows, head dim
    16, 8-row tiles; synthetic windows with the real spec's labels and scaled-down spreads;
    plus one claim that cannot hold, to see its quirk in the report."""
    spec = copy.deepcopy(load_spec("14"))
    ts = spec["trace_set"]["b64"]
    ts["batch"] = 8
    ts["synthetic"] = {"kind": "kv_lengths", "mean": 24, "max_len": 63}
    for w in ts["windows"]:
        w["std"] = w["std"] / 40
    for sw in spec["sweep"]:
        sw["params"] = {"B": 8, "MAXN": 64, "HEAD_DIM": 16, "TILE_N": 8}
    spec["claim"].append({
        "text": "impossible: interleaved takes negative time",
        "value": "interleaved[kv_lens=low_4185].cycles / dynamic[kv_lens=low_4185].cycles",
        "paper": "< 0", "quirk": "QUIRK-MARKER: this claim is false by construction"})
    return spec


def test_small_reproduction_of_figure_14_on_synthetic_traces(tmp_path, monkeypatch):
    spec = _small_fig14()
    monkeypatch.setattr(rp, "load_spec", lambda fig: spec)
    report_path, ok = rp.reproduce("14", None, str(tmp_path), jobs=2)
    assert not ok  # the impossible claim
    report = Path(report_path).read_text()
    assert "Points: 18 (18 ok)" in report
    assert "Data: synthetic where noted" in report and "seeded synthetic KV lengths" in report
    # every claim evaluated to a number (its terms found their windows)
    lines = report.splitlines()
    start = lines.index("| claim | paper | stepc | |") + 2
    rows = lines[start:lines.index("", start)]
    assert [r.split(" | ")[0][2:] for r in rows] == [c["text"] for c in spec["claim"]]
    for r in rows:
        float(r.split(" | ")[2])
    # the failing claim's reason, and the figure's known quirks, are in the report
    why = report.split("Why these claims are not reproduced")[1]
    assert "impossible: interleaved takes negative time" in why and "QUIRK-MARKER" in why
    assert "Known quirks of the paper's artifact" in report
    assert "head_dim is 64" in report
    # one bar per window in the plot's table, in the spec's window order
    table = report.split("| kv_lens | interleaved / dynamic |")[1].splitlines()[2:11]
    assert [r.split("|")[1].strip() for r in table] == \
        [w["label"] for w in spec["trace_set"]["b64"]["windows"]]
    fig = tmp_path / "fig14"
    assert (fig / "figure.png").exists() and (fig / "results.csv").exists()
    assert len(list((fig / "traces").glob("*.synthetic.npy"))) == 9
    # resumed: nothing re-runs, the same report comes out
    monkeypatch.setattr(rp.Sweep, "run", lambda self, **kw: [])
    rp.reproduce("14", None, str(tmp_path), jobs=1)
    assert (fig / "report.md").read_text() == report


def test_per_sweep_x_metric_in_plots(monkeypatch, tmp_path):
    """Figure 9 plots static points at on_chip_bytes and dynamic ones at
    on_chip_bytes_on_demand (the sweeps' `plot_x`)."""
    import stepc.sweep.plot as plot
    seen = {}

    def fake_scatter(records, x, y, out, *args, **kw):
        seen.update({r["tag"]: r[x] for r in records}, xlabel=kw.get("xlabel"))
    monkeypatch.setattr(plot, "scatter", fake_scatter)
    recs = [{"tag": t, "params": {}, "status": "ok", "cycles": 1, "on_chip_bytes": 10,
             "on_chip_bytes_on_demand": 4} for t in ("qwen_static", "qwen_dynamic")]
    rp._plots(load_spec("9"), recs, tmp_path)
    assert seen["qwen_static"] == 10 and seen["qwen_dynamic"] == 4
    assert "on demand" in seen["xlabel"]


# ---------------------------------------------------------------- the paper's traces
def test_specs_find_every_trace_of_the_paper():
    if not (DATA / "expert_routing").is_dir() or not (DATA / "azure_kv_trace").is_dir():
        pytest.skip(f"no paper traces under {DATA} (../shared/data is absent)")
    for fig in ALL:
        exp = expand_spec(load_spec(fig), str(DATA), "ref")
        assert exp.notes == [], (fig, exp.notes)
