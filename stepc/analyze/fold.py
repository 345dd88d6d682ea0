"""Readable forms of large symbolic costs, still exact.

A program with a loop over 128 experts has costs like `3145728*ceil(n_0/16) + ... +
3145728*ceil(n_127/16)`. `fmt_folded` prints such a sum as `Σ_{i<128} 3145728*ceil(n_i/16)`:
terms that differ only in the index of an indexed symbol family (`n_0`, `n_1`, ...; also
`mx_0_rows`, `xt_0_1_d'`) over a contiguous range of at least three indices become one Σ.
`fold_names` writes lists of such symbols as ranges (`n_0..n_127`).
"""

from __future__ import annotations

import re

import sympy

from stepc.types import DimPrinter, natural_key

_INDEXED = re.compile(r"^(?P<pre>[A-Za-z_]\w*?)_(?P<i>\d+)(?P<post>(?:_[A-Za-z]\w*)?'*)$")
MIN_FOLD = 3  # terms a Σ must replace


def family(name: str) -> tuple[str, int, str] | None:
    """(prefix, index, suffix) of an indexed symbol name: `n_12` -> ("n", 12, "")."""
    m = _INDEXED.match(name)
    return (m["pre"], int(m["i"]), m["post"]) if m else None


class _FoldPrinter(DimPrinter):
    def _print_Add(self, expr, order=None):
        groups: dict[sympy.Basic, dict[int, sympy.Basic]] = {}
        rest = []
        for term in expr.args:
            key = _canonical(term)
            if key is None:
                rest.append(term)
            else:
                groups.setdefault(key[0], {}).setdefault(key[1], term)
                if groups[key[0]][key[1]] is not term:  # the same index twice: keep apart
                    rest.append(term)
        sums = []
        for summand, members in groups.items():
            idx = sorted(members)
            if len(idx) >= MIN_FOLD and idx == list(range(idx[0], idx[-1] + 1)):
                bound = f"i<{idx[-1] + 1}" if idx[0] == 0 else f"{idx[0]}<=i<{idx[-1] + 1}"
                sums.append(f"Σ_{{{bound}}} {self._print(summand)}")
            else:
                rest.extend(members[i] for i in idx)
        if len(rest) > 1:
            parts = [super()._print_Add(sympy.Add(*rest, evaluate=False), order)]
        else:
            parts = [self._print(t) for t in rest]
        return " + ".join(parts + sums)


def _canonical(term) -> tuple[sympy.Basic, int] | None:
    """The term with its indexed symbols' index replaced by `i`, and that index; None when
    it has no indexed symbol or several different indices."""
    subs, index = {}, None
    for s in term.free_symbols:
        f = family(s.name)
        if f is None:
            continue
        if index is not None and f[1] != index:
            return None
        index = f[1]
        subs[s] = sympy.Symbol(f"{f[0]}_i{f[2]}", **s.assumptions0)
    if index is None:
        return None
    return term.xreplace(subs), index


_PRINTER = _FoldPrinter({"order": "none"})


def fmt_folded(e) -> str:
    """A symbolic expression with its sums over symbol families folded into Σ."""
    return _PRINTER.doprint(sympy.sympify(e))


def fold_names(names) -> list[str]:
    """Names in natural order, runs of one family written as a range: n_0..n_127."""
    out: list[str] = []
    run: list[tuple[str, tuple[str, int, str]]] = []

    def flush():
        if len(run) >= MIN_FOLD:
            out.append(f"{run[0][0]}..{run[-1][0]}")
        else:
            out.extend(n for n, _ in run)
        run.clear()

    for name in sorted(set(names), key=natural_key):
        f = family(name)
        if run and f is not None and (f[0], f[2]) == (run[-1][1][0], run[-1][1][2]) \
                and f[1] == run[-1][1][1] + 1:
            run.append((name, f))
            continue
        flush()
        if f is not None:
            run.append((name, f))
        else:
            out.append(name)
    flush()
    return out
