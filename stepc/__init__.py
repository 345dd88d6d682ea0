"""stepc: the toolchain for Streaming Tensor Programs (STeP, ASPLOS '26).

    import stepc
    prog = stepc.load("programs/swiglu.step", TB=32, TI=64)
    run = prog.simulate(hw="hdl-validation")
    results = stepc.sweep(["programs/swiglu.step"], grid={"TB": [16, 32, 64]})

The names below load on first use, so `import stepc` stays cheap (docs/api.md).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> the module that defines it
_LAZY = {
    "load": "stepc.api.program",
    "compile": "stepc.api.program",
    "Program": "stepc.api.program",
    "CheckReport": "stepc.api.program",
    "Stream": "stepc.api.program",
    "Cost": "stepc.api.results",
    "Run": "stepc.api.results",
    "SweepResults": "stepc.api.study",
    "reproduce": "stepc.api.study",
    "StepError": "stepc.diagnostics",
    "Diagnostic": "stepc.diagnostics",
    "InputError": "stepc.api.errors",
    "SimulationError": "stepc.api.errors",
    "Deadlock": "stepc.api.errors",
    "check": "stepc.api.program",
    "sweep": "stepc.api.study",
    "from_torch": "stepc.torch",  # needs the torch extra
}
# `stepc.tune` is a package that holds `tune` and its types
_PACKAGES = ("tune",)

__all__ = ["CheckReport", "Cost", "Deadlock", "Diagnostic", "InputError", "Program", "Run",
           "SimulationError", "StepError", "Stream", "SweepResults", "__version__", "check",
           "compile", "from_torch", "load", "reproduce", "sweep", "tune"]


# public names that need an extra: the extra, and the packages it installs
_EXTRAS = {"from_torch": ("torch", ("torch", "safetensors", "transformers"))}


def __getattr__(name: str):
    if name in _LAZY:
        try:
            module = importlib.import_module(_LAZY[name])
        except ModuleNotFoundError as e:
            if name not in _EXTRAS or e.name not in _EXTRAS[name][1]:
                raise
            value = _needs_extra(name, e.name, _EXTRAS[name][0])
        else:
            value = getattr(module, name)
        globals()[name] = value
        return value
    if name in _PACKAGES:
        return importlib.import_module(f"stepc.{name}")
    raise AttributeError(f"module 'stepc' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def _needs_extra(name: str, package: str, extra: str):
    """A stand-in for `name` when its extra is not installed: `from stepc import *` and
    `help(stepc)` work, and a call says what to install."""
    def missing(*args, **kwargs):
        raise ImportError(f"stepc.{name} needs {package}, which is not installed: "
                          f"pip install 'stepc[{extra}]'", name=package)
    missing.__name__ = missing.__qualname__ = name
    missing.__doc__ = f"Needs the `{extra}` extra: pip install 'stepc[{extra}]'."
    return missing
