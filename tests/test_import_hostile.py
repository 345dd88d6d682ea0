"""Hostile inputs around `stepc import` and `stepc export` (issue 41, item 13): never exit 70,
never hang, never succeed with a program `stepc check` rejects."""

from __future__ import annotations

import signal
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from stepc.cli import main
from stepc.interop.schema import ProgramGraph

CASE_SECONDS = 30  # one import and its check; the slowest seed takes ~4 s on a quiet core


def _invoke(*args: str):
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:  # click >= 8.2 keeps stderr apart already
        runner = CliRunner()
    return runner.invoke(main, list(args))


@contextmanager
def _deadline(seconds: float, what: str):
    """Fail (rather than hang) when the block runs longer than `seconds`."""
    def expired(*_):
        raise AssertionError(f"{what}: still running after {seconds} s")
    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ------------------------------------------------------------------ the properties
def _survives(tmp_path: Path, name: str, data: bytes, side: Path, what: str) -> int:
    """Import the graph `data` (side files in `side`) as `stepc import` does; assert it
    ends in time with exit 0, 1 or 2 and no traceback, writes nothing unless it succeeds,
    and writes a program `stepc check` accepts when it does. Its exit code."""
    pb, out = tmp_path / "g.pb", tmp_path / "g.step"
    pb.write_bytes(data)
    link = tmp_path / "g.npy"
    if side.is_dir() and not link.exists():
        link.symlink_to(side)
    out.unlink(missing_ok=True)
    case = f"{name}: {what}"
    with _deadline(CASE_SECONDS, case):
        r = _invoke("import", str(pb), "-o", str(out))
    said = r.output + r.stderr
    assert r.exit_code in (0, 1, 2), (case, r.exit_code, said[-800:])
    assert "Traceback" not in said and "internal error" not in said, (case, said[-800:])
    if r.exit_code:
        assert not out.exists(), case
        return r.exit_code
    with _deadline(CASE_SECONDS, case + " (check)"):
        checked = _invoke("check", str(out))
    assert checked.exit_code == 0, (case, (checked.output + checked.stderr)[-800:])
    return 0


def test_a_store_into_a_tensor_of_2_31000_tiles_is_a_located_check_error(tmp_path):
    dims = ", ".join(["2147483648"] * 1000)
    prog = tmp_path / "huge.step"
    prog.write_text(f"tensor X : f32[64, 64] input\ntensor Y : f32[{dims}] output\n"
                    "LinearOffChipStore(LinearOffChipLoad(X, tile=[16, 64]), Y)\n")
    r = _invoke("check", str(prog))
    assert r.exit_code == 1 and "huge.step:3:" in r.output + r.stderr
    assert "(~2^30990 tiles of" in r.output + r.stderr  # (2^31)^1000 / (16 * 64)


# ------------------------------------------------------------------ linear time
def test_folding_a_chain_that_does_not_fold_takes_linear_time():
    """Each statement reads the one before: no loop. It was tried again from every statement
    of the run (2,000 statements: 25 s)."""
    from stepc.interop.fold import Unit, fold
    units = [Unit(f"b_{i} = Broadcast(b_{i - 1}[0], consumers=1)", f"op {i}")
             for i in range(1, 10_001)]
    start = time.perf_counter()
    folded = fold(units, [])
    assert time.perf_counter() - start < 5 and len(folded.body) == len(units)


def test_ten_thousand_operators_of_one_name_get_short_names():
    """Each clash added an underscore: names of 10,000 characters, and quadratic time."""
    from stepc.interop.writer import Writer
    w = Writer("g.pb", ".")
    names = [w.unique("same", i) for i in range(10_000)]
    assert len(set(names)) == 10_000 and names[:3] == ["same", "same_", "same_2"]
    assert max(map(len, names)) <= len("same_10000")


def test_a_ring_of_eager_merges_is_ordered_in_linear_time():
    """The loop finder searched the graph again from every EagerMerge (2,000: 6 s)."""
    from stepc.interop.reader import parse_graph
    g = ProgramGraph(name="ring")
    n = 10_000
    for i in range(n):
        op = g.operators.add(id=i, name=f"m{i}")
        op.eager_merge.input_id_list[:] = [(i + 1) % n]
        op.eager_merge.input_stream_idx_list[:] = [1]
    start = time.perf_counter()
    _, ops = parse_graph(g.SerializeToString(), "ring.pb")
    assert len(ops) == n and time.perf_counter() - start < 10


# ------------------------------------------------------------------ the export
HOSTILE_PROGRAMS = {
    "a tensor of 2^40 rows": "tensor X : f32[1099511627776, 64] input\n"
                             "x = LinearOffChipLoad(X, tile=[16, 64])\nSink(Map(x, fn=silu))\n",
    "a depth of 2^32": "tensor X : f32[64, 64] input\nx = LinearOffChipLoad(X, tile=[16, 64])\n"
                       "Sink(Map(x, fn=silu, depth=4294967296))\n",
    "a 40-dim tensor": f"tensor X : f32[{', '.join(['2'] * 38)}, 16, 64] input\n"
                       "x = LinearOffChipLoad(X, tile=[16, 64])\nSink(Map(x, fn=silu))\n",
}


@pytest.mark.parametrize("what", HOSTILE_PROGRAMS)
def test_export_of_a_hostile_but_valid_program_refuses_or_round_trips(tmp_path, what):
    """A number the format's fields cannot hold (the 2^37 tiles of 40 dims among them)
    stopped the export with exit 70."""
    prog = tmp_path / "p.step"
    prog.write_text(HOSTILE_PROGRAMS[what])
    assert _invoke("check", str(prog)).exit_code == 0
    r = _invoke("export", str(prog), "-o", str(tmp_path / "p.pb"))
    said = r.output + r.stderr
    assert r.exit_code in (0, 1) and "Traceback" not in said and "internal error" not in said, \
        said
    if r.exit_code:
        assert "a number the format cannot hold" in said and not (tmp_path / "p.pb").exists()
    else:
        assert _survives(tmp_path, what, (tmp_path / "p.pb").read_bytes(), tmp_path / "p.npy",
                         "exported") in (0, 2)
