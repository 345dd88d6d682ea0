"""The `ref` memory model's strategies (`stepc.sim.hbm.ref.STRATEGIES`) serve every request
identically: the whole window service compiled (the default where the native core is
built), the closed form per stretch of constant ports, numpy in pickup order, the plain
request loop in Python under windows cut by the pickups alone, the same loop compiled by
numba (`stepc[fast]`), and the memory window's generic numpy path. Same cycles, same
per-channel counts, on every bundled program and on the validation fabric."""

from __future__ import annotations

import numpy as np
import pytest
from bundled import MOE, PROGRAMS, SMALL

from stepc.hw import load_config
from stepc.sim.hbm import make_memory, ref
from stepc.sim.hbm.ref import STRATEGIES, RefHbm
from stepc.sim.kernel import Kernel
from stepc.sim.native import PURE_PYTHON_VARIABLE, compiled
from stepc.sim.run import simulate

OTHERS = [s for s in STRATEGIES if s != "auto"]
NATIVE = compiled("stepc.sim.hbm._ref_pool") is not None


def needs(strategy: str) -> None:
    """Skip a strategy whose compiled part is not installed."""
    if strategy == "numba":
        pytest.importorskip("numba")
    if strategy == "native" and not NATIVE:
        pytest.skip("the native core is not built (python hatch_build.py)")


def assert_same(a, b) -> None:
    assert a.cycles == b.cycles
    assert (a.read_requests, a.write_requests) == (b.read_requests, b.write_requests)
    assert np.array_equal(a.memory.per_channel, b.memory.per_channel)
    assert [o.finish for o in a.ops] == [o.finish for o in b.ops]
    assert [o.busy for o in a.ops] == [o.busy for o in b.ops]


def served_only_by(run, *paths: str) -> bool:
    """Every request of the run was served by one of `paths`."""
    by = run.memory.served_by
    return sum(by.values()) == run.read_requests + run.write_requests and set(by) <= set(paths)


@pytest.mark.parametrize("strategy", OTHERS)
@pytest.mark.parametrize("program", [pytest.param(p, marks=pytest.mark.xdist_group(f"{p}-small"))
                                     for p in PROGRAMS])
def test_every_strategy_agrees_on_every_bundled_program(program, strategy, bundled):
    needs(strategy)
    params = SMALL.get(program)
    run = bundled.run(program, params, ref_strategy=strategy)
    assert served_only_by(run, strategy, "in-order" if strategy == "closed" else strategy)
    assert_same(run, bundled.run(program, params))


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["closed", "in-order", "generic"])
@pytest.mark.parametrize("program", sorted(SMALL))
def test_every_strategy_agrees_at_the_bundled_sizes(program, strategy, bundled):
    """The same at the programs' own sizes (deep queues, thousands of ports' stretches)."""
    assert_same(bundled.run(program, ref_strategy=strategy), bundled.run(program))


@pytest.mark.xdist_group("swiglu-validation")
@pytest.mark.parametrize("strategy", OTHERS)
def test_every_strategy_agrees_on_the_validation_fabric(strategy, bundled):
    """8 channels, four requests per message: the closed form steps aside."""
    needs(strategy)
    for ti in (16, 256):
        params = {"TB": 16, "TI": ti}
        run = bundled.run("swiglu", params, "hdl-validation", strategy)
        assert "closed" not in run.memory.served_by
        assert_same(run, bundled.run("swiglu", params, "hdl-validation"))


def test_streamed_tiles_see_the_same_first_responses(bundled):
    """With `fabric.stream_tile` the loaders read each burst's first response too."""
    typed = bundled.typed("moe_static", MOE)
    hw = load_config("paper-eval", ("fabric.stream_tile=1",))
    auto = simulate(typed, hw, functional=False)
    for strategy in ("closed", "in-order", "python", "generic") + (("native",) if NATIVE else ()):
        assert_same(simulate(typed, hw, functional=False, ref_strategy=strategy), auto)


@pytest.mark.xdist_group("moe_static")  # shares the run with its cycles record
def test_the_closed_form_serves_every_request_of_a_moe_layer(bundled):
    """The MoE layer (one request per message) is served in closed form throughout,
    however many ports issue at once: nothing request by request, no numba."""
    run = bundled.run("moe_static", ref_strategy="closed")
    assert run.read_requests > 0 and served_only_by(run, "closed")


def test_the_compiled_kernel_is_taken_once_a_run_is_long(monkeypatch, bundled):
    """Without the native core, short runs stay in Python and numpy (numba's start-up would
    not pay); a run past the threshold (lowered here from 20 M requests) switches."""
    pytest.importorskip("numba")
    monkeypatch.setenv(PURE_PYTHON_VARIABLE, "1")
    monkeypatch.setattr(ref, "COMPILE_AFTER", 50_000)
    typed = bundled.typed("swiglu", {"TB": 16, "TI": 16})
    by = simulate(typed, load_config("hdl-validation"), functional=False).memory.served_by
    assert by.get("numba", 0) > 0
    assert by.get("python", 0) + by.get("in-order", 0) > 50_000


def test_the_native_pool_serves_plain_pools_and_only_those(monkeypatch, bundled):
    """`auto` takes the compiled pool where it is built and no arbiter or credit limit
    applies; with `STEPC_PURE_PYTHON=1` the Python model serves, with the same cycles."""
    needs("native")
    typed = bundled.typed("swiglu", {"TB": 16, "TI": 16})
    native = simulate(typed, load_config("paper-eval"), functional=False)
    assert served_only_by(native, "native")
    monkeypatch.setenv(PURE_PYTHON_VARIABLE, "1")
    python = simulate(typed, load_config("paper-eval"), functional=False)
    assert "native" not in python.memory.served_by
    assert_same(native, python)
    assert (native.memory.first_cycle, native.memory.last_cycle) == \
        (python.memory.first_cycle, python.memory.last_cycle)
    monkeypatch.delenv(PURE_PYTHON_VARIABLE)
    limited = load_config("paper-eval", ("hbm.outstanding=64",))
    assert "native" not in simulate(typed, limited, functional=False).memory.served_by
    with pytest.raises(ValueError, match="serves pools without hbm.arbiter_grants"):
        make_memory(Kernel(), limited, "native")


def test_an_unknown_strategy_is_refused():
    hw = load_config("paper-eval")
    with pytest.raises(ValueError,
                       match="unknown ref strategy 'fast': one of auto, native, closed"):
        RefHbm(Kernel(), hw.hbm, strategy="fast")
    with pytest.raises(ValueError, match="applies to hbm.model = ref, not fluid"):
        make_memory(Kernel(), load_config("paper-eval", ("hbm.model=fluid",)), "python")


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
        for serve in (serve_periodic, serve_window):
            m = SimpleNamespace(cfg=cfg, free=free.astype(np.int64), offset=offset,
                                min_latency=17, want_first=True,
                                stats=MemoryStats(per_channel=np.zeros(channels, np.int64)))
            n_req, latest, earliest = serve(m, picked, ended)
            out.append((list(n_req), [int(x) for x in latest], [int(x) for x in earliest],
                        m.free.tolist(), m.offset, m.stats.per_channel.tolist()))
        assert out[0] == out[1]


@pytest.mark.parametrize("channels,interval,want_first", [
    (32, 2, False), (32, 2, True), (8, 2, True), (32, 1, False), (16, 3, True), (12, 2, False)])
def test_the_native_pool_serves_random_bursts_as_the_request_loop(channels, interval,
                                                                 want_first):
    """Random bursts (ports issuing one after another, more ports than channels, single- and
    multi-request messages, stretches shorter and far longer than a channel period): the
    native pool, which serves long stretches of single-request ports in closed form, gives
    every burst the completion and first response the Python request loop gives it and
    leaves the channels as it does."""
    needs("native")
    from types import SimpleNamespace

    from stepc.sim.kernel import Ctx

    rng = np.random.default_rng(channels * 100 + interval * 10 + want_first)
    cfg = SimpleNamespace(channels=channels, request_interval=interval, startup=14, latency=2,
                          arbiter_grants=0, outstanding=0)
    pool_module = compiled("stepc.sim.hbm._ref_pool")
    for _ in range(12):
        plan = []
        for port in range(int(rng.integers(1, 2 * channels + 3))):
            per_message = 1 if rng.integers(0, 4) else 2
            for _ in range(int(rng.integers(1, 4))):
                plan.append(((0, port), int(rng.integers(0, 60)),
                             int(rng.integers(1, 2000)), per_message))
        seen = []
        for pool_of in (lambda k: pool_module.RefPool(k, cfg, want_first),
                        lambda k: RefHbm(k, cfg, want_first, strategy="python")):
            kernel = Kernel()
            pool = pool_of(kernel)
            bursts = []
            for port, at, requests, per_message in plan:
                ctx = Ctx("load", "LinearOffChipLoad")
                ctx.t = at
                bursts.append(pool.issue(ctx, port, requests, per_message, False, None,
                                         wait=False))
            kernel.run()
            seen.append(([(b.completion, b.first if want_first else None, b.issued)
                          for b in bursts], list(pool.free), pool.offset,
                         pool.stats.per_channel.tolist()))
        assert seen[0] == seen[1]
