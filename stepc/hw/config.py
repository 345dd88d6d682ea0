"""Hardware configuration: TOML files and named presets, validated with "did you mean" errors.

`--hw NAME` selects a preset shipped in `stepc/hw/presets/`, `--hw PATH` reads a TOML file;
`--set section.key=value` overrides single fields. The default preset is `paper-eval`.
With `hbm.model = "dram"` the `[dram]` table describes the memory part: `part` names a
shipped part (`stepc/hw/parts/`: hbm2, hbm3) or a TOML file of the same keys, and any other
key overrides the part's value.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from importlib import resources
from pathlib import Path

from stepc.hw.memory import MEMORY_MODELS, mapping_fields, readers
from stepc.spelling import given, label

DEFAULT_PRESET = "paper-eval"


class ConfigError(Exception):
    """A bad hardware configuration; the message names the file and the key."""


@dataclass(frozen=True)
class Fabric:
    onchip_bw: int = 64
    compute_bw: int = 1024
    fifo_depth: int = 2
    hop_latency: int = 1
    compute_capacity: int = 0
    onchip_capacity: int = 0
    stream_tile: int = 0


@dataclass(frozen=True)
class Hbm:
    model: str = "ref"
    channels: int = 32
    request_bytes: int = 64
    request_interval: int = 2
    latency: int = 2
    startup: int = 14
    par_dispatch: int = 1
    arbiter_grants: int = 0
    tile_buffers: int = 1
    outstanding: int = 0


@dataclass(frozen=True)
class Dram:
    """A DRAM part and its controller for `hbm.model = "dram"`: organization per channel
    (the channel count is `hbm.channels`), timings in memory clock cycles of `tck_ps`,
    the address mapping (fields from most to least significant bit), the tensor layout
    and the accelerator clock. The part's values come from its part file
    (`stepc/hw/parts/`), the others from `SYSTEM_DEFAULTS`."""

    part: str
    mapping: str
    layout: str
    accel_clock_mhz: int
    queue_depth: int
    mapper_bytes: int
    block: int
    placement: str
    tck_ps: int
    pseudo_channels: int
    bank_groups: int
    banks: int
    rows: int
    page_bytes: int
    access_bytes: int
    nBL: int
    nCL: int
    nCWL: int
    nRCDRD: int
    nRCDWR: int
    nRP: int
    nRAS: int
    nRC: int
    nWR: int
    nRTP: int
    nCCDS: int
    nCCDL: int
    nRRDS: int
    nRRDL: int
    nFAW: int
    nWTRS: int
    nWTRL: int
    nRTW: int
    nREFI: int
    nRFC: int

    @property
    def clock_ratio(self) -> float:
        """Memory clock cycles per accelerator cycle."""
        return 1e6 / self.accel_clock_mhz / self.tck_ps


@dataclass(frozen=True)
class Energy:
    """Energy coefficients in pJ: per arithmetic operation of an element type, per 64-bit
    access of an on-chip SRAM of each size class, per bit moved over a millimetre of
    on-chip wire and to or from off-chip memory, per DRAM row activation; and the leakage
    power of logic in mW per mm2. Defaults and their sources: docs/energy.md."""

    fp16_add_pj: float = 0.4
    fp16_mul_pj: float = 1.1
    fp32_add_pj: float = 0.9
    fp32_mul_pj: float = 3.7
    int32_add_pj: float = 0.1
    int32_mul_pj: float = 3.1
    sram_8kib_pj: float = 10.0
    sram_32kib_pj: float = 20.0
    sram_1mib_pj: float = 100.0
    wire_pj_per_bit_mm: float = 0.121
    off_chip_pj_per_bit: float = 3.97
    activation_pj: float = 0.0
    leakage_mw_per_mm2: float = 11.35


@dataclass(frozen=True)
class Area:
    """Area coefficients in um2 per arithmetic unit of an element type and per SRAM bit
    cell, and the allocation units: the FLOPs/cycle of one compute unit and the bytes of
    one on-chip memory unit. Defaults and their sources: docs/energy.md."""

    fp16_add_um2: float = 1360.0
    fp16_mul_um2: float = 1640.0
    fp32_add_um2: float = 4184.0
    fp32_mul_um2: float = 7700.0
    int32_add_um2: float = 137.0
    int32_mul_um2: float = 3495.0
    sram_bit_um2: float = 0.346
    unit_flops: int = 1024
    unit_bytes: int = 524288


SECTIONS = {"fabric": Fabric, "hbm": Hbm, "dram": Dram, "energy": Energy,
            "area": Area}  # the tables of a hardware file
MODEL_SECTIONS = {s: cls for s, cls in SECTIONS.items() if s in ("dram",)}
SYSTEM_DEFAULTS = {"part": "hbm2", "mapping": "RoBaRaCoCh", "layout": "tiled",
                   "accel_clock_mhz": 1000, "queue_depth": 32,
                   "mapper_bytes": 0, "block": 16,
                   "placement": "staggered"}  # [dram] keys not of the part
LAYOUTS = ("row-major", "tiled", "blocked", "reference")
PLACEMENTS = ("packed", "staggered")
_MIN = {"fifo_depth": 1, "hop_latency": 0, "compute_capacity": 0, "onchip_capacity": 0,
        "latency": 0, "startup": 0, "nREFI": 0, "nRFC": 0, "nRTW": 0, "arbiter_grants": 0,
        "outstanding": 0, "mapper_bytes": 0,
        "stream_tile": 0}
# channels: the reference model's request pattern grows with the square of the channel count
# (4,096 channels: 11 s and 0.5 GB before the first request; 65,536 would never start)
_MAX = {"compute_capacity": 2**62, "onchip_capacity": 2**62, "channels": 1024}
INT_LIMIT = 2**31 - 1  # any other integer key: keeps cycle arithmetic exact in int64
_POW2 = ("pseudo_channels", "bank_groups", "banks", "rows", "page_bytes", "access_bytes",
         "mapper_bytes")


@dataclass(frozen=True)
class HardwareConfig:
    name: str
    description: str
    fabric: Fabric
    hbm: Hbm
    dram: Dram
    energy: Energy = Energy()
    area: Area = Area()

    def value(self, key: str):
        """The value of a dotted key such as `hbm.par_dispatch`."""
        section, _, name = key.partition(".")
        return getattr(getattr(self, section), name)

    @property
    def peak_bw(self) -> float:
        """Peak off-chip bandwidth in bytes per cycle: the memory model's (`dram`: over the
        channels the address mapping can reach with requests of `hbm.request_bytes`), and
        no more than an arbiter passes (`arbiter_grants` x `par_dispatch` requests)."""
        bw = MEMORY_MODELS[self.hbm.model].peak_bw(self)
        if self.hbm.arbiter_grants:
            bw = min(bw, self.hbm.arbiter_grants * self.hbm.par_dispatch *
                     self.hbm.request_bytes)
        return bw

    @property
    def mapper_bytes(self) -> int:
        """The address mapper's transaction size: `dram.mapper_bytes`, or (0) the request
        size, a mapper matched to the requests."""
        return self.dram.mapper_bytes or self.hbm.request_bytes

    @property
    def reachable_channels(self) -> int:
        """Channels a stream of aligned `hbm.request_bytes` requests can reach (the memory
        model's address mapping may leave some out)."""
        return MEMORY_MODELS[self.hbm.model].reachable_channels(self)

    def to_toml(self) -> str:
        """The effective configuration as TOML (for --print-config)."""
        lines = [f'name = "{self.name}"', f'description = "{self.description}"']
        for section in ("fabric", "hbm", *MEMORY_MODELS[self.hbm.model].sections,
                        "energy", "area"):
            lines.append(f"\n[{section}]")
            for k, v in asdict(getattr(self, section)).items():
                lines.append(f'{k} = "{v}"' if isinstance(v, str) else f"{k} = {v}")
        return "\n".join(lines) + "\n"


def preset_names() -> list[str]:
    files = resources.files("stepc.hw").joinpath("presets").iterdir()
    return sorted(f.name.removesuffix(".toml") for f in files if f.name.endswith(".toml"))


def _suggest(name: str, options) -> str:
    near = difflib.get_close_matches(name, list(options), n=1)
    return f' (did you mean "{near[0]}"?)' if near else ""


def part_names() -> list[str]:
    files = resources.files("stepc.hw").joinpath("parts").iterdir()
    return sorted(f.name.removesuffix(".toml") for f in files if f.name.endswith(".toml"))


MAX_CONFIG_BYTES = 2**20  # a hardware or part file is a few hundred bytes of TOML

# called with a file's path before a configuration reads it (a server's workspace rule);
# it raises to refuse the read
MayRead = Callable[[str], None]


def _read(spec: str, kind: str = "presets", may_read: MayRead | None = None
          ) -> tuple[str, dict]:
    names = preset_names() if kind == "presets" else part_names()
    if spec in names:
        text = resources.files("stepc.hw").joinpath(kind, spec + ".toml").read_text()
        where = f"{kind[:-1]} {spec}"
    else:
        path = Path(spec)
        flag = given("hw", spec) if kind == "presets" else f"dram.part {spec}"
        if may_read is not None:
            may_read(spec)
        if not path.exists():
            raise ConfigError(f"{flag}: no such {kind[:-1]} or file ({kind}: "
                              f"{', '.join(names)}){_suggest(spec, names)}")
        try:
            if not path.is_file():
                raise ConfigError(f"{flag}: not a regular file")
            if path.stat().st_size > MAX_CONFIG_BYTES:
                raise ConfigError(f"{flag}: larger than {MAX_CONFIG_BYTES:,} bytes; a "
                                  "hardware file is a short TOML table")
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"{spec}: cannot read the file ({e})") from None
        where = spec
    try:
        return where, tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where}: invalid TOML: {e}") from None


def _section(cls, data: dict, where: str, section: str):
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: [{section}] must be a table")
    known = {f.name: f for f in fields(cls)}
    values = {}
    for key, value in data.items():
        if key not in known:
            raise ConfigError(f'{where}: unknown key "{section}.{key}"{_suggest(key, known)}')
        want = known[key].type
        if want == "int":
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f'{where}: "{section}.{key}" must be an integer, found '
                                  f"{value!r}")
            if value < _MIN.get(key, 1):
                raise ConfigError(f'{where}: "{section}.{key}" must be >= {_MIN.get(key, 1)}, '
                                  f"found {value}")
            if value > _MAX.get(key, INT_LIMIT):
                raise ConfigError(f'{where}: "{section}.{key}" must be <= '
                                  f"{_MAX.get(key, INT_LIMIT):,}, found {value:,}")
            if key in _POW2 and value & (value - 1):
                raise ConfigError(f'{where}: "{section}.{key}" must be a power of two (the '
                                  f"address mapping slices bits), found {value}")
        elif want == "float":
            if not isinstance(value, (int, float)) or isinstance(value, bool) \
                    or not 0 <= value < float("inf"):
                raise ConfigError(f'{where}: "{section}.{key}" must be a number >= 0, '
                                  f"found {value!r}")
            value = float(value)
        elif not isinstance(value, str):
            raise ConfigError(f'{where}: "{section}.{key}" must be a string, found {value!r}')
        values[key] = value
    return cls(**values)


def _build(where: str, data: dict, may_read: MayRead | None = None) -> HardwareConfig:
    allowed = {"name", "description", *SECTIONS}
    for key in data:
        if key not in allowed:
            raise ConfigError(f'{where}: unknown key "{key}"{_suggest(key, allowed)}')
    hbm = _section(Hbm, data.get("hbm", {}), where, "hbm")
    if hbm.model not in MEMORY_MODELS:
        raise ConfigError(f'{where}: "hbm.model" must be one of {", ".join(MEMORY_MODELS)}, '
                          f'found "{hbm.model}"{_suggest(hbm.model, MEMORY_MODELS)}')
    dram = _dram(data.get("dram", {}), where, may_read)
    problem = MEMORY_MODELS[hbm.model].check(hbm)
    if problem:
        raise ConfigError(f"{where}: {problem}")
    return HardwareConfig(str(data.get("name", where)), str(data.get("description", "")),
                          _section(Fabric, data.get("fabric", {}), where, "fabric"), hbm, dram,
                          _section(Energy, data.get("energy", {}), where, "energy"),
                          _section(Area, data.get("area", {}), where, "area"))


def _dram(data: dict, where: str, may_read: MayRead | None = None) -> Dram:
    """The [dram] table: the named part's values, then the table's own keys."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: [dram] must be a table")
    part = data.get("part", SYSTEM_DEFAULTS["part"])
    if not isinstance(part, str):
        raise ConfigError(f'{where}: "dram.part" must be a string, found {part!r}')
    part_where, values = _read(part, "parts", may_read)
    part_keys = [f.name for f in fields(Dram) if f.name not in SYSTEM_DEFAULTS]
    missing = [k for k in part_keys if k not in values]
    extra = [k for k in values if k in SYSTEM_DEFAULTS]
    if missing or extra:
        problem = f"lacks {', '.join(missing)}" if missing else \
            f"sets {', '.join(extra)}, which belong in the [dram] table, not in a part"
        raise ConfigError(f"{part_where}: a part file describes the whole part; it {problem}")
    _section(Dram, {**SYSTEM_DEFAULTS, **values}, part_where, "dram")  # the part alone
    dram = _section(Dram, {**SYSTEM_DEFAULTS, **values, **data, "part": part}, where,
                    "dram")
    try:
        mapping_fields(dram.mapping)
    except ValueError as e:
        raise ConfigError(f'{where}: "dram.mapping" {e}') from None
    if dram.placement not in PLACEMENTS:
        raise ConfigError(f'{where}: "dram.placement" must be one of {", ".join(PLACEMENTS)}, '
                          f'found "{dram.placement}"{_suggest(dram.placement, PLACEMENTS)}')
    if dram.layout not in LAYOUTS:
        raise ConfigError(f'{where}: "dram.layout" must be one of {", ".join(LAYOUTS)}, '
                          f'found "{dram.layout}"{_suggest(dram.layout, LAYOUTS)}')
    if dram.page_bytes < dram.access_bytes:
        raise ConfigError(f'{where}: "dram.page_bytes" ({dram.page_bytes}) is smaller than '
                          f'"dram.access_bytes" ({dram.access_bytes})')
    return dram


def _parse_set(item: str) -> tuple[str, str, object]:
    """`SECTION.KEY=VALUE` -> (section, key, int or string value)."""
    key, sep, raw = item.partition("=")
    section, dot, name = key.strip().partition(".")
    if not sep or not dot or not name:
        raise ConfigError(f"{given('set', item)}: expected SECTION.KEY=VALUE, e.g. "
                          "hbm.channels=16")
    if section not in SECTIONS:
        raise ConfigError(f'{given("set", item)}: unknown section "{section}"'
                          f"{_suggest(section, SECTIONS)}")
    raw = raw.strip()
    value: object = int(raw) if raw.lstrip("-").isdigit() else _number_or_text(raw)
    return section, name, value


def _number_or_text(raw: str) -> object:
    """A `--set` value that is not an integer: a decimal number, or else text."""
    try:
        return float(raw) if any(c.isdigit() for c in raw) else raw.strip('"')
    except ValueError:
        return raw.strip('"')


def load_config(spec: str | None = None, sets: tuple[str, ...] = (),
                may_read: MayRead | None = None) -> HardwareConfig:
    """Load a preset by name or a TOML file by path, then apply `--set` overrides. Every
    key the file or a `--set` names keeps its value whatever the order: a `--set
    dram.part=...` changes the part's values, not the file's own `[dram]` settings.
    `may_read` is asked before any file (not a shipped preset or part) is read."""
    where, data = _read(spec or DEFAULT_PRESET, may_read=may_read)
    cfg = _build(where, data, may_read)
    for item in sets:
        section, name, value = _parse_set(item)
        table = data.get(section, {})
        data = {**data, section: {**(table if isinstance(table, dict) else {}), name: value}}
        cfg = replace(_build(label("set"), data, may_read), name=cfg.name,
                      description=cfg.description)
    return cfg


CLOCK_KEY = "dram.accel_clock_mhz"  # the accelerator clock: the energy model reads it too


def unused_keys(cfg: HardwareConfig) -> dict[str, str]:
    """The keys the configured memory model does not read, each with the reason."""
    model = cfg.hbm.model
    out = {}
    for section, cls in MODEL_SECTIONS.items():
        if section not in MEMORY_MODELS[model].sections:
            models = " or ".join(f'"{m}"' for m in readers(section))
            out.update({f"{section}.{f.name}": f"only hbm.model = {models} reads "
                        f'[{section}]; this configuration uses "{model}"'
                        for f in fields(cls) if f"{section}.{f.name}" != CLOCK_KEY})
    if "dram" not in MEMORY_MODELS[model].sections:
        out["energy.activation_pj"] = (f'only a bank-level memory model (hbm.model = "dram") '
                                       f'counts row activations; this configuration uses '
                                       f'"{model}"')
    return {**out, **MEMORY_MODELS[model].ignores(cfg)}


def roofline_unused(cfg: HardwareConfig) -> dict[str, str]:
    """The keys the roofline bound of `stepc analyze` does not read: it uses only the
    peak off-chip bandwidth (`peak_bw`) and the default compute bandwidth."""
    read = {"hbm.model", "fabric.compute_bw", *MEMORY_MODELS[cfg.hbm.model].peak_keys(cfg)}
    if cfg.hbm.arbiter_grants:
        read |= {"hbm.par_dispatch", "hbm.request_bytes"}
    read |= {"hbm.arbiter_grants", CLOCK_KEY}  # the energy bound's static term reads the clock
    return {f"{section}.{f.name}": "the roofline bound reads only the peak bandwidth and "
            "the compute bandwidth (`stepc sim` uses it)"
            for section, cls in SECTIONS.items() for f in fields(cls)
            if f"{section}.{f.name}" not in read and section not in ("energy", "area")}




def file_warnings(spec: str | None) -> list[str]:
    """A warning when a hardware file (not a preset) sets no key of any section: every
    value is then the built-in default, which equals the default preset's."""
    if spec is None or spec in preset_names():
        return []
    _, data = _read(spec)
    if any(isinstance(data.get(s), dict) and data[s] for s in SECTIONS):
        return []
    return [f"{given('hw', spec)}: the file sets no key of [fabric], [hbm] or [dram]: every "
            f"value is the default ({DEFAULT_PRESET}'s)"]


def set_warnings(cfg: HardwareConfig, sets: tuple[str, ...],
                 unused: dict[str, str] | None = None) -> list[str]:
    """A warning for each `--set` of a key that this configuration (or the reader given
    by `unused`) does not read."""
    unused = {**unused_keys(cfg), **(unused or {})}
    out = []
    for item in sets:
        key = item.partition("=")[0].strip()
        if key in unused:
            out.append(f"{given('set', item)}: no effect: {unused[key]}")
    return out


def configured(spec: str | None = None, sets: tuple[str, ...] = (), roofline: bool = False,
               may_read: MayRead | None = None) -> tuple[HardwareConfig, list[str]]:
    """`load_config`, and a warning for each setting the run will not read: a hardware
    file that sets no key, a `--set` of a key this configuration (with `roofline`, the
    analyzer's bound) does not read."""
    cfg = load_config(spec, sets, may_read)
    return cfg, file_warnings(spec) + set_warnings(
        cfg, sets, roofline_unused(cfg) if roofline else None)
