"""Stream types: element types (tiles, selectors, buffers, tuples, scalars) and symbolic shapes.

A rank-N stream has shape `[D_N, ..., D_1, D_0]` (N + 1 dims, outermost first), as in the
paper. Each dim is a sympy expression: an Integer for a static dim (or a `StaticDim`, an int,
when checking without sympy: stepc.sympy_lazy), otherwise an expression over symbols.
Whether a symbol is dynamic-regular or ragged is recorded in a `SymbolTable`; by the
absorbing rule a ragged dim is always a bare ragged symbol.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeAlias

from stepc.canon import memo_renamed
from stepc.source import Span
from stepc.sympy_lazy import StaticDim, defer_tensor_module, dim, is_int, product, total

if TYPE_CHECKING:
    import sympy
else:
    from stepc.sympy_lazy import sympy

defer_tensor_module()

DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4, "u32": 4, "u64": 8, "bool": 1}
INT_DTYPES = ("i32", "u32", "u64")

Dim: TypeAlias = "sympy.Expr"


# ------------------------------------------------------------------ printing
def printed_int(n: int) -> str:
    """An integer in digits, or as its power of two when it is longer than any count (the
    size of a tensor of a thousand dims): Python refuses to print those."""
    if n.bit_length() <= PRINTED_BITS:
        return str(n)
    return f"{'-' if n < 0 else ''}~2^{abs(n).bit_length() - 1}"


@functools.cache
def _printer_class() -> type:
    """DimPrinter, defined when first needed (it is a sympy printer)."""
    from sympy.printing.str import StrPrinter

    class DimPrinter(StrPrinter):
        """Prints dims the way the paper writes them: ceil(D_0/4), (1 if D_0 > 0 else 0)."""

        def _print_ceiling(self, e):
            return f"ceil({self._print(e.args[0])})"

        def _print_floor(self, e):
            return f"floor({self._print(e.args[0])})"

        def _print_Piecewise(self, e):
            (v1, c1), (v2, _) = e.args[0], e.args[-1]
            return f"({self._print(v1)} if {self._print(c1)} else {self._print(v2)})"

        def _print_StrictGreaterThan(self, e):
            return f"{self._print(e.lhs)} > {self._print(e.rhs)}"

        def _print_Integer(self, e):
            return printed_int(int(e))

        def _print_int(self, n: int) -> str:
            return printed_int(n)

    return DimPrinter


def __getattr__(name: str) -> Any:
    """`DimPrinter` (the printer of dims, a sympy StrPrinter) is built on first use."""
    if name == "DimPrinter":
        return _printer_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _printer() -> Any:
    return _printer_class()({"order": "none"})


PRINTED_BITS = 1024  # integers longer than this print as ~2^k
_PRINTED: dict = {}  # (type, dim) -> its text: a program prints the same dims many times
PRINTED_SIZE = 65536  # dims kept (then the memo starts over)


def fmt_dim(d: Dim) -> str:
    key = (type(d), d)  # the type too: 2 == 2.0, but they print differently
    text = _PRINTED.get(key)
    if text is None:
        text = printed_int(d) if is_int(d) else _printer().doprint(d)
        if len(_PRINTED) >= PRINTED_SIZE:
            _PRINTED.clear()
        _PRINTED[key] = text
    return text


def dim_json(e) -> int | float | str | None:
    """A value in stepc's JSON documents: an int when integral, a float when numeric (None
    for NaN), else the expression as stepc prints it."""
    if is_int(e):
        return int(e)
    e = sympy.sympify(e)
    if e.is_Integer:
        return int(e)
    if e.is_number:
        return None if e == sympy.nan else float(e)
    return fmt_dim(e)


def natural_key(name: str) -> list:
    """Sort key that orders numbered names by number: n_2 before n_10 before n_100."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", name)]


def fmt_shape(shape: tuple[Dim, ...]) -> str:
    return "[" + ", ".join(fmt_dim(d) for d in shape) + "]"


# ------------------------------------------------------------------ element types
@dataclass(frozen=True)
class Tile:
    """A 2-D tile of `dtype`; rows/cols may be symbolic (dynamically sized tiles)."""

    dtype: str
    rows: Dim
    cols: Dim

    @property
    def static(self) -> bool:
        return self.rows.is_Integer and self.cols.is_Integer

    @property
    def bytes(self) -> Dim:
        return self.rows * self.cols * DTYPE_BYTES[self.dtype]

    def __str__(self) -> str:
        return f"Tile<{self.dtype}, [{fmt_dim(self.rows)}, {fmt_dim(self.cols)}]>"


@dataclass(frozen=True)
class Select:
    """A selector: multi-hot vector over `n` targets (or an index list)."""

    n: int
    kind: str = "MultiHot"

    @property
    def bytes(self) -> Dim:
        return dim(self.n)

    def __str__(self) -> str:
        return f"{self.kind}<{self.n}>"


@dataclass(frozen=True)
class Buffer:
    """A read-only reference to an on-chip buffer holding `shape` tiles of `tile`."""

    tile: Tile
    shape: tuple[Dim, ...]

    @property
    def bytes(self) -> Dim:
        return product(self.shape) * self.tile.bytes

    def __str__(self) -> str:
        return f"Buffer<{self.tile}, {fmt_shape(self.shape)}>"


@dataclass(frozen=True)
class Scalar:
    """A scalar element (for example the bool acks of RandomOffChipStore)."""

    dtype: str

    @property
    def bytes(self) -> Dim:
        return dim(DTYPE_BYTES[self.dtype])

    def __str__(self) -> str:
        return self.dtype


@dataclass(frozen=True)
class Tuple:
    """A tuple of element types (the output of Zip)."""

    elems: tuple

    @property
    def bytes(self) -> Dim:
        return total(e.bytes for e in self.elems)

    def __str__(self) -> str:
        return "(" + ", ".join(str(e) for e in self.elems) + ")"


ElemType = Tile | Select | Buffer | Scalar | Tuple


def elem_kind(e: ElemType) -> str:
    """A short word for an element type, for messages."""
    return {Tile: "tile", Select: "selector", Buffer: "buffer", Scalar: "scalar",
            Tuple: "tuple"}[type(e)]


@dataclass(frozen=True)
class StreamType:
    """A stream of `elem` with shape `[D_N, ..., D_0]` (rank N = len(shape) - 1)."""

    elem: ElemType
    shape: tuple[Dim, ...]

    @property
    def rank(self) -> int:
        return len(self.shape) - 1

    @cached_property
    def card(self) -> Dim:
        """||X||: the number of elements the stream carries (computed once per type)."""
        return product(self.shape)

    def __str__(self) -> str:
        return f"Strm<{self.elem}, {self.rank}>{fmt_shape(self.shape)}"


# ------------------------------------------------------------------ symbols
@dataclass(frozen=True)
class SymbolInfo:
    """Where a symbolic dim came from."""

    name: str
    kind: str  # "dynamic" (dynamic-regular) | "ragged" | "param"
    origin: str  # node name, or "" for user-introduced symbols
    span: Span | None
    reason: str


@dataclass
class SymbolTable:
    """All symbols of one program, by name, in creation order."""

    infos: dict[str, SymbolInfo] = field(default_factory=dict)
    symbols: dict[str, sympy.Symbol] = field(default_factory=dict)
    version: int = 0  # bumped on every new or renamed symbol

    def fresh(self, base: str, kind: str, origin: str, span: Span | None,
              reason: str) -> sympy.Symbol:
        """A new symbol named `base` (suffixed `'`, `''`... if taken)."""
        name = base
        while name in self.infos:
            name += "'"
        sym = sympy.Symbol(name, integer=True, nonnegative=True)
        self.symbols[name] = sym
        self.infos[name] = SymbolInfo(name, kind, origin, span, reason)
        self.version += 1
        return sym

    def get(self, name: str) -> sympy.Symbol | None:
        return self.symbols.get(name)

    def is_ragged(self, d: Dim) -> bool:
        return any(self.infos.get(s.name, None) is not None
                   and self.infos[s.name].kind == "ragged" for s in d.free_symbols)

    def kind_of(self, d: Dim) -> str:
        """static | dynamic | ragged, for a dim expression."""
        if not d.free_symbols:
            return "static"
        return "ragged" if self.is_ragged(d) else "dynamic"

    def rename(self, old: sympy.Symbol, new_name: str) -> sympy.Symbol:
        """Give a symbol a user-chosen name (keeps its kind and origin)."""
        info = self.infos.pop(old.name)
        self.symbols.pop(old.name)
        sym = sympy.Symbol(new_name, integer=True, nonnegative=True)
        self.symbols[new_name] = sym
        self.infos[new_name] = SymbolInfo(new_name, info.kind, info.origin, info.span,
                                          info.reason)
        self.version += 1
        return sym


def equal(a: Dim, b: Dim) -> bool | None:
    """Three-valued dim equality: True (proved), False (refuted), None (unknown)."""
    if is_int(a) and is_int(b):
        return a == b
    a, b = sympy.sympify(a), sympy.sympify(b)
    if a == b:
        return True
    if a.is_Integer and b.is_Integer:
        return False
    return _equal_symbolic(a, b)


@memo_renamed
def _equal_symbolic(a: Dim, b: Dim) -> bool | None:
    if (a - b).has(sympy.Piecewise):
        return _equal_by_cases(sympy.piecewise_fold(a - b))
    diff = sympy.expand(a - b)
    if not diff.is_number and diff.has(sympy.ceiling, sympy.floor, sympy.Piecewise, sympy.Mod,
                                       sympy.Min, sympy.Max):
        diff = sympy.simplify(diff)
    if diff == 0:
        return True
    if diff.is_number:
        return False
    nz = diff.is_zero
    if nz is not None:
        return nz
    return None


def _equal_by_cases(diff) -> bool | None:
    """diff == 0 for Promote's `(1 if D > 0 else 0)`: check each branch, knowing that in a
    branch after `D > 0` failed, the nonnegative D is 0."""
    if not isinstance(diff, sympy.Piecewise):
        return _equal_symbolic(diff, sympy.Integer(0)) if diff.free_symbols else diff == 0
    failed: dict = {}
    verdicts = []
    for expr, cond in diff.args:
        expr = sympy.sympify(expr).xreplace(failed)
        v = _equal_symbolic(expr, sympy.Integer(0)) if expr.free_symbols else expr == 0
        verdicts.append(v)
        if isinstance(cond, sympy.StrictGreaterThan) and cond.rhs == 0 and cond.lhs.is_Symbol:
            failed[cond.lhs] = sympy.Integer(0)
        elif cond is not sympy.true:
            return None
    if all(v is True for v in verdicts):
        return True
    return None


def divides(s: int, d: Dim) -> bool | None:
    """Whether static `s` divides dim `d` (three-valued)."""
    if d.is_Integer:
        return int(d) % s == 0
    return _divides_symbolic(s, d)


@memo_renamed
def _divides_symbolic(s: int, d: Dim) -> bool | None:
    if (d / s).is_integer:
        return True
    return None


def ceil_div(d: Dim, s: int) -> Dim:
    """ceiling(d / s)."""
    if type(d) is StaticDim and s:
        return StaticDim(-(-d // s))
    return _ceil_div_symbolic(d, s)


@memo_renamed
def _ceil_div_symbolic(d: Dim, s: int) -> Dim:
    """Built once per form of `d` (its evaluation asks sympy's assumptions)."""
    return sympy.ceiling(d / s)
