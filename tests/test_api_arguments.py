"""The API's public functions (docs/api.md) refuse bad arguments with a `stepc.StepError`
subclass whose message names the argument: never a bare TypeError, ValueError or KeyError
from deep inside, and never an error that cannot be printed. Issue 29, item 1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import stepc

REPO = Path(__file__).resolve().parent.parent
SWIGLU = "programs/swiglu.step"
MOE = "programs/moe_simple.step"


@pytest.fixture(scope="module")
def prog():
    return stepc.load(REPO / MOE)


def test_check_after_load_in_a_fresh_process():
    """docs/api.md's order: `stepc.load` imports the checker package, which used to replace
    the function `stepc.check` ('module' object is not callable); `stepc.tune.tune` as
    docs/tune.md writes it, without importing stepc.tune first."""
    code = ("import stepc\n"
            f"stepc.load({SWIGLU!r})\n"
            f"assert stepc.check({SWIGLU!r}).ok\n"
            f"assert stepc.check({SWIGLU!r}).ok\n"
            "import stepc.typecheck.checker\n"
            f"assert stepc.check({MOE!r}).ok\n"
            "assert callable(stepc.sweep) and callable(stepc.tune.tune)\n"
            "assert stepc.tune.Space and stepc.tune.TuneError\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert r.returncode == 0, r.stderr


def test_compile_bytes_reads_utf8_and_reports_binary():
    """`compile(b"...")` used to raise a StepError whose str() itself raised."""
    assert stepc.compile(b"param N = 4\n").params == {"N": 4}
    with pytest.raises(stepc.StepError) as e:
        stepc.compile(b"param N = 4\x00\n", name="bin.step")
    assert "NUL" in str(e.value)


# (call, a piece of the expected message). `prog` is moe_simple, loaded once.
BAD = [
    ("load-none", lambda p: stepc.load(None), "path: expected a file path"),
    ("load-int", lambda p: stepc.load(3), "path: expected a file path"),
    ("check-int", lambda p: stepc.check(5), "path: expected a file path"),
    ("compile-none", lambda p: stepc.compile(None), "text: expected a str"),
    ("compile-name", lambda p: stepc.compile("param N = 4\n", name=5), "name: expected a str"),
    ("analyze-hw", lambda p: p.analyze(hw=5), "hw: expected a preset name"),
    ("analyze-set", lambda p: p.analyze(set=5), "set: expected a mapping"),
    ("analyze-bind-str", lambda p: p.analyze(bind={"D_0": "x"}), "bind['D_0']: expected an int"),
    ("analyze-bind-list", lambda p: p.analyze(bind=["D_0"]), "bind: expected a mapping"),
    ("analyze-bind-negative", lambda p: p.analyze(bind={"D_0": -5}), ">= 0, found -5"),
    ("simulate-hw", lambda p: p.simulate(hw=5), "hw: expected a preset name"),
    ("simulate-max-cycles", lambda p: p.simulate(max_cycles="x"), "max_cycles: expected an"),
    ("simulate-max-cycles-0", lambda p: p.simulate(max_cycles=0), "max_cycles: expected an"),
    ("simulate-progress", lambda p: p.simulate(progress=5), "progress: expected a tqdm"),
    ("simulate-values-list", lambda p: p.simulate(values=[1]), "values: expected a mapping"),
    ("simulate-values-name", lambda p: p.simulate(values={"Z": [1]}), "no tensor `Z`"),
    ("simulate-traces-list", lambda p: p.simulate(traces=[1]), "traces: expected a mapping"),
    ("simulate-traces-text", lambda p: p.simulate(traces={"routing": [["a"]]}),
     "traces['routing']: expected an array of numbers"),
    ("simulate-timing", lambda p: p.simulate(timing_only="yes"), "timing_only: expected"),
    ("dot-annotate", lambda p: p.dot(annotate=5), "annotate: expected a Cost"),
    ("dot-annotate-value", lambda p: p.dot(annotate={"x": "y"}), "annotate['x']: expected"),
    ("dot-title", lambda p: p.dot(title=5), "title: expected a str"),
    ("dot-collapse", lambda p: p.dot(collapse="no"), "collapse: expected True or False"),
    ("sweep-grid-text", lambda p: stepc.sweep([SWIGLU], grid={"TB": "16,32"}),
     "grid['TB']: expected integers"),
    ("sweep-grid-float", lambda p: stepc.sweep([SWIGLU], grid={"TB": [1.5]}), "expected an int"),
    ("sweep-grid-list", lambda p: stepc.sweep([SWIGLU], grid=["TB"]), "grid: expected a mapp"),
    ("sweep-grid-empty", lambda p: stepc.sweep([SWIGLU], grid={"TB": []}), "no values"),
    ("sweep-params", lambda p: stepc.sweep([SWIGLU], params={"TB": "x"}), "params['TB']"),
    ("sweep-programs-int", lambda p: stepc.sweep(5), "programs: expected a path"),
    ("sweep-programs-empty", lambda p: stepc.sweep([]), "programs: expected a path"),
    ("sweep-jobs-0", lambda p: stepc.sweep([SWIGLU], jobs=0), "jobs: expected an integer >= 1"),
    ("sweep-jobs-text", lambda p: stepc.sweep([SWIGLU], jobs="2"), "jobs: expected an int"),
    ("sweep-hw-int", lambda p: stepc.sweep([SWIGLU], hw=5), "hw: expected a path"),
    ("sweep-traces", lambda p: stepc.sweep([SWIGLU], traces={"r": 5}), "traces['r']"),
    ("sweep-out-int", lambda p: stepc.sweep([SWIGLU], out=5), "out: expected a file path"),
    ("sweep-out-missing-dir", lambda p: stepc.sweep([SWIGLU], out="no/such/dir/r.jsonl"),
     "does not exist"),
    ("sweep-timing", lambda p: stepc.sweep([SWIGLU], timing_only="no"), "timing_only"),
    ("sweep-progress", lambda p: stepc.sweep([SWIGLU], progress=5), "progress: expected"),
    ("reproduce-figure", lambda p: stepc.reproduce("99"), "no experiment spec for figure 99"),
    ("reproduce-figures-type", lambda p: stepc.reproduce({"9"}), "figures: expected"),
    ("reproduce-data", lambda p: stepc.reproduce("9", data=5), "data: expected a file path"),
    ("reproduce-model", lambda p: stepc.reproduce("9", model="nope"), "model: expected one"),
    ("reproduce-jobs", lambda p: stepc.reproduce("9", jobs=0), "jobs: expected an integer"),
    ("reproduce-out", lambda p: stepc.reproduce("9", out="no/such/dir/x"), "does not exist"),
]


@pytest.mark.parametrize("call,expect", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_arguments_raise_step_errors(prog, call, expect, monkeypatch):
    monkeypatch.chdir(REPO)
    with pytest.raises(stepc.StepError) as e:
        call(prog)
    text = str(e.value)
    assert expect in text, text


def test_every_documented_function_is_in_the_table():
    """Each public function and method of docs/api.md has a row above."""
    names = {b[0].split("-")[0] for b in BAD}
    assert names >= {"load", "check", "compile", "analyze", "simulate", "dot", "sweep",
                     "reproduce"}
