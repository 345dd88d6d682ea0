"""The hardware a use case runs on, from what a front end gives: a preset name or TOML file
and `--set` strings."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from stepc.api import InputError

if TYPE_CHECKING:
    from stepc.hw import HardwareConfig


def hardware(hw: str | None, sets: Sequence[str] = (),
             warn: Callable[[str], None] | None = None) -> HardwareConfig:
    """The preset or TOML file `hw` (None: the default preset) with `sets`
    (`SECTION.KEY=VALUE`); `warn` hears each setting the run will not read. A bad one
    raises InputError."""
    from stepc.hw.config import ConfigError, configured
    try:
        config, warnings = configured(hw, tuple(sets))
    except ConfigError as e:
        raise InputError(str(e)) from None
    for warning in warnings:
        if warn is not None:
            warn(warning)
    return config
