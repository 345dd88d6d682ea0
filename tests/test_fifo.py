"""`stepc fifo`: the static minimum depth of a reconvergent FIFO, confirmed by simulation
(the program completes at it and deadlocks one below), dead feedback loops, the search."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepc.api import compile
from stepc.api.inputs import hardware
from stepc.fifo.search import search_depths
from stepc.fifo.static import analyze_fifos
from stepc.measure import measure

# x forks to a join directly (through `hops` Maps) and through an Accum over C elements
# repeated C times: the direct branch must hold C elements of x.
FORK_JOIN = """param R = {rows}
param C = {chunk}
tensor X : f32[R, C, 16] input = random(seed=1)
tensor Y : f32[R, C, 16] output
x = LinearOffChipLoad(X, tile=[1, 16], shape=[R, C])
s = Accum(x, fn=add, rank=1)
sr = Repeat(s, count=C)
{hops}y = Map(h{n}, sr, fn=mul)
LinearOffChipStore(y, Y)
"""


def fork_join(rows: int, chunk: int, hops: int) -> str:
    lines = "h0 = x\n" + "".join(f"h{i + 1} = Map(h{i}, fn=exp)\n" for i in range(hops))
    return FORK_JOIN.format(rows=rows, chunk=chunk, hops=lines, n=hops)


def _join_fifo(analysis):
    minima = analysis.minimum_depths(lambda k: DEFAULT)
    assert len(minima) == 1
    (key, (bound, _)), = minima.items()
    return key, int(bound)


DEFAULT = 2


def _completes(typed, key, depth) -> bool:
    hw, _ = hardware("paper-eval", {"fabric.fifo_depth": DEFAULT})
    m = measure(typed, hw, functional=False, depths={key: depth})
    return not m.deadlocked


@pytest.mark.parametrize("chunk, hops", [(6, 0), (6, 1), (9, 2)])
def test_static_minimum_is_the_simulated_one(chunk, hops):
    typed = compile(fork_join(3, chunk, hops))._compiled.typed
    key, bound = _join_fifo(analyze_fifos(typed))
    assert bound == chunk - DEFAULT * hops
    assert _completes(typed, key, bound)
    assert not _completes(typed, key, bound - 1)


@settings(max_examples=6, deadline=None)
@given(chunk=st.integers(3, 10), hops=st.integers(0, 1), rows=st.integers(1, 3))
def test_static_minimum_on_generated_fork_joins(chunk, hops, rows):
    typed = compile(fork_join(rows, chunk, hops))._compiled.typed
    key, bound = _join_fifo(analyze_fifos(typed))
    assert _completes(typed, key, bound)
    if bound > 1:
        assert not _completes(typed, key, bound - 1)


def test_a_loop_no_element_enters_is_found_and_located():
    from test_tensor_sources import TOKENLESS
    analysis = analyze_fifos(compile(TOKENLESS)._compiled.typed)
    (loop,) = analysis.loops
    assert loop.feedback.span.line == 8 and "`order`" in loop.reason
    assert "merge" in loop.reason


def test_a_loop_started_by_a_merge_is_not_dead():
    from test_tensor_sources import _feedback_blocks
    for body in _feedback_blocks():
        assert analyze_fifos(compile(body)._compiled.typed).loops == []


def test_selector_routing_is_data_dependent():
    typed = compile(open("programs/moe_simple.step").read())._compiled.typed
    routed = [r for r in analyze_fifos(typed).reconvergences if r.data_dependent]
    assert routed and all("selectors" in r.data_dependent or "data" in r.data_dependent
                          for r in routed)


def test_search_reaches_the_unbounded_cycles_within_tolerance():
    typed = compile(fork_join(3, 6, 1))._compiled.typed
    hw, _ = hardware("paper-eval")
    result = search_depths(analyze_fifos(typed), hw, tolerance=0.0)
    assert result.cycles == result.unbounded_cycles
    loose = search_depths(analyze_fifos(typed), hw, tolerance=0.5)
    assert loose.cycles <= 1.5 * loose.unbounded_cycles
    assert sum(c.depth for c in loose.classes) <= sum(c.depth for c in result.classes)
    join = next(c for c in result.classes if any(k[2] == "y" and k[3] == 0 for k in c.edges))
    assert join.static_minimum == 4 and join.depth >= 4


def test_a_run_past_the_tolerance_stops_early():
    """The search stops a run once it passes the tolerance (the simulator's max_cycles
    raises its own error), and a tight search logs such stops."""
    from stepc.sim.kernel import CycleLimitError
    typed = compile(fork_join(4, 6, 1))._compiled.typed
    hw, _ = hardware("paper-eval")
    with pytest.raises(CycleLimitError, match="passed --max-cycles 10 "):
        measure(typed, hw, functional=False, max_cycles=10)
    tight = search_depths(analyze_fifos(typed), hw, tolerance=0.0)
    assert any("stopped" in line for line in tight.log)
    assert tight.cycles == tight.unbounded_cycles


def test_searched_depths_are_per_class_and_at_most_what_they_held():
    """Each class gets its own depth, never above the most its FIFOs held with unbounded
    FIFOs (or its static minimum), and the run at them is within the tolerance."""
    typed = compile(fork_join(4, 6, 2))._compiled.typed
    hw, _ = hardware("paper-eval")
    deep = {(e.src, e.port, e.dst, e.slot): 1 << 20 for e in typed.program.edges}
    run = measure(typed, hw, functional=False, depths=deep)
    unbounded = {name: fifo[0] for name, fifo in run.result.fifo.items()}
    result = search_depths(analyze_fifos(typed), hw, tolerance=0.0)
    prog = typed.program
    for c in (c for c in result.classes if c.settable):  # fan-outs keep the hardware's
        held = max(unbounded[f"{prog.nodes[k[0]].port_label(k[1])} -> {k[2]}"]
                   for k in c.edges)
        assert c.depth <= max(held, c.static_minimum, 1)
    assert len({c.depth for c in result.classes}) > 1  # not one depth for all
    assert result.cycles == result.unbounded_cycles


# ---------------------------------------------------------------- the command and the hint
def _cli(*args, input=None):  # noqa: A002
    from click.testing import CliRunner

    from stepc.cli import main
    return CliRunner().invoke(main, list(args), input=input)


def test_fifo_command_reports_minimum_depth_bytes_and_exit_codes(tmp_path):
    import json
    path = tmp_path / "fj.step"
    path.write_text(fork_join(3, 6, 0))
    r = _cli("fifo", str(path), "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    join = next(f for f in doc["fifos"] if f["consumer"] == "y" and f["slot"] == 0)
    assert join["static_minimum"] == 6 and join["depth"] >= 6
    assert join["location"]["line"] == 9 and join["bytes"] == join["depth"] * 64
    assert doc["cycles"] <= 1.01 * doc["unbounded_cycles"]
    assert doc["fifo_bytes"] == sum(f["bytes"] for f in doc["fifos"])
    assert doc["on_chip_bytes"] > 0  # the operators' own, beside the FIFOs
    text = _cli("fifo", str(path), "--static")
    assert text.exit_code == 0 and "x -> y" in text.stdout.replace("x.bcast", "x")
    # a loop no element enters: exit 3, located, whatever the depth
    from test_tensor_sources import TOKENLESS
    dead = tmp_path / "dead.step"
    dead.write_text(TOKENLESS)
    r = _cli("fifo", str(dead))
    assert r.exit_code == 3 and "dead.step:8" in r.stdout and "any depth" in r.stdout
    assert _cli("fifo", str(path), "--tolerance", "-1").exit_code == 2


def test_tolerance_moves_the_depths(tmp_path):
    typed = compile(fork_join(4, 6, 1))._compiled.typed
    hw, _ = hardware("paper-eval")
    tight = search_depths(analyze_fifos(typed), hw, tolerance=0.0)
    loose = search_depths(analyze_fifos(typed), hw, tolerance=1.0)
    assert tight.cycles == tight.unbounded_cycles <= loose.cycles
    assert sum(c.depth for c in loose.classes) < sum(c.depth for c in tight.classes)


def test_deadlock_hint_names_the_fifo_and_its_depth(tmp_path):
    path = tmp_path / "fj.step"
    path.write_text(fork_join(3, 6, 1))
    r = _cli("sim", str(path))
    assert r.exit_code == 3
    hint = r.stderr.strip().splitlines()[-1]
    assert "`h1 -> y`" in hint and "fj.step:10" in hint and "needs depth >= 4 (has 2)" in hint


# ---------------------------------------------------------------- the bundled programs
from bundled import PROGRAMS, SMALL, program_params  # noqa: E402


@pytest.mark.parametrize("name", program_params(PROGRAMS))
def test_bundled_static_minima_hold_in_simulation(bundled, name):
    """No bundled loop is dead, the preset depth meets every static minimum (the preset
    run completes), and a minimum above 1 is the simulated one: the run completes at it
    and deadlocks one below."""
    params = SMALL.get(name)
    typed = bundled.typed(name, params)
    analysis = analyze_fifos(typed)
    assert analysis.loops == []
    assert not bundled.run(name, params).deadlock
    hw, _ = hardware("paper-eval")
    minima = analysis.minimum_depths(lambda k: hw.fabric.fifo_depth)
    for key, (bound, _r) in minima.items():
        assert bound.is_number and int(bound) <= hw.fabric.fifo_depth, (key, bound)
        if int(bound) > 1:
            assert not measure(typed, hw, functional=False,
                               depths={key: int(bound)}).deadlocked
            assert measure(typed, hw, functional=False,
                           depths={key: int(bound) - 1}).deadlocked


def test_apply_writes_the_depths_the_search_measured(tmp_path):
    import json
    path = tmp_path / "fj.step"
    path.write_text(fork_join(3, 6, 1))
    r = _cli("fifo", str(path), "--format", "json", "--apply")
    assert r.exit_code == 0, r.output
    searched = json.loads(r.stdout)["cycles"]
    text = path.read_text()
    assert "y = Map(h1, sr, fn=mul, depth=[" in text
    assert _cli("fmt", "--check", str(path)).exit_code == 0  # in the formatter's layout
    run = _cli("sim", str(path), "--format", "json")
    assert run.exit_code == 0 and json.loads(run.stdout)["cycles"] == searched
    again = _cli("fifo", str(path), "--apply")
    assert again.exit_code == 0 and "depth= set on 0 calls" in again.stderr
    assert path.read_text() == text


def test_apply_is_refused_before_work(tmp_path):
    path = tmp_path / "fj.step"
    path.write_text(fork_join(3, 6, 0))
    assert _cli("fifo", str(path), "--static", "--apply").exit_code == 2
    folder = tmp_path / "folder.step"
    folder.mkdir()
    r = _cli("fifo", str(folder), "--apply")
    assert r.exit_code == 2 and "--apply" in r.output and "directory" in r.output
    assert _cli("fifo", "-", "--apply", input=fork_join(3, 6, 0)).exit_code == 2
    assert path.read_text() == fork_join(3, 6, 0)


def test_json_joins_the_document_family(tmp_path):
    import json

    from test_json_schema import assert_family
    path = tmp_path / "fj.step"
    path.write_text(fork_join(3, 6, 0))
    doc = json.loads(_cli("fifo", str(path), "--format", "json").stdout)
    assert assert_family(doc, "fifo") == len(doc["fifos"])


# A loop that starts but never ends: the Partition feeding it back waits for its data to
# end, and that data is the loop's own.
ENDLESS_LOOP = """param N = 6
tensor NEXT : u64[N, 1] input = arange
tensor START : u64[1, 1] input = zeros
tensor ONE : u64[1] input = ones
tensor Y : u64[N, 1] output
stream back : Strm<Tile<u64, [1, 1]>, 0>[N - 1]
start = Flatten(MetadataGen(START), min=0, max=1)
addr, _ = EagerMerge([start, back])
assume shape(addr) == [N]
v = RandomOffChipLoad(addr, NEXT, tile=[1, 1])
out, fed = Broadcast(v, consumers=2)
LinearOffChipStore(out, Y)
chunks = Map(MetadataGen(ONE), fn=ceildiv_int(by=1, plus=N - 1))
keep = Flatten(FlatMap(chunks, fn=filter_last_tile), min=0, max=1)
assume shape(keep) == [N]
kept = Partition(fed, keep, rank=0, consumers=2, dim="c")
assume shape(kept[1]) == [N - 1]
Sink(kept[0])
back = kept[1]
"""


def test_a_deadlock_with_unbounded_fifos_reports_no_depths(tmp_path):
    path = tmp_path / "endless.step"
    path.write_text(ENDLESS_LOOP)
    r = _cli("fifo", str(path))
    assert r.exit_code == 3
    assert "no depth helps" in r.stdout and "FIFO bytes" not in r.stdout


def test_attention_dynamic_with_two_tile_buffers_finds_depths():
    """Its double-buffered K loads send a request's last tile without waiting for the next
    request's address (docs/fifo.md)."""
    r = _cli("fifo", "programs/attention_dynamic.step", "--set", "hbm.tile_buffers=2",
             "-D", "B=8", "-D", "HEAD_DIM=16", "-D", "TILE_N=64", "-D", "MAXN=4096")
    assert r.exit_code == 0, r.output
    assert "FIFO bytes" in r.stdout


def test_fifo_bytes_of_analyze_and_sim_follow_the_depths(tmp_path):
    import json
    path = tmp_path / "fj.step"
    path.write_text(fork_join(3, 6, 0))  # 6 FIFOs of 64 B tiles (x feeds a fan-out)

    def doc(*args):
        r = _cli(*args, str(path), "--fifo-bytes", "--format", "json")
        assert r.exit_code in (0, 3), r.output
        return json.loads(r.stdout)
    two = doc("analyze")
    assert two["fifo_bytes"] == 6 * 2 * 64
    assert two["on_chip_bytes_with_fifos"] == two["fifo_bytes"] + two["totals"]["on_chip_bytes"]
    assert doc("analyze", "--set", "fabric.fifo_depth=4")["fifo_bytes"] == 6 * 4 * 64
    path.write_text(fork_join(3, 6, 0).replace("fn=mul)", "fn=mul, depth=[6, 1])"))
    assert doc("analyze")["fifo_bytes"] == (4 * 2 + 6 + 1) * 64
    assert doc("sim")["fifo_bytes"] == (4 * 2 + 6 + 1) * 64
    text = _cli("sim", str(path), "--fifo-bytes")
    assert "FIFOs at their depths: 960 B" in text.stdout


def test_program_fifo_refuses_bad_arguments():
    import stepc
    prog = stepc.compile(fork_join(3, 6, 0))
    for kwargs, expect in (({"tolerance": -1}, "tolerance"), ({"tolerance": "1%"}, "tolerance"),
                           ({"search": "no"}, "search"), ({"hw": 5}, "hw"),
                           ({"traces": [1]}, "traces")):
        with pytest.raises(stepc.StepError, match=expect):
            prog.fifo(**kwargs)
    report = prog.fifo(search=False)
    assert report.cycles is None and any(r.static_minimum == 6 for r in report.rows)


def test_the_feedback_example_of_the_language_docs(tmp_path):
    """docs/language.md's feedback loop runs; with its start removed as the docs say, sim
    and fifo explain that no depth helps, in the words the docs quote."""
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "docs" / "language.md").read_text()
    section = text[text.index("### Feedback streams"):]
    block = re.search(r"```step\n(.*?)```", section, re.S).group(1)
    live = tmp_path / "loop.step"
    live.write_text(block)
    assert _cli("sim", str(live)).exit_code == 0
    assert _cli("fifo", str(live)).exit_code == 0
    start = re.compile(r"^order = Flatten\(sel.*$", re.M)
    assert start.search(block)
    dead = tmp_path / "dead.step"
    dead.write_text(start.sub("order = Flatten(Reshape(who, chunk=1), min=0, max=1)", block))
    r = _cli("sim", str(dead))
    assert r.exit_code == 3
    hint = r.stderr.strip().splitlines()[-1]
    quoted = re.search(r"```text\n(hint: .*?)```", section, re.S).group(1)
    quoted = " ".join(quoted.split()).replace("FILE", str(dead)).split(", ...)")[0]
    assert hint.startswith(quoted), (hint, quoted)
    r = _cli("fifo", str(dead))
    assert r.exit_code == 3 and "deadlocks at any depth" in r.stdout


def test_reported_bytes_are_those_of_the_program_with_the_depths_applied(tmp_path):
    """The searched FIFO bytes are what `--fifo-bytes` counts once `--apply` wrote the
    depths; the uniform bytes, what it counts before."""
    from stepc.api import load
    from stepc.api.fifo import apply_depths, fifo_capacity_bytes
    path = tmp_path / "fj.step"
    path.write_text(fork_join(3, 6, 1))
    prog = load(str(path))
    report = prog.fifo(hw="paper-eval", tolerance=0.0)
    assert report.uniform_bytes == fifo_capacity_bytes(prog._compiled, "paper-eval")
    edited, _ = apply_depths(prog._compiled, report)
    assert edited >= 1
    applied = load(str(path))._compiled
    assert fifo_capacity_bytes(applied, "paper-eval") == report.fifo_bytes
    assert report.fifo_bytes != report.uniform_bytes


def test_a_fan_out_the_program_needs_deeper_is_named_with_the_broadcast_to_write():
    """The report's advice for a fan-out stepc inserted: the stream, where it is made, and
    an explicit Broadcast that, written into the program, is a call `depth=` reaches."""
    import io

    from rich.console import Console
    from test_fifo_applied import FAN_OUT

    from stepc.api.fifo import FifoReport, _fan_outs
    from stepc.fifo.search import FanOutNeed
    text = FAN_OUT.format(n=2, rows=4, width=16, direct="Flatten(x, min=0, max=1)")
    typed = compile(text)._compiled.typed
    (edge,) = [(e.src, e.port, e.dst, e.slot) for e in typed.program.edges
               if e.dst == "t.bcast"]
    (need,) = _fan_outs(typed, [FanOutNeed(edge, 2, 5)])
    assert need["stream"] == "t" and need["depth"] == 5 and need["span"].line == 10
    assert need["suggestion"] == "t_0, t_1 = Broadcast(t, consumers=2, depth=5)"
    report = FifoReport("fan.step", "paper-eval", 2, 0.01, [], [], unbounded_cycles=100,
                        cycles=120, fan_outs=[need])
    out = io.StringIO()
    report.render(Console(file=out, width=300))
    assert "`t` feeds 2 uses through a fan-out stepc inserted" in out.getvalue()
    assert "no depths within the tolerance" in out.getvalue()
    assert report.to_dict()["fan_outs"][0]["location"]["line"] == 10
    written = text.replace("a = scale(t)", need["suggestion"] + "\na = scale(t_0)").replace(
        "FlatMap(t,", "FlatMap(t_1,")
    program = compile(written)._compiled.typed.program
    assert not any(n.implicit for n in program.nodes.values() if n.name.startswith("t"))
    assert any(n.op == "Broadcast" and n.attrs.get("depth") == 5
               for n in program.nodes.values())


def test_a_program_named_through_a_parent_directory_is_confirmed(tmp_path):
    """`load("dir/../fj.step")`: the confirmation run finds the program under the name it was
    given (it reported 'no such file' for the normalised one, so no depths were reported)."""
    from stepc.api import load
    (tmp_path / "dir").mkdir()
    (tmp_path / "fj.step").write_text(fork_join(3, 6, 1))
    report = load(str(tmp_path / "dir" / ".." / "fj.step")).fifo(hw="paper-eval", tolerance=0.0)
    assert report.confirmation.cycles == report.cycles > 0
