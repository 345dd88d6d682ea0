"""The `ref` memory model's two implementations of the reference simulator's HBM node
serve every request identically: the numpy one (always there) and the numba one a long run
switches to when numba is installed (`stepc[fast]`). Same cycles, same per-channel
counts, on every bundled program and on the paper's MoE layer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stepc.frontend import compile_file
from stepc.hw import load_config
from stepc.sim.hbm import ref
from stepc.sim.run import simulate

pytest.importorskip("numba")
ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = sorted(p.name for p in (ROOT / "programs").glob("*.step"))


def run(program: str, compiled: bool, monkeypatch, params=None, preset="paper-eval",
        traces=None):
    monkeypatch.setattr(ref, "COMPILE_AFTER", -1 if compiled else 1 << 62)
    typed = compile_file(str(ROOT / "programs" / program), params or {}).typed
    return simulate(typed, load_config(preset), traces, functional=False)


# whole decoder layers at their defaults take about 20 s a run: one layer of a smaller model
SMALLER = {"L": 1, "D": 512, "E": 32, "TOPK": 2}


@pytest.mark.parametrize("program", PROGRAMS)
def test_compiled_and_numpy_ref_agree_on_every_bundled_program(program, monkeypatch):
    params = SMALLER if program.startswith("decoder_") else None
    a = run(program, False, monkeypatch, params)
    b = run(program, True, monkeypatch, params)
    assert a.cycles == b.cycles
    assert (a.read_requests, a.write_requests) == (b.read_requests, b.write_requests)
    assert np.array_equal(a.memory.per_channel, b.memory.per_channel)
    assert [o.finish for o in a.ops] == [o.finish for o in b.ops]


def test_compiled_and_numpy_ref_agree_on_the_validation_fabric(monkeypatch):
    for ti in (16, 256):
        a = run("swiglu.step", False, monkeypatch, {"TB": 16, "TI": ti}, "hdl-validation")
        b = run("swiglu.step", True, monkeypatch, {"TB": 16, "TI": ti}, "hdl-validation")
        assert a.cycles == b.cycles and np.array_equal(a.memory.per_channel,
                                                       b.memory.per_channel)


def test_the_compiled_kernel_is_taken_once_a_run_is_long(monkeypatch):
    """Short runs stay in numpy (numba's start-up would not pay); a run past the
    threshold switches."""
    from stepc.sim.hbm.ref import RefHbm
    used = []
    original = RefHbm._requests

    def spy(self, picked, ended, c1):
        out = original(self, picked, ended, c1)
        used.append(bool(self.compiled))
        return out
    monkeypatch.setattr(RefHbm, "_requests", spy)
    monkeypatch.setattr(ref, "COMPILE_AFTER", 50_000)
    typed = compile_file(str(ROOT / "programs" / "swiglu.step"), {"TB": 16, "TI": 16}).typed
    simulate(typed, load_config("hdl-validation"), functional=False)
    assert not used[0] and used[-1]
