"""Inputs that used to crash the simulator (exit 70) or never end (issue 29, item 4): a
huge channel count, an integer Map value outside its element type, out-of-range generator
settings of external streams, and a loop whose every iteration fails."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from stepc.cli import main
from stepc.frontend import compile_source
from stepc.grammar.parse import decode_source

REPO = Path(__file__).resolve().parent.parent
MOE = str(REPO / "programs" / "moe_simple.step")


def run(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("channels", ["1000000", "65536", "1025"])
def test_channel_count_is_bounded(channels):
    """1,000,000 channels allocated 745 GiB (exit 70); 65,536 never started."""
    res = run("sim", MOE, "--set", f"hbm.channels={channels}")
    assert res.exit_code == 2, (res.exit_code, res.output[-500:])
    assert '"hbm.channels" must be <= 1,024' in res.output


def test_an_integer_map_value_outside_its_type_is_a_located_error(tmp_path):
    """A negative value into u64: `check` cannot know it, `sim` stops at the operator."""
    prog = tmp_path / "neg.step"
    prog.write_text("tensor LEN : u64[4] input = arange\n"
                    "n = Map(MetadataGen(LEN), fn=ceildiv_int(by=1, plus=-5))\nSink(n)\n")
    assert run("check", str(prog)).exit_code == 0
    res = run("sim", str(prog))
    assert res.exit_code == 1, (res.exit_code, res.output)
    assert f"{prog}:2:5: error: `ceildiv_int` gives -5, which does not fit the element " \
        "type u64" in res.output, res.output


@pytest.mark.parametrize("setting", ["mean=0", "mean=-5", "mean=18446744073709551616",
                                     "mean=1000000000000", "std=-1", "topk=0", "seed=-1"])
def test_external_generator_settings_are_checked(tmp_path, setting):
    """mean = 0, negative or >= 2^64 exited 70 in sim; 10^12 never ended."""
    prog = tmp_path / "kv.step"
    prog.write_text(f'stream kv : Strm<Tile<u64, [1, 1]>, 0>[4] = external("kv_lens", '
                    f"{setting})\nSink(kv)\n")
    res = run("check", str(prog))
    assert res.exit_code == 1, (res.exit_code, res.output)
    key = setting.split("=")[0]
    assert f"error[E0204]: external `{key}=` expects" in res.output, res.output


def test_generated_kv_lengths_in_range_still_run(tmp_path):
    prog = tmp_path / "kv.step"
    prog.write_text('stream kv : Strm<Tile<u64, [1, 1]>, 0>[4] = external("kv_lens", '
                    "mean=64, std=8, seed=3)\nSink(kv)\n")
    assert run("sim", str(prog)).exit_code == 0


def test_a_loop_whose_iterations_all_fail_stops_early():
    """100,000 iterations that each repeat one error: the loop stops after a few, one
    error is reported, and nothing after the loop cascades."""
    text = ('stream x : Strm<Tile<bf16, [1, 64]>, 1>[10, 1] = external("x")\n'
            "for i in 0..100000 {\n    y[i] = Nope(x)\n}\nSink(y[5])\n")
    start = time.monotonic()
    c = compile_source(decode_source("loop.step", text.encode()))
    assert [d.code for d in c.diagnostics.items] == ["E0102"], c.diagnostics.items
    assert time.monotonic() - start < 30  # guards against the hang, not a speed target


def test_a_loop_with_one_failing_iteration_reports_it_and_goes_on():
    text = ('stream x : Strm<Tile<bf16, [1, 64]>, 1>[10, 1] = external("x")\n'
            "for i in 0..40 {\n    y[i] = Map(x, fn=silu)\n    Sink(y[i])\n}\n"
            "for i in 0..4 {\n    z[i] = Broadcast(y[i * 20], consumers=1)\n"
            "    Sink(z[i][0])\n}\n")
    c = compile_source(decode_source("loop.step", text.encode()))
    messages = " ".join(d.message for d in c.diagnostics.items)
    assert "index 40 is out of range for `y`" in messages, messages
    assert "index 60 is out of range for `y`" in messages, messages


def test_many_experts_are_refused_in_seconds():
    """`check -D E=100000` on moe_static ran past 30 s (and stalled the editor server):
    every expert's iteration failed on the refused Partition."""
    start = time.monotonic()
    res = run("check", str(REPO / "programs" / "moe_static.step"), "-D", "E=100000")
    assert res.exit_code == 1, res.output[-500:]
    assert "Partition with 100,000 consumers: at most 65,536 are allowed" in res.output
    assert res.output.count("error[") == 2, res.output
    assert time.monotonic() - start < 60  # guards against the hang, not a speed target


ENDLESS = ("param B = 1099511627776\ntensor X : bf16[B, 64] input\n"
           "x = LinearOffChipLoad(X, tile=[1, 64])\nSink(x)\n")


def test_a_run_that_would_never_end_is_refused_before_it_starts(tmp_path):
    """2^40 rows: 1.4 x 10^11 cycles by the roofline bound; the run was started and never
    ended (moe_static with F = 2^64 alike). `--max-cycles` bounds it instead."""
    prog = tmp_path / "endless.step"
    prog.write_text(ENDLESS)
    start = time.monotonic()
    res = run("sim", str(prog))
    assert res.exit_code == 1, (res.exit_code, res.output[-500:])
    assert "the run needs at least 137,438,953,472 cycles" in res.output, res.output
    assert "--max-cycles N" in res.output
    assert time.monotonic() - start < 60  # guards against the hang, not a speed target
    bounded = run("sim", str(prog), "--max-cycles", "1000")
    assert bounded.exit_code == 1 and "--max-cycles 1,000" in bounded.output


def test_the_estimate_is_a_lower_bound_on_the_bundled_programs():
    """The bound never exceeds the cycles a run takes (so no real run is refused)."""
    import zlib

    import stepc
    from stepc.analyze import analyze
    from stepc.hw.config import load_config
    from stepc.sim.data import external_elements
    from stepc.sim.estimate import cycles_lower_bound
    hw = load_config(None, ())
    for path in ("swiglu.step", "moe_simple.step", "attention_dynamic.step"):
        prog = stepc.load(REPO / "programs" / path)
        data = {}
        for n in prog.typed.program.nodes.values():
            if n.op == "External":
                name = n.attrs["name"]
                data[name] = external_elements(name, prog.typed.types[(n.name, 0)], None,
                                               n.attrs.get("gen", {}),
                                               zlib.crc32(name.encode()) % 2**31)[2]
        bound = cycles_lower_bound(analyze(prog.typed, "artifact", hw), prog.typed, hw, data)
        cycles = prog.simulate(hw=hw, timing_only=True).cycles
        assert bound is not None and 0 < bound <= cycles, (path, bound, cycles)


def test_a_kv_trace_of_endless_requests_is_refused(tmp_path):
    """decoder_timemux with KV lengths of 10^12 never ended: the roofline cannot see the
    lengths (FlatMap expands them at run time), so the trace's values are checked."""
    import numpy as np
    prog = tmp_path / "kv.step"
    prog.write_text('stream kv : Strm<Tile<u64, [1, 1]>, 0>[4] = external("kv_lens")\n'
                    "Sink(kv)\n")
    trace = tmp_path / "kv.npy"
    np.save(trace, np.full(4, 10**12, dtype=np.int64))
    res = run("sim", str(prog), "--trace", f"kv_lens={trace}")
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert "holds 1,000,000,000,000: values of an integer stream (KV lengths) above " \
        "10,000,000" in res.output, res.output
    np.save(trace, np.full(4, 7930, dtype=np.int64))  # the longest Azure request
    assert run("sim", str(prog), "--trace", f"kv_lens={trace}").exit_code == 0


def test_the_editor_server_checks_a_huge_expert_count_in_seconds():
    """The editor server compiles as `check` does: typing `param E = 100000` in moe_static
    stalled it for 20 s; it is now answered with the two Partition errors."""
    from stepc.app.document import Settings, check_document
    path = str(REPO / "programs" / "moe_static.step")
    text = Path(path).read_text().replace("param E = 128 ", "param E = 100000 ", 1)
    start = time.monotonic()
    checked = check_document(path, text, 1, {}, Settings())
    codes = [d.code for d in checked.compiled.diagnostics.items if d.severity.value == "error"]
    assert codes == ["E0114", "E0114"], codes
    assert time.monotonic() - start < 60  # guards against the stall, not a speed target
