"""The `dram` memory model's physics in closed form: row hits, closed banks and conflicts,
bank parallelism, FR-FCFS row grouping, bus turnaround, refresh, address mapping, the
clock ratio; agreement with `ref` on streaming; configuration and reporting."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from stepc.cli import main
from stepc.frontend import compile_file
from stepc.hw import load_config
from stepc.hw.config import SYSTEM_DEFAULTS, ConfigError
from stepc.sim.data import tensor_values
from stepc.sim.hbm import Addresses
from stepc.sim.hbm.dram import DramHbm
from stepc.sim.hbm.ref import RefHbm
from stepc.sim.kernel import MEM, Ctx, Kernel
from stepc.sim.run import simulate

ROW_MAJOR = ("dram.layout=row-major", "dram.placement=packed")
HW = load_config("hdl-validation-dram", ROW_MAJOR)
D = HW.dram  # HBM2, 8 channels, RoBaRaCoCh, 1 GHz: one memory cycle per accelerator cycle
# RoBaRaCoCh on 8 channels of HBM2 with 64-byte requests, from the least significant bit:
# 6 offset bits, 3 channel, 4 column (16 requests per 1 KiB row), 1 pseudo-channel,
# 4 bank (2 bank-group bits first), then the row.
BANK_GROUP = 1 << 14
BANK = 1 << 16  # the next bank of the same bank group
ROW = 1 << 18
# issue -> visible on a row hit: pickup the next cycle, one hop each way (as in `ref`)
HIT = 1 + 1 + D.nCL + D.nBL + 1
ARRIVAL = 2  # a request issued at cycle 0 reaches the controller at cycle 2


def memory(hw=HW):
    k = Kernel()
    k.memory = DramHbm(k, hw) if hw.hbm.model == "dram" else RefHbm(k, hw.hbm)
    return k


def run(hw, loaders, starts=None):
    """`loaders`: per port, in port order, a list of bursts (requests, per_message, write,
    Addresses), issued from cycle `starts[i]` (default 0); returns each port's completion
    cycle of every burst."""
    k = memory(hw)
    done = {i: [] for i in range(len(loaders))}

    def loader(ctx, i, bursts):
        ctx.t = (starts or {}).get(i, 0)
        for requests, per_message, write, addr in bursts:
            yield (MEM, (0, i), requests, per_message, write, addr)
            done[i].append(ctx.t)

    for i, bursts in enumerate(loaders):
        c = Ctx(f"l{i}", "load")
        k.add(c, loader(c, i, bursts))
    k.run()
    return done, k.memory.stats


def one(addr: int, write: bool = False):
    return (1, 1, write, Addresses(addr, 64, 1))


def latencies(hw, addrs, write=False):
    """Issue single requests one after another; the latency of each."""
    done, stats = run(hw, [[one(a, write) for a in addrs]])
    times = [0] + done[0]
    return [b - a for a, b in zip(times, times[1:])], stats


def test_closed_bank_conflict_and_hit_latencies():
    lat, stats = latencies(HW, [0, ROW, ROW])
    closed, conflict, hit = lat
    assert hit == HIT
    assert closed - hit == D.nRCDRD
    assert conflict - hit == D.nRP + D.nRCDRD
    assert (stats.row_misses, stats.row_conflicts, stats.row_hits) == (1, 1, 1)


def test_conflict_waits_for_ras():
    """A conflict right after an activation waits until the row has been open nRAS."""
    slow = replace(HW, dram=replace(D, nRAS=60, nRC=60 + D.nRP))
    lat, _ = latencies(slow, [0, ROW])
    act = ARRIVAL  # the first ACT issues when the request arrives
    assert lat[0] + lat[1] == act + 60 + D.nRP + D.nRCDRD + D.nCL + D.nBL + 1


def test_two_banks_overlap_one_bank_serializes():
    two_banks = Addresses(0, BANK_GROUP, 1)  # request k -> bank group k, row 0
    done, _ = run(HW, [[(2, 2, False, two_banks)]])
    # both activate at once (nRRD apart), the second transfer follows the first on the bus
    assert done[0][0] == ARRIVAL + D.nRCDRD + max(D.nRRDS, D.nBL) + D.nCL + D.nBL + 1
    same_bank = Addresses(0, ROW, 1)  # request k -> bank 0, row k
    done2, stats = run(HW, [[(2, 2, False, same_bank)]])
    assert stats.row_conflicts == 1
    assert done2[0][0] - done[0][0] >= D.nRP + D.nRCDRD


def test_fr_fcfs_groups_rows_within_a_queue():
    """Requests alternating between two rows of one bank: served row by row, so one miss
    and one conflict instead of a conflict per request."""
    n = 16
    # request k: row k % 2, column k // 2
    a = np.array([(k % 2) * ROW + (k // 2) * 8 * 64 for k in range(n)])
    loaders = [[one(int(x))] for x in a]  # one port per request, all issued together
    _, stats = run(HW, loaders)
    assert (stats.row_misses, stats.row_conflicts) == (1, 1)
    assert stats.row_hits == n - 2


def test_fr_fcfs_does_not_wait_for_a_late_row_hit():
    """A request to an open row that arrives long after an older request to another row
    of the bank does not jump ahead of it: the older one is served first."""
    done, stats = run(HW, [[one(0)], [one(ROW)], [one(64 * 8)]], starts={2: 200})
    assert done[1][0] < 200  # the conflict is served before the late hit arrives
    assert stats.row_conflicts == 2  # row 0 -> row 1 -> row 0


def test_read_write_turnaround():
    """A write then a read of the same row, issued together: the read waits for the
    write-to-read turnaround; after a read it would wait only for the data bus."""
    done, _ = run(HW, [[one(0, True)], [one(64 * 8)]])
    assert done[1][0] == ARRIVAL + D.nRCDWR + D.nCWL + D.nBL + D.nWTRL + D.nCL + D.nBL + 1
    done, _ = run(HW, [[one(0)], [one(64 * 8)]])
    assert done[1][0] == ARRIVAL + D.nRCDRD + D.nBL + D.nCL + D.nBL + 1
    done, _ = run(HW, [[one(0)], [one(64 * 8, True)]])  # read -> write: nRTW
    assert done[1][0] == ARRIVAL + D.nRCDRD + D.nRTW + D.nCWL + D.nBL + 1


def stream_cycles(hw, requests: int, par_dispatch: int = 8) -> int:
    addr = Addresses(0, 64, 1)  # a linear stream
    done, _ = run(hw, [[(requests, par_dispatch, False, addr)]])
    return done[0][0]


def test_streaming_read_reaches_peak_without_refresh():
    no_refresh = replace(HW, dram=replace(D, nREFI=0))
    n = 65536  # 4 MiB
    cycles = stream_cycles(no_refresh, n)
    ideal = n * 64 / HW.peak_bw
    assert ideal <= cycles <= ideal * 1.01


def test_streaming_read_loses_the_refresh_fraction():
    n = 65536
    cycles = stream_cycles(HW, n)
    derated = n * 64 / HW.peak_bw / (1 - (D.nRP + D.nRFC) / D.nREFI)
    assert cycles == pytest.approx(derated, rel=0.02)


def test_address_mapping_spreads_a_linear_stream():
    k = memory()
    f = k.memory.decode(np.arange(0, 1 << 20, 64))
    assert np.all(np.bincount(f["Ch"]) == (1 << 14) // 8)  # RoBaRaCoCh: channel first
    assert list(f["Ch"][:9]) == [0, 1, 2, 3, 4, 5, 6, 7, 0]
    ch_first = load_config("hdl-validation-dram", ("dram.mapping=ChRaBaRoCo",))
    f2 = memory(ch_first).memory.decode(np.arange(0, 1 << 20, 64))
    assert set(f2["Ch"]) == {0}  # channel in the top bits: 1 MiB stays in one channel
    bank_first = load_config("hdl-validation-dram", ("dram.mapping=RoCoBaRaCh",))
    f3 = memory(bank_first).memory.decode(np.arange(0, 64 * 8 * 2 * 16, 64))
    assert len(set(zip(f3["Ch"], f3["Ra"], f3["Ba"]))) == 8 * 2 * 16  # every bank once


def test_power_of_two_strides_camp_on_one_channel():
    """A tile column (64-byte rows 2 KiB apart) camps on one channel under RoBaRaCoCh, a
    contiguous tile spreads over all eight; the cycles follow."""
    done, stats = run(HW, [[(256, 4, False, Addresses(0, 2048, 1))]])
    assert sum(1 for c in stats.per_channel if c) == 1
    done2, stats2 = run(HW, [[(256, 4, False, Addresses(0, 64, 1))]])
    assert sum(1 for c in stats2.per_channel if c) == 8
    assert done2[0][0] * 3 < done[0][0]


def test_hbm3_streams_faster_when_bank_groups_interleave():
    """HBM3's nCCDL is twice nBL: a row's columns in one bank group (RoBaRaCoCh) stream at
    half the rate of requests that alternate bank groups (RoCoBaRaCh)."""
    def bandwidth(mapping):
        hw = load_config("hdl-validation-dram", ("dram.part=hbm3", f"dram.mapping={mapping}",
                                                 "hbm.request_bytes=32"))
        done, _ = run(hw, [[(65536, 32, False, Addresses(0, 32, 1))]])
        return 65536 * 32 / done[0][0] / hw.peak_bw
    same_group, interleaved = bandwidth("RoBaRaCoCh"), bandwidth("RoCoBaRaCh")
    assert same_group == pytest.approx(0.5 * (1 - (586 / 6240)), rel=0.05)
    assert interleaved > 1.5 * same_group


def test_clock_ratio_converts_memory_cycles():
    hbm3 = load_config("hdl-validation-dram", ("dram.part=hbm3",))
    d3 = hbm3.dram
    assert d3.clock_ratio == pytest.approx(1.6)
    assert hbm3.peak_bw == pytest.approx(8 * 2 * 32 / 2 * 1.6)
    lat, _ = latencies(hbm3, [0, 64 * 8])  # closed, then a hit (64-byte request = 2 accesses)
    t = lat[0]  # the hit is issued here, picked up at t + 1, arrives at t + 2
    arrival = math.ceil((t + 2) * 1.6)
    done = arrival + max(d3.nBL, d3.nCCDL) + d3.nCL + d3.nBL  # two column commands
    assert t + lat[1] == math.ceil(done / 1.6) + 1


def test_dram_agrees_with_ref_on_a_streaming_bandwidth_bound_load():
    """Same peak (256 B/cycle): hdl-validation's channel pool and HBM2 without refresh
    agree within 2% on a long linear read; with refresh dram is slower by its fraction."""
    n = 32768
    ref_cycles = stream_cycles(load_config("hdl-validation"), n, par_dispatch=4)
    no_refresh = replace(HW, dram=replace(D, nREFI=0))
    dram_cycles = stream_cycles(no_refresh, n, par_dispatch=4)
    assert dram_cycles == pytest.approx(ref_cycles, rel=0.02)
    with_refresh = stream_cycles(HW, n, par_dispatch=4)
    assert with_refresh / ref_cycles == pytest.approx(1 / (1 - (D.nRP + D.nRFC) / D.nREFI),
                                                      rel=0.03)


def test_swiglu_under_dram_is_functional_and_deterministic():
    r = compile_file("programs/swiglu.step", {"TB": 32, "TI": 64})
    run1 = simulate(r.typed, HW, functional=True)
    t = {n: tensor_values(x, True) for n, x in r.typed.program.tensors.items()}
    g = t["X"] @ t["W_gate"]
    ref = ((g / (1 + np.exp(-g))) * (t["X"] @ t["W_up"])) @ t["W_down"]
    np.testing.assert_allclose(run1.outputs["Y"], ref, rtol=1e-4, atol=1e-5 * abs(ref).max())
    run2 = simulate(r.typed, HW, functional=False)
    assert run1.cycles == run2.cycles
    assert sum(run1.memory.per_channel) == run1.read_requests + run1.write_requests
    m = run1.memory
    assert m.row_hits + m.row_misses + m.row_conflicts == sum(m.per_channel)


def test_tiled_layout_streams_narrow_tiles():
    """Narrow weight tiles stored row-major camp on one channel; stored tile by tile
    they stream, and the run gets faster."""
    r = compile_file("programs/swiglu.step", {"TB": 16, "TI": 16})
    row_major = simulate(r.typed, HW, functional=False)
    tiled = simulate(r.typed, load_config("hdl-validation-dram", ("dram.layout=tiled",
                                                                  "dram.placement=packed")),
                     functional=False)
    assert tiled.cycles < row_major.cycles
    assert tiled.row_hit_rate > row_major.row_hit_rate


def test_dram_config_errors():
    with pytest.raises(ConfigError, match="must order the fields"):
        load_config("hdl-validation-dram", ("dram.mapping=RoBaRaCo",))
    with pytest.raises(ConfigError, match="power of two"):
        load_config("hdl-validation-dram", ("dram.banks=3",))
    with pytest.raises(ConfigError, match='did you mean "hbm3"'):
        load_config("hdl-validation-dram", ("dram.part=hbm4",))
    with pytest.raises(ConfigError, match='did you mean "tiled"'):
        load_config("hdl-validation-dram", ("dram.layout=tile",))
    with pytest.raises(ConfigError, match="power of two"):
        load_config("hdl-validation-dram", ("hbm.channels=6",))


def test_a_user_part_file(tmp_path):
    part = tmp_path / "hbm2e.toml"
    text = load_config("hdl-validation-dram").to_toml().split("[dram]\n")[1].split("\n[")[0]
    lines = [ln for ln in text.splitlines() if ln.split(" = ")[0] not in SYSTEM_DEFAULTS]
    part.write_text("\n".join(lines).replace("tck_ps = 1000", "tck_ps = 625") + "\n")
    hw = tmp_path / "hw.toml"
    hw.write_text(f'[hbm]\nmodel = "dram"\nchannels = 8\n[dram]\npart = "{part}"\n')
    cfg = load_config(str(hw))
    assert cfg.dram.tck_ps == 625 and cfg.peak_bw == pytest.approx(256 * 1.6)
    part.write_text("tck_ps = 625\nnCL = 9\n")  # a part is described whole
    with pytest.raises(ConfigError, match="lacks pseudo_channels"):
        load_config(str(hw))


def test_sim_reports_dram_statistics():
    r = CliRunner().invoke(main, ["sim", "programs/swiglu.step", "--hw",
                                  "hdl-validation-dram", "--timing-only"])
    assert r.exit_code == 0, r.output
    assert "DRAM rows:" in r.stdout and "% hits" in r.stdout and "per channel" in r.stdout
    doc = json.loads(CliRunner().invoke(main, ["sim", "programs/swiglu.step", "--hw",
                                               "hdl-validation-dram", "--timing-only",
                                               "--format", "json"]).stdout)
    off = doc["off_chip"]
    assert off["model"] == "dram" and 0 < off["row_hit_rate"] < 1
    assert len(off["channel_bw"]) == 8 and off["peak_bw"] == 256
    assert off["row_hits"] + off["row_misses"] + off["row_conflicts"] == \
        off["read_requests"] + off["write_requests"]
    ref = json.loads(CliRunner().invoke(main, ["sim", "programs/swiglu.step", "--hw",
                                               "hdl-validation", "--timing-only",
                                               "--format", "json"]).stdout)
    assert ref["off_chip"]["row_hit_rate"] is None
    printed = CliRunner().invoke(main, ["sim", "programs/swiglu.step", "--hw",
                                        "hdl-validation-dram", "--print-config"])
    assert "[dram]" in printed.stdout and "nRCDRD = 7" in printed.stdout


def test_sweep_records_and_shows_row_hits(tmp_path):
    out = tmp_path / "r.jsonl"
    r = CliRunner().invoke(main, ["sweep", "programs/swiglu.step", "--grid", "TI=64",
                                  "--hw", "hdl-validation", "--hw", "hdl-validation-dram",
                                  "-j", "1", "--timing-only", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "row hits" in r.stdout
    recs = {rec["hw"]: rec for rec in map(json.loads, out.read_text().splitlines())}
    assert recs["hdl-validation"]["row_hit_rate"] is None
    assert 0 < recs["hdl-validation-dram"]["row_hit_rate"] < 1
    assert recs["hdl-validation-dram"]["cycles"] > recs["hdl-validation"]["cycles"]
