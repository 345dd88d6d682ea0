"""Off-chip memory models behind one interface: `issue(ctx, port, requests, per_message,
write, addr)` takes a tile's burst of requests and wakes `ctx` at the cycle its last response
is visible. `addr` describes the burst's byte addresses (`Addresses`), which a model's
`addresses` method lays out (only `dram` reads them).

- `ref` (`ref.py`): the reference simulator's channel pool, request by request (served in
  closed form or by one of the loops its `STRATEGIES` name).
- `fluid` (`fluid.py`): a bandwidth + latency server, O(1) per burst.
- `dram` (`dram.py`): HBM2/HBM3 banks, rows and buses under an FR-FCFS controller.

Each model's module registers its `from_config(kernel, hw)` as the builder of its
`hbm.model` name (`table.memory_model`); `stepc.hw.memory.MEMORY_MODELS` holds what the
configuration knows of each name. All run from the kernel's event heap only when no other
context can run, so every burst that could start at a cycle is known before that cycle is
served.
"""

from stepc.hw.config import HardwareConfig
from stepc.sim.hbm import dram, fluid, ref  # noqa: F401 (each registers its builder)
from stepc.sim.hbm.table import BUILDERS
from stepc.sim.hbm.window import Addresses, MemoryModel, MemoryStats, tiled_shape

__all__ = ["Addresses", "MemoryModel", "MemoryStats", "make_memory", "tiled_shape"]


def make_memory(kernel, hw: HardwareConfig, ref_strategy: str = "auto") -> MemoryModel:
    """The configured memory model; `ref_strategy` (one of `ref.STRATEGIES`) says how the
    `ref` model serves its windows (same cycles whichever)."""
    if ref_strategy == "auto":
        return BUILDERS[hw.hbm.model](kernel, hw)
    if hw.hbm.model != "ref":
        raise ValueError(f"ref_strategy {ref_strategy!r} applies to hbm.model = ref, "
                         f"not {hw.hbm.model}")
    return ref.from_config(kernel, hw, ref_strategy)
