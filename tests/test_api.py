"""The Python API (stepc.load, compile, sweep, the result types, the errors): docs/api.md's
examples run as written, results match the CLI's JSON, nothing is printed, and `import
stepc` stays cheap."""

from __future__ import annotations

import doctest
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_sim_kernel import DEADLOCK

import stepc
from stepc.cli import main

REPO = Path(__file__).resolve().parent.parent
SWIGLU = str(REPO / "programs" / "swiglu.step")
API_DOC = REPO / "docs" / "api.md"
DATA = REPO.parent / "shared" / "data"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
needs_data = pytest.mark.skipif(not (DATA / "expert_routing").is_dir(),
                                reason="the paper's data (../shared/data) is absent")


def doc_blocks(lang: str) -> list[str]:
    return [body for kind, body in FENCE.findall(API_DOC.read_text(encoding="utf-8"))
            if kind == lang]


@pytest.fixture
def at_repo(monkeypatch):
    monkeypatch.chdir(REPO)


# ---------------------------------------------------------------- docs/api.md
def test_doc_examples(at_repo):
    """Every `>>>` example of docs/api.md, in order, in one namespace, as doctests."""
    text = "\n".join(doc_blocks("pycon"))
    test = doctest.DocTestParser().get_doctest(text, {}, "docs/api.md", str(API_DOC), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    out: list[str] = []
    runner.run(test, out=out.append)
    assert runner.failures == 0, "".join(out)
    assert runner.tries >= 15


@pytest.mark.slow
@needs_data
def test_doc_notebook_cells(at_repo):
    """The real-trace cell and the Figure 9 Qwen cell run as written (public API only) and
    draw the panel: four static points and the dynamic one."""
    import matplotlib
    matplotlib.use("Agg")
    cells = doc_blocks("python")
    assert len(cells) == 2
    fig9 = cells[1]
    assert len(fig9.strip().splitlines()) < 15
    assert all(m in ("stepc", "matplotlib.pyplot") for m in
               re.findall(r"^import (\S+)", fig9, re.M))
    namespace: dict = {}
    for cell in cells:
        exec(compile(cell, str(API_DOC), "exec"), namespace)
    ax = namespace["ax"]
    static, dynamic = ax.get_lines()
    assert len(static.get_xdata()) == 4 and len(dynamic.get_xdata()) == 1
    assert [r["status"] for r in namespace["static"]] == ["ok"] * 4
    assert namespace["dynamic"].cycles == namespace["run"].cycles  # the same point twice
    assert ax.get_xscale() == "log"


# ---------------------------------------------------------------- surface
def test_import_is_cheap():
    """`import stepc` loads neither the front end nor the API (the CLI's start-up time)."""
    code = ("import sys, stepc; heavy = [m for m in ('sympy', 'textx', 'networkx', "
            "'numpy', 'stepc.api') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_public_names():
    import importlib.util
    for name in stepc.__all__:
        if name == "from_torch" and importlib.util.find_spec("torch") is None:
            continue  # the torch extra
        assert getattr(stepc, name) is not None, name
    assert issubclass(stepc.Deadlock, stepc.StepError)
    assert issubclass(stepc.InputError, stepc.StepError)
    with pytest.raises(AttributeError):
        stepc.no_such_name  # noqa: B018


def test_check_and_sweep_are_the_api_functions_not_modules():
    import types

    import stepc.explore.runner  # noqa: F401 - importing the packages rebinds nothing
    import stepc.typecheck.checker  # noqa: F401
    from stepc.api.program import check
    from stepc.api.study import sweep
    assert stepc.check is check and stepc.sweep is sweep
    assert not isinstance(stepc.check, types.ModuleType)


# ---------------------------------------------------------------- the CLI's schema
def _cli_json(args: list[str]) -> dict:
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_to_dict_is_the_cli_json(at_repo):
    prog = stepc.load("programs/moe_simple.step")
    assert prog.report().to_dict() == _cli_json(["check", "--format", "json",
                                                 "programs/moe_simple.step"])
    cost = prog.analyze(hw="paper-eval", bind={"D_0": 4})
    assert cost.to_dict() == _cli_json(["analyze", "--format", "json", "--hw", "paper-eval",
                                        "--bind", "D_0=4", "programs/moe_simple.step"])
    run = prog.simulate(hw="hdl-validation")
    assert run.to_dict() == _cli_json(["sim", "--format", "json", "--hw", "hdl-validation",
                                       "programs/moe_simple.step"])


def test_per_op_is_built_on_first_use(at_repo):
    """`Cost.per_op` (which `stepc analyze`'s text report never reads) is built when first
    read, from the analysis the cost carries."""
    cost = stepc.load("programs/moe_simple.step").analyze(bind={"D_0": 4})
    assert "per_op" not in vars(cost)
    ops = cost.analysis.ops
    assert list(cost.per_op) == [o.node for o in ops]
    for o in ops:
        assert cost.per_op[o.node] == {
            "op": o.op, "off_chip_bytes": o.off_chip, "on_chip_bytes": o.on_chip,
            "on_chip_bytes_on_demand": o.on_chip_on_demand, "flops": o.flops,
            "compute_bw": o.compute_bw}, o.node


def test_api_prints_nothing(at_repo, capfd, tmp_path):
    prog = stepc.load("programs/swiglu.step", TB=32)
    prog.analyze(hw="paper-eval", set={"hbm.channels": 16})
    run = prog.simulate(set=["hbm.model=dram", "hbm.latency=9"], timing_only=True)
    assert run.warnings  # the dram model reads no fixed latency: returned, not printed
    stepc.sweep("programs/swiglu.step", grid={"TB": [16]}, jobs=1)
    assert capfd.readouterr() == ("", "")


# ---------------------------------------------------------------- errors
def test_errors_carry_diagnostics(at_repo, tmp_path):
    with pytest.raises(stepc.StepError) as e:
        stepc.load("no/such/file.step")
    assert [d.code for d in e.value.diagnostics] == ["E0002"]
    with pytest.raises(stepc.InputError) as e:
        stepc.load("programs/moe_simple.step").analyze(bind={"D_9": 1})
    assert [d.code for d in e.value.diagnostics] == ["E0106"]
    with pytest.raises(stepc.InputError, match="no external stream `nope`"):
        stepc.load("programs/moe_simple.step").simulate(traces={"nope": [[0]]})
    with pytest.raises(stepc.InputError, match="hbm"):
        stepc.load("programs/swiglu.step").simulate(set={"hbm.chanels": 3})


def test_deadlock_carries_the_wait_for_report(tmp_path):
    p = tmp_path / "dead.step"
    p.write_text(DEADLOCK)
    with pytest.raises(stepc.Deadlock) as e:
        stepc.load(p).simulate()
    assert "wait-for cycle" in e.value.report and "dead.step:" in e.value.report
    assert e.value.blocked and e.value.run.deadlock == e.value.blocked
    assert e.value.run.to_dict()["deadlock"]


# ---------------------------------------------------------------- sweeps and pictures
def test_sweep_results_and_file(at_repo, tmp_path):
    out = tmp_path / "r.jsonl"
    calls: list[dict] = []
    results = stepc.sweep(["programs/swiglu.step"], grid={"TB": [16, 32]}, jobs=1,
                          out=str(out), progress=calls.append)
    assert len(results) == 2 and len(calls) == 2 and not results.failed
    assert [json.loads(line)["cycles"] for line in out.read_text().splitlines()] == \
        [r["cycles"] for r in results]
    again = stepc.sweep(["programs/swiglu.step"], grid={"TB": [16, 32]}, out=str(out),
                        resume=True)
    assert again.reused == 2 and again.ran == 0
    with pytest.raises(stepc.InputError, match="exists"):
        stepc.sweep(["programs/swiglu.step"], out=str(out))
    with pytest.raises(stepc.InputError, match="no parameter `TX`"):
        stepc.sweep(["programs/swiglu.step"], grid={"TX": [1]})


def test_to_pandas(at_repo, monkeypatch):
    results = stepc.sweep("programs/swiglu.step", grid={"TB": [16]}, jobs=1)
    rows = results.to_records()
    assert rows[0]["TB"] == 16 and "params" not in rows[0]
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match="stepc\\[pandas\\]"):
        results.to_pandas()
    monkeypatch.undo()
    pandas = pytest.importorskip("pandas")
    frame = results.to_pandas()
    assert isinstance(frame, pandas.DataFrame) and list(frame["TB"]) == [16]


def test_repr_svg_with_and_without_graphviz(at_repo, monkeypatch):
    import shutil
    prog = stepc.load("programs/moe_simple.step")
    if shutil.which("dot"):
        assert "<svg" in prog._repr_svg_()
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert prog._repr_svg_() is None
    assert "\ndigraph " in prog.dot()


def test_reproduce_refuses_unknown_figures(tmp_path):
    with pytest.raises(stepc.InputError, match="no experiment spec for figure 99"):
        next(stepc.reproduce("99", out=str(tmp_path)))
    assert not os.listdir(tmp_path)


def test_without_the_torch_extra_star_import_and_help_work_and_a_call_says_what_to_install():
    """`from_torch` is in `__all__`: without torch, `from stepc import *` and `help(stepc)`
    raised ModuleNotFoundError, and a call a 20-line traceback with no install hint."""
    import subprocess
    import sys
    code = ("import sys\nsys.modules['torch'] = None\nfrom stepc import *\nimport pydoc\n"
            "import stepc\npydoc.render_doc(stepc)\nfrom_torch('m.py:M')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last == ("ImportError: stepc.from_torch needs torch, which is not installed: "
                    "pip install 'stepc[torch]'"), proc.stderr


def test_api_errors_name_keywords_and_the_command_line_names_flags(tmp_path):
    """The API said `--hw paper_eval`, `--trace`, `--bind`, `--grid`, `--out`: each
    message now names the argument as the caller wrote it."""
    from click.testing import CliRunner

    from stepc.cli import main

    prog = stepc.load(SWIGLU)
    cases = [(lambda: prog.simulate(hw="paper_eval"), "hw='paper_eval'"),
             (lambda: prog.simulate(set={"zz.a": 1}), "set['zz.a']"),
             (lambda: prog.analyze(bind={"D_9": 3}), "bind['D_9']"),
             (lambda: stepc.sweep([SWIGLU], grid={"TQ": [1]}),
              "grid['TQ']"),
             (lambda: stepc.sweep([SWIGLU], grid={"TB": [16]},
                                  traces={"routing": str(tmp_path / "no.npy")}),
              "traces['routing']")]
    for call, named in cases:
        with pytest.raises(stepc.InputError) as e:
            call()
        assert named in str(e.value) and "--" not in str(e.value), str(e.value)
    res = CliRunner().invoke(main, ["sim", SWIGLU, "--hw", "paper_eval"])
    assert res.exit_code == 2 and "--hw paper_eval" in res.output, res.output
    res = CliRunner().invoke(main, ["analyze", SWIGLU, "--bind", "D_9=3"])
    assert "--bind D_9" in res.output, res.output


def test_reprs_say_the_verdict_and_iteration_has_the_flat_records():
    ok, bad = stepc.check(SWIGLU), stepc.check("no/such.step")
    assert repr(ok).endswith(": ok, 0 errors, 0 warnings)") and repr(ok) != repr(bad)
    assert ": has errors, 1 error" in repr(bad)
    results = stepc.sweep([SWIGLU], grid={"TB": [16, 32]}, jobs=1)
    assert [r["TB"] for r in results] == [16, 32]
    assert list(results) == results.to_records()
    assert repr(results).startswith("SweepResults(2 points: 2 ok, 0 failed")


def test_an_unsigned_or_fractional_trace_array_is_read_or_refused_with_a_message():
    import numpy as np

    from stepc.api import InputError, load
    prog = load(str(REPO / "programs" / "attention_dynamic.step"))
    lens = [3, 6, 1, 9] * 16
    assert prog.simulate(traces={"kv_lens": np.array(lens, dtype=np.uint64)}).cycles == \
        prog.simulate(traces={"kv_lens": np.array(lens)}).cycles
    for bad, says in ((np.array([2**64 - 1] * 64, dtype=np.uint64), "too large"),
                      (np.array([1.5] * 64), "must hold integers")):
        with pytest.raises(InputError, match=says):
            prog.simulate(traces={"kv_lens": bad})
