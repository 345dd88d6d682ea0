"""Hardware configuration: TOML files and named presets, validated with "did you mean" errors.

`--hw NAME` selects a preset shipped in `stepc/hw/presets/`, `--hw PATH` reads a TOML file;
`--set section.key=value` overrides single fields. The default preset is `paper-eval`.
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
    def peak_bw(self) -> float:
        """Peak off-chip bandwidth in bytes/cycle."""
        return self.channels * self.request_bytes / self.request_interval


HBM_MODELS = ("ref", "fluid")
_MIN = {"fifo_depth": 1, "hop_latency": 0, "compute_capacity": 0, "onchip_capacity": 0,
        "latency": 0, "startup": 0}


@dataclass(frozen=True)
class HardwareConfig:
    name: str
    description: str
    fabric: Fabric
    hbm: Hbm

    def to_toml(self) -> str:
        """The effective configuration as TOML (for --print-config)."""
        lines = [f'name = "{self.name}"', f'description = "{self.description}"']
        for section in ("fabric", "hbm"):
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


def _read(spec: str) -> tuple[str, dict]:
    if spec in preset_names():
        text = resources.files("stepc.hw").joinpath("presets", spec + ".toml").read_text()
        where = f"preset {spec}"
    else:
        path = Path(spec)
        if not path.exists():
            raise ConfigError(f"--hw {spec}: no such preset or file (presets: "
                              f"{', '.join(preset_names())}){_suggest(spec, preset_names())}")
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
        elif not isinstance(value, str):
            raise ConfigError(f'{where}: "{section}.{key}" must be a string, found {value!r}')
        values[key] = value
    return cls(**values)


def _build(where: str, data: dict) -> HardwareConfig:
    allowed = {"name", "description", "fabric", "hbm"}
    for key in data:
        if key not in allowed:
            raise ConfigError(f'{where}: unknown key "{key}"{_suggest(key, allowed)}')
    hbm = _section(Hbm, data.get("hbm", {}), where, "hbm")
    if hbm.model not in HBM_MODELS:
        raise ConfigError(f'{where}: "hbm.model" must be one of {", ".join(HBM_MODELS)}, '
                          f'found "{hbm.model}"{_suggest(hbm.model, HBM_MODELS)}')
    return HardwareConfig(str(data.get("name", where)), str(data.get("description", "")),
                          _section(Fabric, data.get("fabric", {}), where, "fabric"), hbm)


def _apply_set(cfg: HardwareConfig, item: str) -> HardwareConfig:
    key, sep, raw = item.partition("=")
    section, dot, field = key.strip().partition(".")
    if not sep or not dot:
        raise ConfigError(f"--set {item!r}: expected SECTION.KEY=VALUE, e.g. hbm.channels=16")
    if section not in ("fabric", "hbm"):
        raise ConfigError(f'--set: unknown section "{section}"'
                          f"{_suggest(section, ['fabric', 'hbm'])}")
    raw = raw.strip()
    value: object = int(raw) if raw.lstrip("-").isdigit() else raw.strip('"')
    merged = asdict(getattr(cfg, section))
    merged[field] = value
    sub = _build("--set", {section: {k: v for k, v in merged.items()}})
    return replace(cfg, **{section: getattr(sub, section)})


def load_config(spec: str | None = None, sets: tuple[str, ...] = ()) -> HardwareConfig:
    """Load a preset by name or a TOML file by path, then apply `--set` overrides."""
    where, data = _read(spec or DEFAULT_PRESET)
    cfg = _build(where, data)
    for item in sets:
        cfg = _apply_set(cfg, item)
    return cfg
