"""Elaboration of calls: an operator call becomes one `OpNode` (its arguments bound to the
operator's parameters and checked, its attributes evaluated), a function argument a
`FnValue`, and a call of a `graph` an instance of its body."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from stepc.codes import (
    BAD_ARGUMENT,
    MISPLACED_ARGUMENT,
    MISSING_ARGUMENT,
    PROGRAM_TOO_LARGE,
    RECURSIVE_GRAPH,
    UNASSIGNED_ELEMENT,
    UNKNOWN_OPERATOR,
    UNKNOWN_PARAMETER,
    UNKNOWN_TYPE_OR_ROLE,
)
from stepc.diagnostics import did_you_mean
from stepc.grammar import ast
from stepc.graph.draft import ARRAY_OUTPUT_OPS, Draft
from stepc.graph.expr import INT_BUILTINS
from stepc.graph.limits import MAX_CONSUMERS, Abort
from stepc.graph.program import Cluster, TypeAnnotation
from stepc.graph.scope import Entry, GraphVal, Pending, Scope, StreamVal, kind_word
from stepc.graph.values import Evaluator
from stepc.ops import OPS
from stepc.ops.base import COMMON_PARAMS, STREAM, STREAMS, VARSTREAMS, FnValue, TensorRef
from stepc.source import Span
from stepc.types import DTYPE_BYTES

_KIND_EXPECT = {
    "int": "an integer", "ints": "a list of integers", "bool": "true or false",
    "str": "a string", "dtype": "an element type (bf16, f16, f32, i32, u32, u64, bool)",
    "fn": "a function", "init": "an initialiser (zero, empty, ...)", "tensor": "a tensor",
    "type": "a stream type", "int_or_ints": "an integer or a list of integers",
    STREAM: "a stream", STREAMS: "a list of streams", VARSTREAMS: "a stream",
}

# a parameter's argument: its expression and span (a variadic parameter's first), and every
# argument given for the parameter (a variadic one takes the positional ones left)
BoundArg = tuple[ast.Expr, Span, list[ast.Arg]]


class Calls:
    """The values of calls: operator calls become nodes of the `Draft`, graph calls run
    their bodies through `run_block` (the `Elaborator`'s statements)."""

    def __init__(self, draft: Draft, evaluator: Evaluator,
                 run_block: Callable[[Sequence, Scope], None]):
        self.draft, self.evaluator, self.run_block = draft, evaluator, run_block
        self.graph_stack: list[str] = []  # graphs being instantiated (recursion check)

    def call(self, e: ast.Call, scope: Scope, name_hint: str | None = None,
             anonymous: bool = False) -> Any:
        if e.func in OPS:
            return self.op_call(e, scope, name_hint)
        entry = scope.lookup(e.func)
        if entry is not None and isinstance(entry.value, GraphVal):
            entry.used = True
            return self.graph_call(e, entry.value, scope, name_hint)
        if e.func in INT_BUILTINS:
            return self.evaluator.eval_int(e, scope)
        self.reference_args(e, scope)
        if entry is not None:
            raise self.draft.error(UNKNOWN_OPERATOR,
                                   f"`{e.func}` is {kind_word(entry.value)}, not an "
                                   "operator or graph", e.func_span)
        raise self.draft.error(UNKNOWN_OPERATOR, f"unknown operator `{e.func}`" + did_you_mean(
            e.func, list(OPS) + _graph_names(scope)), e.func_span)

    def reference_args(self, e: ast.Call, scope: Scope) -> None:
        """The arguments of a call that cannot be made still count as uses of their streams."""
        for a in e.args:
            v = a.value
            while isinstance(v, ast.Index):
                v = v.base
            if isinstance(v, ast.Name):
                entry = scope.lookup(v.name)
                if entry is not None:
                    entry.used = True
                    self.evaluator.referenced(entry.value)

    def bind_args(self, e: ast.Call, params: tuple | list, what: str) -> dict[str, BoundArg]:
        """Match positional and keyword args to params; returns name -> (ast value, span,
        its arguments)."""
        out: dict[str, BoundArg] = {}
        names = [p.name for p in params]
        pos = [a for a in e.args if a.name is None]
        kw = [(a.name, a) for a in e.args if a.name is not None]
        seen_kw = False
        for a in e.args:
            if a.name is not None:
                seen_kw = True
            elif seen_kw:
                raise self.draft.error(MISPLACED_ARGUMENT,
                                       "positional argument after keyword arguments", a.span)
        positional = [p for p in params if getattr(p, "kind", None) != "type"
                      and not any(p is c for c in COMMON_PARAMS)]
        i = 0
        for p in positional:
            if i >= len(pos):
                break
            if getattr(p, "kind", None) == VARSTREAMS:
                out[p.name] = (pos[i].value, pos[i].span, pos[i:])
                i = len(pos)
                break
            out[p.name] = (pos[i].value, pos[i].span, [pos[i]])
            i += 1
        if i < len(pos):
            raise self.draft.error(MISPLACED_ARGUMENT,
                                   f"{what} takes at most {i} positional argument"
                                   f"{'s' if i != 1 else ''}, found {len(pos)}", pos[i].span)
        for name, a in kw:
            if name not in names:
                raise self.draft.error(UNKNOWN_PARAMETER, f"{what} has no parameter `{name}`"
                                       + did_you_mean(name, names), a.span)
            if name in out:
                raise self.draft.error(MISPLACED_ARGUMENT,
                                       f"parameter `{name}` is given twice", a.span)
            out[name] = (a.value, a.span, [a])
        return out

    def op_call(self, e: ast.Call, scope: Scope, name_hint: str | None) -> Any:
        spec = OPS[e.func]
        if spec.external:
            raise self.draft.error(BAD_ARGUMENT, "external streams are declared with "
                                            '`stream NAME : TYPE = external("name")`', e.span)
        args = self.bind_args(e, spec.all_params, spec.name)
        attrs: dict[str, Any] = {}
        arg_spans: dict[str, Span] = {}
        stream_inputs: list[tuple[str, int | None, Any, Span]] = []
        failed = False
        for p in spec.all_params:
            if p.name not in args:
                if p.required:
                    self.draft.bag.error(MISSING_ARGUMENT, f"{spec.name} needs `{p.name}=` "
                                         f"({p.doc or _KIND_EXPECT[p.kind]})", e.span)
                    failed = True
                elif not p.is_stream:
                    attrs[p.name] = p.default
                continue
            val_ast, span, given = args[p.name]
            arg_spans[p.name] = span
            try:
                if p.kind == STREAM:
                    v = self.first_output(self.evaluator.value(val_ast, scope))
                    self.expect_stream(v, spec.name, p.name, span)
                    stream_inputs.append((p.name, None, v, span))
                elif p.kind in (STREAMS, VARSTREAMS):
                    if p.kind == STREAMS:
                        vs = self.evaluator.value(val_ast, scope)
                        if isinstance(vs, tuple):
                            vs = list(vs)
                        if not isinstance(vs, list):
                            raise self.draft.error(BAD_ARGUMENT,
                                                   f"{spec.name} `{p.name}` expects a list "
                                                   f"of streams, found {kind_word(vs)}", span)
                        spans = [i.span for i in val_ast.items] \
                            if isinstance(val_ast, ast.ListLit) else [span] * len(vs)
                    else:
                        vs = [self.first_output(self.evaluator.value(a.value, scope))
                              for a in given]
                        spans = [a.span for a in given]
                    for k, (v, sp) in enumerate(zip(vs, spans, strict=True)):
                        if v is None and p.kind == STREAMS:
                            what = f"`{val_ast.name}[{k}]`" if isinstance(val_ast, ast.Name) \
                                else f"element [{k}] of the list"
                            raise self.draft.error(UNASSIGNED_ELEMENT,
                                                   f"{what} is never assigned (passed to "
                                                   f"{spec.name} `{p.name}`)", sp)
                        self.expect_stream(v, spec.name, p.name, sp)
                        stream_inputs.append((p.name, k, v, sp))
                else:
                    attrs[p.name] = self.attr_value(val_ast, p, spec.name, scope, span)
            except Abort:
                failed = True
        if failed:
            raise Abort()
        if isinstance(attrs.get("consumers"), int) and attrs["consumers"] > MAX_CONSUMERS:
            raise self.draft.error(PROGRAM_TOO_LARGE,
                                   f"{spec.name} with {attrs['consumers']:,} consumers: at "
                                   f"most {MAX_CONSUMERS:,} are allowed", arg_spans["consumers"])
        name = name_hint or self.anon_name(spec.name, e.span, scope)
        node = self.draft.new_node(spec.name, name, scope, e.span, e.func_span, attrs,
                                   [(pn, k) for pn, k, _, _ in stream_inputs], arg_spans)
        for slot, (_, _, v, sp) in enumerate(stream_inputs):
            self.draft.edges.append((v, node.name, slot, sp))
        n_out = len(node.outputs)
        vals = [StreamVal(node.name, i, node.port_label(i)) for i in range(n_out)]
        if spec.name in ARRAY_OUTPUT_OPS:
            return vals
        if n_out == 0:
            return None
        return tuple(vals) if n_out > 1 else vals[0]

    def first_output(self, v: Any) -> Any:
        """A multi-output call used as one stream stands for its first output."""
        if isinstance(v, tuple) and v and all(isinstance(x, StreamVal) for x in v):
            self.draft.nodes[v[0].node].discarded.update(x.port for x in v[1:])
            return v[0]
        return v

    def expect_stream(self, v: Any, op: str, param: str, span: Span) -> None:
        if not isinstance(v, (StreamVal, Pending)):
            raise self.draft.error(BAD_ARGUMENT,
                                   f"{op} `{param}` expects a stream, found {kind_word(v)}",
                                   span)

    def anon_name(self, op: str, span: Span, scope: Scope) -> str:
        base = f"{scope.prefix}{op}@{span.line}"
        name = base + scope.suffix
        if name in self.draft.nodes:
            name = f"{base}:{span.col}{scope.suffix}"
        return name

    def attr_value(self, e: ast.Expr, p, op: str, scope: Scope, span: Span) -> Any:
        kind = p.kind
        if kind in ("fn", "init"):
            if isinstance(e, ast.Name):
                return FnValue(e.name, (), e.span)
            if isinstance(e, ast.Call):
                return self.fn_value(e, scope)
            raise self.draft.error(BAD_ARGUMENT,
                                   f"{op} `{p.name}` expects {_KIND_EXPECT[kind]}, found "
                                   f"{kind_word(self.evaluator.value(e, scope))}", span)
        if kind == "dtype":
            if isinstance(e, ast.Name) and e.name in DTYPE_BYTES:
                return e.name
            if isinstance(e, ast.Name):
                raise self.draft.error(UNKNOWN_TYPE_OR_ROLE, f"unknown element type `{e.name}`"
                                       + did_you_mean(e.name, DTYPE_BYTES), e.span)
            raise self.draft.error(BAD_ARGUMENT,
                                   f"{op} `{p.name}` expects {_KIND_EXPECT[kind]}", span)
        v = self.evaluator.value(e, scope)
        ok = {
            "int": lambda x: isinstance(x, int) and not isinstance(x, bool),
            "ints": lambda x: isinstance(x, list) and all(
                isinstance(i, int) and not isinstance(i, bool) for i in x),
            "int_or_ints": lambda x: (isinstance(x, int) and not isinstance(x, bool)) or (
                isinstance(x, list) and all(isinstance(i, int) for i in x)),
            "bool": lambda x: isinstance(x, bool),
            "str": lambda x: isinstance(x, str),
            "tensor": lambda x: isinstance(x, TensorRef),
        }[kind](v)
        if not ok:
            raise self.draft.error(BAD_ARGUMENT,
                                   f"{op} `{p.name}` expects {_KIND_EXPECT[kind]}, found "
                                   f"{kind_word(v)}", span)
        low = getattr(p, "minimum", None)
        if low is not None and any(i < low for i in (v if isinstance(v, list) else [v])):
            raise self.draft.error(BAD_ARGUMENT, f"{op} `{p.name}` must be >= {low}, found {v}"
                                   + (f" (leave it out to take the hardware's {p.hw})"
                                      if p.hw else ""), span)
        return v

    def fn_value(self, e: ast.Call, scope: Scope, allowed=None) -> FnValue:
        kwargs = []
        for a in e.args:
            if a.name is None:
                raise self.draft.error(MISPLACED_ARGUMENT,
                                       f"arguments of `{e.func}` must be named "
                                       f"(`{e.func}(name=value)`)", a.span)
            if allowed is not None and a.name not in allowed:
                raise self.draft.error(UNKNOWN_PARAMETER, f"`{e.func}` has no parameter `{a.name}`"
                                       + did_you_mean(a.name, allowed), a.span)
            v = self.evaluator.value(a.value, scope)
            if not isinstance(v, (int, bool, str)):
                raise self.draft.error(BAD_ARGUMENT,
                                       f"argument `{a.name}` of `{e.func}` must be an "
                                       f"integer, boolean or string, found {kind_word(v)}",
                                       a.span)
            kwargs.append((a.name, v))
        return FnValue(e.func, tuple(kwargs), e.span)

    def graph_call(self, e: ast.Call, g: GraphVal, scope: Scope, name_hint: str | None) -> Any:
        d = g.definition
        if d.name in self.graph_stack:
            raise self.draft.error(RECURSIVE_GRAPH,
                                   f"graph `{d.name}` instantiates itself (through "
                                   + " -> ".join(self.graph_stack + [d.name]) + "); recursion is "
                                   "not allowed", e.span)
        args = self.bind_args(e, list(d.params), f"graph `{d.name}`")
        inst = name_hint or self.anon_name(d.name, e.span, scope)
        body = Scope(g.scope, inst + ".", "",
                     scope.cluster + (Cluster("graph", inst, f"{d.name} {inst}", d.name),))
        body.has_return = False
        for p in d.params:
            if p.name in args:
                v = self.evaluator.value(args[p.name][0], scope)
            elif p.default is not None:
                v = self.evaluator.value(p.default, g.scope)
            else:
                raise self.draft.error(MISSING_ARGUMENT,
                                       f"graph `{d.name}` needs argument `{p.name}`", e.span)
            if p.type is not None and isinstance(v, StreamVal) and \
                    not self.evaluator.mentions_poison(p.type, g.scope):
                # the parameter's annotation is checked on the producing port
                node = self.draft.nodes[v.node]
                node.annotations.setdefault(v.port, []).append(
                    TypeAnnotation(p.type, g.scope.int_env()))
            body.names[p.name] = Entry(v, "param" if isinstance(v, int) else "value", p.span,
                                       used=True)
        self.graph_stack.append(d.name)
        errors = len(self.draft.bag.errors)
        try:
            self.run_block(d.body, body)
        finally:
            self.graph_stack.pop()
        if body.returned is None and len(self.draft.bag.errors) > errors:
            raise Abort()  # the body's errors are reported; its result is unusable
        return body.returned


def _graph_names(scope: Scope) -> list[str]:
    """The names of the graphs `scope` sees."""
    names = []
    for name in scope.visible():
        entry = scope.lookup(name)
        if entry is not None and isinstance(entry.value, GraphVal):
            names.append(name)
    return names
