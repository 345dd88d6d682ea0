"""The simulator's table of memory models: `hbm.model` name -> the function building it.

A model's module registers its builder with `@memory_model("dram")` beside its code
(`builder(kernel, hw)` returns a `window.MemoryModel`); registering a name twice is an
error. `stepc.hw.memory.MEMORY_MODELS` holds what the configuration knows of each name.
"""

from __future__ import annotations

from collections.abc import Callable

BUILDERS: dict[str, Callable] = {}


def memory_model(name: str) -> Callable[[Callable], Callable]:
    """Register the decorated `builder(kernel, hw)` as the simulator of `hbm.model = name`."""
    def register(builder: Callable) -> Callable:
        if name in BUILDERS:
            raise ValueError(f"memory model {name} already has a builder "
                             f"({BUILDERS[name].__module__}.{BUILDERS[name].__name__})")
        BUILDERS[name] = builder
        return builder
    return register
