"""Elaboration: AST -> Program graph.

Evaluates `param`s (with `-D` overrides), unrolls `for` loops, instantiates `graph`
definitions, resolves names, builds one `OpNode` per operator instance (named from the
source: `rows[3]`, `e[2].up`) and one `Edge` per stream use, then inserts an explicit
Broadcast wherever a stream has several consumers. Streams declared with
`stream NAME : TYPE` and bound later are feedback streams: the only way to build a cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stepc.codes import (
    ALREADY_DEFINED,
    BAD_ARGUMENT,
    IMPORT_CYCLE,
    MISSING_ARGUMENT,
    NOTHING_TO_BIND,
    PROGRAM_TOO_LARGE,
    RETURN_OUTSIDE_GRAPH,
    TOP_LEVEL_ONLY,
    UNBOUND_DECLARED_STREAM,
    UNREADABLE_FILE,
    UNUSED_PARAM,
    USED_BEFORE_BOUND,
)
from stepc.diagnostics import DiagnosticBag, Note, StepError
from stepc.grammar import ast
from stepc.graph.bindings import Binder
from stepc.graph.calls import Calls
from stepc.graph.declarations import Declarations, import_path
from stepc.graph.draft import Draft
from stepc.graph.limits import MAX_LOOP, Abort, Fatal
from stepc.graph.program import (
    Assumption,
    Cluster,
    Program,
    StreamRefTerm,
)
from stepc.graph.scope import POISON, Entry, GraphVal, Pending, Scope, StreamVal, kind_word
from stepc.graph.values import Evaluator
from stepc.source import SourceFile, Span

MAX_ITERATIONS = 1_000_000  # loop iterations of one program, nested loops included
FAILING_ITERATIONS = 16  # iterations in a row whose statements failed: the loop stops there

Loader = Callable[[str, Span], tuple[SourceFile, ast.Module]]


class Elaborator:
    """Builds a `Program` from a parsed main module: runs its statements, handing
    expressions to the `Evaluator`, calls to `Calls`, bindings to the `Binder` and
    declarations to `Declarations`, all writing into one `Draft`."""

    def __init__(self, main: ast.Module, src: SourceFile, overrides: dict[str, int],
                 loader: Loader, main_path: str | None):
        self.main, self.overrides = main, dict(overrides)
        self.loader, self.main_path = loader, main_path
        self.draft = Draft(main, src)
        self.evaluator = Evaluator(self.draft)
        self.calls = Calls(self.draft, self.evaluator, self.block)
        self.evaluator.calls = self.calls
        self.binder = Binder(self.draft, self.evaluator)
        self.declarations = Declarations(self.draft, self.evaluator, self.calls, self.binder)
        self.used_overrides: set[str] = set()
        self.imported: set[str] = set()
        self.global_scope = Scope(None)
        self.iterations = 0  # loop iterations unrolled so far
        self.aborted = 0  # statements that failed so far
        self.truncated = False  # a size limit stopped elaboration

    # ================================================================ driver
    def run(self) -> Program:
        self.draft.import_stack.append(self.main_path or self.main.name)
        try:
            self.block(self.main.statements, self.global_scope, top=True)
        except Fatal:
            self.truncated = True
        self.finish_pendings()
        for name, e in self.global_scope.names.items():
            # a statement skipped for a failed definition may have been a param's only use
            if e.kind == "param" and not e.used and not self.evaluator.hit_poison:
                self.draft.bag.warning(UNUSED_PARAM, f"parameter `{name}` is never used", e.span)
        return self.draft.build(self.evaluator.named)

    def block(self, stmts, scope: Scope, top: bool = False) -> None:
        for s in stmts:
            try:
                self.statement(s, scope, top)
            except Abort:
                self.aborted += 1
                self.poison(s, scope)
                self.mention(s, scope)

    def poison(self, s, scope: Scope) -> None:
        """Names a failed statement would define fail silently when used later."""
        if isinstance(s, (ast.Param, ast.TensorDecl, ast.StreamDecl)):
            names = [s.name]
        elif isinstance(s, ast.Binding):
            names = [t.name for t in s.targets if not t.indices and t.name != "_"]
        elif isinstance(s, ast.ForLoop):  # the arrays its body would have built
            names, scope = _bound_in(s.body), Binder.array_owner(scope)
        else:
            return
        for name in names:
            entry = scope.names.get(name)
            if entry is None:
                scope.names[name] = Entry(POISON, "value", s.span, used=True)
            elif isinstance(entry.value, Pending) and entry.value.bound is None:
                entry.value.failed = True

    def mention(self, node: Any, scope: Scope) -> None:
        """The names a failed statement uses count as used: warning that they are never
        consumed or never used would only repeat its error."""
        if isinstance(node, ast.Name):
            entry = scope.lookup(node.name)
            if entry is not None:
                entry.used = True
                self.evaluator.referenced(entry.value)
        elif isinstance(node, (tuple, list)):
            for x in node:
                self.mention(x, scope)
        elif hasattr(node, "__dataclass_fields__"):
            for f in node.__dataclass_fields__:
                if not f.endswith("span"):
                    self.mention(getattr(node, f), scope)

    # ================================================================ statements
    def statement(self, s, scope: Scope, top: bool) -> None:
        if isinstance(s, ast.Import):
            if not top:
                raise self.draft.error(TOP_LEVEL_ONLY,
                                       "`import` is only allowed at the top level", s.span)
            self.do_import(s, scope)
        elif isinstance(s, ast.Param):
            if not top or scope is not self.global_scope:
                raise self.draft.error(TOP_LEVEL_ONLY,
                                       "`param` is only allowed at the top level", s.span)
            self.do_param(s, scope)
        elif isinstance(s, ast.TensorDecl):
            self.declarations.do_tensor(s, scope)
        elif isinstance(s, ast.StreamDecl):
            self.declarations.do_stream_decl(s, scope)
        elif isinstance(s, ast.Assume):
            self.do_assume(s, scope)
        elif isinstance(s, ast.ForLoop):
            self.do_for(s, scope)
        elif isinstance(s, ast.GraphDef):
            self.binder.define(scope, s.name, GraphVal(s, scope), "graph", s.name_span)
        elif isinstance(s, ast.Return):
            if scope.has_return is None:
                raise self.draft.error(RETURN_OUTSIDE_GRAPH,
                                       "`return` is only allowed inside a `graph` body",
                                       s.span)
            vals = [self.evaluator.value(v, scope) for v in s.values]
            scope.returned = vals[0] if len(vals) == 1 else tuple(vals)
            scope.has_return = True
        elif isinstance(s, ast.Binding):
            self.binder.do_binding(s, scope)
        elif isinstance(s, ast.CallStatement):
            v = self.calls.call(s.call, scope, anonymous=True)
            if v is not None and not isinstance(v, (StreamVal, list, tuple)):
                raise self.draft.error(NOTHING_TO_BIND,
                                       f"this statement computes {kind_word(v)} and "
                                       "discards it", s.span)

    def do_import(self, s: ast.Import, scope: Scope) -> None:
        path = import_path(self.draft.import_stack[-1], s.path)
        if path in self.draft.import_stack:
            stack = self.draft.import_stack
            chain = " -> ".join(stack[stack.index(path):] + [path])
            raise self.draft.error(IMPORT_CYCLE, f"import cycle: {chain}", s.span)
        if path in self.imported:
            return
        try:
            src, module = self.loader(path, s.span)
        except StepError as e:
            self.draft.bag.extend(e.diagnostics)
            raise Abort() from None
        self.draft.sources[src.name] = src
        self.imported.add(path)
        self.draft.import_stack.append(path)
        try:
            self.block(module.statements, scope, top=True)
        finally:
            self.draft.import_stack.pop()

    def do_param(self, s: ast.Param, scope: Scope) -> None:
        prev = scope.names.get(s.name)
        if prev is not None and prev.kind == "param":
            # which value is meant is unclear: what depends on the param is not elaborated
            # (no loop unrolled to either bound), so this one error is all that is reported
            prev.value, prev.used = POISON, True
            self.draft.params.pop(s.name, None)
            self.binder.define(scope, s.name, None, "param", s.name_span)
        if s.name in self.overrides:
            value = self.overrides[s.name]
            self.used_overrides.add(s.name)
        else:
            value = self.evaluator.eval_int(s.value, scope)
        self.binder.define(scope, s.name, value, "param", s.name_span)
        self.draft.params[s.name] = value
        self.draft.param_spans[s.name] = s.name_span

    def do_for(self, s: ast.ForLoop, scope: Scope) -> None:
        lo, hi = self.evaluator.eval_int(s.start, scope), self.evaluator.eval_int(s.end, scope)
        if hi - lo > MAX_LOOP:
            raise self.draft.error(PROGRAM_TOO_LARGE,
                                   f"loop of {hi - lo:,} iterations: stepc unrolls loops "
                                   f"and allows at most {MAX_LOOP:,}", s.span)
        self.iterations += max(hi - lo, 0)
        if self.iterations > MAX_ITERATIONS:
            self.draft.error(PROGRAM_TOO_LARGE, f"the program's loops unroll to more than "
                             f"{MAX_ITERATIONS:,} iterations", s.span)
            raise Fatal()
        exported: dict[str, list] = {}
        group = f"for@{s.span.file}:{s.span.line}:{s.span.col}"
        failing = 0  # iterations in a row in which a statement failed
        for i in range(lo, hi):
            if failing == FAILING_ITERATIONS:  # the rest would repeat the same errors
                raise Abort()
            aborted = self.aborted
            it = Scope(scope, scope.prefix, f"{scope.suffix}[{i}]",
                       scope.cluster + (Cluster("loop", f"{group}#{i}", f"{s.var} = {i}",
                                                group),))
            it.has_return, it.is_loop = scope.has_return, True
            it.names[s.var] = Entry(i, "loopvar", s.span, used=True)
            self.block(s.body, it)
            failing = failing + 1 if self.aborted > aborted else 0
            if it.has_return:
                scope.returned, scope.has_return = it.returned, True
            for name, e in it.names.items():
                if name == s.var or e.kind in ("graph",):
                    continue
                exported.setdefault(name, []).append((i - lo, e))
        n = max(hi - lo, 0)
        for name, items in exported.items():
            arr: list = [None] * n
            span = items[0][1].span
            for k, e in items:
                arr[k] = e.value
            if name in scope.names:
                self.draft.bag.error(ALREADY_DEFINED, f"`{name}` is already defined in this scope",
                                     span, [Note(f"`{name}` was first defined here",
                                                 scope.names[name].span)])
                continue
            scope.names[name] = Entry(arr, "array", span, used=True)

    def do_assume(self, s: ast.Assume, scope: Scope) -> None:
        streams: list[StreamRefTerm] = []
        lhs = self.assume_term(s.lhs, scope, streams)
        rhs = self.assume_term(s.rhs, scope, streams)
        self.draft.assumptions.append(Assumption(lhs, s.op, rhs, s.span, tuple(streams)))

    def assume_term(self, e: ast.Expr, scope: Scope, streams: list) -> Any:
        if isinstance(e, ast.Call) and e.func in ("shape", "dim"):
            want = 1 if e.func == "shape" else 2
            if len(e.args) != want:
                raise self.draft.error(MISSING_ARGUMENT, f"`{e.func}` takes {want} argument"
                                       + ("s" if want > 1 else ""), e.span)
            v = self.evaluator.value(e.args[0].value, scope)
            if not isinstance(v, (StreamVal, Pending)):
                raise self.draft.error(BAD_ARGUMENT,
                                       f"`{e.func}` expects a stream, found {kind_word(v)}",
                                       e.args[0].span)
            ref = self.stream_ref(v, e.args[0].span)
            streams.append(ref)
            if e.func == "shape":
                return ("shape", ref)
            return ("dim", ref, self.evaluator.eval_int(e.args[1].value, scope))
        if isinstance(e, ast.ListLit):
            return ("dims", tuple(self.evaluator.eval_sym(i, scope) for i in e.items))
        return self.evaluator.eval_sym(e, scope)

    def stream_ref(self, v, span: Span) -> StreamRefTerm:
        if isinstance(v, Pending):
            if v.bound is None:
                raise self.draft.error(USED_BEFORE_BOUND,
                                       f"`{v.name}` is not bound yet; assume facts about it "
                                       "after its producer", span)
            v = v.bound
        return StreamRefTerm(v.node, v.port, span)

    # ================================================================ finishing
    def finish_pendings(self) -> None:
        for p in self.draft.pendings:
            if p.bound is None and not p.failed:
                self.draft.bag.error(UNBOUND_DECLARED_STREAM,
                                     f"feedback stream `{p.name}` is declared but never "
                                     "bound to a producer", p.span)


def _bound_in(stmts) -> list[str]:
    """The names statements (and the loops among them) bind."""
    out: list[str] = []
    for s in stmts:
        if isinstance(s, ast.Binding):
            out.extend(t.name for t in s.targets if t.name != "_")
        elif isinstance(s, (ast.TensorDecl, ast.StreamDecl)):
            out.append(s.name)
        elif isinstance(s, ast.ForLoop):
            out.extend(_bound_in(s.body))
    return out


def elaborate(main: ast.Module, src: SourceFile, overrides: dict[str, int] | None = None,
              loader: Loader | None = None, main_path: str | None = None
              ) -> tuple[Program | None, DiagnosticBag, set[str]]:
    """Elaborate a parsed module. Returns (program, diagnostics, -D names that matched);
    the program is None when a size limit stopped elaboration."""
    el = Elaborator(main, src, overrides or {}, loader or _no_imports, main_path)
    prog = el.run()
    return (None if el.truncated else prog), el.draft.bag, el.used_overrides


def _no_imports(path: str, span: Span):
    from stepc.diagnostics import Diagnostic, Severity
    raise StepError([Diagnostic(UNREADABLE_FILE, Severity.ERROR, f"cannot import `{path}` here",
                                span)])


__all__ = ["Program", "elaborate"]
