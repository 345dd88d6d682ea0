"""What a run says about its settings: only the hardware keys operators really change, a
did-you-mean for a wrong `--trace` name, and a routing trace of another model named as
top-k against top-k."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from click.testing import CliRunner

from stepc.cli import main

REPO = Path(__file__).resolve().parent.parent


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_an_attribute_equal_to_the_hardware_is_no_override():
    r = run("sim", "programs/moe_simple.step")  # compute_bw=1024 on paper-eval's 1024
    assert r.exit_code == 0, r.output
    assert "program overrides" not in r.stdout


# attention_dynamic at a small size: the bundled size's operators and attributes, smaller
# tiles and streams
SMALL_ATTENTION = ("-D", "B=8", "-D", "HEAD_DIM=16", "-D", "TILE_N=64", "-D", "MAXN=4096")


def test_overrides_are_one_line_per_hardware_key():
    r = run("sim", "programs/attention_dynamic.step", "--timing-only", *SMALL_ATTENTION)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if "program overrides:" in line)
    assert "fabric.compute_bw = 1024, set to compute_bw=2048 on 24 operators" in lines[first]
    assert lines[first + 1].split()[0] == "fabric.fifo_depth"
    assert "program overrides" not in lines[first + 2] and "fifo_depth" not in lines[first + 2]
    # a key set by --set to the operators' value is no longer overridden
    r = run("sim", "programs/attention_dynamic.step", "--timing-only", *SMALL_ATTENTION,
            "--set", "fabric.compute_bw=2048")
    assert r.exit_code == 0 and "fabric.compute_bw" not in r.stdout


def test_a_wrong_trace_name_suggests_the_right_one(tmp_path):
    ids = tmp_path / "ids.npy"
    np.save(ids, np.zeros((64, 8), dtype=np.int64))
    r = run("sim", "programs/moe_static.step", "--timing-only", "--trace", f"routng={ids}")
    assert r.exit_code == 2 and "(did you mean `routing`?)" in r.stderr


def test_a_top_2_trace_on_a_top_8_program_says_so(tmp_path):
    ids = tmp_path / "ids.npy"
    np.save(ids, np.tile(np.arange(2), (64, 1)))  # 64 tokens, 2 experts each
    r = run("sim", "programs/moe_static.step", "--timing-only", "--trace", f"routing={ids}")
    assert r.exit_code == 2
    assert "routes each row to 2 experts (top-2)" in r.stderr and "(top-8)" in r.stderr
