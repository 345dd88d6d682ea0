"""The bundled programs (programs/*.step), each compiled, analyzed and simulated once per test
session (once per worker under pytest-xdist), for the tests that only read a run or an
analysis: the `bundled` fixture of tests/conftest.py hands out one `BundledRuns` per
session. Runs are timing-only; a test must not change what it is given."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = sorted(p.stem for p in (ROOT / "programs").glob("*.step"))

# Sizes at which every bundled program runs in well under a second, whichever way the `ref`
# model serves it (the Python request loop is the slowest: ~8x the closed form on a whole
# MoE layer); the programs not named here are that quick as bundled.
ATTENTION = {"B": 8, "HEAD_DIM": 16, "TILE_N": 64, "MAXN": 4096}
DECODER = {"L": 1, "B": 8, "R": 2, "D": 128, "HQ": 4, "HKV": 2, "HEAD_DIM": 32, "F": 128,
           "E": 4, "TOPK": 2, "TILE_N": 64}
MOE = {"B": 8, "D": 128, "F": 192, "E": 8, "K": 2}
SMALL = {
    "attention_coarse": {**ATTENTION, "NB": 2},
    "attention_dynamic": ATTENTION,
    "attention_interleaved": ATTENTION,
    "decoder_dynamic": DECODER,
    "decoder_static": DECODER,
    "decoder_timemux": {**DECODER, "MR": 2},
    "moe_dynamic": MOE,
    "moe_static": MOE,
    "moe_timemux": {**MOE, "R": 4},
    "moe_timemux_dynamic": {**MOE, "R": 4},
}
# The programs whose run at their own size takes seconds (a decoder layer: ~10 s each on
# a quiet core): the default run checks them at their SMALL size, `-m slow` at their own.
LARGE = ("decoder_dynamic", "decoder_static", "decoder_timemux")


def program_params(names, *marks) -> list:
    """Bundled program names (`x.step` or `x`) as parameters, the LARGE ones under
    `-m slow` (every other program still covers the check by default)."""
    import pytest
    return [pytest.param(n, marks=[*marks] + [pytest.mark.slow] * (n.removesuffix(".step")
                                                                      in LARGE))
            for n in names]


def _key(params: dict | None) -> tuple:
    return tuple(sorted((params or {}).items()))


class BundledRuns:
    """Compiled bundled programs, their analyses and timing-only runs, made on first use and
    kept."""

    def __init__(self) -> None:
        self._typed: dict[tuple, object] = {}
        self._analyses: dict[tuple, object] = {}
        self._runs: dict[tuple, object] = {}

    def typed(self, program: str, params: dict | None = None):
        """The checked program `programs/<program>.step` under `params`."""
        key = (program, _key(params))
        if key not in self._typed:
            from stepc.frontend import compile_file

            result = compile_file(str(ROOT / "programs" / f"{program}.step"), params or {})
            assert result.ok, result.diagnostics.items
            self._typed[key] = result.typed
        return self._typed[key]

    def analysis(self, program: str, params: dict | None = None, mode: str = "artifact"):
        """The cost formulas of the checked program (`analyze` in `mode`, no hardware)."""
        key = (program, _key(params), mode)
        if key not in self._analyses:
            from stepc.analyze import analyze

            self._analyses[key] = analyze(self.typed(program, params), mode)
        return self._analyses[key]

    def run(self, program: str, params: dict | None = None, hw: str = "paper-eval",
            ref_strategy: str = "auto"):
        """Its timing-only simulation on the preset `hw`, the `ref` model served the
        `ref_strategy` way (external streams from their seeded stand-ins)."""
        key = (program, _key(params), hw, ref_strategy)
        if key not in self._runs:
            from stepc.hw import load_config
            from stepc.sim.run import simulate

            self._runs[key] = simulate(self.typed(program, params), load_config(hw),
                                       functional=False, ref_strategy=ref_strategy)
        return self._runs[key]
