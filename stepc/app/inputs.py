"""What a front end gives, read: a program file or text checked with its `-D` overrides
(an override that names no `param` raises InputError), hardware loaded from a preset or
TOML file and `--set` strings, the data files a program reads."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stepc.api import CheckReport
    from stepc.hw import HardwareConfig


def hardware_presets() -> list[str]:
    """The names of the bundled hardware presets (light: loads no sympy)."""
    from stepc.hw.config import preset_names
    return preset_names()


def checked_program(path: str, defines: Mapping[str, int]) -> CheckReport:
    """The check report of the program file `path` ('-': standard input) with `defines`
    overriding its `param`s; an override naming no `param` raises InputError."""
    from stepc.api import InputError, check
    report = check(path, **defines)
    unknown = report.unknown_params()
    if unknown:
        raise InputError("; ".join(d.message for d in unknown), unknown,
                         report.compiled.sources)
    return report


def checked_guarded(path: str, params: Mapping[str, int], may_read: Callable[[str], None]
                    ) -> CheckReport:
    """The check report of a program file, `may_read(path)` called before each file it
    imports is read: it raises to refuse the file (its exception ends the check)."""
    from stepc.api import CheckReport
    from stepc.frontend import compile_file
    return CheckReport(compile_file(path, dict(params), may_read))


def checked_text(text: str | bytes, name: str, params: Mapping[str, int] | None = None,
                 may_read: Callable[[str], None] | None = None) -> CheckReport:
    """The check report of program text named `name` (bytes read as UTF-8), its imports
    vetted by `may_read` as `checked_guarded` does (None: not vetted)."""
    from stepc.api import CheckReport
    from stepc.frontend import compile_text
    return CheckReport(compile_text(text, name, dict(params or {}), may_read))


def load_hardware(hw: str | None, sets: Sequence[str] | Mapping[str, Any] = (),
                  roofline: bool = False, may_read: Callable[[str], None] | None = None
                  ) -> tuple[HardwareConfig, list[str]]:
    """The preset or TOML file `hw` with `sets`, and a warning for each setting the run
    will not read (`roofline`: the analyzer's bound is the reader); InputError if bad.
    `may_read` is asked before each file is read (it raises to refuse)."""
    from stepc.api import hardware
    return hardware(hw, sets, roofline, may_read)


def hardware(hw: str | None, sets: Sequence[str] = (),
             warn: Callable[[str], None] | None = None) -> HardwareConfig:
    """`load_hardware` for a run: the configuration, `warn` hearing each setting the run
    will not read."""
    config, warnings = load_hardware(hw, sets)
    for warning in warnings:
        if warn is not None:
            warn(warning)
    return config


def data_files(report: CheckReport) -> list[str]:
    """The data files a checked program reads besides its sources (`file(path=...)`
    tensors, `external(..., file=...)` defaults), as the simulator opens them: for front
    ends that keep a program inside a directory."""
    from stepc.ops import OPS
    typed = report.compiled.typed
    if typed is None:
        return []
    paths = [dict(t.source.kwargs)["path"] for t in typed.program.tensors.values()
             if t.source is not None and t.source.name == "file"]
    paths += [n.attrs["gen"]["file"] for n in typed.program.nodes.values()
              if OPS[n.op].external and isinstance(n.attrs.get("gen", {}).get("file"), str)]
    return [p for p in paths if isinstance(p, str)]
