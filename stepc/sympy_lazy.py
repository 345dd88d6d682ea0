"""One import sympy makes needlessly, deferred until something needs it.

Every `sympy.Add` of more than one term runs `from sympy.tensor.tensor import TensExpr,
TensAdd` (for an isinstance test), and loading that module loads `sympy.combinatorics`,
which builds the Platonic solids' permutation groups: ~0.25 s, a fifth of `stepc analyze`.
No tensor expression can exist before `sympy.tensor.tensor` is loaded, so until then a
stand-in module answers sympy's Add with a class nothing is an instance of; any other
request for the module's contents (a user's script using tensors) loads the real module,
which replaces the stand-in.
"""

from __future__ import annotations

import importlib
import sys
import types

NAME = "sympy.tensor.tensor"
_ASKER = "sympy.core.add"  # the only caller answered without loading the real module
_ANSWERED = ("TensExpr", "TensAdd")


class _NoTensor:
    """A class with no instances: the tensor classes before any tensor can exist."""


class _Deferred(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):  # the import machinery probing (`__path__`, ...)
            raise AttributeError(name)
        if name in _ANSWERED and sys._getframe(1).f_globals.get("__name__") == _ASKER:
            return _NoTensor
        if sys.modules.get(NAME) is self:
            del sys.modules[NAME]
        return getattr(importlib.import_module(NAME), name)


def defer_tensor_module() -> None:
    """Install the stand-in, unless the real module is already loaded."""
    if NAME not in sys.modules:
        sys.modules[NAME] = _Deferred(NAME)
