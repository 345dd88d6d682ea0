"""Memory models behind one registry: adding one takes its own module (which registers its
builder with the simulator) and one entry of `stepc.hw.memory.MEMORY_MODELS`
(CONTRIBUTING.md, "Adding a memory model")."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from stepc.api import load
from stepc.cli import main
from stepc.hw.config import load_config, unused_keys
from stepc.hw.memory import MEMORY_MODELS, MemorySpec
from stepc.sim.hbm.table import BUILDERS

ROOT = Path(__file__).resolve().parents[1]
SWIGLU = str(ROOT / "programs" / "swiglu.step")

# A fixed-latency, fixed-bandwidth memory: bursts served one after another at the channel
# pool's peak bandwidth, each response `hbm.latency` cycles after its last byte.
FIXED = '''
    """`fixed`: one server at the peak bandwidth plus `hbm.latency` per burst."""

    import math

    from stepc.sim.hbm.table import memory_model
    from stepc.sim.hbm.window import MemoryModel


    @memory_model("fixed")
    def from_config(kernel, hw):
        return FixedMemory(kernel, hw)


    class FixedMemory(MemoryModel):
        def __init__(self, kernel, hw):
            super().__init__(kernel, hw.hbm.channels)
            self.bw, self.latency = hw.peak_bw, hw.hbm.latency
            self.request_bytes = hw.hbm.request_bytes
            self.free = 0  # the first cycle the server is idle

        def issue(self, ctx, port, requests, per_message, write, addr=None, wait=True):
            b = self._burst(ctx, port, requests, per_message, write, addr, wait)
            if not b.done:
                start = max(ctx.t + 1, self.free)
                self.free = start + math.ceil(requests * self.request_bytes / self.bw)
                if write:
                    self.stats.write_requests += requests
                else:
                    self.stats.read_requests += requests
                self.stats.note(self.free + self.latency)
                self._complete(b, self.free + self.latency)
            return b
'''


@pytest.fixture
def fixed_model(tmp_path, monkeypatch):
    """The `fixed` model: its module (imported, it registers its builder) and its registry
    entry."""
    (tmp_path / "fixed_memory.py").write_text(textwrap.dedent(FIXED))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(MEMORY_MODELS, "fixed", MemorySpec())
    importlib.import_module("fixed_memory")
    yield
    del BUILDERS["fixed"], sys.modules["fixed_memory"]


def sim_cycles(*sets: str) -> int:
    args = ["sim", SWIGLU, "--timing-only", "--format", "json"]
    for s in sets:
        args += ["--set", s]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["cycles"]


def test_a_memory_model_is_added_by_its_module_and_one_registry_entry(fixed_model):
    slow, fast = (sim_cycles("hbm.model=fixed", f"hbm.latency={n}") for n in (500, 2))
    assert slow > fast > 0
    halved = sim_cycles("hbm.model=fixed", "hbm.latency=2", "hbm.channels=16")
    assert halved > fast  # half the channels: half the peak bandwidth
    program = load(SWIGLU)
    runs = [program.simulate(set={"hbm.model": "fixed", "hbm.latency": n}, timing_only=True)
            for n in (500, 2)]
    assert [r.cycles for r in runs] == [slow, fast]
    cfg = load_config(None, ("hbm.model=fixed",))
    assert cfg.peak_bw == 32 * 64 / 2
    assert unused_keys(cfg)["dram.part"].startswith('only hbm.model = "dram" reads [dram]')


def test_an_unregistered_model_is_refused_with_the_registry_names(fixed_model):
    result = CliRunner().invoke(main, ["sim", SWIGLU, "--set", "hbm.model=fixd"])
    assert result.exit_code == 2
    assert 'must be one of ref, fluid, dram, fixed, found "fixd" (did you mean "fixed"?)' \
        in result.output


def test_every_configured_model_has_a_simulator_and_every_simulator_a_name():
    assert sorted(BUILDERS) == sorted(MEMORY_MODELS)


def test_a_model_registered_twice_is_an_error():
    from stepc.sim.hbm.table import memory_model
    with pytest.raises(ValueError, match="memory model ref already has a builder"):
        memory_model("ref")(lambda kernel, hw: None)


def test_the_docs_list_every_registered_model():
    names = list(MEMORY_MODELS)
    assert f'model = "ref"           # {" | ".join(names)}' in \
        (ROOT / "docs" / "sim.md").read_text()
    assert f'[--model {"|".join(names)}]' in (ROOT / "docs" / "reproduce.md").read_text()
