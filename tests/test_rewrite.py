"""`stepc rewrite downtile`: the appendix's hierarchical-tiling figure reproduced stream by
stream, rewritten programs equal to their originals by simulation, analysis deltas by the
documented rules, every knob moving the result, and the command's errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import stepc
from stepc.api.rewrite import rewrite
from stepc.cli import main
from stepc.rewrite import RewriteError

REPO = Path(__file__).resolve().parent.parent
APPENDIX = REPO / "tests" / "golden" / "rewrite" / "appendix_abt.step"
TYPES_GOLDEN = REPO / "tests" / "golden" / "rewrite" / "appendix_abt_types.expect"
SWIGLU = REPO / "programs" / "swiglu.step"
SMALL_SWIGLU = {"B": 32, "H": 64, "I": 64, "TB": 16, "TI": 32}


@pytest.fixture(scope="module")
def appendix():
    return rewrite(APPENDIX, "downtile", tile=(16, 16))


def stream_types(program) -> str:
    return "".join(f"{name:<8} {s.type}\n" for name, s in program.streams.items())


def test_the_figure_stream_shapes(appendix, request):
    """The rewritten program's streams have the shapes the appendix's figure gives."""
    text = stream_types(appendix.program)
    if request.config.getoption("--update-goldens"):
        TYPES_GOLDEN.write_text(text, encoding="utf-8", newline="\n")
    assert text == TYPES_GOLDEN.read_text(encoding="utf-8")
    shapes = {name: list(s.shape) for name, s in appendix.program.streams.items()}
    assert shapes["a"] == [4, 1, 16] and shapes["b"] == [4, 2, 16]  # inputs, 16 x 16 tiles
    assert shapes["c_a"] == shapes["c_b"] == [4, 1, 2, 16]  # both Streamify outputs
    assert shapes["c"] == [4, 1, 2]  # the Accum's output
    ops = [s.op for s in appendix.program.streams.values()]
    assert ops == ["LinearOffChipLoad", "LinearOffChipLoad", "Bufferize", "Repeat",
                   "Streamify", "Bufferize", "Repeat", "Streamify", "Map", "Accum"]


def test_the_figure_computes_the_same(appendix):
    verdict = appendix.verify("paper-eval")
    assert verdict.ok, verdict.problems
    old, new, rule = verdict.totals["flops"]
    # 4 output tiles of 16 x 32, each the sum of 16 partial products: one add per element
    assert new - old == rule == 4 * 16 * 32 * 16
    assert verdict.totals["off_chip"][0] == verdict.totals["off_chip"][1]


def test_the_figure_on_chip_memory_by_the_rule(appendix):
    """The on-chip rule (rewrite/memory.py) for the figure, by hand (f32, 16 x 16 sub-tiles
    of 1 KiB): A's Bufferize holds one sub-tile row (16 sub-tiles, twice, plus the one it
    fills), its Repeat and Streamify the row again (+ the tile emitted): 2 + 4 x 16 KiB;
    B's buffers hold its whole 32 x 256 tile the same way: 2 + 4 x 32 KiB; one 16 x 16
    accumulator of partial sums: 1 KiB. The loads and the store hold a sub-tile instead
    of a tile: -15, -31 and -1 KiB."""
    verdict = appendix.verify("paper-eval", simulate=False)
    kib = 1024
    buffers = (2 + 4 * 16) * kib + (2 + 4 * 32) * kib + kib
    memory = -15 * kib - 31 * kib - kib
    old, new, rule = verdict.totals["on_chip"]
    assert new - old == rule == buffers + memory == 153600
    appendix.changes[0].on_chip_delta += 1  # a rule off by one byte is caught
    try:
        assert not appendix.verify("paper-eval", simulate=False).ok
    finally:
        appendix.changes[0].on_chip_delta -= 1


def test_every_statement_says_where_it_came_from(appendix):
    body = [line for line in appendix.text.splitlines()
            if line and not line.startswith(("#", "tensor"))]
    assert body and all("# " in line for line in body)
    assert all("c (Map)" in line for line in body if line.startswith("c"))
    assert stepc.compile(appendix.text).operators == 11  # it parses and checks as printed


def test_swiglu_downtiled_equals_the_original():
    done = rewrite(SWIGLU, "downtile", tile="16x16", **SMALL_SWIGLU)
    assert {c.node for c in done.rewritten} >= {"gate", "up", "down", "act", "prod"}
    verdict = done.verify("hdl-validation", seed=3)
    assert verdict.ok, verdict.problems
    assert verdict.outputs["Y"][0] < 1e-5


def test_the_tile_moves_the_result():
    small = rewrite(SWIGLU, "downtile", tile=(16, 16), **SMALL_SWIGLU)
    large = rewrite(SWIGLU, "downtile", tile=(32, 32), **SMALL_SWIGLU)
    assert small.program.streams["x"].type != large.program.streams["x"].type
    assert "Tile<f32, [16, 16]>" in small.program.streams["x"].type
    assert "Tile<f32, [16, 32]>" in large.program.streams["x"].type  # 16 rows kept whole


def test_the_hardware_gives_the_tile():
    by_hw = rewrite(SWIGLU, "downtile", hw="hdl-like", **SMALL_SWIGLU)
    assert by_hw.text.split("\n", 2)[2] == \
        rewrite(SWIGLU, "downtile", tile=(16, 16), **SMALL_SWIGLU).text.split("\n", 2)[2]
    with pytest.raises(RewriteError, match="stream_tile"):
        rewrite(SWIGLU, "downtile", hw="paper-eval", **SMALL_SWIGLU)
    with pytest.raises(RewriteError, match="--tile"):
        rewrite(SWIGLU, "downtile", **SMALL_SWIGLU)


def test_loads_can_keep_their_tiles():
    """--keep-memory-tiles: the loads read logical tiles and operators split them on chip;
    the products are still rewritten and the values are the same."""
    kept = rewrite(SWIGLU, "downtile", tile=(16, 16), split_memory=False, **SMALL_SWIGLU)
    split = rewrite(SWIGLU, "downtile", tile=(16, 16), **SMALL_SWIGLU)
    original = stepc.load(SWIGLU, **SMALL_SWIGLU)
    assert kept.program.streams["x"].type == original.streams["x"].type
    assert split.program.streams["x"].type != original.streams["x"].type
    assert "x_sub" in kept.program.streams and "x_sub" not in split.program.streams
    computed = {"gate", "up", "down", "act", "prod"}
    assert computed <= {c.node for c in kept.rewritten} and \
        computed <= {c.node for c in split.rewritten}
    verdict = kept.verify("paper-eval")
    assert verdict.ok, verdict.problems


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_cli_writes_the_program(tmp_path):
    out = tmp_path / "abt16.step"
    r = run("rewrite", "downtile", str(APPENDIX), "--tile", "16x16", "-o", str(out))
    assert r.exit_code == 0, r.output
    assert "4 operators rewritten" in r.stderr
    assert stepc.load(out).streams["c"].type.endswith("[4, 1, 2]")


def test_cli_never_overwrites_without_force(tmp_path):
    out = tmp_path / "mine.step"
    out.write_text("# mine\n")
    r = run("rewrite", "downtile", str(APPENDIX), "--tile", "16", "-o", str(out))
    assert r.exit_code == 2 and "--force" in r.stderr
    assert out.read_text() == "# mine\n"
    r = run("rewrite", "downtile", str(APPENDIX), "--tile", "16", "-o", str(out), "--force")
    assert r.exit_code == 0 and "Bufferize" in out.read_text()


@pytest.mark.parametrize("args, code, said", [
    (["nope", str(APPENDIX)], 2, "no rewrite `nope`"),
    (["downtile", str(APPENDIX), "--tile", "16xq"], 2, "ROWSxCOLS"),
    (["downtile", str(APPENDIX), "--tile", "0x16"], 2, "positive"),
    (["downtile", str(APPENDIX)], 2, "physical tile"),
    (["downtile", "missing.step", "--tile", "16"], 2, "no such file"),
    (["downtile", str(SWIGLU), "--tile", "16", "-D", "NOPE=1"], 2, "NOPE"),
])
def test_cli_usage_errors(args, code, said):
    r = run("rewrite", *args)
    assert r.exit_code == code, r.output
    assert said in r.output
    assert "Traceback" not in r.output


def test_cli_program_errors(tmp_path):
    bad = tmp_path / "bad.step"
    bad.write_text("tensor A : f32[16, 16] input\na = LinearOffChipLoad(A, tile=[16, 16])\n"
                   "b = Map(a, fn=nope)\nSink(b)\n")
    r = run("rewrite", "downtile", str(bad), "--tile", "16")
    assert r.exit_code == 1 and "nope" in r.stderr


def test_cli_verify_reports_the_checks():
    r = run("rewrite", "downtile", str(APPENDIX), "--tile", "16x16", "--verify")
    assert r.exit_code == 0, r.output
    assert "verify: output C" in r.stderr and "verify: flops" in r.stderr
    assert r.stdout.startswith("# appendix_abt.step rewritten")


def test_stores_can_keep_their_tiles():
    kept = rewrite(APPENDIX, "downtile", tile=(16, 16), split_memory=False)
    store = [c for c in kept.changes if c.op == "LinearOffChipStore"]
    assert store and store[0].action == "kept"
    assert "fn=retile_row" in kept.text  # the sub-tiles are packed back before the store
    assert kept.verify("paper-eval").ok


PASSING = """\
tensor A : f32[128, 32] input
tensor B : f32[128, 32] input
tensor Y : f32[256, 32] output
tensor S : f32[32, 32] output

a = LinearOffChipLoad(A, tile=[32, 32], shape=[4])
b = LinearOffChipLoad(B, tile=[32, 32], shape=[4])
z = Zip(a, b)
Sink(z)
r = Repeat(a, count=2)
e = Expand(Reshape(b, chunk=1), ref=r)
y = Map(r, e, fn=add)
LinearOffChipStore(y, Y)
p = Parallelize(a, consumers=2, rank=0)
x0 = Map(p[0], fn=exp)
x1 = Map(p[1], fn=silu)
m, _ = EagerMerge([x0, x1], rank=0)
s = Accum(Reshape(m, chunk=4), fn=add, rank=1)
LinearOffChipStore(s, S)
"""


def test_sub_tiles_pass_through_routing_and_repeats():
    """Zip, Repeat, Expand, Parallelize and EagerMerge take sub-tiles: what follows them
    computes on 16 x 16 sub-tiles, and the values are the same."""
    done = rewrite(stepc.compile(PASSING, "passing.step"), "downtile", tile=(16, 16))
    by_node = {c.node: c for c in done.changes}
    for name in ("z", "r", "e", "p", "m", "y", "x0", "x1"):
        assert by_node[name].action == "rewritten", by_node[name]
    streams = done.program.streams
    assert streams["z"].type == \
        "Strm<(Tile<f32, [16, 16]>, Tile<f32, [16, 16]>), 2>[4, 2, 2]"
    assert streams["r_sub"].type == "Strm<Tile<f32, [16, 16]>, 3>[4, 2, 2, 2]"
    assert streams["e_sub"].type == streams["r_sub"].type
    assert streams["m"].type == "Strm<Tile<f32, [16, 16]>, 2>[4, 2, 2]"
    assert "Expand(e_held, r)" in done.text  # its reference: the repeat's buffer references
    verdict = done.verify("paper-eval", seed=2)
    assert verdict.ok, verdict.problems


BROADCASTING = """\
tensor A : f32[64, 32] input
tensor C : f32[64, 1] input
tensor W : f32[2, 1] input
tensor Y : f32[64, 32] output
a = LinearOffChipLoad(A, tile=[32, 32], shape=[2])
c = LinearOffChipLoad(C, tile=[32, 1], shape=[2])
w = LinearOffChipLoad(W, tile=[1, 1], shape=[2])
x = Map(a, c, fn=mul)
y = Map(x, w, fn=add)
LinearOffChipStore(y, Y)
"""


def test_broadcast_operands_meet_every_sub_tile():
    """A [32, 1] column is split by rows and each piece repeated across the sub-tile
    columns; a [1, 1] scalar is repeated once per sub-tile; the maps run on 16 x 16
    sub-tiles and compute the same, the on-chip rule counting the repeats."""
    done = rewrite(stepc.compile(BROADCASTING, "broadcasting.step"), "downtile", tile=(16, 16))
    by_node = {c.node: c for c in done.changes}
    assert by_node["x"].action == by_node["y"].action == "rewritten"
    streams = done.program.streams
    assert streams["x_bsub"].type == "Strm<Tile<f32, [16, 1]>, 2>[2, 2, 2]"
    assert streams["y_bsub"].type == "Strm<Tile<f32, [1, 1]>, 2>[2, 2, 2]"
    assert streams["y"].type == "Strm<Tile<f32, [16, 16]>, 2>[2, 2, 2]"
    verdict = done.verify("paper-eval", seed=6)
    assert verdict.ok, verdict.problems


DEADLOCKING = """\
tensor A : f32[128, 32] input
tensor B : f32[128, 32] input
tensor Y : f32[256, 32] output
a = LinearOffChipLoad(A, tile=[16, 16], stride=[4, 2, 1], shape=[4, 2, 2])
b = LinearOffChipLoad(B, tile=[16, 16], stride=[4, 2, 1], shape=[4, 2, 2])
r_held = Bufferize(a, rank=2)
r = Repeat(r_held, count=2)
r_sub = Streamify(r)
Reshape_7 = Reshape(b, chunk=1, rank=2)
e_held = Bufferize(Reshape_7, rank=2)
r_sub_cols = Accum(r_sub, fn=retile_col, rank=1)
r_sub_whole = Accum(r_sub_cols, fn=retile_row, rank=1)
e = Expand(e_held, r_sub_whole)
e_sub = Streamify(e)
y = Map(r_sub, e_sub, fn=add)
LinearOffChipStore(y, Y)
"""


def test_verify_fails_a_rewrite_that_deadlocks():
    """A sub-tiled Repeat whose sub-tiles are also packed back for an Expand's reference
    (what downtile wrote before Expand read the repeat's buffer references) forks and
    joins with a FIFO too shallow for a logical tile's sub-tiles: verify says so."""
    from stepc.rewrite.verify import Verdict, equivalence
    old = stepc.compile(PASSING, "passing.step")
    new = stepc.compile(DEADLOCKING, "deadlocking.step")
    verdict = Verdict()
    equivalence(old.typed, new.typed, _hardware("paper-eval"), verdict)
    assert not verdict.ok and "deadlocks" in verdict.problems[0]


def _hardware(name: str):
    from stepc.api.inputs import hardware
    return hardware(name)[0]
