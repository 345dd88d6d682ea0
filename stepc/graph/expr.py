"""Integer and symbolic-dim expressions: `+ - * // % /`, ceildiv, min, max, ceil, floor.

One evaluator serves params (strict integers), tensor shapes, and stream-type annotations
and `assume` facts (where unknown names are symbolic dims).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from stepc.codes import (
    BAD_ARGUMENT,
    DIVISION_BY_ZERO,
    MISPLACED_ARGUMENT,
    MISSING_ARGUMENT,
    NOT_INTEGER,
)
from stepc.grammar import ast
from stepc.source import Span
from stepc.sympy_lazy import is_int

if TYPE_CHECKING:
    import sympy
else:
    from stepc.sympy_lazy import sympy

INT_BUILTINS = ("ceildiv", "min", "max")
DIM_BUILTINS = ("ceil", "floor")


class ExprError(Exception):
    def __init__(self, code: str, message: str, span: Span):
        super().__init__(message)
        self.code, self.message, self.span = code, message, span


def dim_symbol(name: str) -> sympy.Symbol:
    """The sympy symbol for a dim named in the source (same assumptions as fresh symbols)."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


Resolver = Callable[[str, Span], "int | sympy.Expr"]


def _integers(*values) -> bool:
    """Every value an int (not a bool): symbolic evaluation stays in integers, whose results
    equal sympy's (floor(a/b) == a // b, Mod(a, b) == a % b for integers)."""
    return all(is_int(v) for v in values)


def _apply(e: ast.BinOp, a, b, symbolic: bool):
    symbolic = symbolic and not (e.op in ("//", "%") and _integers(a, b))
    if e.op in ("//", "%", "/") and b == 0:
        raise ExprError(DIVISION_BY_ZERO, "division by zero", e.rhs.span)
    if e.op == "+":
        return a + b
    if e.op == "-":
        return a - b
    if e.op == "*":
        return a * b
    if e.op == "//":
        return sympy.floor(sympy.sympify(a) / b) if symbolic else a // b
    if e.op == "%":
        return sympy.Mod(a, b) if symbolic else a % b
    if not symbolic:
        raise ExprError(NOT_INTEGER, "`/` is not integer division: use `//` or "
                                 "`ceildiv(a, b)`", e.span)
    if _integers(a, b) and a % b == 0:
        return a // b
    return sympy.sympify(a) / b


def evaluate(e: ast.Expr, resolve: Resolver, symbolic: bool):
    """Evaluate an expression; `resolve(name, span)` gives a name's value or raises ExprError."""
    if isinstance(e, ast.IntLit):
        return e.value
    if isinstance(e, ast.Name):
        return resolve(e.name, e.span)
    if isinstance(e, ast.Neg):
        return -evaluate(e.value, resolve, symbolic)
    if isinstance(e, ast.BinOp):
        # walk the left spine iteratively: `1 + 1 + ... + 1` nests as deep as it is long
        chain = []
        while isinstance(e, ast.BinOp):
            chain.append(e)
            e = e.lhs
        acc = evaluate(e, resolve, symbolic)
        for node in reversed(chain):
            acc = _apply(node, acc, evaluate(node.rhs, resolve, symbolic), symbolic)
        return acc
    if isinstance(e, ast.Call) and e.func in INT_BUILTINS + DIM_BUILTINS:
        if any(a.name for a in e.args):
            raise ExprError(MISPLACED_ARGUMENT, f"`{e.func}` takes positional arguments", e.span)
        vals = [evaluate(a.value, resolve, symbolic) for a in e.args]
        want = 1 if e.func in DIM_BUILTINS else 2
        if len(vals) != want and not (e.func in ("min", "max") and len(vals) >= 2):
            raise ExprError(MISSING_ARGUMENT, f"`{e.func}` takes {want} argument"
                                     f"{'s' if want > 1 else ''}, found {len(vals)}", e.span)
        if e.func == "ceildiv":
            if vals[1] == 0:
                raise ExprError(DIVISION_BY_ZERO, "division by zero", e.args[1].span)
            if symbolic and not _integers(*vals):
                return sympy.ceiling(sympy.sympify(vals[0]) / vals[1])
            return -(-vals[0] // vals[1])
        if e.func in DIM_BUILTINS:
            if not symbolic:
                raise ExprError(NOT_INTEGER, f"`{e.func}` is for symbolic dims; use "
                                         "`ceildiv(a, b)` or `//`", e.span)
            if _integers(*vals):
                return vals[0]
            return (sympy.ceiling if e.func == "ceil" else sympy.floor)(vals[0])
        if symbolic and not _integers(*vals):
            return (sympy.Min if e.func == "min" else sympy.Max)(*vals)
        return (min if e.func == "min" else max)(vals)
    if isinstance(e, ast.Call):
        raise ExprError(BAD_ARGUMENT, f"expected an integer expression, found a call of "
                                 f"`{e.func}`", e.span)
    raise ExprError(BAD_ARGUMENT, "expected an integer expression", e.span)
