"""Exact evaluation of a cost formula whose every symbol has a value, in Python integers and
fractions instead of sympy (a trace binds every dim: 10,000 formulas in milliseconds).

`value` returns None where it cannot be sure to give what sympy would (a symbol without a
value, a function it does not know, a float, a division by zero); the caller then
substitutes with sympy. Every part of a formula is evaluated (no short cut past a branch
or a condition), so a value means every symbol had one.
"""

from __future__ import annotations

import math
import operator
from fractions import Fraction

import sympy

Exact = int | Fraction

_RELATIONS = {sympy.StrictGreaterThan: operator.gt, sympy.GreaterThan: operator.ge,
              sympy.StrictLessThan: operator.lt, sympy.LessThan: operator.le,
              sympy.Equality: operator.eq, sympy.Unequality: operator.ne}


class _Unsupported(Exception):
    """A formula outside what `value` evaluates exactly."""


def number(v: sympy.Basic) -> Exact | None:
    """A sympy rational as an int or a Fraction (None for anything else)."""
    if isinstance(v, sympy.Integer):
        return int(v)
    if isinstance(v, sympy.Rational):
        return Fraction(int(v.p), int(v.q))
    return None


def as_sympy(x: Exact) -> sympy.Rational:
    """An int or a Fraction back as a sympy Integer or Rational."""
    if isinstance(x, Fraction):
        return sympy.Rational(x.numerator, x.denominator)
    return sympy.Integer(x)


def value(e: sympy.Basic, values: dict[sympy.Symbol, Exact]) -> Exact | None:
    """`e` with `values` for its symbols, exactly, or None (see the module's docstring)."""
    try:
        return _eval(e, values)
    except (_Unsupported, KeyError, ZeroDivisionError):
        return None


def _eval(e: sympy.Basic, values: dict) -> Exact:
    if e.is_Symbol:
        return values[e]
    x = number(e)
    if x is not None:
        return x
    if isinstance(e, sympy.Add):
        return sum((_eval(a, values) for a in e.args), 0)
    if isinstance(e, sympy.Mul):
        out: Exact = 1
        for a in e.args:
            out *= _eval(a, values)
        return out
    if isinstance(e, sympy.Pow) and isinstance(e.exp, sympy.Integer):
        base, n = _eval(e.base, values), int(e.exp)
        return base ** n if n >= 0 else Fraction(1) / Fraction(base) ** -n
    if isinstance(e, sympy.ceiling):
        return math.ceil(_eval(e.args[0], values))
    if isinstance(e, sympy.floor):
        return math.floor(_eval(e.args[0], values))
    if isinstance(e, (sympy.Max, sympy.Min)):
        pick = max if isinstance(e, sympy.Max) else min
        return pick(_eval(a, values) for a in e.args)
    if isinstance(e, sympy.Piecewise):
        branches = [(_eval(expr, values), _truth(cond, values)) for expr, cond in e.args]
        for x, holds in branches:
            if holds:
                return x
    raise _Unsupported(e)


def _truth(c: sympy.Basic, values: dict) -> bool:
    if c is sympy.true:
        return True
    if c is sympy.false:
        return False
    rel = _RELATIONS.get(type(c))
    if rel is not None:
        return rel(_eval(c.lhs, values), _eval(c.rhs, values))
    if isinstance(c, sympy.And):
        return all([_truth(a, values) for a in c.args])
    if isinstance(c, sympy.Or):
        return any([_truth(a, values) for a in c.args])
    if isinstance(c, sympy.Not):
        return not _truth(c.args[0], values)
    raise _Unsupported(c)
