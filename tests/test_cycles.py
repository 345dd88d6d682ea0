"""Every bundled program's cycles pinned: one record per program under tests/golden/cycles/,
the timing-only run of `stepc sim --timing-only --format json programs/<name>.step` (at the
program's own params, on paper-eval) reduced to its cycles and traffic (the whole JSON
lists every operator and FIFO; a decoder's runs to megabytes). A change of cycles is a
reviewed diff: rewrite the records with `python -m pytest --update-goldens`. The decoder
layers (bundled.LARGE, ~10 s a run) are pinned at their own size under `-m slow` and at
their SMALL size (tests/golden/cycles/small/) by default. The runs are the session's
(tests/bundled.py), shared on one worker with the other tests of a program's run (the xdist
group named after it)."""

from __future__ import annotations

import json

import pytest
from bundled import LARGE, PROGRAMS, ROOT, SMALL
from click.testing import CliRunner

from stepc.cli import main
from stepc.sim.report import run_json

GOLDEN = ROOT / "tests" / "golden" / "cycles"
OFF_CHIP = ("useful_bytes", "request_bytes", "read_requests", "write_requests")


def record(program: str, doc: dict, per_channel) -> dict:
    """The pinned part of a `stepc sim --format json` document: cycles, traffic, requests
    per channel, FLOPs, FIFO high water, the run's dims and its five busiest operators."""
    busiest = sorted((o for o in doc["ops"] if o["busy_cycles"]),
                     key=lambda o: (-o["busy_cycles"], o["name"]))[:5]
    return {
        "program": f"programs/{program}.step", "hw": doc["hw"], "mode": doc["mode"],
        "cycles": doc["cycles"],
        "off_chip": {k: doc["off_chip"][k] for k in OFF_CHIP},
        "requests_per_channel": [int(n) for n in per_channel],
        "flops": doc["flops"],
        "fifo_high_water_bytes": doc["fifo_high_water_bytes"],
        "dims": doc["dims"],
        "busiest": [{k: o[k] for k in ("name", "op", "busy_cycles", "finish")} for o in busiest],
    }


def text(rec: dict) -> str:
    """JSON, one key a line (the busiest operators one a line): diffs show what moved."""
    lines = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in rec.items() if k != "busiest"]
    ops = ",\n".join(f"    {json.dumps(o)}" for o in rec["busiest"])
    return "{\n" + ",\n".join(lines) + f',\n  "busiest": [\n{ops}\n  ]\n}}\n'


def full_size(program: str):
    """`program` as a parameter at its own size: the LARGE ones under `-m slow`."""
    marks = [pytest.mark.xdist_group(program)]
    return pytest.param(program, marks=marks + [pytest.mark.slow] * (program in LARGE))


@pytest.mark.parametrize("program", [full_size(p) for p in PROGRAMS])
def test_cycles_are_pinned(program, bundled, request):
    assert_pinned(program, None, GOLDEN / f"{program}.json", bundled, request)


@pytest.mark.parametrize("program", [pytest.param(p, marks=pytest.mark.xdist_group(f"{p}-small"))
                                     for p in LARGE])
def test_cycles_are_pinned_at_small_sizes(program, bundled, request):
    """The LARGE programs at their SMALL sizes (the runs of tests/test_ref_kernels.py), so
    that the default run sees their cycles move too."""
    assert_pinned(program, SMALL[program], GOLDEN / "small" / f"{program}.json", bundled,
                  request)


def assert_pinned(program: str, params: dict | None, expect, bundled, request) -> None:
    run = bundled.run(program, params)
    actual = text(record(program, run_json(run), run.memory.per_channel))
    if request.config.getoption("--update-goldens"):
        if not expect.exists() or expect.read_text(encoding="utf-8") != actual:
            expect.parent.mkdir(parents=True, exist_ok=True)
            expect.write_text(actual, encoding="utf-8", newline="\n")
        return
    name = expect.relative_to(ROOT).as_posix()
    assert expect.exists(), (f"missing {name}: run `python -m pytest tests/test_cycles.py "
                             "--update-goldens`, then review it")
    assert actual == expect.read_text(encoding="utf-8"), (
        f"{program}: the run differs from {name} (rerun with --update-goldens if the change "
        "is intended, and review the diff)")


def test_every_program_is_pinned():
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == PROGRAMS
    assert sorted(p.stem for p in (GOLDEN / "small").glob("*.json")) == sorted(LARGE)


def test_the_record_is_what_the_cli_prints(monkeypatch):
    """The records hold the numbers `stepc sim --timing-only --format json` prints."""
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(main, ["sim", "--timing-only", "--format", "json",
                                       "programs/moe_simple.step"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    off = doc["off_chip"]
    size = off["request_bytes"] // (off["read_requests"] + off["write_requests"])
    per_channel = [round(bw * doc["cycles"] / size) for bw in off["channel_bw"]]
    pinned = json.loads((GOLDEN / "moe_simple.json").read_text(encoding="utf-8"))
    assert record("moe_simple", doc, per_channel) == pinned
