"""Elaboration of expressions: the values names and indexing denote and integer expressions;
calls are handed to stepc.graph.calls. The `Evaluator` also remembers the streams the
source names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from stepc.codes import (
    BAD_ARGUMENT,
    BAD_INDEX,
    DIVISION_BY_ZERO,
    UNASSIGNED_ELEMENT,
    UNDEFINED_NAME,
    USED_BEFORE_BOUND,
)
from stepc.diagnostics import Note, closest, did_you_mean
from stepc.grammar import ast
from stepc.graph.draft import Draft
from stepc.graph.expr import ExprError, dim_symbol, evaluate
from stepc.graph.limits import Abort
from stepc.graph.program import Tensor
from stepc.graph.scope import POISON, Pending, Scope, StreamVal, kind_word
from stepc.ops import OPS
from stepc.ops.base import TensorRef
from stepc.source import Span
from stepc.sympy_lazy import dim

if TYPE_CHECKING:
    import sympy


class CallElaborator(Protocol):
    """What expressions ask of the call elaborator (`stepc.graph.calls.Calls`)."""

    def call(self, e: ast.Call, scope: Scope, name_hint: str | None = None) -> Any: ...


class Evaluator:
    """The values of expressions in a scope, reporting into the `Draft`."""

    calls: CallElaborator  # set by the `Elaborator` once it has made the calls' elaborator

    def __init__(self, draft: Draft):
        self.draft = draft
        self.named: set[tuple[str, int]] = set()  # streams referenced by name
        self.walked_arrays: dict[int, tuple[list | tuple, int]] = {}  # see `referenced`
        self.hit_poison = False  # a statement was skipped for a failed definition

    def poisoned(self) -> Abort:
        """Abort a statement that uses a name whose definition failed (already reported)."""
        self.hit_poison = True
        return Abort()

    def mentions_poison(self, node: Any, scope: Scope) -> bool:
        """Whether an annotation names a param whose definition failed."""
        if isinstance(node, ast.Name):
            entry = scope.lookup(node.name)
            return entry is not None and entry.value is POISON
        if isinstance(node, tuple):
            return any(self.mentions_poison(x, scope) for x in node)
        if hasattr(node, "__dataclass_fields__"):
            return any(self.mentions_poison(getattr(node, f), scope)
                       for f in node.__dataclass_fields__ if f != "span")
        return False

    def mark_used(self, node: Any, scope: Scope) -> None:
        """Params named inside a type annotation count as used; a poisoned one (its
        definition failed) silently fails the statement."""
        if self.mentions_poison(node, scope):
            raise self.poisoned()
        if isinstance(node, ast.Name):
            entry = scope.lookup(node.name)
            if entry is not None:
                entry.used = True
        elif isinstance(node, tuple):
            for x in node:
                self.mark_used(x, scope)
        elif hasattr(node, "__dataclass_fields__"):
            for f in node.__dataclass_fields__:
                if f != "span":
                    self.mark_used(getattr(node, f), scope)

    # ================================================================ values
    def value(self, e: ast.Expr, scope: Scope, name_hint: str | None = None) -> Any:
        """Evaluate an expression to a run-time-independent value (int, stream, list, ...)."""
        if isinstance(e, ast.IntLit):
            return e.value
        if isinstance(e, ast.StrLit):
            return e.value
        if isinstance(e, ast.BoolLit):
            return e.value
        if isinstance(e, ast.Name):
            entry = scope.lookup(e.name)
            if entry is None:
                raise self.undefined(e.name, e.span, scope)
            entry.used = True
            v = entry.value
            self.referenced(v)
            if v is POISON:
                raise self.poisoned()
            if isinstance(v, Tensor):
                return TensorRef(v.name, v.dtype, v.shape, (), v.span)
            if isinstance(v, Pending) and v.bound is not None:
                return v.bound
            return v
        if isinstance(e, ast.ListLit):
            return [self.value(i, scope) for i in e.items]
        if isinstance(e, ast.Index):
            base = self.value(e.base, scope)
            i = self.eval_int(e.index, scope)
            if isinstance(base, TensorRef):
                if len(base.shape) <= 1:
                    raise self.draft.error(BAD_INDEX, f"tensor `{base}` has no dim left to index",
                                           e.span)
                if not 0 <= i < base.shape[0]:
                    raise self.draft.error(BAD_INDEX,
                                           f"index {i} is out of range for tensor `{base}` "
                                           f"of shape {list(base.shape)}", e.index.span)
                return TensorRef(base.name, base.dtype, base.shape[1:], base.index + (i,),
                                 base.span)
            if isinstance(base, (list, tuple)):
                if not 0 <= i < len(base):
                    what = f"`{self.text_of(e.base.span)}`" if isinstance(e.base, (
                        ast.Name, ast.Index)) else "the array"
                    valid = f"indices 0..{len(base) - 1}" if base else "it is empty"
                    raise self.draft.error(BAD_INDEX,
                                           f"index {i} is out of range for {what} (length "
                                           f"{len(base)}: {valid})", e.index.span)
                v = base[i]
                if v is POISON:
                    raise self.poisoned()
                if v is None:
                    raise self.draft.error(UNASSIGNED_ELEMENT,
                                           f"element [{i}] is never assigned", e.span)
                return v
            raise self.draft.error(BAD_INDEX, f"cannot index {kind_word(base)}", e.span)
        if isinstance(e, ast.Call):
            return self.calls.call(e, scope, name_hint=name_hint)
        return self.eval_int(e, scope)

    def referenced(self, v: Any) -> None:
        """Remember streams the source names: an unconsumed-stream warning for them would
        only repeat an error reported where they are used.

        An array of streams is walked once per length (`p[e]` in a loop names all of `p`
        in every iteration): its elements are never replaced (assigning an element twice
        is an error; only missing ones are filled in, and such an array is walked again)."""
        if isinstance(v, StreamVal):
            self.named.add((v.node, v.port))
        elif isinstance(v, (list, tuple)):
            walked = self.walked_arrays.get(id(v))
            if walked is not None and walked[0] is v and walked[1] == len(v):
                return
            for x in v:
                self.referenced(x)
            if all(isinstance(x, StreamVal) for x in v):
                self.walked_arrays[id(v)] = (v, len(v))

    def undefined(self, name: str, span: Span, scope: Scope) -> Abort:
        later = self.defined_later(name)
        if later is not None:
            return self.draft.error(USED_BEFORE_BOUND,
                                    f"`{name}` is used before it is bound; to build a "
                                    f"feedback edge declare it first with "
                                    f"`stream {name} : TYPE`", span,
                                    [Note(f"`{name}` is bound here", later)])
        options = list(scope.visible()) + list(OPS)
        for near in closest(name, options):  # a misspelled use: no cascaded warning that
            entry = scope.lookup(near)         # the stream it meant is never consumed
            if entry is not None:
                self.referenced(entry.value)
        return self.draft.error(UNDEFINED_NAME,
                                f"undefined name `{name}`" + did_you_mean(name, options),
                                span)

    def defined_later(self, name: str) -> Span | None:
        def walk(stmts):
            for s in stmts:
                if isinstance(s, ast.Binding):
                    for t in s.targets:
                        if t.name == name:
                            return t.span
                if isinstance(s, ast.ForLoop):
                    r = walk(s.body)
                    if r:
                        return r
            return None
        return walk(self.draft.main.statements)

    # ================================================================ integer expressions
    def eval_int(self, e: ast.Expr, scope: Scope) -> int:
        return int(self._eval(e, scope, symbolic=False))

    def eval_sym(self, e: ast.Expr, scope: Scope) -> sympy.Expr:
        return dim(self._eval(e, scope, symbolic=True))

    def _eval(self, e: ast.Expr, scope: Scope, symbolic: bool):
        def resolve(name: str, span: Span):
            entry = scope.lookup(name)
            if entry is not None and entry.value is POISON:
                raise self.poisoned()
            if entry is not None and isinstance(entry.value, int) \
                    and not isinstance(entry.value, bool):
                entry.used = True
                return entry.value
            if symbolic and entry is None:
                return dim_symbol(name)
            if entry is None:
                raise self.undefined(name, span, scope)
            raise self.draft.error(BAD_ARGUMENT, f"expected an integer, but `{name}` is "
                                   f"{kind_word(entry.value)}", span)
        try:
            return evaluate(e, resolve, symbolic)
        except ExprError as err:
            msg = err.message
            divisor = self.text_of(err.span)
            if err.code == DIVISION_BY_ZERO and not divisor.strip().isdigit():
                msg = f"division by zero: `{divisor}` is 0"
            raise self.draft.error(err.code, msg, err.span) from None

    def text_of(self, span: Span) -> str:
        src = self.draft.sources.get(span.file)
        if src is None or span.line != span.end_line:
            return "the divisor"
        return src.line_text(span.line)[span.col - 1: span.end_col - 1]
