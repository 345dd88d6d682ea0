"""The options of a rewrite from what its caller gives: downtile's physical tile (`16x16`,
a pair, or the hardware's `fabric.stream_tile`) and whether off-chip loads keep their
logical tiles; every other rewrite takes none."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stepc.rewrite.draft import RewriteError
from stepc.rewrite.subtiles import tile_of

if TYPE_CHECKING:
    from stepc.hw import HardwareConfig


def rewrite_options(name: str, tile: tuple[int, int] | str | None, hw: Any,
                    split_memory: bool, load: Callable[[Any], HardwareConfig]
                    ) -> dict[str, Any]:
    """The options of the rewrite `name`; `load` turns `hw` (as the caller gave it) into
    its configuration, read only when downtile needs the hardware's tile."""
    if name != "downtile":
        if tile is not None or not split_memory:
            raise RewriteError(f"`{name}` takes no tile options")
        return {}
    if isinstance(tile, str):
        tile = tile_of(tile)
    if tile is None:
        tile = _stream_tile(hw, load)
    return {"tile": tuple(tile), "split_memory": split_memory}


def _stream_tile(hw: Any, load: Callable[[Any], HardwareConfig]) -> tuple[int, int]:
    if hw is None:
        raise RewriteError("downtile needs a physical tile: --tile ROWSxCOLS, or --hw with a "
                           "preset whose fabric.stream_tile is set (hdl-like)")
    size = load(hw).fabric.stream_tile
    if not size:
        raise RewriteError(f"the hardware {hw} sets no fabric.stream_tile: give --tile "
                           "ROWSxCOLS")
    return size, size
