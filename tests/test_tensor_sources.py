"""Where a run's data comes from and how to see it: `file(path=...)` relative to the
program's folder (as `import`), a coded, located error for a missing file, the inputs a run
starts from (`--inputs-out`, `Program.inputs`), and the documented feedback loop that runs
while a loop without a first element is diagnosed as one no FIFO depth can start."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import stepc
from stepc.cli import main

REPO = Path(__file__).resolve().parent.parent
COPY = """tensor X : f32[2, 64] input = file(path="data/x.npy")
tensor Y : f32[2, 64] output
x = LinearOffChipLoad(X, tile=[1, 64])
LinearOffChipStore(x, Y)
"""


def run(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A program in proj/ reading proj/data/x.npy, run from another directory."""
    (tmp_path / "proj" / "data").mkdir(parents=True)
    (tmp_path / "proj" / "copy.step").write_text(COPY, encoding="utf-8")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    return tmp_path


def test_file_sources_are_relative_to_the_program(project):
    x = np.arange(128, dtype=np.float32).reshape(2, 64)
    np.save(project / "proj" / "data" / "x.npy", x)
    r = run("sim", "../proj/copy.step", "--out", "o")
    assert r.exit_code == 0, r.output
    assert (np.load("o/Y.npy") == x).all()


def test_a_missing_file_is_a_located_coded_error(project):
    r = run("sim", "../proj/copy.step")
    assert r.exit_code == 1
    assert re.search(r"copy\.step:1:\d+: error\[E0002\]: tensor `X`: no such file: "
                     r"\S*proj/data/x\.npy", r.stderr), r.stderr
    with pytest.raises(stepc.StepError, match="E0002"):
        stepc.load("../proj/copy.step").inputs()


def test_inputs_out_writes_what_the_run_started_from(tmp_path):
    r = run("sim", "programs/moe_simple.step", "--inputs-out", str(tmp_path / "in"),
            "--out", str(tmp_path / "out"))
    assert r.exit_code == 0, r.output
    assert "wrote" in r.stderr and str(tmp_path / "in") in r.stderr
    prog = stepc.load("programs/moe_simple.step")
    inputs = prog.inputs()
    written = {p.stem: np.load(p) for p in (tmp_path / "in").glob("*.npy")}
    assert set(written) == set(inputs) == {n for n, t in prog._compiled.typed.program.tensors
                                           .items() if t.role != "output"}
    for name, value in inputs.items():
        assert (written[name] == value).all(), name
    # the inputs are the run's: a copy program's output equals its input
    copy = tmp_path / "copy.step"
    copy.write_text(COPY.replace('file(path="data/x.npy")', "random(seed=3)"))
    r = run("sim", str(copy), "--inputs-out", str(tmp_path / "cin"), "--out",
            str(tmp_path / "cout"))
    assert r.exit_code == 0, r.output
    assert (np.load(tmp_path / "cin" / "X.npy") == np.load(tmp_path / "cout" / "Y.npy")).all()
    r = run("sim", "programs/moe_simple.step", "--timing-only", "--inputs-out",
            str(tmp_path / "t"))
    assert r.exit_code == 0 and "nothing written" in r.stderr
    assert not (tmp_path / "t").exists()


def _feedback_blocks() -> list[str]:
    text = (REPO / "docs" / "language.md").read_text(encoding="utf-8")
    return [body for body in re.findall(r"^```step\n(.*?)^```$", text, re.S | re.M)
            if re.search(r"^stream \w+ : [^=]*$", body, re.M)]


def test_the_documented_feedback_loop_runs(tmp_path):
    bodies = _feedback_blocks()
    assert bodies, "docs/language.md has no feedback stream example"
    for i, body in enumerate(bodies):
        path = tmp_path / f"fb{i}.step"
        path.write_text(body, encoding="utf-8")
        r = run("sim", str(path))
        assert r.exit_code == 0, r.output


TOKENLESS = """param E = 2
param N = 8
tensor X : bf16[N, 64] input = random(seed=1)
tensor W : bf16[E, 64, 64] weight = random(seed=2)
tensor Y : bf16[N, 64] output
stream order : Strm<MultiHot<E>, 0>[N]
x = LinearOffChipLoad(X, tile=[1, 64])
p = Partition(x, order, rank=1, consumers=E, dim="R")
for i in 0..E {
    rows = Flatten(p[i], min=0, max=1)
    w = LinearOffChipLoad(W[i], ref=rows, tile=[64, 64], shape=[1])
    y[i] = Flatten(Map(Reshape(rows, chunk=1), w, fn=matmul), min=0, max=1)
}
merged, order = EagerMerge(y)
assume shape(merged) == [N]
LinearOffChipStore(merged, Y)
"""


def test_a_loop_without_a_first_element_is_named_and_no_fifo_depth_offered(tmp_path):
    path = tmp_path / "tokenless.step"
    path.write_text(TOKENLESS, encoding="utf-8")
    r = run("sim", str(path))
    assert r.exit_code == 3
    hint = r.stderr.strip().splitlines()[-1]
    assert "feedback stream `order`" in hint and "no FIFO depth helps" in hint
    assert "deeper FIFO" not in r.stderr
