"""Readable forms of large symbolic costs, still exact.

A program with a loop over 128 experts has costs like `3145728*ceil(n_0/16) + ... +
3145728*ceil(n_127/16)`. `fmt_folded` prints such a sum as `Σ_{i<128} 3145728*ceil(n_i/16)`:
terms that differ only in the first index of their indexed symbols (`n_0`, `mx_3_rows`,
`xt_2_1_d'`) over a contiguous range of at least three indices become one Σ, and summands
that run over the same range share it; a summand with a second index folds again inside
(`Σ_{i<32} Σ_{j<4} xt_i_j_d'`). The families of indexed symbols, and lists of names folded
as ranges (`n_0..n_127`), are stepc.symbol_families'.
"""

from __future__ import annotations

import sympy

from stepc.symbol_families import MIN_FOLD, family
from stepc.types import DimPrinter

LETTERS = "ijklmn"


class _FoldPrinter(DimPrinter):
    depth = 0

    def _print_Add(self, expr, order=None):
        letter = LETTERS[min(self.depth, len(LETTERS) - 1)]
        groups: dict[sympy.Basic, dict[int, sympy.Basic]] = {}
        rest = []
        for term in expr.args:
            key = self._canonical(term, letter)
            if key is None or key[1] in groups.get(key[0], {}):
                rest.append(term)
            else:
                groups.setdefault(key[0], {})[key[1]] = term
        by_range: dict[tuple[int, int], list] = {}
        for summand, members in groups.items():
            idx = sorted(members)
            if len(idx) >= MIN_FOLD and idx == list(range(idx[0], idx[-1] + 1)):
                by_range.setdefault((idx[0], idx[-1] + 1), []).append(summand)
            else:
                rest.extend(members[i] for i in idx)
        sums = []
        for (lo, hi), summands in by_range.items():
            bound = f"{letter}<{hi}" if lo == 0 else f"{lo}<={letter}<{hi}"
            self.depth += 1
            try:
                body = self._print(sympy.Add(*summands))
            finally:
                self.depth -= 1
            if len(summands) > 1 and not body.startswith("Σ"):
                body = f"({body})"
            sums.append(f"Σ_{{{bound}}} {body}")
        if len(rest) > 1:
            parts = [super()._print_Add(sympy.Add(*rest, evaluate=False), order)]
        else:
            parts = [self._print(t) for t in rest]
        return " + ".join(parts + sums)

    def _canonical(self, term, letter: str) -> tuple[sympy.Basic, int] | None:
        """`_canonical(term, letter)`, rebuilt once per shape of term: terms whose trees
        are the same once their indexed symbols are renamed give the same result."""
        shape = _shape(term, letter)
        if shape is None:
            return None
        key, index = shape
        if key not in _CANONICAL:
            if len(_CANONICAL) >= MEMO_SIZE:
                _CANONICAL.clear()
            _CANONICAL[key] = _canonical(term, letter)[0]
        return _CANONICAL[key], index


MEMO_SIZE = 65536  # term shapes kept (then the memo starts over)
_CANONICAL: dict[tuple, sympy.Basic] = {}


class _MixedIndices(Exception):
    """A term whose indexed symbols differ in their first index."""


def _shape(term, letter: str) -> tuple[tuple, int] | None:
    """A hashable tree of `term` with each indexed symbol replaced by its name with the
    first index written as `letter` (and its assumptions), and that index; None where
    `_canonical` gives None. Equal trees rebuild to equal terms."""
    index = None

    def walk(e):
        nonlocal index
        if e.is_Symbol:
            f = family(e.name)
            if f is None:
                return e
            if index is None:
                index = f[1][0]
            elif f[1][0] != index:
                raise _MixedIndices
            return (f[0].format(letter, *f[1][1:]), tuple(sorted(e.assumptions0.items())))
        if not e.args:
            return e
        return (e.func, *(walk(a) for a in e.args))

    try:
        key = walk(term)
    except _MixedIndices:
        return None
    return None if index is None else ((letter, key), index)


def _canonical(term, letter: str) -> tuple[sympy.Basic, int] | None:
    """The term with the first index of its indexed symbols replaced by `letter`, and that
    index; None when it has no indexed symbol or their first indices differ."""
    subs, index = {}, None
    for s in term.free_symbols:
        f = family(s.name)
        if f is None:
            continue
        if index is not None and f[1][0] != index:
            return None
        index = f[1][0]
        name = f[0].format(letter, *f[1][1:])
        subs[s] = sympy.Symbol(name, **s.assumptions0)
    if index is None:
        return None
    return term.xreplace(subs), index


def fmt_folded(e) -> str:
    """A symbolic expression with its sums over symbol families folded into Σ."""
    return _FoldPrinter({"order": "none"}).doprint(sympy.sympify(e))

