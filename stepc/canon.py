"""Symbol-renaming memoisation: results computed once per expression shape, not per copy.

A program's loop iterations build copies of one subgraph whose formulas differ only in
their symbols (`n_0`, `n_1`, ... per expert). A function whose result does not depend on
symbol names is computed once on the formula with its symbols renamed to canonical
placeholders, and the result is renamed back for each copy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

from stepc.sympy_lazy import is_sympy

if TYPE_CHECKING:
    import sympy
else:
    from stepc.sympy_lazy import sympy


@functools.cache
def _settled() -> tuple:
    """Rebuilt without evaluation: their evaluation (assumption queries, collapsing) already
    happened on the canonical copy, and a renaming does not change its outcome."""
    return (sympy.core.relational.Relational, sympy.logic.boolalg.BooleanFunction,
            sympy.Piecewise, sympy.ceiling, sympy.floor, sympy.Max, sympy.Min)


def rename(e, mapping: dict):
    """`e` with its symbols replaced by `mapping` (a bijection between symbols of the same
    assumptions), rebuilt without re-deciding relations."""
    if isinstance(e, tuple):
        return tuple(rename(x, mapping) for x in e)
    if not is_sympy(e):
        return e
    if not e.args:
        return mapping.get(e, e) if e.is_Symbol else e
    args = [rename(a, mapping) for a in e.args]
    if all(a is b for a, b in zip(args, e.args, strict=True)):
        return e
    if isinstance(e, _settled()):
        return e.func(*args, evaluate=False)
    return e.func(*args)


def symbols_in(exprs: list) -> set:
    """The symbols in `exprs` (their free symbols: the formulas renamed here bind none),
    each shared subexpression walked once."""
    out: set = set()
    seen: set[int] = set()
    todo = list(exprs)
    while todo:
        e = todo.pop()
        if e.is_Symbol:
            out.add(e)
        elif e.args and id(e) not in seen:
            seen.add(id(e))
            todo.extend(e.args)
    return out


def canonical(exprs: tuple) -> tuple[tuple, dict]:
    """`exprs` with their symbols renamed `_c0, _c1, ...` (in order of name), and the map
    back to the original symbols."""
    free = symbols_in([e for e in exprs if is_sympy(e)])
    fwd = {s: sympy.Symbol(f"_c{i}", **s.assumptions0)
           for i, s in enumerate(sorted(free, key=lambda s: s.name))}
    return rename(exprs, fwd), {v: k for k, v in fwd.items()}


MEMO_SIZE = 65536  # canonical forms kept per function (then the memo starts over)


def memo_renamed(fn: Callable) -> Callable:
    """`fn(*args)` computed once per canonical form of its arguments (sympy expressions and
    other hashable values); `fn` must not depend on the names of the symbols."""
    cache: dict[Hashable, object] = {}

    @functools.wraps(fn)
    def wrapper(*exprs):
        if not any(map(is_sympy, exprs)):  # no symbols to rename
            return fn(*exprs)
        key, back = canonical(exprs)
        if key not in cache:
            if len(cache) >= MEMO_SIZE:
                cache.clear()
            cache[key] = fn(*key)
        return rename(cache[key], back)

    return wrapper
