"""The off-chip memory models `hbm.model` names, in one table (`MEMORY_MODELS`).

Each entry says what the configuration layer must know of a model without running it: the
configuration sections it reads besides
[fabric] and [hbm], its peak bandwidth and the keys that bandwidth reads, the keys it
ignores and why, the channels its requests reach, and a check of its [hbm] values. The
simulator registers a builder under the same name (`stepc.sim.hbm.table.memory_model`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# Keys the channel pool's bandwidth reads (ref, fluid): channels x request size / interval.
POOL_KEYS = frozenset({"hbm.channels", "hbm.request_bytes", "hbm.request_interval"})


def pool_bw(hw) -> float:
    """The channel pool's peak bandwidth in bytes/cycle: each channel serves one request
    every `request_interval` cycles."""
    return hw.hbm.channels * hw.hbm.request_bytes / hw.hbm.request_interval


def all_channels(hw) -> int:
    return hw.hbm.channels


def reads_nothing_more(hw) -> dict[str, str]:
    return {}


def no_check(hbm) -> str | None:
    return None


@dataclass(frozen=True)
class MemorySpec:
    """One memory model as the configuration layer sees it (`hw` is a `HardwareConfig`,
    which this module lies below)."""

    peak_bw: Callable = pool_bw  # hw -> bytes/cycle before the arbiter
    peak_keys: Callable = lambda hw: POOL_KEYS  # hw -> the dotted keys `peak_bw` reads
    sections: tuple[str, ...] = ()  # sections read besides [fabric] and [hbm]
    ignores: Callable = reads_nothing_more  # hw -> {dotted key: why it is not read}
    reachable_channels: Callable = all_channels  # hw -> channels its requests reach
    check: Callable = no_check  # the [hbm] table -> what is wrong with it, or None
    screen: bool = False  # approximate: screens candidates, never confirms


_MAPPING_FIELDS = ("Ro", "Ba", "Ra", "Co", "Ch")
MAPPINGS_EXAMPLES = ("RoBaRaCoCh", "RoCoBaRaCh", "ChRaBaRoCo")


def mapping_fields(mapping: str) -> list[str]:
    """The fields of an address mapping from least to most significant bit: a permutation
    of Ro (row), Ba (bank group, then bank), Ra (pseudo-channel), Co (column), Ch
    (channel), written most significant first as in Ramulator ("RoBaRaCoCh")."""
    parts = [mapping[i:i + 2] for i in range(0, len(mapping), 2)]
    if sorted(parts) != sorted(_MAPPING_FIELDS) or len(mapping) != 10:
        raise ValueError(f"must order the fields Ro, Ba, Ra, Co, Ch from the most "
                         f'significant bit, e.g. {", ".join(MAPPINGS_EXAMPLES)}; '
                         f'found "{mapping}"')
    return parts[::-1]


def dram_reachable_channels(hw) -> int:
    """Channels a stream of aligned `request_bytes` requests can reach: with the channel
    bits lowest and a mapper transaction smaller than a request (Ramulator 2.0's HBM2
    mapper assumes 16 B), the low channel bits of every request are 0."""
    ch, step = hw.hbm.channels, hw.hbm.request_bytes // hw.mapper_bytes
    if step <= 1 or mapping_fields(hw.dram.mapping)[0] != "Ch":
        return ch
    return max(1, ch // step)


def dram_peak_bw(hw) -> float:
    """Peak data-bus bandwidth in bytes per accelerator cycle over the reachable channels."""
    d = hw.dram
    return dram_reachable_channels(hw) * d.pseudo_channels * d.access_bytes / d.nBL * \
        d.clock_ratio


def dram_ignores(hw) -> dict[str, str]:
    out = {f"hbm.{k}": "the dram model times each request from the part's timings"
           for k in ("request_interval", "latency", "startup")}
    if hw.dram.layout != "blocked":
        out["dram.block"] = f'only dram.layout = "blocked" reads it (layout is ' \
            f'"{hw.dram.layout}")'
    return out


def dram_check(hbm) -> str | None:
    if hbm.channels & (hbm.channels - 1):
        return f'"hbm.channels" must be a power of two with the dram model (the address ' \
            f"mapping slices bits), found {hbm.channels}"
    return None


DRAM_PEAK_KEYS = frozenset({
    "hbm.channels", "hbm.request_bytes", "dram.part", "dram.tck_ps", "dram.accel_clock_mhz",
    "dram.pseudo_channels", "dram.access_bytes", "dram.nBL", "dram.mapper_bytes",
    "dram.mapping"})

MEMORY_MODELS: dict[str, MemorySpec] = {
    "ref": MemorySpec(),
    "fluid": MemorySpec(
        ignores=lambda hw: {"hbm.outstanding":
                            "the fluid model serves whole bursts, not requests"},
        screen=True),
    "dram": MemorySpec(
        peak_bw=dram_peak_bw, peak_keys=lambda hw: DRAM_PEAK_KEYS,
        sections=("dram",), ignores=dram_ignores,
        reachable_channels=dram_reachable_channels, check=dram_check),
}


def confirming_models() -> list[str]:
    """The models that may confirm a search's best candidates (all but the screens)."""
    return [name for name, spec in MEMORY_MODELS.items() if not spec.screen]


def by_cost() -> list[str]:
    """The models cheapest first: the screens, then the others in the table's order (the
    table lists those from the cheapest)."""
    return [m for m, s in MEMORY_MODELS.items() if s.screen] + confirming_models()


def readers(section: str) -> list[str]:
    """The models that read `section`."""
    return [name for name, spec in MEMORY_MODELS.items() if section in spec.sections]
