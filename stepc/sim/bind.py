"""The dims a run determines: counted on its FIFOs, taken from merged tiles' inputs and
from the dims inferred for declared streams' unknown (`?`) dims, pass after pass."""

from __future__ import annotations

from functools import lru_cache

import sympy

from stepc.typecheck.checker import TypedProgram
from stepc.types import StreamType, Tile


def bind_dims(typed: TypedProgram, chans: dict, bindings: dict[str, int]) -> dict[str, sympy.Expr]:
    """The program's symbolic dims as a run determined them: `bindings` (those its data
    fixed) and those the element counts of its FIFOs (`chans`, by edge) fix."""
    counts: dict[tuple[str, int], tuple[StreamType, int, tuple[frozenset, ...]]] = {}
    for (src, port, _dst, _slot), ch in chans.items():
        st = typed.types.get((src, port))
        if st is None:
            continue
        symbols = _shape_symbols(st.shape)
        if any(symbols):
            counts[(src, port)] = (st, ch.count, symbols)
    merges, declared = _merged_tiles(typed), _declared_dims(typed)
    # streams of the same shape and count fix the same dims: the first of them does it
    pending = list({(entry[0].shape, entry[1]): entry for entry in counts.values()}.values())
    while True:  # each pass can fix dims that the next pass needs
        known = len(bindings)
        values = {sympy.Symbol(k, integer=True, nonnegative=True): v for k, v in bindings.items()}
        # a stream whose dims were all known at a pass's start can fix nothing more
        pending = [entry for entry in pending if not _bind_from_count(*entry, bindings, values)]
        for sym, dims in merges:
            _bind_largest(sym, dims, bindings, values)
        for sym, dim in declared:
            _bind_declared(sym, dim, bindings, values)
        if len(bindings) == known:
            break
    return {k: sympy.sympify(v) for k, v in bindings.items()}


@lru_cache(maxsize=8192)
def _shape_symbols(shape: tuple) -> tuple[frozenset, ...]:
    """Each dim's free symbols, worked out once per distinct shape (streams share their
    shapes, and sympy walks the whole expression on every `free_symbols`)."""
    return tuple(frozenset(dim.free_symbols) for dim in shape)


def _bind_from_count(st: StreamType, count: int, symbols: tuple[frozenset, ...],
                     bindings: dict, values: dict) -> bool:
    """A stream whose shape has one unknown symbol as a dim (`symbols`: each dim's free
    symbols): its element count fixes it (to the mean, for a ragged dim, which keeps
    cardinalities exact). True when every dim was known (in `values`) already."""
    unknown = [d for d, syms in zip(st.shape, symbols) if syms and not syms <= values.keys()]
    if len(unknown) != 1 or not unknown[0].is_Symbol or unknown[0].name in bindings:
        return not unknown
    sym = unknown[0]
    others = sympy.Mul(*[d for d in st.shape if d is not sym]).xreplace(values)
    if others.free_symbols or others == 0:
        return False
    bindings[sym.name] = sympy.Rational(count, int(others))
    return False


def _merged_tiles(typed: TypedProgram) -> list[tuple[sympy.Symbol, list[sympy.Expr]]]:
    """The tile dims that merging dynamically sized tiles creates (EagerMerge, Reassemble:
    a fresh row count), each with the same dim of the merged inputs' tiles."""
    out = []
    for name, _node in typed.program.nodes.items():
        st = typed.types.get((name, 0))
        tile = getattr(st, "elem", None)
        if not isinstance(tile, Tile) or not tile.rows.is_Symbol:
            continue
        ins = [typed.types.get((e.src, e.port)) for e in typed.program.in_edges(name)]
        rows = [t.elem.rows for t in ins if t is not None and isinstance(t.elem, Tile)]
        if len(rows) > 1 and all(r != tile.rows for r in rows):
            out.append((tile.rows, rows))
    return out


def _bind_largest(sym: sympy.Symbol, dims: list, bindings: dict, values: dict) -> None:
    """A merged tile's row count, once its inputs' are known: the largest of them, the
    tile that the buffers downstream of the merge must hold."""
    if sym.name in bindings:
        return
    known = [sympy.sympify(d).xreplace(values) for d in dims]
    if all(k.is_number for k in known):
        bindings[sym.name] = max(known)


def _declared_dims(typed: TypedProgram) -> list[tuple[sympy.Symbol, sympy.Expr]]:
    """The unknown (`?`) dims of declared streams, each with the dim inferred for it."""
    out = []
    for key, decl in typed.declared.items():
        inferred = typed.types.get(key)
        if inferred is None or len(decl.shape) != len(inferred.shape):
            continue
        pairs = list(zip(decl.shape, inferred.shape))
        if isinstance(decl.elem, Tile) and isinstance(inferred.elem, Tile):
            pairs += [(decl.elem.rows, inferred.elem.rows), (decl.elem.cols, inferred.elem.cols)]
        out += [(d, i) for d, i in pairs if d.is_Symbol and d != i]
    return out


def _bind_declared(sym: sympy.Symbol, dim, bindings: dict, values: dict) -> None:
    """A declared stream's unknown dim takes the value of the dim inferred for it."""
    if sym.name not in bindings:
        known = sympy.sympify(dim).xreplace(values)
        if known.is_number:
            bindings[sym.name] = known
