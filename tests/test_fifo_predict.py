"""`stepc fifo`'s prediction from the occupancy log: the replay of one FIFO, the run count
where the prediction holds, the budget search where it does not, the same answer with
the independent runs on several cores, and the `jobs` setting."""

from __future__ import annotations

import pytest
from bundled import ATTENTION
from test_fifo import _cli, fork_join

from stepc.api import compile
from stepc.api.inputs import hardware
from stepc.fifo.predict import edge_depth, occupancy, replay
from stepc.fifo.search import search_depths
from stepc.fifo.static import analyze_fifos
from stepc.frontend import compile_file

# A producer that sends four elements at cycle 0 to a consumer taking one per cycle from
# cycle 10 (each slot frees the cycle after): it ran ahead by the whole stream.
AHEAD = [(0, 1)] * 4 + [(11, -1), (12, -1), (13, -1), (14, -1)]


def test_the_replay_holds_back_a_producer_that_ran_ahead():
    assert occupancy(AHEAD) == 4
    assert replay(AHEAD, 4, hop=1) == (0, 0)  # the unbounded run's own schedule
    assert replay(AHEAD, 2, hop=1) == (0, 12)  # the consumer waits no longer; the producer does
    assert replay(AHEAD, 1, hop=1)[0] > 0  # one slot: each element reaches it late
    assert edge_depth(AHEAD, hop=1, fork=False) == 2
    assert edge_depth(AHEAD, hop=1, fork=True) == 4  # a fork's other outputs would wait
    assert edge_depth(AHEAD[:-1], hop=1, fork=False) == 4  # left in the FIFO: all it held


def test_a_consumer_that_looks_ahead_needs_its_elements_when_it_looks():
    """A load peeks at its next address at cycle 2 but takes it (and frees the slot) only
    at 10, after its burst: one slot would delay the second address past the peek."""
    log = [(0, 1), (1, 1), (11, -1), (21, -1)]  # sent at 0 and 1, taken at 10 and 20
    assert edge_depth(log, hop=1, fork=False) == 1  # taken late: one slot seems enough
    looks = [1, 11]  # the second address wanted at 11, the cycle after the first take
    assert replay(log, 1, hop=1, looks=looks) == (1, 10)
    assert edge_depth(log, hop=1, fork=False, looks=[1, 2]) == 2  # wanted at 2: two slots
    assert edge_depth(log, hop=1, fork=False, looks=looks) == 2


def _search(typed, tolerance=0.01, jobs=1):
    hw, _ = hardware("paper-eval")
    return search_depths(analyze_fifos(typed), hw, tolerance=tolerance, jobs=jobs)


def test_a_prediction_that_holds_replaces_the_budget_search(monkeypatch):
    """The reference, then the uniform run, the static minima and the prediction: the
    minima are over the tolerance, the prediction is not, and the rows are lowered from
    it with no budget search: fewer runs than the search makes without the prediction."""
    import stepc.fifo.search as search
    typed = compile_file("programs/attention_dynamic.step", ATTENTION).typed
    result = _search(typed, tolerance=0.0)
    assert result.log[1] == "every FIFO at its minimum: over the tolerance (stopped)"
    assert result.log[2] == f"each FIFO at its predicted depth: {result.unbounded_cycles:,} " \
        "cycles"
    assert not any(" B per FIFO" in line for line in result.log)
    assert result.runs == 1 + len(result.log)  # the reference, then one run per line
    assert result.within_tolerance and result.cycles <= result.unbounded_cycles
    monkeypatch.setattr(search, "predicted_depths", lambda edges, logs, looks, hop: dict.fromkeys(
        edges, 1))  # the minima: no run of its own
    without = _search(typed, tolerance=0.0)
    assert not any("predicted" in line for line in without.log)
    assert any(" B per FIFO" in line for line in without.log)
    assert result.runs < without.runs and without.within_tolerance


def test_a_prediction_heavier_than_the_uniform_depth_is_not_run():
    """The fork/join's prediction keeps the direct branch as deep as the Accum's chunk,
    more bytes than the uniform depth (which deadlocks): the budget search sizes it."""
    typed = compile(fork_join(4, 6, 1))._compiled.typed
    result = _search(typed, tolerance=0.0)
    assert not any("predicted" in line for line in result.log)
    assert any(" B per FIFO" in line for line in result.log)
    assert result.within_tolerance and result.runs == 1 + len(result.log)


def _coarse():
    return compile_file("programs/attention_coarse.step", {**ATTENTION, "NB": 2}).typed


def test_a_prediction_over_the_tolerance_falls_back_to_the_budget_search(monkeypatch):
    """attention_coarse's K and V loads peek at their addresses before they take them; a
    replay blind to those looks keeps too few addresses: the prediction's run is over the
    tolerance and the budget search finds depths within it."""
    import stepc.fifo.search as search
    real = search.predicted_depths
    monkeypatch.setattr(search, "predicted_depths",
                        lambda edges, logs, looks, hop: real(edges, logs, {}, hop))
    result = _search(_coarse())
    assert "each FIFO at its predicted depth: over the tolerance (stopped)" in result.log
    assert any(" B per FIFO: " in line for line in result.log[3:])
    assert result.runs > 4 and result.within_tolerance
    assert 0 < result.cycles <= result.unbounded_cycles * 1.01


def test_parallel_runs_give_the_serial_answer():
    serial, parallel = _search(_coarse(), jobs=1), _search(_coarse(), jobs=2)
    assert [(c.key, c.depth) for c in parallel.classes] == \
        [(c.key, c.depth) for c in serial.classes]
    assert (parallel.cycles, parallel.uniform_cycles, parallel.runs, parallel.log) == \
        (serial.cycles, serial.uniform_cycles, serial.runs, serial.log)


def test_an_error_in_a_worker_is_raised_with_its_location():
    """A worker sends back the simulator's error with its operator (a pickled exception
    keeps only its message), and the caller raises it."""
    import pickle

    from stepc.fifo.trials import _in_worker, _inherit
    from stepc.sim.kernel import SimError
    _inherit(None)  # no program: the run fails in the worker
    failed = pickle.loads(pickle.dumps(_in_worker(None)))
    with pytest.raises(TypeError):
        failed.throw()
    error = SimError("bad address", "load.k")
    carried = pickle.loads(pickle.dumps(type(failed)(type(error), error.args, vars(error))))
    with pytest.raises(SimError, match="bad address") as raised:
        carried.throw()
    assert raised.value.node == "load.k"


def test_jobs_below_one_are_refused(tmp_path):
    import stepc
    path = tmp_path / "fj.step"
    path.write_text(fork_join(3, 6, 0))
    for jobs in ("0", "-1"):
        r = _cli("fifo", str(path), "-j", jobs)
        assert r.exit_code == 2 and "--jobs" in r.output and "1<=x" in r.output
    r = _cli("fifo", str(path), "--static", "-j", "2")
    assert r.exit_code == 2 and "drop --static" in r.output
    prog = stepc.compile(fork_join(3, 6, 0))
    for jobs in (0, 1.5, True):
        with pytest.raises(stepc.StepError, match="jobs"):
            prog.fifo(jobs=jobs)
    assert _cli("fifo", str(path), "-j", "1").exit_code == 0
