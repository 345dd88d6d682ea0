"""Which simulator core runs: the compiled modules (`stepc/**/*.pyx`, built into the wheel by
hatch_build.py, or in a checkout by `python hatch_build.py`) when present, else the Python
ones, which give the same cycles more slowly. `STEPC_PURE_PYTHON=1` in the environment
chooses the Python core (read at each run)."""

from __future__ import annotations

import importlib
import os

PURE_PYTHON_VARIABLE = "STEPC_PURE_PYTHON"
# the compiled modules, each beside the Python code it stands in for
MODULES = ("stepc.sim._kernel", "stepc.sim._compute_machines", "stepc.sim._memory_machines",
           "stepc.sim._machines", "stepc.sim.hbm._ref_stretch", "stepc.sim.hbm._ref_pool")


def compiled(module: str):
    """The compiled module `module` (a dotted name), or None when it was not built or the
    environment asks for the Python core."""
    if os.environ.get(PURE_PYTHON_VARIABLE) == "1":
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def core_name() -> str:
    """`native` when every compiled module is built and chosen, `python` when none is, else
    the ones that are."""
    built = [m for m in MODULES if compiled(m) is not None]
    if len(built) == len(MODULES):
        return "native"
    return f"native ({', '.join(built)}), else python" if built else "python"
