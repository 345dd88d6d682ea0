"""Every hardware setting takes effect, or says that it does not.

The `[energy]` and `[area]` keys (and the accelerator clock, which prices leakage) move
the energy and area metrics rather than the cycles: `test_energy_and_area_keys_move_their_metric`.

For each memory model (`ref`, `fluid`, `dram`) and every key of `[fabric]`, `[hbm]` and
`[dram]`: either changing the key changes the cycles of a bundled program (or, for the
capacity keys, the report's capacity warning), or the model does not read the key, and
then `--set` warns and the cycles stay put. A key added to the configuration without a
row here fails `test_every_key_is_covered`. Operator attributes that mirror a hardware key
take the hardware's value unless the program sets them."""

from __future__ import annotations

import functools
from dataclasses import fields
from pathlib import Path

import pytest
from click.testing import CliRunner

from stepc.cli import main
from stepc.frontend import compile_file, compile_source
from stepc.grammar.parse import decode_source
from stepc.hw import load_config
from stepc.hw.config import (
    CLOCK_KEY,
    Area,
    ConfigError,
    Dram,
    Energy,
    Fabric,
    Hbm,
    set_warnings,
    unused_keys,
)
from stepc.measure import measure
from stepc.ops import OPS
from stepc.sim.run import simulate

ROOT = Path(__file__).resolve().parent.parent
BASES = {"ref": ("hdl-validation", ()), "fluid": ("hdl-validation", ("hbm.model=fluid",)),
         "dram": ("hdl-validation-dram", ())}
PIPE = """
tensor X : f32[1024, 64] input = zeros
tensor Y : f32[1024, 64] output
x = LinearOffChipLoad(X, tile=[16, 64])
y = Map(x, fn=silu)
LinearOffChipStore(y, Y)
"""
# "narrow" is SwiGLU at half its bundled batch, hidden and intermediate sizes (one run
# ~0.05 s, ~0.2 s on the dram model); its writes rarely meet reads at that size, so the
# write/read turnaround timings use the bundled size
PROGRAMS = {"narrow": {"B": 32, "H": 128, "I": 256, "TB": 16, "TI": 16},
            "wide": {"B": 32, "H": 128, "TB": 32, "TI": 64},
            "turnaround": {"TB": 16, "TI": 16}, "pipe": PIPE}
ROW_MAJOR = ("dram.layout=row-major", "dram.placement=packed")  # rows conflict in banks
# (model, key) -> (program, a value that must change the cycles[, other settings it needs]);
# a row for "*" holds for every model that reads the key
EFFECT = {
    ("*", "fabric.onchip_bw"): ("narrow", 512),
    ("*", "fabric.compute_bw"): ("narrow", 64),
    ("*", "fabric.fifo_depth"): ("pipe", 2),
    ("*", "fabric.hop_latency"): ("narrow", 2),
    ("*", "fabric.stream_tile"): ("pipe", 16),
    ("*", "hbm.model"): ("narrow", "dram"),
    ("dram", "hbm.model"): ("narrow", "ref"),
    ("*", "hbm.channels"): ("narrow", 16),
    ("*", "hbm.request_bytes"): ("narrow", 128),
    ("*", "hbm.request_interval"): ("narrow", 4),
    ("*", "hbm.latency"): ("narrow", 40),
    ("*", "hbm.startup"): ("narrow", 40),
    ("*", "hbm.par_dispatch"): ("narrow", 1),
    ("*", "hbm.arbiter_grants"): ("narrow", 1),
    ("fluid", "hbm.arbiter_grants"): ("narrow", 1, ("hbm.par_dispatch=2",)),  # below the pool
    ("*", "hbm.tile_buffers"): ("narrow", 2),
    ("*", "hbm.outstanding"): ("wide", 16),
    ("dram", "dram.part"): ("narrow", "hbm3"),
    ("dram", "dram.mapping"): ("narrow", "ChRaBaRoCo"),
    ("dram", "dram.layout"): ("narrow", "row-major"),
    ("dram", "dram.placement"): ("narrow", "packed"),
    ("dram", "dram.accel_clock_mhz"): ("narrow", 2000),
    ("dram", "dram.queue_depth"): ("narrow", 1),
    ("dram", "dram.mapper_bytes"): ("narrow", 16),
    ("dram", "dram.tck_ps"): ("narrow", 2000),
    ("dram", "dram.pseudo_channels"): ("narrow", 1),
    ("dram", "dram.bank_groups"): ("narrow", 1),
    ("dram", "dram.banks"): ("narrow", 1),
    ("dram", "dram.rows"): ("narrow", 1, ROW_MAJOR),
    ("dram", "dram.page_bytes"): ("narrow", 256),
    ("dram", "dram.access_bytes"): ("narrow", 32),
    ("dram", "dram.nBL"): ("narrow", 8),
    ("dram", "dram.nCL"): ("narrow", 30),
    ("dram", "dram.nCWL"): ("narrow", 30),
    ("dram", "dram.nRCDRD"): ("narrow", 30),
    ("dram", "dram.nRCDWR"): ("narrow", 30),
    ("dram", "dram.nRP"): ("narrow", 30),
    ("dram", "dram.nRAS"): ("narrow", 200, ROW_MAJOR),
    ("dram", "dram.nRC"): ("narrow", 90, ROW_MAJOR),
    ("dram", "dram.nWR"): ("narrow", 200, ROW_MAJOR),
    ("dram", "dram.nRTP"): ("narrow", 30, ROW_MAJOR),
    ("dram", "dram.nCCDS"): ("narrow", 8),
    ("dram", "dram.nCCDL"): ("narrow", 8),
    ("dram", "dram.nRRDS"): ("narrow", 20),
    ("dram", "dram.nRRDL"): ("narrow", 40, ROW_MAJOR),
    ("dram", "dram.nFAW"): ("narrow", 400, ROW_MAJOR),
    ("dram", "dram.nWTRS"): ("turnaround", 40),
    ("dram", "dram.nWTRL"): ("turnaround", 40),
    ("dram", "dram.nRTW"): ("turnaround", 40),
    ("dram", "dram.nREFI"): ("narrow", 0),
    ("dram", "dram.nRFC"): ("narrow", 1000),
}
# keys that move the report rather than the cycles: the capacity warnings
REPORTED = {"fabric.compute_capacity": ("1000", "FLOP/cycle but the fabric has"),
            "fabric.onchip_capacity": ("1000", "on chip but the fabric has")}
OTHER_STRING = {"dram.part": "hbm3", "dram.mapping": "RoCoBaRaCh", "dram.layout": "row-major",
                "dram.placement": "packed"}
KEYS = [f"{section}.{f.name}" for section, cls in (("fabric", Fabric), ("hbm", Hbm),
                                                   ("dram", Dram)) for f in fields(cls)]
_typed = {}


def typed(program: str):
    if program not in _typed:
        p = PROGRAMS[program]
        _typed[program] = compile_source(decode_source("t.step", p.encode())).typed \
            if isinstance(p, str) else compile_file(str(ROOT / "programs" / "swiglu.step"),
                                                     p).typed
    return _typed[program]


@functools.cache  # each test compares against the same unchanged run of its model
def cycles(model: str, program: str, *sets: str) -> int:
    preset, base = BASES[model]
    return simulate(typed(program), load_config(preset, base + sets), functional=False).cycles


def effect(model: str, key: str):
    return EFFECT.get((model, key)) or EFFECT.get(("*", key))


def test_every_key_is_covered():
    for model, (preset, sets) in BASES.items():
        unused = unused_keys(load_config(preset, sets))
        for key in KEYS:
            assert key in unused or key in REPORTED or effect(model, key) or \
                key in METRIC_EFFECT, \
                f"{key} under {model}: add the value that moves it to EFFECT, or make " \
                "unused_keys() say that the model ignores it"


@pytest.mark.parametrize("model", list(BASES))
@pytest.mark.parametrize("key", KEYS)
def test_a_key_moves_the_cycles_or_is_declared_unused(model, key):
    preset, sets = BASES[model]
    cfg = load_config(preset, sets)
    if key in REPORTED:
        return  # test_capacity_keys_move_the_report
    unused = unused_keys(cfg)
    if key == CLOCK_KEY and key not in unused and not effect(model, key):
        return  # it prices leakage alone: test_energy_and_area_keys_move_their_metric
    if key in unused:
        value = cfg.value(key)
        other = f"{key}={value * 2 or 1}" if isinstance(value, int) else \
            f"{key}={OTHER_STRING[key]}"
        assert set_warnings(cfg, (other,)), key
        assert cycles(model, "narrow", other) == cycles(model, "narrow")
        return
    program, value, *needs = effect(model, key)
    needs = needs[0] if needs else ()
    assert cycles(model, program, *needs, f"{key}={value}") != \
        cycles(model, program, *needs), (model, key)


# energy and area keys -> (a value, the metric it must move, the pipeline's element type
# and tile rows): a [rows, 64] tile's load buffer falls in one SRAM size class (16 rows of
# f32: 4 KiB, 8 KiB class; 64: 16 KiB, 32 KiB class; 512: 128 KiB, 1 MiB class), and the
# element type picks the arithmetic coefficients (bf16 is charged as fp16)
METRIC_EFFECT = {
    "energy.fp16_add_pj": (9.0, "energy_compute_j", "bf16", 16),
    "energy.fp16_mul_pj": (9.0, "energy_compute_j", "bf16", 16),
    "energy.fp32_add_pj": (9.0, "energy_compute_j", "f32", 16),
    "energy.fp32_mul_pj": (9.0, "energy_compute_j", "f32", 16),
    "energy.int32_add_pj": (9.0, "energy_compute_j", "i32", 16),
    "energy.int32_mul_pj": (9.0, "energy_compute_j", "i32", 16),
    "energy.sram_8kib_pj": (99.0, "energy_sram_j", "f32", 16),
    "energy.sram_32kib_pj": (99.0, "energy_sram_j", "f32", 64),
    "energy.sram_1mib_pj": (999.0, "energy_sram_j", "f32", 512),
    "energy.wire_pj_per_bit_mm": (9.0, "energy_fabric_j", "f32", 16),
    "energy.off_chip_pj_per_bit": (9.0, "energy_off_chip_j", "f32", 16),
    "energy.activation_pj": (999.0, "energy_off_chip_j", "f32", 16),
    "energy.leakage_mw_per_mm2": (99.0, "energy_static_j", "f32", 16),
    "area.fp16_add_um2": (9999.0, "area_mm2", "bf16", 16),
    "area.fp16_mul_um2": (9999.0, "area_mm2", "bf16", 16),
    "area.fp32_add_um2": (9999.0, "area_mm2", "f32", 16),
    "area.fp32_mul_um2": (9999.0, "area_mm2", "f32", 16),
    "area.int32_add_um2": (9999.0, "area_mm2", "i32", 16),
    "area.int32_mul_um2": (9999.0, "area_mm2", "i32", 16),
    "area.sram_bit_um2": (9.0, "area_mm2", "f32", 16),
    "area.unit_flops": (64, "compute_units", "f32", 16),
    "area.unit_bytes": (2**24, "energy_fabric_j", "f32", 16),
    CLOCK_KEY: (100, "energy_static_j", "f32", 16),
}
TYPED_PIPE = """
tensor X : {dtype}[1024, 64] input = zeros
tensor Y : {dtype}[1024, 64] output
x = LinearOffChipLoad(X, tile=[{rows}, 64])
y = Map(x, fn=relu)
LinearOffChipStore(y, Y)
"""


def test_every_energy_and_area_key_is_covered():
    keys = {f"{s}.{f.name}" for s, cls in (("energy", Energy), ("area", Area))
            for f in fields(cls)}
    assert keys | {CLOCK_KEY} == set(METRIC_EFFECT)


@functools.cache
def metric_of(model: str, dtype: str, rows: int, metric: str, *sets: str):
    preset, base = BASES[model]
    text = TYPED_PIPE.format(dtype=dtype, rows=rows)
    program = compile_source(decode_source("t.step", text.encode())).typed
    return measure(program, load_config(preset, base + sets), functional=False)[metric]


@pytest.mark.parametrize("model", list(BASES))
@pytest.mark.parametrize("key", list(METRIC_EFFECT))
def test_energy_and_area_keys_move_their_metric(model, key):
    preset, sets = BASES[model]
    cfg = load_config(preset, sets)
    value, metric, dtype, rows = METRIC_EFFECT[key]
    before = metric_of(model, dtype, rows, metric)
    after = metric_of(model, dtype, rows, metric, f"{key}={value}")
    if key in unused_keys(cfg):
        assert set_warnings(cfg, (f"{key}={value}",)), key
        assert after == before, (model, key)
        return
    assert after != before, (model, key)


@pytest.mark.parametrize("key", list(REPORTED))
def test_capacity_keys_move_the_report(key):
    value, warning = REPORTED[key]
    run = ["sim", str(ROOT / "programs" / "swiglu.step"), "--hw", "hdl-validation",
           "--timing-only"]
    assert warning not in CliRunner().invoke(main, run).stdout
    r = CliRunner().invoke(main, run + ["--set", f"{key}={value}"])
    assert r.exit_code == 0 and warning in r.stdout, r.output


def test_set_on_an_unused_key_warns_on_the_command_line():
    r = CliRunner().invoke(main, ["sim", str(ROOT / "programs" / "swiglu.step"), "--hw",
                                  "hdl-validation-dram", "--timing-only",
                                  "--set", "hbm.latency=9"])
    assert r.exit_code == 0
    assert "warning: --set hbm.latency=9: no effect: the dram model" in r.stderr
    r = CliRunner().invoke(main, ["analyze", str(ROOT / "programs" / "swiglu.step"),
                                  "--set", "fabric.fifo_depth=4"])
    assert "warning: --set fabric.fifo_depth=4: no effect: the roofline bound" in r.stderr


def test_set_keeps_every_setting_whatever_the_order():
    a = load_config("hdl-validation-dram", ("dram.layout=row-major", "dram.part=hbm3"))
    b = load_config("hdl-validation-dram", ("dram.part=hbm3", "dram.layout=row-major"))
    assert a == b and a.dram.layout == "row-major" and a.dram.tck_ps == 625
    c = load_config("hdl-like", ("dram.part=hbm3",))  # the preset's own [dram] keys stay
    assert (c.dram.mapper_bytes, c.dram.placement) == (16, "staggered")


@pytest.mark.parametrize("item", ["hbm.channels=9223372036854775808",
                                  "hbm.latency=4611686018427387904",
                                  "fabric.hop_latency=2147483648", "hbm.channels=2**63",
                                  "hbm.outstanding=-1", "fabric.stream_tile=-2"])
def test_out_of_range_settings_are_refused_before_running(item):
    with pytest.raises(ConfigError):
        load_config("hdl-validation", (item,))
    r = CliRunner().invoke(main, ["sim", str(ROOT / "programs" / "moe_simple.step"),
                                  "--set", item])
    assert r.exit_code == 2 and item.split("=")[0] in r.stderr, r.output


# ------------------------------------------------------------ operator attributes
def run_text(text: str, *sets: str) -> int:
    result = compile_source(decode_source("t.step", text.encode()))
    assert result.ok, [d.message for d in result.diagnostics.items]
    return simulate(result.typed, load_config("hdl-validation", sets), functional=False).cycles


MIRRORS = {  # attribute -> (the statements that set it, the hardware key, another value)
    "par_dispatch": (("x = LinearOffChipLoad(X, tile=[16, 64])", "LinearOffChipStore(y, Y)"),
                     "hbm.par_dispatch", 1),
    "compute_bw": (("y = Map(x, fn=silu)",), "fabric.compute_bw", 16),
    "depth": (("y = Map(x, fn=silu)", "LinearOffChipStore(y, Y)"), "fabric.fifo_depth", 2),
}


def test_every_mirrored_attribute_is_tested():
    mirrored = {p.name for spec in OPS.values() for p in spec.all_params if p.hw}
    assert mirrored == set(MIRRORS)


@pytest.mark.parametrize("attr", list(MIRRORS))
def test_an_attribute_left_out_takes_the_hardware_value(attr):
    statements, key, value = MIRRORS[attr]
    pinned = PIPE
    for line in statements:
        pinned = pinned.replace(line, line[:-1] + f", {attr}=8)")
    assert pinned.count(f"{attr}=8") == len(statements)
    base = load_config("hdl-validation").value(key)
    assert run_text(PIPE, f"{key}={value}") != run_text(PIPE, f"{key}={base}"), attr
    assert run_text(pinned, f"{key}={value}") == run_text(pinned, f"{key}={base}"), attr
    r = simulate(compile_source(decode_source("t.step", pinned.encode())).typed,
                 load_config("hdl-validation"), functional=False)
    assert {(o.attr, o.key) for o in r.overrides} == {(attr, key)}
