"""`stepc dot`: rendering, collapse, annotation, and never clobbering a user's file."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from bundled import LARGE, SMALL
from click.testing import CliRunner

from stepc.cli import main
from stepc.frontend import compile_file
from stepc.viz.dot import Heat, to_dot

REPO = Path(__file__).resolve().parent.parent
PROGRAMS = sorted((REPO / "programs").glob("*.step"))
sys.path.insert(0, str(REPO / "benchmarks"))
from gen_moe import generate  # noqa: E402


def need_graphviz():
    if shutil.which("dot") is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install Graphviz (apt-get install graphviz)")
        pytest.skip("Graphviz `dot` is not installed")


WHOLE_GRAPH_LIMIT = 3000  # operators: moe_static's 2,442 still render whole


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def sized(program: Path, small: bool):
    """`program` at its bundled.SMALL size, or at its own (under `-m slow` when it has a
    SMALL one: a whole MoE layer takes Graphviz ~20 CPU-seconds)."""
    params = SMALL.get(program.stem) if small else None
    return pytest.param(program, params, id=program.name + ("-small" if params else ""),
                        marks=[pytest.mark.slow] * (not small and program.stem in SMALL))


@pytest.mark.parametrize("program,params", [sized(p, small) for p in PROGRAMS
                                            for small in (True, False)
                                            if not small or p.stem in SMALL])
def test_every_program_renders_to_svg(program, params, tmp_path, bundled):
    need_graphviz()
    out = tmp_path / "g.svg"
    # whole decoder layers (thousands of operators) take Graphviz minutes: drawn collapsed,
    # at every size (Graphviz 2.43 fails on the small timemux layer drawn whole: init_rank)
    big = program.stem in LARGE or \
        len(bundled.typed(program.stem, params).program.nodes) > WHOLE_GRAPH_LIMIT
    sizes = [a for k, v in (params or {}).items() for a in ("-D", f"{k}={v}")]
    r = run("dot", str(program.relative_to(REPO)), *sizes, "-o", str(out),
            *(["--collapse"] if big else []))
    assert r.exit_code == 0, r.output
    root = ET.fromstring(out.read_bytes())
    assert root.tag.endswith("svg")
    assert "stepc" in out.read_text()


def test_collapse_folds_128_experts(tmp_path):
    path = tmp_path / "moe128.step"
    path.write_text(generate(128))
    typed = compile_file(str(path)).typed
    full = to_dot(typed)
    folded = to_dot(typed, collapse=True)
    nodes = lambda text: len(re.findall(r'^\s*"[^"]+" \[label=', text, re.M))  # noqa: E731
    assert nodes(full) > 2000
    assert nodes(folded) < 40
    assert "128 iterations" in folded
    assert "x128" in folded


def test_feedback_edges_and_clusters():
    text = (REPO / "tests/golden/check/types_feedback_loop_graph.step")
    typed = compile_file(str(text.relative_to(REPO))).typed
    dot = to_dot(typed)
    assert "style=dashed" in dot and "subgraph" in dot


def test_heat_shades_nodes():
    typed = compile_file("programs/swiglu.step").typed
    dot = to_dot(typed, heat={"wg": Heat(1.0, "hot"), "x": Heat(0.0, "cold")})
    assert re.search(r'"wg" \[.*fillcolor="#ff4141"', dot)
    assert re.search(r'"x" \[.*fillcolor="#ffffff"', dot)
    assert "hot" in dot


def test_annotate_from_json_hook(tmp_path):
    heat = tmp_path / "sim.json"
    heat.write_text(json.dumps({"heat": {"gate": {"fraction": 0.5, "note": "busy 50%"}}}))
    r = run("dot", "programs/swiglu.step", "--annotate", str(heat))
    assert r.exit_code == 0 and "busy 50%" in r.stdout
    heat.write_text("{}")
    r = CliRunner().invoke(main, ["dot", "programs/swiglu.step", "--annotate", str(heat)])
    assert r.exit_code == 2


def test_never_overwrites_foreign_files(tmp_path):
    mine = tmp_path / "notes.dot"
    mine.write_text("my precious notes\n")
    r = CliRunner().invoke(main, ["dot", "programs/swiglu.step", "-o", str(mine)])
    assert r.exit_code == 2 and "--force" in r.stderr
    assert mine.read_text() == "my precious notes\n"
    assert run("dot", "programs/swiglu.step", "-o", str(mine), "--force").exit_code == 0
    # a previous output of stepc dot is replaced without --force
    assert run("dot", "programs/moe_simple.step", "-o", str(mine)).exit_code == 0
    assert "moe_simple" in mine.read_text()


def test_previous_svg_is_replaced(tmp_path):
    need_graphviz()
    out = tmp_path / "g.svg"
    assert run("dot", "programs/swiglu.step", "-o", str(out)).exit_code == 0
    assert run("dot", "programs/moe_simple.step", "-o", str(out)).exit_code == 0
    foreign = tmp_path / "x.svg"
    foreign.write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
    r = CliRunner().invoke(main, ["dot", "programs/swiglu.step", "-o", str(foreign)])
    assert r.exit_code == 2


def test_missing_graphviz_writes_dot_beside(tmp_path, monkeypatch):
    """Without Graphviz the image is not made (exit 2, with the install hint), but the DOT
    text is written beside it, as the README says."""
    monkeypatch.setattr(shutil, "which", lambda name: None)
    r = CliRunner().invoke(main, ["dot", "programs/swiglu.step", "-o", str(tmp_path / "g.svg")])
    assert r.exit_code == 2
    assert "apt-get install graphviz" in r.stderr and "g.dot" in r.stderr
    assert not (tmp_path / "g.svg").exists()
    assert (tmp_path / "g.dot").read_text().startswith("// generated by stepc dot")
    foreign = tmp_path / "h.dot"  # a file of the user's is not replaced by the fallback
    foreign.write_text("mine\n")
    r = CliRunner().invoke(main, ["dot", "programs/swiglu.step", "-o", str(tmp_path / "h.svg")])
    assert r.exit_code == 2 and foreign.read_text() == "mine\n"


def test_unknown_format(tmp_path):
    r = CliRunner().invoke(main, ["dot", "programs/swiglu.step", "-o", str(tmp_path / "g.jpg")])
    assert r.exit_code == 2 and "unknown output format" in r.stderr


@pytest.mark.parametrize("suffix", [".png", ".pdf"])
def test_previous_binary_output_is_replaced(tmp_path, suffix):
    need_graphviz()
    out = tmp_path / f"g{suffix}"
    assert run("dot", "programs/swiglu.step", "-o", str(out)).exit_code == 0
    assert run("dot", "programs/moe_simple.step", "-o", str(out)).exit_code == 0
    foreign = tmp_path / f"x{suffix}"
    foreign.write_bytes(out.read_bytes()[:100])
    r = CliRunner().invoke(main, ["dot", "programs/swiglu.step", "-o", str(foreign)])
    assert r.exit_code == 2


def test_large_uncollapsed_graph_warns(tmp_path):
    """A 128-expert graph drawn whole is illegible: stepc says so and suggests --collapse."""
    r = CliRunner().invoke(main, ["dot", "programs/moe_static.step", "-o",
                                  str(tmp_path / "g.dot")])
    assert r.exit_code == 0
    assert "2,442 operators" in r.stderr and "--collapse" in r.stderr
    r = CliRunner().invoke(main, ["dot", "programs/moe_static.step", "--collapse", "-o",
                                  str(tmp_path / "g.dot")])
    assert r.exit_code == 0 and "--collapse" not in r.stderr
    r = CliRunner().invoke(main, ["dot", "programs/swiglu.step", "-o", str(tmp_path / "s.dot")])
    assert "warning" not in r.stderr and f"wrote {tmp_path / 's.dot'}" in r.stderr
