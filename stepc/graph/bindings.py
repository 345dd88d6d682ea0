"""Binding statements during elaboration: `a, b = Op(...)` names an operator's outputs,
`x : TYPE = ...` annotates a stream, `out[i] = ...` builds an array element by element, and
a binding of a declared feedback stream closes its cycle."""

from __future__ import annotations

from typing import Any

from stepc.codes import (
    ALREADY_DEFINED,
    BAD_ARGUMENT,
    BAD_INDEX,
    BINDING_MISMATCH,
    NOTHING_TO_BIND,
    PROGRAM_TOO_LARGE,
)
from stepc.diagnostics import Note
from stepc.grammar import ast
from stepc.graph.draft import Draft
from stepc.graph.limits import MAX_INDEX
from stepc.graph.program import TypeAnnotation
from stepc.graph.scope import POISON, Entry, Pending, Scope, StreamVal, kind_word
from stepc.graph.values import Evaluator
from stepc.ops import OPS
from stepc.source import Span


class Binder:
    """Binds names to values in scopes: definitions, binding statements, array elements and
    feedback streams, the values computed by the `Evaluator`."""

    def __init__(self, draft: Draft, evaluator: Evaluator):
        self.draft, self.evaluator = draft, evaluator

    def define(self, scope: Scope, name: str, value: Any, kind: str, span: Span) -> None:
        prev = scope.names.get(name)
        if prev is not None:
            notes = [Note(f"`{name}` was first defined here", prev.span)] if prev.span else []
            raise self.draft.error(ALREADY_DEFINED,
                                   f"`{name}` is already defined in this scope", span, notes)
        if name in OPS:
            raise self.draft.error(ALREADY_DEFINED, f"`{name}` is the name of an operator and "
                                   "cannot be redefined", span)
        scope.names[name] = Entry(value, kind, span)

    def do_binding(self, s: ast.Binding, scope: Scope) -> None:
        if len(s.targets) > 1 and s.type is not None:
            raise self.draft.error(BINDING_MISMATCH,
                                   "a type annotation needs a single binding target", s.span)
        first = s.targets[0]
        name_hint = None if first.name == "_" else self.target_name(first, scope)
        value = self.evaluator.value(s.value, scope, name_hint=name_hint)
        if len(s.targets) == 1:
            if isinstance(value, tuple) and value and isinstance(value[0], StreamVal):
                value = value[0]  # bind the first output of a multi-output operator
            values = [value]
        else:
            if isinstance(value, (list, tuple)):
                values = list(value)
            else:
                values = [value]
            if len(values) != len(s.targets):
                self.discard(values)
                raise self.draft.error(BINDING_MISMATCH,
                                       f"{len(s.targets)} targets but the value has "
                                       f"{len(values)} output{'s' if len(values) != 1 else ''}",
                                       s.span)
        made = isinstance(s.value, ast.Call) and s.value.func in OPS
        node = self.draft.last_node if made else None
        if node is not None and len(s.targets) == 1 and isinstance(value, StreamVal):
            node.discarded.update(range(1, len(node.outputs)))
        for t, v in zip(s.targets, values, strict=True):
            if t.name == "_":
                if isinstance(v, StreamVal):
                    self.draft.nodes[v.node].discarded.add(v.port)
                continue
            if v is None:
                raise self.draft.error(NOTHING_TO_BIND,
                                       "the call has no output stream to bind", t.span)
            self.bind(t, v, scope, s.type)

    def discard(self, values) -> None:
        """Outputs of a statement that failed after its node was built are not warned about."""
        for v in values if isinstance(values, (list, tuple)) else [values]:
            if isinstance(v, StreamVal):
                self.draft.nodes[v.node].discarded.add(v.port)

    def target_name(self, t: ast.Target, scope: Scope) -> str:
        idx = "".join(f"[{self.evaluator.eval_int(i, scope)}]" for i in t.indices)
        return f"{scope.prefix}{t.name}{idx if t.indices else scope.suffix}"

    def bind(self, t: ast.Target, v: Any, scope: Scope, ann: ast.StreamTypeAst | None) -> None:
        if isinstance(v, StreamVal):
            node = self.draft.nodes[v.node]
            node.port_names.setdefault(v.port, self.target_name(t, scope))
            node.port_spans.setdefault(v.port, t.span)
            if ann is not None:
                self.evaluator.mark_used(ann, scope)
                node.annotations.setdefault(v.port, []).append(
                    TypeAnnotation(ann, scope.int_env()))
        elif ann is not None:
            raise self.draft.error(BINDING_MISMATCH,
                                   f"only streams can be annotated, found {kind_word(v)}",
                                   ann.span)
        if t.indices:
            self.assign_indexed(t, v, scope)
            return
        existing = scope.names.get(t.name)
        if existing is not None and isinstance(existing.value, Pending) \
                and existing.value.bound is None:
            if not isinstance(v, StreamVal):
                raise self.draft.error(BAD_ARGUMENT,
                                       f"feedback stream `{t.name}` must be bound to a "
                                       f"stream, found {kind_word(v)}", t.span)
            existing.value.bound = v
            self.draft.nodes[v.node].port_names[v.port] = t.name
            return
        kind = "stream" if isinstance(v, StreamVal) else "value"
        if t.name in scope.names:
            self.discard(v)
        self.define(scope, t.name, v, kind, t.span)

    def assign_indexed(self, t: ast.Target, v: Any, scope: Scope) -> None:
        idx = [self.evaluator.eval_int(i, scope) for i in t.indices]
        for i in idx:
            bad = None
            if i < 0:
                bad = self.draft.error(BAD_INDEX, f"negative index {i}", t.span)
            elif i >= MAX_INDEX:
                bad = self.draft.error(PROGRAM_TOO_LARGE,
                                       f"index {i:,} of `{t.name}`: stepc builds arrays of "
                                       f"at most {MAX_INDEX:,} elements", t.span)
            if bad is not None:
                self.discard(v)
                if scope.lookup(t.name) is None:  # later uses of the array fail silently
                    self.array_owner(scope).names[t.name] = Entry(POISON, "value", t.span,
                                                                  used=True)
                raise bad
        entry = scope.lookup(t.name)
        if entry is None:
            entry = self.array_owner(scope).names[t.name] = Entry([], "array", t.span,
                                                                  used=True)
        if not isinstance(entry.value, list):
            raise self.draft.error(BAD_INDEX,
                                   f"`{t.name}` is {kind_word(entry.value)}, not an array",
                                   t.span)
        arr = entry.value
        for depth, i in enumerate(idx):
            while len(arr) <= i:
                arr.append(None if depth == len(idx) - 1 else [])
            if depth == len(idx) - 1:
                if arr[i] is not None:
                    raise self.draft.error(ALREADY_DEFINED,
                                           f"`{t.name}{''.join(f'[{x}]' for x in idx)}` "
                                           "is assigned twice", t.span)
                arr[i] = v
            else:
                if arr[i] is None:
                    arr[i] = []
                arr = arr[i]

    @staticmethod
    def array_owner(scope: Scope) -> Scope:
        """`out[i] = ...` inside a loop builds one array in the loop's enclosing scope."""
        while scope.is_loop:
            assert scope.parent is not None  # a loop's body has the scope around the loop
            scope = scope.parent
        return scope
