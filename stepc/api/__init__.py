"""stepc's Python API: load, cost, simulate and draw programs, sweep them, reproduce the
paper's figures. The CLI is built on it. Anything not exported here is private.

The names load on first use, so that importing one light module of the package
(`stepc.api.arguments`, for a help text) does not load sympy and the checker."""

from __future__ import annotations

import importlib

# public name -> the module that defines it
_NAMES = {
    "Deadlock": "stepc.api.errors", "InputError": "stepc.api.errors",
    "SimulationError": "stepc.api.errors",
    "CheckReport": "stepc.api.program", "Program": "stepc.api.program",
    "Stream": "stepc.api.program", "check": "stepc.api.program",
    "compile": "stepc.api.program", "load": "stepc.api.program",
    "Cost": "stepc.api.results", "Run": "stepc.api.results",
    "apply_depths": "stepc.api.fifo",
    "hardware": "stepc.api.inputs", "hardware_presets": "stepc.api.inputs",
    "trace_arrays": "stepc.api.inputs",
    "SweepResults": "stepc.api.study", "plan_sweep": "stepc.api.study",
    "reproduce": "stepc.api.study", "sweep": "stepc.api.study",
    "Diagnostic": "stepc.diagnostics", "Note": "stepc.diagnostics",
    "Severity": "stepc.diagnostics", "StepError": "stepc.diagnostics",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str):
    if name in _NAMES:  # looked up on each use, so a test may replace it where it is defined
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'stepc.api' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
