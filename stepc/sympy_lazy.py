"""sympy, loaded only when a program needs it (importing it costs ~0.3 s, most of a `stepc
check`).

`sympy` here is a stand-in for the module: its first attribute lookup imports sympy.
Modules on the check's path use it, so checking a program whose dims are all numbers needs
no sympy when its static dims are plain integers (`StaticDim`), as they are inside
`static_dims_as_ints()` (the `stepc check` command: it prints and exits). Everywhere else a
dim is a sympy expression, as before. `dim`, `product` and `total` build dims either way.

One import sympy makes needlessly is deferred further: every `sympy.Add` of more than one
term runs `from sympy.tensor.tensor import TensExpr, TensAdd` (for an isinstance test), and
loading that module loads `sympy.combinatorics`, which builds the Platonic solids'
permutation groups: ~0.25 s, a fifth of `stepc analyze`. No tensor expression can exist
before `sympy.tensor.tensor` is loaded, so until then a stand-in module answers sympy's Add
with a class nothing is an instance of; any other request for the module's contents (a
user's script using tensors) loads the real module, which replaces the stand-in.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import math
import sys
import types
from collections.abc import Iterable, Iterator
from typing import Any

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


# ------------------------------------------------------------------ sympy on first use
class _LazySympy:
    """The sympy module, imported at the first attribute looked up."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        module = sys.modules.get("sympy")
        if module is None:
            defer_tensor_module()
            import sympy as module
        self.__dict__.update(vars(module))  # later lookups find sympy's names directly
        return getattr(module, name)


sympy: Any = _LazySympy()


def is_sympy(e: object) -> bool:
    """Whether `e` is a sympy object (False without importing sympy when it is not loaded:
    then nothing is)."""
    module = sys.modules.get("sympy")
    return module is not None and isinstance(e, module.Basic)


# ------------------------------------------------------------------ static dims as ints
_AS_INTS = contextvars.ContextVar("static_dims_as_ints", default=False)


@contextlib.contextmanager
def static_dims_as_ints() -> Iterator[None]:
    """Inside: `dim` makes static dims `StaticDim`s, not sympy Integers (for a process that
    only checks a program and prints the result)."""
    token = _AS_INTS.set(True)
    try:
        yield
    finally:
        _AS_INTS.reset(token)


def is_int(x: object) -> bool:
    """An integer that is not a bool (sympy makes a bool a logical value, not a number): a
    Python int or a `StaticDim`."""
    return isinstance(x, int) and not isinstance(x, bool)


def dim(value: Any) -> Any:
    """`value` as a dim: a `StaticDim` for an integer inside `static_dims_as_ints()`, else
    the sympy expression of `value` (`sympy.sympify`)."""
    if is_int(value) and (type(value) is StaticDim or _AS_INTS.get()):
        return StaticDim(value)
    return sympy.sympify(value)


def product(dims: Iterable[Any]) -> Any:
    """`sympy.Mul(*dims)`, in integers when every factor is a `StaticDim`."""
    dims = tuple(dims)
    if all(type(d) is StaticDim for d in dims):
        return StaticDim(math.prod(dims))
    return sympy.Mul(*dims)


def total(dims: Iterable[Any]) -> Any:
    """`sympy.Add(*dims)`, in integers when every term is a `StaticDim`."""
    dims = tuple(dims)
    if all(type(d) is StaticDim for d in dims):
        return StaticDim(sum(dims))
    return sympy.Add(*dims)


def _integer_op(name: str, exact):
    """The arithmetic operator `name` of a `StaticDim`: `exact(a, b)` in integers when the
    other operand is an integer and `exact` answers (not None), else sympy's Integer
    operator (the result and its type as a sympy Integer would give)."""
    def op(self, other):
        if is_int(other):
            value = exact(int(self), int(other))
            if value is not None:
                return StaticDim(value)
        return getattr(sympy.Integer(int(self)), name)(other)
    op.__name__ = name
    return op


def _divided(a: int, b: int) -> int | None:
    return a // b if b and a % b == 0 else None


def _compare(name: str):
    """The comparison `name` of a `StaticDim`: in integers against an integer, else as a
    sympy Integer compares (2 == 2.0 is False in sympy)."""
    int_op = getattr(int, name)

    def op(self, other):
        if is_int(other):
            return int_op(self, other)
        if isinstance(other, (float, complex)) or is_sympy(other):
            return getattr(sympy.Integer(int(self)), name)(other)
        return NotImplemented
    op.__name__ = name
    return op


class StaticDim(int):
    """A static dim without sympy: an int that answers as a sympy Integer would (its
    attributes, and the result and type of its arithmetic); anything it does not answer
    itself, a sympy Integer of its value answers."""

    __slots__ = ()

    is_Integer = is_Rational = is_Number = is_number = is_Atom = True
    is_integer = is_rational = is_real = is_finite = is_comparable = True
    is_Symbol = is_Add = is_Mul = is_Pow = is_Float = is_Function = is_Piecewise = False
    is_Relational = is_Boolean = False
    args: tuple = ()

    @property
    def free_symbols(self) -> set:
        return set()

    @property
    def is_zero(self) -> bool:
        return self == 0

    @property
    def is_positive(self) -> bool:
        return self > 0

    @property
    def is_nonnegative(self) -> bool:
        return self >= 0

    def xreplace(self, rule: dict) -> Any:
        return rule.get(self, self)

    def _sympy_(self) -> Any:
        return sympy.Integer(int(self))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(sympy.Integer(int(self)), name)

    __add__ = _integer_op("__add__", lambda a, b: a + b)
    __radd__ = _integer_op("__radd__", lambda a, b: b + a)
    __sub__ = _integer_op("__sub__", lambda a, b: a - b)
    __rsub__ = _integer_op("__rsub__", lambda a, b: b - a)
    __mul__ = _integer_op("__mul__", lambda a, b: a * b)
    __rmul__ = _integer_op("__rmul__", lambda a, b: b * a)
    __floordiv__ = _integer_op("__floordiv__", lambda a, b: a // b if b else None)
    __rfloordiv__ = _integer_op("__rfloordiv__", lambda a, b: b // a if a else None)
    __mod__ = _integer_op("__mod__", lambda a, b: a % b if b else None)
    __rmod__ = _integer_op("__rmod__", lambda a, b: b % a if a else None)
    __truediv__ = _integer_op("__truediv__", _divided)
    __rtruediv__ = _integer_op("__rtruediv__", lambda a, b: _divided(b, a))
    __pow__ = _integer_op("__pow__", lambda a, b: a ** b if b >= 0 else None)
    __rpow__ = _integer_op("__rpow__", lambda a, b: b ** a if a >= 0 else None)
    __lt__ = _compare("__lt__")
    __le__ = _compare("__le__")
    __gt__ = _compare("__gt__")
    __ge__ = _compare("__ge__")
    __eq__ = _compare("__eq__")
    __ne__ = _compare("__ne__")
    __hash__ = int.__hash__

    def __neg__(self) -> StaticDim:
        return StaticDim(-int(self))

    def __pos__(self) -> StaticDim:
        return self

    def __abs__(self) -> StaticDim:
        return StaticDim(abs(int(self)))
