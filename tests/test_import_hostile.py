"""Hostile graphs given to `stepc import` (issue 41, item 13): it never exits 70, never
hangs, and never succeeds with a program `stepc check` rejects. Bounds are refused at read
time naming the operator and the field (exit 2), lists beyond them in linear time, and a
graph whose written program does not check is refused with the operators its errors are
on, writing nothing. A seeded mutator (tests/graph_mutator.py) damages the reference
corpus's graphs (when ../shared/data/stepir is present) and graphs `stepc export` writes of
the bundled programs."""

from __future__ import annotations

import signal
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from graph_mutator import mutants
from test_interop import GRAPHS

import stepc
from stepc.cli import main
from stepc.hw import load_config
from stepc.interop.schema import ProgramGraph
from stepc.interop.write.export import export_program

REPO = Path(__file__).resolve().parents[1]
CASE_SECONDS = 30  # one import and its check; the slowest seed takes ~4 s on a quiet core
# bundled programs exported at small sizes: the mutator's seeds without the corpus
EXPORTED = {"swiglu": {"B": 64, "I": 256, "TB": 16, "TI": 64}, "moe_simple": {},
            "attention_coarse": {"HEAD_DIM": 16, "TILE_N": 8, "MAXN": 64, "B": 16, "R": 1}}
QUICK_CORPUS = ("swiglu_hdl_b16_i64", "decode_attn_qwen_b16_coarse")  # small and quick


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


# ------------------------------------------------------------------ seeds
def _exported(where: Path, program: str) -> tuple[str, bytes, Path]:
    prog = stepc.load(REPO / "programs" / f"{program}.step", **EXPORTED[program])
    data, files = export_program(prog, str(where / "graph.pb"), load_config("paper-eval"))
    side = where / f"{program}.npy"
    side.mkdir()
    for name, arr in files.items():
        np.save(side / name, arr)
    return program, data, side


@pytest.fixture(scope="module")
def exported_seeds(tmp_path_factory) -> list[tuple[str, bytes, Path]]:
    where = tmp_path_factory.mktemp("seeds")
    return [_exported(where, p) for p in EXPORTED]


def _corpus(names=None) -> list[tuple[str, bytes, Path]]:
    if not GRAPHS.is_dir():
        return []
    return [(p.stem, p.read_bytes(), GRAPHS / f"{p.stem}.npy") for p in sorted(GRAPHS.glob("*.pb"))
            if names is None or p.stem in names]


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


def _run_mutants(tmp_path: Path, seeds, seed: int, count: int) -> dict[int, int]:
    exits: dict[int, int] = {}
    for k, (name, data, side) in enumerate(seeds):
        where = tmp_path / name
        where.mkdir(exist_ok=True)
        for m in mutants(data, seed * 1000 + k, count):
            code = _survives(where, name, m.data, side, m.what)
            exits[code] = exits.get(code, 0) + 1
    return exits


def test_mutated_graphs_never_crash_hang_or_write_a_program_that_does_not_check(
        tmp_path, exported_seeds):
    exits = _run_mutants(tmp_path, exported_seeds + _corpus(QUICK_CORPUS), seed=0, count=8)
    assert sum(exits.values()) >= 24 and exits.get(0) and exits.get(2), exits


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 6))
def test_many_mutated_graphs_never_crash_hang_or_write_a_program_that_does_not_check(
        tmp_path, exported_seeds, seed):
    exits = _run_mutants(tmp_path, exported_seeds + _corpus(), seed=seed, count=60)
    assert exits.get(0) and exits.get(2), exits


# ------------------------------------------------------------------ what each fix is for
def _swiglu(exported_seeds) -> ProgramGraph:
    g = ProgramGraph()
    g.ParseFromString(exported_seeds[0][1])
    return g


def _import(tmp_path: Path, g: ProgramGraph, *args: str):
    pb = tmp_path / "g.pb"
    pb.write_bytes(g.SerializeToString())
    return _invoke("import", str(pb), *args)


def _op(g: ProgramGraph, name: str):
    return next(op for op in g.operators if op.name == name)


def test_a_thousand_dims_of_2_31_are_refused_naming_the_operator(tmp_path, exported_seeds):
    """They made the checker print a 9,300-digit count of tiles (exit 70)."""
    g = _swiglu(exported_seeds)
    store = next(op for op in g.operators if op.HasField("off_chip_store"))
    store.off_chip_store.tensor_shape_tiled[:] = [2**31] * 1000
    r = _import(tmp_path, g)
    assert r.exit_code == 2, r.output + r.stderr
    assert f"operator {store.id} (`{store.name}`): tensor_shape_tiled has 1,000 dims; the " \
        "import takes at most 32" in r.stderr


def test_a_store_into_a_tensor_of_2_31000_tiles_is_a_located_check_error(tmp_path):
    dims = ", ".join(["2147483648"] * 1000)
    prog = tmp_path / "huge.step"
    prog.write_text(f"tensor X : f32[64, 64] input\ntensor Y : f32[{dims}] output\n"
                    "LinearOffChipStore(LinearOffChipLoad(X, tile=[16, 64]), Y)\n")
    r = _invoke("check", str(prog))
    assert r.exit_code == 1 and "huge.step:3:" in r.output + r.stderr
    assert "(~2^30990 tiles of" in r.output + r.stderr  # (2^31)^1000 / (16 * 64)


def _a_million(g: ProgramGraph, field: str) -> None:
    """A million entries in `field` of the load `wu` (1 to 4 MB on the wire)."""
    op = _op(g, "wu")
    if field == "stepc_fifo_depth":
        op.stepc_fifo_depth.extend([1] * 10**6)
    elif field == "out_stream_shape":
        op.MergeFromString(b"\x22\x02\x08\x01" * 10**6)  # field 4: {static: 1}
    else:
        getattr(op.off_chip_load, field).extend([1] * 10**6)


@pytest.mark.parametrize("field", ["stepc_fifo_depth", "out_stream_shape", "tensor_shape_tiled",
                                   "out_shape_tiled"])
def test_a_million_entries_are_refused_at_once(tmp_path, exported_seeds, field):
    """A million FIFO depths took 52 s; a million shape entries did not end in a minute."""
    g = _swiglu(exported_seeds)
    _a_million(g, field)
    with _deadline(CASE_SECONDS, field):  # the 52 s the depths took would overrun it
        r = _import(tmp_path, g)
    assert r.exit_code == 2 and "operator 3 (`wu`): " in r.stderr, r.stderr


@pytest.mark.parametrize("change, said", [
    (lambda g: setattr(_op(g, "wg").off_chip_load, "tile_col", 0), "tile_col = 0: must be at "
     "least 1"),
    (lambda g: setattr(_op(g, "gate").binarymap_accum, "rank", 0), "rank = 0: must be at least 1"),
    (lambda g: setattr(_op(g, "pr").reshape, "chunk_size", 0), "chunk_size = 0"),
    (lambda g: setattr(_op(g, "x.bcast").broadcast, "num_consumers", 70000),
     "num_consumers = 70,000: an operator has at most 65,536 outputs"),
    (lambda g: setattr(_op(g, "x.bcast"), "stepc_buffer_depth", 4),
     "stepc_buffer_depth = 4 on a `broadcast`: only a random_off_chip_store has a write buffer"),
    (lambda g: _op(g, "prod").stepc_fifo_depth.extend([0, 3]), "stepc_fifo_depth[0] = 0"),
    (lambda g: _op(g, "act").stepc_fifo_depth.extend([2, 3]),
     "stepc_fifo_depth has 2 entries: one depth for every input (it has 1 input)"),
    (lambda g: _op(g, "wd").off_chip_load.stride.pop(), "stride has 2 entries but "
     "out_shape_tiled has 3"),
    (lambda g: _op(g, "wd").off_chip_load.tensor_shape_tiled.pop(), "tensor_shape_tiled [4] "
     "needs at least 2 dims"),
    (lambda g: _op(g, "wd").off_chip_load.out_shape_tiled.__setitem__(0, 0),
     "out_shape_tiled [0, 1, 4]: every dim must be at least 1"),
])
def test_a_value_no_operator_takes_is_refused_where_it_is_read(tmp_path, exported_seeds, change,
                                                                said):
    """Each of these imported with exit 0 and wrote a program `stepc check` rejects."""
    g = _swiglu(exported_seeds)
    change(g)
    r = _import(tmp_path, g)
    assert r.exit_code == 2 and said in r.stderr, r.stderr


def test_a_graph_whose_program_does_not_check_is_refused_and_nothing_is_written(
        tmp_path, exported_seeds):
    g = _swiglu(exported_seeds)
    _op(g, "gate").binarymap_accum.rank = 9  # a rank the read cannot judge: the checker does
    out = tmp_path / "g.step"
    r = _import(tmp_path, g, "-o", str(out))
    assert r.exit_code == 2 and not out.exists(), r.output + r.stderr
    assert "operator 4 (`gate`): the program written for it does not check" in r.stderr
    assert "found 9" in r.stderr and "gate = Accum(" in r.stderr
    out.write_text("mine\n")
    assert _import(tmp_path, g, "-o", str(out), "--force").exit_code == 2
    assert out.read_text() == "mine\n"


def test_a_lone_zero_fifo_depth_is_the_hardwares(tmp_path, exported_seeds):
    g = _swiglu(exported_seeds)
    _op(g, "prod").stepc_fifo_depth[:] = [0]
    r = _import(tmp_path, g)
    assert r.exit_code == 0 and "depth=" not in r.output, r.output + r.stderr


def test_names_cannot_add_lines_to_the_program(tmp_path, exported_seeds):
    """A graph name with a newline became a statement of the program (exit 70 here)."""
    g = _swiglu(exported_seeds)
    g.name = "x\ntensor EVIL : f32[4, 4] input"
    _op(g, "act").name = "a\nb" * 5000
    r = _import(tmp_path, g)
    assert r.exit_code == 0, r.stderr
    assert "EVIL" not in r.output.split("\n", 1)[1] and max(map(len, r.output.split())) < 100


# ------------------------------------------------------------------ linear time
def test_folding_a_chain_that_does_not_fold_takes_linear_time():
    """Each statement reads the one before: no loop. It was tried again from every statement
    of the run (2,000 statements: 25 s; quadratic, 10,000 would take ten minutes, far past
    the deadline, which only guards against that, not a speed target)."""
    from stepc.interop.read.fold import Unit, fold
    units = [Unit(f"b_{i} = Broadcast(b_{i - 1}[0], consumers=1)", f"op {i}")
             for i in range(1, 10_001)]
    with _deadline(CASE_SECONDS, "fold"):
        folded = fold(units, [])
    assert len(folded.body) == len(units)


def test_ten_thousand_operators_of_one_name_get_short_names():
    """Each clash added an underscore: names of 10,000 characters, and quadratic time."""
    from stepc.interop.read.writer import Writer
    w = Writer("g.pb", ".")
    names = [w.unique("same", i) for i in range(10_000)]
    assert len(set(names)) == 10_000 and names[:3] == ["same", "same_", "same_2"]
    assert max(map(len, names)) <= len("same_10000")


def test_a_ring_of_eager_merges_is_ordered_in_linear_time():
    """The loop finder searched the graph again from every EagerMerge (2,000: 6 s;
    quadratic, 10,000 would take minutes, past the deadline, which only guards against
    that, not a speed target)."""
    from stepc.interop.read.reader import parse_graph
    g = ProgramGraph(name="ring")
    n = 10_000
    for i in range(n):
        op = g.operators.add(id=i, name=f"m{i}")
        op.eager_merge.input_id_list[:] = [(i + 1) % n]
        op.eager_merge.input_stream_idx_list[:] = [1]
    with _deadline(CASE_SECONDS, "ring"):
        _, ops = parse_graph(g.SerializeToString(), "ring.pb")
    assert len(ops) == n


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
