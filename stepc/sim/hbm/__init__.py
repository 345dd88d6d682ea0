"""Off-chip memory models behind one interface: `issue(ctx, port, requests, per_message,
write, addr)` takes a tile's burst of requests and wakes `ctx` at the cycle its last response
is visible. `addr` describes the burst's byte addresses (`Addresses`); only `dram` reads it.

- `ref` (`ref.py`): the reference simulator's channel pool, request by request (served in
  closed form or by one of the loops its `STRATEGIES` name).
- `fluid` (`fluid.py`): a bandwidth + latency server, O(1) per burst.
- `dram` (`dram.py`): HBM2/HBM3 banks, rows and buses under an FR-FCFS controller.

All run from the kernel's event heap only when no other context can run, so every burst
that could start at a cycle is known before that cycle is served.
"""

from stepc.hw.config import HardwareConfig
from stepc.sim.hbm.dram import DramHbm, bank_geometry
from stepc.sim.hbm.fluid import FluidHbm
from stepc.sim.hbm.ref import RefHbm
from stepc.sim.hbm.window import Addresses, MemoryStats

__all__ = ["Addresses", "DramHbm", "bank_geometry", "FluidHbm", "MemoryStats", "RefHbm",
           "make_memory"]


def make_memory(kernel, hw: HardwareConfig, ref_strategy: str = "auto"):
    """The configured memory model; `ref_strategy` (one of `ref.STRATEGIES`) says how the
    `ref` model serves its windows (same cycles whichever)."""
    if hw.hbm.model != "ref" and ref_strategy != "auto":
        raise ValueError(f"ref_strategy {ref_strategy!r} applies to hbm.model = ref, "
                         f"not {hw.hbm.model}")
    if hw.hbm.model == "fluid":
        return FluidHbm(kernel, hw.hbm)
    if hw.hbm.model == "dram":
        return DramHbm(kernel, hw)
    return RefHbm(kernel, hw.hbm, want_first=hw.fabric.stream_tile, strategy=ref_strategy)
