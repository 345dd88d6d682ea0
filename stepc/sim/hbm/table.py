"""The simulator's table of memory models: `hbm.model` name -> the function building it.

A model's module registers its builder with `@memory_model("dram")` beside its code
(`builder(kernel, hw)` returns a `window.MemoryModel`); registering a name twice is an
error. `stepc.hw.memory.MEMORY_MODELS` holds what the configuration knows of each name.
"""

from __future__ import annotations

from collections.abc import Callable

from stepc.registry import registrar

BUILDERS: dict[str, Callable] = {}
memory_model = registrar(BUILDERS, "memory model", "a builder")
