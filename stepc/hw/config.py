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
from dataclasses import asdict, dataclass, fields, replace
from importlib import resources
from pathlib import Path

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


@dataclass(frozen=True)
class Hbm:
    model: str = "ref"
    channels: int = 32
    request_bytes: int = 64
    request_interval: int = 2
    latency: int = 2
    startup: int = 14
    par_dispatch: int = 1

    @property
    def pool_bw(self) -> float:
        """Bandwidth of the ref/fluid channel pool in bytes/cycle."""
        return self.channels * self.request_bytes / self.request_interval


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

    def peak_bw(self, channels: int) -> float:
        """Peak data-bus bandwidth in bytes per accelerator cycle."""
        return channels * self.pseudo_channels * self.access_bytes / self.nBL * \
            self.clock_ratio


HBM_MODELS = ("ref", "fluid", "dram")
SYSTEM_DEFAULTS = {"part": "hbm2", "mapping": "RoBaRaCoCh", "layout": "row-major",
                   "accel_clock_mhz": 1000, "queue_depth": 32}  # [dram] keys not of the part
MAPPINGS_EXAMPLES = ("RoBaRaCoCh", "RoCoBaRaCh", "ChRaBaRoCo")
LAYOUTS = ("row-major", "tiled")
_MIN = {"fifo_depth": 1, "hop_latency": 0, "compute_capacity": 0, "onchip_capacity": 0,
        "latency": 0, "startup": 0, "nREFI": 0, "nRFC": 0, "nRTW": 0}
_POW2 = ("pseudo_channels", "bank_groups", "banks", "rows", "page_bytes", "access_bytes")


@dataclass(frozen=True)
class HardwareConfig:
    name: str
    description: str
    fabric: Fabric
    hbm: Hbm
    dram: Dram

    def value(self, key: str):
        """The value of a dotted key such as `hbm.par_dispatch`."""
        section, _, name = key.partition(".")
        return getattr(getattr(self, section), name)

    @property
    def peak_bw(self) -> float:
        """Peak off-chip bandwidth of the selected memory model, bytes per cycle."""
        if self.hbm.model == "dram":
            return self.dram.peak_bw(self.hbm.channels)
        return self.hbm.pool_bw

    def to_toml(self) -> str:
        """The effective configuration as TOML (for --print-config)."""
        lines = [f'name = "{self.name}"', f'description = "{self.description}"']
        sections = ("fabric", "hbm", "dram") if self.hbm.model == "dram" else ("fabric", "hbm")
        for section in sections:
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


def _read(spec: str, kind: str = "presets") -> tuple[str, dict]:
    names = preset_names() if kind == "presets" else part_names()
    if spec in names:
        text = resources.files("stepc.hw").joinpath(kind, spec + ".toml").read_text()
        where = f"{kind[:-1]} {spec}"
    else:
        path = Path(spec)
        if not path.exists():
            flag = "--hw" if kind == "presets" else "dram.part"
            raise ConfigError(f"{flag} {spec}: no such {kind[:-1]} or file ({kind}: "
                              f"{', '.join(names)}){_suggest(spec, names)}")
        try:
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
            if key in _POW2 and value & (value - 1):
                raise ConfigError(f'{where}: "{section}.{key}" must be a power of two (the '
                                  f"address mapping slices bits), found {value}")
        elif not isinstance(value, str):
            raise ConfigError(f'{where}: "{section}.{key}" must be a string, found {value!r}')
        values[key] = value
    return cls(**values)


def _build(where: str, data: dict) -> HardwareConfig:
    allowed = {"name", "description", "fabric", "hbm", "dram"}
    for key in data:
        if key not in allowed:
            raise ConfigError(f'{where}: unknown key "{key}"{_suggest(key, allowed)}')
    hbm = _section(Hbm, data.get("hbm", {}), where, "hbm")
    if hbm.model not in HBM_MODELS:
        raise ConfigError(f'{where}: "hbm.model" must be one of {", ".join(HBM_MODELS)}, '
                          f'found "{hbm.model}"{_suggest(hbm.model, HBM_MODELS)}')
    dram = _dram(data.get("dram", {}), where)
    if hbm.model == "dram" and hbm.channels & (hbm.channels - 1):
        raise ConfigError(f'{where}: "hbm.channels" must be a power of two with the dram '
                          f"model (the address mapping slices bits), found {hbm.channels}")
    return HardwareConfig(str(data.get("name", where)), str(data.get("description", "")),
                          _section(Fabric, data.get("fabric", {}), where, "fabric"), hbm, dram)


def _dram(data: dict, where: str) -> Dram:
    """The [dram] table: the named part's values, then the table's own keys."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: [dram] must be a table")
    part = data.get("part", SYSTEM_DEFAULTS["part"])
    if not isinstance(part, str):
        raise ConfigError(f'{where}: "dram.part" must be a string, found {part!r}')
    part_where, values = _read(part, "parts")
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
    if dram.layout not in LAYOUTS:
        raise ConfigError(f'{where}: "dram.layout" must be one of {", ".join(LAYOUTS)}, '
                          f'found "{dram.layout}"{_suggest(dram.layout, LAYOUTS)}')
    if dram.page_bytes < dram.access_bytes:
        raise ConfigError(f'{where}: "dram.page_bytes" ({dram.page_bytes}) is smaller than '
                          f'"dram.access_bytes" ({dram.access_bytes})')
    return dram


_MAPPING_FIELDS = ("Ro", "Ba", "Ra", "Co", "Ch")


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


def _apply_set(cfg: HardwareConfig, item: str) -> HardwareConfig:
    key, sep, raw = item.partition("=")
    section, dot, field = key.strip().partition(".")
    if not sep or not dot:
        raise ConfigError(f"--set {item!r}: expected SECTION.KEY=VALUE, e.g. hbm.channels=16")
    if section not in ("fabric", "hbm", "dram"):
        raise ConfigError(f'--set: unknown section "{section}"'
                          f"{_suggest(section, ['fabric', 'hbm', 'dram'])}")
    raw = raw.strip()
    value: object = int(raw) if raw.lstrip("-").isdigit() else raw.strip('"')
    merged = asdict(getattr(cfg, section))
    if section == "dram" and field == "part":  # a new part: its values, not the old ones
        merged = {}
    merged[field] = value
    data = {"hbm": asdict(cfg.hbm), "dram": asdict(cfg.dram), section: merged}
    sub = _build("--set", data)
    return replace(cfg, **{section: getattr(sub, section)})


def load_config(spec: str | None = None, sets: tuple[str, ...] = ()) -> HardwareConfig:
    """Load a preset by name or a TOML file by path, then apply `--set` overrides."""
    where, data = _read(spec or DEFAULT_PRESET)
    cfg = _build(where, data)
    for item in sets:
        cfg = _apply_set(cfg, item)
    return cfg
