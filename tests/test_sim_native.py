"""The compiled event kernel (`stepc/sim/_kernel.pyx`) against the Python one
(`stepc/sim/kernel.py`): every bundled program gives the same cycles, per-operator and
per-FIFO figures, FIFO logs, memory counters and scheduling (steps, heap events, progress
calls); a deadlock, a cycle limit and a bad operation give the same reports; functional
runs give the same values. Both cores run in this process: `STEPC_PURE_PYTHON=1` chooses
the Python one."""

from __future__ import annotations

import importlib
import os
from types import SimpleNamespace

import numpy as np
import pytest
from bundled import PROGRAMS, SMALL
from click.testing import CliRunner
from test_sim_kernel import DEADLOCK

from stepc.cli import main
from stepc.frontend import compile_file, compile_source
from stepc.grammar.parse import decode_source
from stepc.hw import load_config
from stepc.hw.config import Hbm
from stepc.sim import kernel as python_core
from stepc.sim import native
from stepc.sim.bind import bind_dims
from stepc.sim.hbm.ref import RefHbm
from stepc.sim.kernel import FIRST, MEM, SELECT, SEND, SEND_AT, CycleLimitError, SimError
from stepc.sim.run import build, collect, run

try:
    importlib.import_module("stepc.sim._kernel")
    BUILT = True
except ImportError:
    BUILT = False
pytestmark = pytest.mark.skipif(not BUILT, reason="the compiled kernel stepc.sim._kernel is "
                                "not built (python hatch_build.py builds it in a checkout)")


def choose(monkeypatch, core: str) -> None:
    """Make the next runs use `core` ("native" or "python")."""
    if core == "python":
        monkeypatch.setenv(native.PURE_PYTHON_VARIABLE, "1")
    else:
        monkeypatch.delenv(native.PURE_PYTHON_VARIABLE, raising=False)
    assert native.core_name() == core


def observe(typed, hw="paper-eval", sets=(), functional=False, trace_ops=False,
            max_cycles=None):
    """One run of `typed` on preset `hw` with the settings `sets`: everything it measured,
    with the kernel's own state at the end (per context and per FIFO) and each progress
    report."""
    reports: list[int] = []
    built = build(typed, load_config(hw, sets), {}, functional, trace_ops, max_cycles,
                  reports.append, None, None, "auto", {})
    k = built.kernel
    wall = run(k)
    r = collect(built, bind_dims(typed, built.chans, built.bindings), wall)
    m = r.memory
    return {
        "core": type(k).__module__, "cycles": r.cycles, "steps": k.steps, "seq": k.seq,
        "progress": reports, "ops": r.ops, "deadlock": r.deadlock, "trace": r.trace,
        "fifo": r.fifo, "fifo_bytes": r.fifo_bytes, "fifo_logs": r.fifo_logs,
        "fifo_looks": r.fifo_looks, "bindings": r.bindings, "useful_bytes": r.useful_bytes,
        "flops": r.flops,
        "contexts": [(c.name, c.t, c.busy, c.mem_ops, c.last_mem, c.done, c.fired)
                     for c in k.contexts],
        "channels": [(ch.name, ch.high_water, ch.elem_bytes, ch.count, ch.cap,
                      ch.outstanding, ch.closed, list(ch.credits),
                      [(t, repr(payload), stop) for t, payload, stop in ch.q])
                     for ch in k.channels],
        "memory": (m.read_requests, m.write_requests, m.first_cycle, m.last_cycle,
                   m.per_channel.tolist(), m.row_hits, m.row_misses, m.row_conflicts,
                   m.refreshes, sum(m.served_by.values())),  # the paths differ by core
        "outputs": {name: v.tolist() for name, v in r.outputs.items()},
    }


def both(monkeypatch, measure):
    """`measure()` under the compiled core, then under the Python one."""
    out = {}
    for core in ("native", "python"):
        choose(monkeypatch, core)
        out[core] = measure()
    assert out["native"].pop("core") == "stepc.sim._kernel"
    assert out["python"].pop("core") == "stepc.sim.kernel"
    return out["native"], out["python"]


def typed_program(name: str, params: dict | None = None):
    r = compile_file(f"programs/{name}.step", params or {})
    assert r.ok
    return r.typed


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("trace_ops", [False, True], ids=["timing", "traced"])
def test_every_bundled_program_runs_the_same_on_both_cores(program, trace_ops, monkeypatch):
    typed = typed_program(program, SMALL.get(program))
    fast, slow = both(monkeypatch, lambda: observe(typed, trace_ops=trace_ops))
    assert fast == slow
    assert fast["cycles"] > 0 and fast["deadlock"] is None
    assert bool(fast["fifo_logs"]) == trace_ops and bool(fast["trace"]) == trace_ops


@pytest.mark.parametrize("hw,sets", [
    ("hdl-like", ()),  # dram, two tiles in flight per port, bounded requests
    ("paper-eval", ("hbm.model=fluid",)),
    ("paper-eval", ("hbm.tile_buffers=2",)),  # loads and stores wait on FIRST
    ("paper-eval", ("hbm.tile_buffers=2", "hbm.outstanding=16", "hbm.arbiter_grants=1")),
], ids=["dram", "fluid", "two-tiles", "two-tiles-credits"])
@pytest.mark.parametrize("program", ["attention_dynamic", "decoder_dynamic"])
def test_every_memory_model_wakes_contexts_the_same(program, hw, sets, monkeypatch):
    """The memory models' own heap events (activations, wakes, FIRST decisions)."""
    typed = typed_program(program, SMALL[program])
    fast, slow = both(monkeypatch, lambda: observe(typed, hw=hw, sets=sets))
    assert fast == slow and fast["deadlock"] is None


def test_memory_operations_issued_by_mem_give_the_same_times(monkeypatch):
    """`MEM` (issue and wait), which the bundled behaviors do not use, on contending ports."""
    def loads():
        core = python_core.core()
        k = core.Kernel()
        k.memory = RefHbm(k, Hbm(model="ref", channels=8, par_dispatch=2))
        done = {}

        def loader(ctx, i):
            for tile in range(3):
                yield (MEM, (0, i), 64 * (i + 1) + tile, 2, False)
                done[(i, tile)] = ctx.t
        for i in range(9):
            c = k.context(f"l{i}", "load")
            k.add(c, loader(c, i))
        k.run()
        return {"core": core.__name__, "done": done, "steps": k.steps, "seq": k.seq,
                "mem_ops": [c.mem_ops for c in k.contexts]}
    fast, slow = both(monkeypatch, loads)
    assert fast == slow and len(fast["done"]) == 27


@pytest.mark.parametrize("program,params", [("swiglu", {"TB": 32, "TI": 32}),
                                            ("moe_simple", {})])
def test_functional_outputs_are_identical(program, params, monkeypatch):
    typed = typed_program(program, params)
    fast, slow = both(monkeypatch, lambda: observe(typed, functional=True))
    assert fast["outputs"] and fast == slow


def test_a_deadlock_gives_the_same_report(monkeypatch):
    typed = compile_source(decode_source("dead.step", DEADLOCK.encode()), {}).typed
    fast, slow = both(monkeypatch, lambda: observe(typed))
    assert fast["deadlock"] and fast == slow


def test_a_deadlock_gives_the_same_error(tmp_path, monkeypatch):
    p = tmp_path / "dead.step"
    p.write_text(DEADLOCK)
    fast, slow = both(monkeypatch, lambda: {"core": python_core.core().__name__,
                                            "result": CliRunner().invoke(main, ["sim", str(p)])})
    assert fast["result"].exit_code == slow["result"].exit_code == 3
    assert fast["result"].stderr == slow["result"].stderr


@pytest.mark.parametrize("limit", [10, 1000, 1700])
def test_max_cycles_gives_the_same_error(limit, monkeypatch):
    typed = typed_program("moe_static", SMALL["moe_static"])

    def stopped():
        core = python_core.core().__name__
        with pytest.raises(CycleLimitError) as e:
            observe(typed, max_cycles=limit)
        return {"core": core, "error": (str(e.value), e.value.node)}
    fast, slow = both(monkeypatch, stopped)
    assert fast == slow and f"--max-cycles {limit:,} " in fast["error"][0]


@pytest.mark.parametrize("late", ["send", "select"])
def test_max_cycles_at_a_send_and_at_a_heap_event(late, monkeypatch):
    """A send visible past the limit, and a select decided past it, stop the run alike."""
    def stopped():
        core = python_core.core()
        k = core.Kernel(max_cycles=50)
        a = k.channel("a", 2, "src", "dst")
        src, dst = k.context("src", "x"), k.context("dst", "y")
        src.outs = [a]

        def produce(ctx):
            ctx.t += 49 if late == "select" else 50
            yield (SEND_AT, a, 1, 0, 60) if late == "select" else (SEND, a, 1, 0)

        def choose_input(ctx):
            yield (SELECT, [a])
        k.add(src, produce(src))
        k.add(dst, choose_input(dst))
        with pytest.raises(CycleLimitError) as e:
            k.run()
        return {"core": core.__name__, "error": (str(e.value), e.value.node), "t": src.t}
    fast, slow = both(monkeypatch, stopped)
    assert fast == slow
    assert fast["error"] == ({"send": "the run passed --max-cycles 50 (cycle 51)",
                              "select": "the run passed --max-cycles 50 (cycle 60)"}[late],
                             {"send": "src", "select": "dst"}[late])


def test_a_bad_operation_is_located_at_its_operator(monkeypatch):
    """A behavior yielding an operation the kernel does not know: the same located error."""
    def bad():
        core = python_core.core()
        k = core.Kernel()
        ch = k.channel("a", 2, "src", "dst")
        src = k.context("src", "x")
        src.outs = [ch]

        def gen():
            yield (SEND, ch, 1, 0)
            yield (99,)
        k.add(src, gen())
        with pytest.raises(SimError) as e:
            k.run()
        return {"core": core.__name__, "error": (str(e.value), e.value.node),
                "q": list(ch.q), "t": src.t}
    fast, slow = both(monkeypatch, bad)
    assert fast == slow and fast["error"] == ("unknown kernel operation (99,)", "src")


def test_the_environment_chooses_the_core(monkeypatch):
    choose(monkeypatch, "python")
    assert python_core.core() is python_core
    choose(monkeypatch, "native")
    assert python_core.core().__name__ == "stepc.sim._kernel"
    assert os.environ.get(native.PURE_PYTHON_VARIABLE) is None


def test_the_compiled_clock_takes_integers_only(monkeypatch):
    """A C clock would drop a float's fraction: it refuses one, and takes numpy integers."""
    choose(monkeypatch, "native")
    ctx = python_core.core().Kernel().context("a", "x")
    ctx.t = np.int64(5)
    ctx.work(np.int64(6), np.int32(4), "w")
    assert (ctx.t, ctx.busy, type(ctx.t)) == (10, 4, int)
    with pytest.raises(TypeError):
        ctx.t = 1.5
    with pytest.raises(TypeError):
        ctx.work(0, 2.5)


@pytest.mark.parametrize("head,completion,expected", [
    (5, 5, 1),  # a tie goes to the burst
    (5, 6, 0),  # the head comes first
    (None, 3, 1),  # no head yet: decided in the heap at the burst's end
    (7, None, 0),  # the burst still running: decided in the heap at the head's time
    ("closed", None, 0),  # the channel ended
    (None, None, 1),  # neither: the burst ends later (its model calls `watched`)
])
def test_first_decides_the_same(head, completion, expected, monkeypatch):
    """`(FIRST, ch, burst)` in each way it can be decided."""
    def decide():
        core = python_core.core()
        k = core.Kernel()
        ch = k.channel("a", 4, "src", "op")
        if head == "closed":
            ch.closed = True
        elif head is not None:
            ch.q.append((head, "x", 0))
            ch.outstanding += 1
        burst = SimpleNamespace(done=completion is not None, completion=completion or 0,
                                watcher=None, waiter=None)
        seen = []
        op = k.context("op", "x")

        def waits(ctx):
            seen.append(((yield (FIRST, ch, burst)), ctx.t))

        def memory(ctx):  # what a memory model does when the burst ends
            ctx.t = 9
            yield (SEND, k.channel("b", 1, "mem", "none"), 0, 0)  # runs after `op` blocks
            if not burst.done:
                burst.done, burst.completion = True, 9
                if burst.watcher is not None:
                    k.watched(burst.watcher)
        k.add(op, waits(op))
        mem = k.context("mem", "x")
        k.add(mem, memory(mem))
        k.run()
        return {"core": core.__name__, "seen": seen, "watcher": burst.watcher is None,
                "seq": k.seq, "steps": k.steps}
    fast, slow = both(monkeypatch, decide)
    assert fast == slow and fast["seen"][0][0] == expected
