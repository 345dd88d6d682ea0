"""Families of indexed symbols and their short forms, without sympy: the symbols a loop of
128 iterations makes (`n_0`, ..., `n_127`, or `xt_2_1_d'` with two indices) share a template
(`n_{}`), and a list of them whose indices fill contiguous ranges is written as one range
(`n_0..n_127`). The types listing and the analysis's report both fold names this way.
"""

from __future__ import annotations

import functools
import itertools
import re

from stepc.types import natural_key

_INDEX = re.compile(r"(?<=_)(\d+)(?=_|'|$)")  # a numeric part of a name: n_12, xt_2_1_d'
MIN_FOLD = 3  # members a folded form must replace (a range of names, a Σ of terms)


@functools.lru_cache(maxsize=65536)
def family(name: str) -> tuple[str, tuple[int, ...]] | None:
    """(template, indices) of an indexed symbol name: `xt_2_1_d'` -> ("xt_{}_{}_d'", (2, 1))."""
    if not re.match(r"[A-Za-z_]", name):
        return None
    indices = tuple(int(m) for m in _INDEX.findall(name))
    return (_INDEX.sub("{}", name), indices) if indices else None


def fold_names(names) -> list[str]:
    """Names in natural order; the members of a family whose indices fill a box of
    contiguous ranges (at least three) are written as one range: n_0..n_127."""
    names = sorted(set(names), key=natural_key)
    fams: dict[str, list[tuple[int, ...]]] = {}
    for n in names:
        f = family(n)
        if f is not None:
            fams.setdefault(f[0], []).append(f[1])
    folded: dict[str, str] = {}
    for template, idx in fams.items():
        ranges = [sorted({i[k] for i in idx}) for k in range(len(idx[0]))]
        box = set(itertools.product(*ranges))
        if len(idx) >= MIN_FOLD and len(box) == len(idx) == len(set(idx)) and \
                all(r == list(range(r[0], r[-1] + 1)) for r in ranges):
            folded[template] = (f"{template.format(*(r[0] for r in ranges))}.."
                                f"{template.format(*(r[-1] for r in ranges))}")
    out: list[str] = []
    for n in names:
        f = family(n)
        if f is not None and f[0] in folded:
            if folded[f[0]] not in out:
                out.append(folded[f[0]])
        else:
            out.append(n)
    return out
