"""Stream-type annotations: converting written types and matching them against inferred ones.

A name in an annotation that is neither a param nor a known symbol names the inferred dim
(when that dim is a bare symbol introduced by an operator), so users can call `D_0` what a
Partition produced: `rows : Strm<Tile<bf16, [1, 64]>, 1>[N0, 1] = ...`.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from stepc.codes import ANNOTATION_MISMATCH, CANNOT_NAME_DIM, UNKNOWN_TYPE_OR_ROLE
from stepc.grammar import ast
from stepc.graph.expr import ExprError, dim_symbol, evaluate
from stepc.graph.program import TypeAnnotation
from stepc.ops.base import sanitize
from stepc.sympy_lazy import dim
from stepc.types import (
    DTYPE_BYTES,
    Buffer,
    Scalar,
    Select,
    StreamType,
    SymbolTable,
    Tile,
    Tuple,
    equal,
    fmt_dim,
)

if TYPE_CHECKING:
    import sympy
else:
    from stepc.sympy_lazy import sympy


class AnnotationError(Exception):
    def __init__(self, code: str, message: str, span):
        super().__init__(message)
        self.code, self.message, self.span = code, message, span


_ANY = object()  # a `?` dim


class Annotator:
    def __init__(self, symbols: SymbolTable):
        self.symbols = symbols
        self.cache: dict[TypeAnnotation, StreamType] = {}
        self.unproved: list[str] = []  # equalities sympy could not decide during `match`

    # ------------------------------------------------------------ evaluation
    def _dim(self, d, env: dict, new_names: set, origin: str | None, span):
        if isinstance(d, ast.UnknownDim):
            if origin is None:
                return _ANY
            return self.symbols.fresh(f"{sanitize(origin)}_d", "dynamic", origin, span,
                                      "unknown dim of a declared stream")

        def resolve(name: str, sp):
            if name in env:
                return env[name]
            if self.symbols.get(name) is not None:
                return self.symbols.get(name)
            new_names.add(name)
            return dim_symbol(name)
        try:
            return dim(evaluate(d, resolve, symbolic=True))
        except ExprError as e:
            raise AnnotationError(e.code, e.message, e.span) from None

    def _dtype(self, name: str, span) -> str:
        if name not in DTYPE_BYTES:
            near = difflib.get_close_matches(name, list(DTYPE_BYTES), n=1)
            hint = f" (did you mean `{near[0]}`?)" if near else ""
            raise AnnotationError(UNKNOWN_TYPE_OR_ROLE,
                                  f"unknown element type `{name}`{hint}", span)
        return name

    def _elem(self, e, env, new_names, origin, span):
        if isinstance(e, ast.TileTypeAst):
            return ("tile", self._dtype(e.dtype, e.dtype_span),
                    self._dim(e.rows, env, new_names, origin, span),
                    self._dim(e.cols, env, new_names, origin, span))
        if isinstance(e, ast.BufferTypeAst):
            return ("buffer", self._elem(e.tile, env, new_names, origin, span),
                    tuple(self._dim(d, env, new_names, origin, span) for d in e.dims))
        if isinstance(e, ast.SelectTypeAst):
            n = self._dim(e.n, env, new_names, None, span)
            if not (n.is_Integer and n > 0):
                raise AnnotationError(ANNOTATION_MISMATCH,
                                      f"selector width must be a positive integer, "
                                               f"found {n}", e.n.span)
            return ("select", e.kind, int(n))
        if isinstance(e, ast.TupleTypeAst):
            return ("tuple",) + tuple(self._elem(x, env, new_names, origin, span)
                                      for x in e.elems)
        return ("scalar", self._dtype(e.dtype, e.span))

    def parse(self, ann: TypeAnnotation, origin: str | None, span):
        env = dict(ann.env)
        new_names: set[str] = set()
        t = ann.type
        elem = self._elem(t.elem, env, new_names, origin, span)
        dims = None
        if t.dims is not None:
            dims = [self._dim(d, env, new_names, origin, span) for d in t.dims]
            if not dims:
                raise AnnotationError(ANNOTATION_MISMATCH,
                                      "a stream shape needs at least one dim", t.span)
            if t.rank is not None and t.rank != len(dims) - 1:
                raise AnnotationError(ANNOTATION_MISMATCH, f"rank {t.rank} does not match the "
                                               f"{len(dims)} dims given (rank = dims - 1)",
                                      t.span)
        return elem, t.rank, dims, new_names

    def declared(self, ann: TypeAnnotation, origin: str | None = None, span=None) -> StreamType:
        """A fully specified declared type (external and feedback streams)."""
        if ann in self.cache:
            return self.cache[ann]
        elem, _rank, dims, new_names = self.parse(ann, origin or "", span)
        for name in sorted(new_names):
            if self.symbols.get(name) is None:
                self.symbols.fresh(name, "dynamic", origin or "", span,
                                   "dim of a declared stream")
        for d in dims:
            if d.is_number and d < 0:
                raise AnnotationError(ANNOTATION_MISMATCH,
                                      f"a stream dim cannot be negative, found "
                                               f"{fmt_dim(d)}", ann.type.span)
        st = StreamType(self._build(elem, ann.type.span), tuple(dims))
        self.cache[ann] = st
        return st

    def _build(self, elem, span):
        kind = elem[0]
        if kind == "tile":
            if elem[2] is _ANY or elem[3] is _ANY:
                raise AnnotationError(ANNOTATION_MISMATCH,
                                      "declared tiles need concrete dims", span)
            return Tile(elem[1], elem[2], elem[3])
        if kind == "buffer":
            return Buffer(self._build(elem[1], span), tuple(elem[2]))
        if kind == "select":
            return Select(elem[2], elem[1])
        if kind == "tuple":
            return Tuple(tuple(self._build(x, span) for x in elem[1:]))
        return Scalar(elem[1])

    # ------------------------------------------------------------ matching
    def match(self, ann: TypeAnnotation, t: StreamType) -> list[tuple[sympy.Symbol, sympy.Expr]]:
        """Check an annotation against an inferred type; returns symbol renames it implies."""
        elem, rank, dims, _new = self.parse(ann, None, ann.type.span)
        renames: list = []
        span = ann.type.span
        self._match_elem(elem, t.elem, renames, span, t)
        if rank is not None and rank != t.rank:
            raise AnnotationError(ANNOTATION_MISMATCH,
                                  f"annotated rank {rank} but the stream has rank "
                                           f"{t.rank}: {t}", span)
        if dims is not None:
            if len(dims) != len(t.shape):
                raise AnnotationError(ANNOTATION_MISMATCH,
                                      f"annotated {len(dims)} dims but the stream "
                                               f"has {len(t.shape)}: {t}", span)
            for i, (a, b) in enumerate(zip(dims, t.shape, strict=True)):
                self._match_dim(a, b, renames, span, f"dim {len(dims) - 1 - i}", t)
        return renames

    def _match_dim(self, a, b, renames, span, what, t) -> None:
        if a is _ANY:
            return
        for old, new in renames:
            a = a.xreplace({new: old}) if isinstance(new, sympy.Symbol) else a
        unknown = [s for s in a.free_symbols if self.symbols.get(s.name) is None]
        if unknown:
            if a.is_Symbol and b.is_Symbol and self.symbols.get(b.name) is not None:
                renames.append((b, a))
                self.symbols.rename(b, a.name)
                return
            raise AnnotationError(CANNOT_NAME_DIM,
                                  f"cannot name {what} `{fmt_dim(a)}`: the inferred "
                                           f"dim is {fmt_dim(b)}, not a symbol introduced by "
                                           "an operator", span)
        verdict = equal(a, b)
        if verdict is False:
            raise AnnotationError(ANNOTATION_MISMATCH,
                                  f"annotated {what} is {fmt_dim(a)} but inferred "
                                           f"{fmt_dim(b)}: {t}", span)
        if verdict is None:
            self.unproved.append(f"cannot prove that {what} is {fmt_dim(a)} as annotated: "
                                 f"inferred {fmt_dim(b)}")

    def _match_elem(self, elem, e, renames, span, t) -> None:
        kind = elem[0]
        mismatch = AnnotationError(ANNOTATION_MISMATCH,
                                   f"annotated element type does not match the "
                                            f"inferred {e}", span)
        if kind == "tile":
            if not isinstance(e, Tile) or e.dtype != elem[1]:
                raise mismatch
            self._match_dim(elem[2], e.rows, renames, span, "tile rows", t)
            self._match_dim(elem[3], e.cols, renames, span, "tile cols", t)
        elif kind == "buffer":
            if not isinstance(e, Buffer) or len(e.shape) != len(elem[2]):
                raise mismatch
            self._match_elem(elem[1], e.tile, renames, span, t)
            for a, b in zip(elem[2], e.shape, strict=True):
                self._match_dim(a, b, renames, span, "buffer dim", t)
        elif kind == "select":
            if not isinstance(e, Select) or e.n != elem[2] or e.kind != elem[1]:
                raise mismatch
        elif kind == "tuple":
            if not isinstance(e, Tuple) or len(e.elems) != len(elem) - 1:
                raise mismatch
            for a, b in zip(elem[1:], e.elems, strict=True):
                self._match_elem(a, b, renames, span, t)
        elif not isinstance(e, Scalar) or e.dtype != elem[1]:
            raise mismatch

    # ------------------------------------------------------------ substitution
    def substitute(self, t: StreamType, mapping: dict) -> StreamType:
        return StreamType(_subst_elem(t.elem, mapping),
                          tuple(dim(d).xreplace(mapping) for d in t.shape))


def _subst_elem(e, mapping):
    if isinstance(e, Tile):
        return Tile(e.dtype, e.rows.xreplace(mapping), e.cols.xreplace(mapping))
    if isinstance(e, Buffer):
        return Buffer(_subst_elem(e.tile, mapping),
                      tuple(d.xreplace(mapping) for d in e.shape))
    if isinstance(e, Tuple):
        return Tuple(tuple(_subst_elem(x, mapping) for x in e.elems))
    return e
