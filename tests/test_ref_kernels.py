"""The `ref` memory model's implementations of the reference simulator's HBM node serve
every request identically: the closed form per stretch of constant ports (the default),
numpy in pickup order, the plain request-by-request loop under the short windows of a
pickup-only completion bound, and the numba loop a long run switches to when numba is
installed (`stepc[fast]`). Same cycles, same per-channel counts, on every bundled program
and on the validation fabric."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stepc.frontend import compile_file
from stepc.hw import load_config
from stepc.sim.hbm import ref
from stepc.sim.hbm.window import WindowedMemory
from stepc.sim.run import simulate

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = sorted(p.name for p in (ROOT / "programs").glob("*.step"))
MODES = ("closed", "numpy", "direct", "compiled")


def run(program: str, mode: str, monkeypatch, params=None, preset="paper-eval",
        traces=None):
    """Simulate with one way of serving the windows whose ports issue every cycle."""
    if mode != "closed":
        monkeypatch.setattr(ref, "serve_periodic", lambda *args: None)
    monkeypatch.setattr(ref, "COMPILE_AFTER", -1 if mode == "compiled" else 1 << 62)
    monkeypatch.setattr(ref, "PYTHON_BELOW", 1 << 62 if mode == "direct" else 0)
    if mode == "direct":  # windows end where the pickups alone say a burst could end
        monkeypatch.setattr(ref.RefHbm, "_done_floor", WindowedMemory._done_floor)
        monkeypatch.setattr(ref.RefHbm, "_earliest_done", WindowedMemory._earliest_done)
    typed = compile_file(str(ROOT / "programs" / program), params or {}).typed
    return simulate(typed, load_config(preset), traces, functional=False)


def assert_same(a, b) -> None:
    assert a.cycles == b.cycles
    assert (a.read_requests, a.write_requests) == (b.read_requests, b.write_requests)
    assert np.array_equal(a.memory.per_channel, b.memory.per_channel)
    assert [o.finish for o in a.ops] == [o.finish for o in b.ops]
    assert [o.busy for o in a.ops] == [o.busy for o in b.ops]


# whole decoder layers at their defaults take about 20 s a run: one layer of a smaller model
SMALLER = {"L": 1, "D": 512, "E": 32, "TOPK": 2}


@pytest.mark.parametrize("program", PROGRAMS)
def test_closed_form_agrees_on_every_bundled_program(program, monkeypatch):
    params = SMALLER if program.startswith("decoder_") else None
    assert_same(run(program, "closed", monkeypatch, params),
                run(program, "numpy", monkeypatch, params))


SMALL = ("moe_simple.step", "swiglu.step", "attention_coarse.step")


@pytest.mark.parametrize("program", [pytest.param(p, marks=() if p in SMALL else
                                                  pytest.mark.slow) for p in PROGRAMS])
def test_direct_loop_agrees_on_every_bundled_program(program, monkeypatch):
    """The plain loop under the pickup-only windows (the way before the closed form)."""
    params = SMALLER if program.startswith("decoder_") else None
    assert_same(run(program, "direct", monkeypatch, params),
                run(program, "numpy", monkeypatch, params))


@pytest.mark.parametrize("program", PROGRAMS)
def test_compiled_kernel_agrees_on_every_bundled_program(program, monkeypatch):
    pytest.importorskip("numba")
    params = SMALLER if program.startswith("decoder_") else None
    assert_same(run(program, "compiled", monkeypatch, params),
                run(program, "numpy", monkeypatch, params))


@pytest.mark.parametrize("mode", MODES)
def test_every_way_of_serving_agrees_on_the_validation_fabric(mode, monkeypatch):
    """8 channels, four requests per message: the closed form steps aside."""
    if mode == "compiled":
        pytest.importorskip("numba")
    for ti in (16, 256):
        params = {"TB": 16, "TI": ti}
        assert_same(run("swiglu.step", mode, monkeypatch, params, "hdl-validation"),
                    run("swiglu.step", "direct", monkeypatch, params, "hdl-validation"))


def test_streamed_tiles_see_the_same_first_responses(monkeypatch):
    """With `fabric.stream_tile` the loaders read each burst's first response too."""
    typed = compile_file(str(ROOT / "programs" / "moe_static.step")).typed
    hw = load_config("paper-eval", ("fabric.stream_tile=1",))
    results = []
    for closed in (True, False):
        if not closed:
            monkeypatch.setattr(ref, "serve_periodic", lambda *args: None)
        results.append(simulate(typed, hw, functional=False))
    assert_same(*results)


def test_the_closed_form_serves_every_request_of_a_moe_layer(monkeypatch):
    """The MoE layer (one request per message) is served in closed form throughout,
    however many ports issue at once: nothing request by request, no numba."""
    models = []
    original = ref.RefHbm.__init__

    def spy(self, *args, **kwargs):
        original(self, *args, **kwargs)
        models.append(self)
    monkeypatch.setattr(ref.RefHbm, "__init__", spy)
    typed = compile_file(str(ROOT / "programs" / "moe_static.step")).typed
    r = simulate(typed, load_config("paper-eval"), functional=False)
    assert r.read_requests > 0 and models[0].served == 0 and not models[0].compiled


def test_the_compiled_kernel_is_taken_once_a_run_is_long(monkeypatch):
    """Short runs stay in numpy (numba's start-up would not pay); a run past the
    threshold switches."""
    pytest.importorskip("numba")
    used = []
    original = ref.RefHbm._requests

    def spy(self, picked, ended, c1):
        out = original(self, picked, ended, c1)
        used.append(bool(self.compiled))
        return out
    monkeypatch.setattr(ref.RefHbm, "_requests", spy)
    monkeypatch.setattr(ref, "COMPILE_AFTER", 50_000)
    typed = compile_file(str(ROOT / "programs" / "swiglu.step"), {"TB": 16, "TI": 16}).typed
    simulate(typed, load_config("hdl-validation"), functional=False)
    assert not used[0] and used[-1]


@pytest.mark.parametrize("channels,interval", [(32, 2), (8, 2), (32, 1), (16, 3), (12, 2)])
def test_closed_form_matches_the_request_loop_on_random_windows(channels, interval):
    """Random windows (ports starting and ending anywhere, more ports than channels,
    channels idle, queued or deep in backlog, stretches shorter and longer than a period):
    the closed form leaves the model in the state the request loop does."""
    from types import SimpleNamespace

    from stepc.sim.hbm.ref_periodic import serve_periodic
    from stepc.sim.hbm.ref_serve import serve_window
    from stepc.sim.hbm.window import MemoryStats

    rng = np.random.default_rng(channels * 10 + interval)
    cfg = SimpleNamespace(channels=channels, request_interval=interval)
    for _ in range(60):
        ports = int(rng.integers(1, 2 * channels + 3))
        c0 = 1000
        picked = []
        for _ in range(ports):
            s = c0 + int(rng.integers(0, 40))
            picked.append((SimpleNamespace(per_message=1, last_requests=1),
                           range(s, s + int(rng.integers(1, 300)))))
        ended = [bool(rng.integers(0, 2)) for _ in picked]
        free = c0 + rng.integers(-50, 3000 if rng.integers(0, 2) else 60, channels)
        offset = int(rng.integers(0, channels))
        out = []
        for serve in (lambda m: serve_periodic(m, picked, ended),
                      lambda m: serve_window(m, picked, ended)):
            m = SimpleNamespace(cfg=cfg, free=free.astype(np.int64), offset=offset,
                                min_latency=17, want_first=True,
                                stats=MemoryStats(per_channel=np.zeros(channels, np.int64)))
            n_req, latest, earliest = serve(m)
            out.append((list(n_req), [int(x) for x in latest], [int(x) for x in earliest],
                        m.free.tolist(), m.offset, m.stats.per_channel.tolist()))
        assert out[0] == out[1]
