"""Elaboration: AST -> Program graph.

Evaluates `param`s (with `-D` overrides), unrolls `for` loops, instantiates `graph`
definitions, resolves names, builds one `OpNode` per operator instance (named from the
source: `rows[3]`, `e[2].up`) and one `Edge` per stream use, then inserts an explicit
Broadcast wherever a stream has several consumers. Streams declared with
`stream NAME : TYPE` and bound later are feedback streams: the only way to build a cycle.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from typing import Any

import sympy

from stepc.diagnostics import DiagnosticBag, Note, StepError, closest, did_you_mean
from stepc.grammar import ast
from stepc.graph.expr import INT_BUILTINS, ExprError, dim_symbol, evaluate
from stepc.graph.program import (Assumption, Cluster, Edge, OpNode, Program, StreamRefTerm,
                                 Tensor, TypeAnnotation)
from stepc.graph.scope import (POISON, Entry, GraphVal, Pending, Scope, StreamVal,
                               kind_word)
from stepc.ops import OPS
from stepc.ops.base import (COMMON_PARAMS, STREAM, STREAMS, VARSTREAMS, FnValue,
                            TensorRef)
from stepc.source import SourceFile, Span
from stepc.types import DTYPE_BYTES

TENSOR_ROLES = ("input", "weight", "output", "scratch")
TENSOR_SOURCES = {"random": ("seed", "high"), "zeros": (), "ones": (), "arange": (),
                  "file": ("path",)}
ARRAY_OUTPUT_OPS = ("Partition", "Parallelize", "Broadcast")
EXTERNAL_GENERATOR = ("topk", "seed", "mean", "std")  # default data of externals
MAX_LOOP = 100_000  # iterations of one `for` loop
MAX_NODES = 50_000  # operator instances of one program
MAX_ITERATIONS = 1_000_000  # loop iterations of one program, nested loops included
MAX_CONSUMERS = 65_536  # outputs of one Partition, Parallelize or Broadcast
MAX_INDEX = MAX_LOOP  # elements of an array built by indexed assignments `a[i] = ...`

Loader = Callable[[str, Span], tuple[SourceFile, ast.Module]]


class _Abort(Exception):
    """Aborts evaluating one statement after its diagnostic was recorded."""


class _Fatal(Exception):
    """Stops elaboration altogether (a size limit was passed)."""


_KIND_EXPECT = {
    "int": "an integer", "ints": "a list of integers", "bool": "true or false",
    "str": "a string", "dtype": "an element type (bf16, f16, f32, i32, u32, u64, bool)",
    "fn": "a function", "init": "an initialiser (zero, empty, ...)", "tensor": "a tensor",
    "type": "a stream type", "int_or_ints": "an integer or a list of integers",
    STREAM: "a stream", STREAMS: "a list of streams", VARSTREAMS: "a stream",
}


class Elaborator:
    """Builds a `Program` from a parsed main module."""

    def __init__(self, main: ast.Module, src: SourceFile, overrides: dict[str, int],
                 loader: Loader, main_path: str | None):
        self.main, self.overrides = main, dict(overrides)
        self.loader, self.main_path = loader, main_path
        self.sources = {src.name: src}
        self.bag = DiagnosticBag()
        self.nodes: dict[str, OpNode] = {}
        self.edges: list[tuple[Any, str, int, Span]] = []  # (StreamVal|Pending, dst, slot, span)
        self.tensors: dict[str, Tensor] = {}
        self.params: dict[str, int] = {}
        self.param_spans: dict[str, Span] = {}
        self.assumptions: list[Assumption] = []
        self.pendings: list[Pending] = []
        self.used_overrides: set[str] = set()
        self.imported: set[str] = set()
        self.import_stack: list[str] = []
        self.global_scope = Scope(None)
        self.named: set[tuple[str, int]] = set()  # streams referenced by name
        self.graph_stack: list[str] = []  # graphs being instantiated (recursion check)
        self.iterations = 0  # loop iterations unrolled so far
        self.truncated = False  # a size limit stopped elaboration
        self.hit_poison = False  # a statement was skipped for a failed definition

    # ================================================================ driver
    def run(self) -> Program:
        self.import_stack.append(self.main_path or self.main.name)
        try:
            self.block(self.main.statements, self.global_scope, top=True)
        except _Fatal:
            self.truncated = True
        self.finish_pendings()
        for name, e in self.global_scope.names.items():
            # a statement skipped for a failed definition may have been a param's only use
            if e.kind == "param" and not e.used and not self.hit_poison:
                self.bag.warning("W0002", f"parameter `{name}` is never used", e.span)
        return self.build()

    def block(self, stmts, scope: Scope, top: bool = False) -> None:
        for s in stmts:
            try:
                self.statement(s, scope, top)
            except _Abort:
                self.poison(s, scope)
                self.mention(s, scope)

    def poisoned(self) -> _Abort:
        """Abort a statement that uses a name whose definition failed (already reported)."""
        self.hit_poison = True
        return _Abort()

    def poison(self, s, scope: Scope) -> None:
        """Names a failed statement would define fail silently when used later."""
        if isinstance(s, (ast.Param, ast.TensorDecl, ast.StreamDecl)):
            names = [s.name]
        elif isinstance(s, ast.Binding):
            names = [t.name for t in s.targets if not t.indices and t.name != "_"]
        elif isinstance(s, ast.ForLoop):  # the arrays its body would have built
            names, scope = _bound_in(s.body), self.array_owner(scope)
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
                self.referenced(entry.value)
        elif isinstance(node, (tuple, list)):
            for x in node:
                self.mention(x, scope)
        elif hasattr(node, "__dataclass_fields__"):
            for f in node.__dataclass_fields__:
                if not f.endswith("span"):
                    self.mention(getattr(node, f), scope)

    def error(self, code: str, message: str, span: Span | None, notes=()) -> _Abort:
        self.bag.error(code, message, span, notes)
        return _Abort()

    # ================================================================ statements
    def statement(self, s, scope: Scope, top: bool) -> None:
        if isinstance(s, ast.Import):
            if not top:
                raise self.error("E0109", "`import` is only allowed at the top level", s.span)
            self.do_import(s, scope)
        elif isinstance(s, ast.Param):
            if not top or scope is not self.global_scope:
                raise self.error("E0109", "`param` is only allowed at the top level", s.span)
            self.do_param(s, scope)
        elif isinstance(s, ast.TensorDecl):
            self.do_tensor(s, scope)
        elif isinstance(s, ast.StreamDecl):
            self.do_stream_decl(s, scope)
        elif isinstance(s, ast.Assume):
            self.do_assume(s, scope)
        elif isinstance(s, ast.ForLoop):
            self.do_for(s, scope)
        elif isinstance(s, ast.GraphDef):
            self.define(scope, s.name, GraphVal(s, scope), "graph", s.name_span)
        elif isinstance(s, ast.Return):
            if scope.has_return is None:
                raise self.error("E0111", "`return` is only allowed inside a `graph` body",
                                 s.span)
            vals = [self.value(v, scope) for v in s.values]
            scope.returned = vals[0] if len(vals) == 1 else tuple(vals)
            scope.has_return = True
        elif isinstance(s, ast.Binding):
            self.do_binding(s, scope)
        elif isinstance(s, ast.CallStatement):
            v = self.call(s.call, scope, anonymous=True)
            if v is not None and not isinstance(v, (StreamVal, list, tuple)):
                raise self.error("E0208", f"this statement computes {kind_word(v)} and "
                                          "discards it", s.span)

    def define(self, scope: Scope, name: str, value: Any, kind: str, span: Span) -> None:
        prev = scope.names.get(name)
        if prev is not None:
            notes = [Note(f"`{name}` was first defined here", prev.span)] if prev.span else []
            raise self.error("E0104", f"`{name}` is already defined in this scope", span, notes)
        if name in OPS:
            raise self.error("E0104", f"`{name}` is the name of an operator and cannot be "
                                      "redefined", span)
        scope.names[name] = Entry(value, kind, span)

    def do_import(self, s: ast.Import, scope: Scope) -> None:
        path = import_path(self.import_stack[-1], s.path)
        if path in self.import_stack:
            chain = " -> ".join(self.import_stack[self.import_stack.index(path):] + [path])
            raise self.error("E0004", f"import cycle: {chain}", s.span)
        if path in self.imported:
            return
        try:
            src, module = self.loader(path, s.span)
        except StepError as e:
            self.bag.extend(e.diagnostics)
            raise _Abort() from None
        self.sources[src.name] = src
        self.imported.add(path)
        self.import_stack.append(path)
        try:
            self.block(module.statements, scope, top=True)
        finally:
            self.import_stack.pop()

    def do_param(self, s: ast.Param, scope: Scope) -> None:
        prev = scope.names.get(s.name)
        if prev is not None and prev.kind == "param":
            # which value is meant is unclear: what depends on the param is not elaborated
            # (no loop unrolled to either bound), so this one error is all that is reported
            prev.value, prev.used = POISON, True
            self.params.pop(s.name, None)
            self.define(scope, s.name, None, "param", s.name_span)
        if s.name in self.overrides:
            value = self.overrides[s.name]
            self.used_overrides.add(s.name)
        else:
            value = self.eval_int(s.value, scope)
        self.define(scope, s.name, value, "param", s.name_span)
        self.params[s.name] = value
        self.param_spans[s.name] = s.name_span

    def do_tensor(self, s: ast.TensorDecl, scope: Scope) -> None:
        if s.dtype not in DTYPE_BYTES:
            raise self.error("E0105", f"unknown element type `{s.dtype}`"
                             + did_you_mean(s.dtype, DTYPE_BYTES), s.dtype_span)
        if s.role not in TENSOR_ROLES:
            raise self.error("E0105", f"unknown tensor role `{s.role}` (expected one of "
                             f"{', '.join(TENSOR_ROLES)})" + did_you_mean(s.role, TENSOR_ROLES),
                             s.role_span)
        shape = []
        for d in s.dims:
            v = self.eval_int(d, scope)
            if v <= 0:
                raise self.error("E0501", f"tensor dims must be positive, found {v}", d.span)
            shape.append(v)
        if not shape:
            raise self.error("E0320", f"tensor `{s.name}` needs at least one dim", s.span)
        source = None
        if s.source is not None:
            source = self.tensor_source(s.source, scope)
        elif s.role in ("input", "weight"):
            source = FnValue("random", (("seed", zlib.crc32(s.name.encode()) % 2**31),), None)
        t = Tensor(s.name, s.dtype, tuple(shape), s.role, source, s.name_span)
        self.define(scope, s.name, t, "tensor", s.name_span)
        self.tensors[s.name] = t

    def tensor_source(self, e: ast.Expr, scope: Scope) -> FnValue:
        if isinstance(e, ast.Name):
            e = ast.Call(e.name, (), e.span, e.span)
        if not isinstance(e, ast.Call) or e.func not in TENSOR_SOURCES:
            name = e.func if isinstance(e, ast.Call) else ""
            raise self.error("E0103", "unknown tensor data source"
                             + (f" `{name}`" if name else "") + " (expected "
                             + ", ".join(f"{k}(...)" for k in TENSOR_SOURCES) + ")"
                             + did_you_mean(name, TENSOR_SOURCES), e.span)
        return self.fn_value(e, scope, allowed=TENSOR_SOURCES[e.func])

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

    def do_stream_decl(self, s: ast.StreamDecl, scope: Scope) -> None:
        self.mark_used(s.type, scope)
        ann = TypeAnnotation(s.type, scope.int_env())
        if s.source is None:
            if s.type.dims is None:
                raise self.error("E0401", f"feedback stream `{s.name}` needs a full type with "
                                          "a shape: Strm<T, r>[dims]", s.type.span)
            p = Pending(s.name, ann, s.name_span)
            self.pendings.append(p)
            self.define(scope, s.name, p, "stream", s.name_span)
            return
        src = s.source
        if isinstance(src, ast.Call) and src.func == "external":
            if not src.args or src.args[0].name is not None or \
                    not isinstance(src.args[0].value, ast.StrLit):
                raise self.error("E0201", 'external streams are written `external("name")` '
                                 "(optionally with generator settings: topk=, seed=, "
                                 "mean=, std=)", src.span)
            gen = dict(self.fn_value(ast.Call("external", src.args[1:], src.span,
                                              src.func_span), scope,
                                     allowed=EXTERNAL_GENERATOR).kwargs)
            if s.type.dims is None:
                raise self.error("E0401", f"external stream `{s.name}` needs a full type with "
                                          "a shape: Strm<T, r>[dims]", s.type.span)
            node = self.new_node("External", s.name, scope, src.span, s.name_span,
                                 {"name": src.args[0].value.value, "type": ann, "gen": gen},
                                 [], {})
            v = StreamVal(node.name, 0, s.name)
            node.port_names[0], node.port_spans[0] = s.name, s.name_span
            self.define(scope, s.name, v, "stream", s.name_span)
            return
        b = ast.Binding((ast.Target(s.name, (), s.name_span),), s.type, src, s.span)
        self.do_binding(b, scope)

    def do_for(self, s: ast.ForLoop, scope: Scope) -> None:
        lo, hi = self.eval_int(s.start, scope), self.eval_int(s.end, scope)
        if hi - lo > MAX_LOOP:
            raise self.error("E0114", f"loop of {hi - lo:,} iterations: stepc unrolls loops "
                             f"and allows at most {MAX_LOOP:,}", s.span)
        self.iterations += max(hi - lo, 0)
        if self.iterations > MAX_ITERATIONS:
            self.error("E0114", f"the program's loops unroll to more than "
                       f"{MAX_ITERATIONS:,} iterations", s.span)
            raise _Fatal()
        exported: dict[str, list] = {}
        group = f"for@{s.span.file}:{s.span.line}:{s.span.col}"
        for i in range(lo, hi):
            it = Scope(scope, scope.prefix, f"{scope.suffix}[{i}]",
                       scope.cluster + (Cluster("loop", f"{group}#{i}", f"{s.var} = {i}",
                                                group),))
            it.has_return, it.is_loop = scope.has_return, True
            it.names[s.var] = Entry(i, "loopvar", s.span, used=True)
            self.block(s.body, it)
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
                self.bag.error("E0104", f"`{name}` is already defined in this scope", span,
                               [Note(f"`{name}` was first defined here", scope.names[name].span)])
                continue
            scope.names[name] = Entry(arr, "array", span, used=True)

    def do_assume(self, s: ast.Assume, scope: Scope) -> None:
        streams: list[StreamRefTerm] = []
        lhs = self.assume_term(s.lhs, scope, streams)
        rhs = self.assume_term(s.rhs, scope, streams)
        self.assumptions.append(Assumption(lhs, s.op, rhs, s.span, tuple(streams)))

    def assume_term(self, e: ast.Expr, scope: Scope, streams: list) -> Any:
        if isinstance(e, ast.Call) and e.func in ("shape", "dim"):
            want = 1 if e.func == "shape" else 2
            if len(e.args) != want:
                raise self.error("E0201", f"`{e.func}` takes {want} argument"
                                 + ("s" if want > 1 else ""), e.span)
            v = self.value(e.args[0].value, scope)
            if not isinstance(v, (StreamVal, Pending)):
                raise self.error("E0204", f"`{e.func}` expects a stream, found {kind_word(v)}",
                                 e.args[0].span)
            ref = self.stream_ref(v, e.args[0].span)
            streams.append(ref)
            if e.func == "shape":
                return ("shape", ref)
            return ("dim", ref, self.eval_int(e.args[1].value, scope))
        if isinstance(e, ast.ListLit):
            return ("dims", tuple(self.eval_sym(i, scope) for i in e.items))
        return self.eval_sym(e, scope)

    def stream_ref(self, v, span: Span) -> StreamRefTerm:
        if isinstance(v, Pending):
            if v.bound is None:
                raise self.error("E0402", f"`{v.name}` is not bound yet; assume facts about it "
                                          "after its producer", span)
            v = v.bound
        return StreamRefTerm(v.node, v.port, span)

    # ================================================================ bindings
    def do_binding(self, s: ast.Binding, scope: Scope) -> None:
        if len(s.targets) > 1 and s.type is not None:
            raise self.error("E0207", "a type annotation needs a single binding target", s.span)
        first = s.targets[0]
        name_hint = None if first.name == "_" else self.target_name(first, scope)
        value = self.value(s.value, scope, name_hint=name_hint)
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
                raise self.error("E0207", f"{len(s.targets)} targets but the value has "
                                          f"{len(values)} output{'s' if len(values) != 1 else ''}",
                                 s.span)
        node = self.last_node if isinstance(s.value, ast.Call) and s.value.func in OPS else None
        if node is not None and len(s.targets) == 1 and isinstance(value, StreamVal):
            node.discarded.update(range(1, len(node.outputs)))
        for t, v in zip(s.targets, values, strict=True):
            if t.name == "_":
                if isinstance(v, StreamVal):
                    self.nodes[v.node].discarded.add(v.port)
                continue
            if v is None:
                raise self.error("E0208", "the call has no output stream to bind", t.span)
            self.bind(t, v, scope, s.type)

    def discard(self, values) -> None:
        """Outputs of a statement that failed after its node was built are not warned about."""
        for v in values if isinstance(values, (list, tuple)) else [values]:
            if isinstance(v, StreamVal):
                self.nodes[v.node].discarded.add(v.port)

    def target_name(self, t: ast.Target, scope: Scope) -> str:
        idx = "".join(f"[{self.eval_int(i, scope)}]" for i in t.indices)
        return f"{scope.prefix}{t.name}{idx if t.indices else scope.suffix}"

    def bind(self, t: ast.Target, v: Any, scope: Scope, ann: ast.StreamTypeAst | None) -> None:
        if isinstance(v, StreamVal):
            node = self.nodes[v.node]
            node.port_names.setdefault(v.port, self.target_name(t, scope))
            node.port_spans.setdefault(v.port, t.span)
            if ann is not None:
                self.mark_used(ann, scope)
                node.annotations.setdefault(v.port, []).append(
                    TypeAnnotation(ann, scope.int_env()))
        elif ann is not None:
            raise self.error("E0207", f"only streams can be annotated, found {kind_word(v)}",
                             ann.span)
        if t.indices:
            self.assign_indexed(t, v, scope)
            return
        existing = scope.names.get(t.name)
        if existing is not None and isinstance(existing.value, Pending) \
                and existing.value.bound is None:
            if not isinstance(v, StreamVal):
                raise self.error("E0204", f"feedback stream `{t.name}` must be bound to a "
                                          f"stream, found {kind_word(v)}", t.span)
            existing.value.bound = v
            self.nodes[v.node].port_names[v.port] = t.name
            return
        kind = "stream" if isinstance(v, StreamVal) else "value"
        if t.name in scope.names:
            self.discard(v)
        self.define(scope, t.name, v, kind, t.span)

    def assign_indexed(self, t: ast.Target, v: Any, scope: Scope) -> None:
        idx = [self.eval_int(i, scope) for i in t.indices]
        for i in idx:
            bad = None
            if i < 0:
                bad = self.error("E0107", f"negative index {i}", t.span)
            elif i >= MAX_INDEX:
                bad = self.error("E0114", f"index {i:,} of `{t.name}`: stepc builds arrays of "
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
            raise self.error("E0107", f"`{t.name}` is {kind_word(entry.value)}, not an array",
                             t.span)
        arr = entry.value
        for depth, i in enumerate(idx):
            while len(arr) <= i:
                arr.append(None if depth == len(idx) - 1 else [])
            if depth == len(idx) - 1:
                if arr[i] is not None:
                    raise self.error("E0104", f"`{t.name}{''.join(f'[{x}]' for x in idx)}` "
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
            scope = scope.parent
        return scope

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
                    raise self.error("E0107", f"tensor `{base}` has no dim left to index",
                                     e.span)
                if not 0 <= i < base.shape[0]:
                    raise self.error("E0107", f"index {i} is out of range for tensor `{base}` "
                                              f"of shape {list(base.shape)}", e.index.span)
                return TensorRef(base.name, base.dtype, base.shape[1:], base.index + (i,),
                                 base.span)
            if isinstance(base, (list, tuple)):
                if not 0 <= i < len(base):
                    what = f"`{self.text_of(e.base.span)}`" if isinstance(e.base, (
                        ast.Name, ast.Index)) else "the array"
                    valid = f"indices 0..{len(base) - 1}" if base else "it is empty"
                    raise self.error("E0107", f"index {i} is out of range for {what} (length "
                                              f"{len(base)}: {valid})", e.index.span)
                v = base[i]
                if v is POISON:
                    raise self.poisoned()
                if v is None:
                    raise self.error("E0108", f"element [{i}] is never assigned", e.span)
                return v
            raise self.error("E0107", f"cannot index {kind_word(base)}", e.span)
        if isinstance(e, ast.Call):
            return self.call(e, scope, name_hint=name_hint)
        return self.eval_int(e, scope)

    def referenced(self, v: Any) -> None:
        """Remember streams the source names: an unconsumed-stream warning for them would
        only repeat an error reported where they are used."""
        if isinstance(v, StreamVal):
            self.named.add((v.node, v.port))
        elif isinstance(v, (list, tuple)):
            for x in v:
                self.referenced(x)

    def undefined(self, name: str, span: Span, scope: Scope) -> _Abort:
        later = self.defined_later(name)
        if later is not None:
            return self.error("E0402", f"`{name}` is used before it is bound; to build a "
                                       f"feedback edge declare it first with "
                                       f"`stream {name} : TYPE`", span,
                              [Note(f"`{name}` is bound here", later)])
        options = list(scope.visible()) + list(OPS)
        for near in closest(name, options):  # a misspelled use: no cascaded warning that
            entry = scope.lookup(near)         # the stream it meant is never consumed
            if entry is not None:
                self.referenced(entry.value)
        return self.error("E0101", f"undefined name `{name}`" + did_you_mean(name, options),
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
        return walk(self.main.statements)

    # ================================================================ calls
    def call(self, e: ast.Call, scope: Scope, name_hint: str | None = None,
             anonymous: bool = False) -> Any:
        if e.func in OPS:
            return self.op_call(e, scope, name_hint)
        entry = scope.lookup(e.func)
        if entry is not None and isinstance(entry.value, GraphVal):
            entry.used = True
            return self.graph_call(e, entry.value, scope, name_hint)
        if e.func in INT_BUILTINS:
            return self.eval_int(e, scope)
        self.reference_args(e, scope)
        if entry is not None:
            raise self.error("E0102", f"`{e.func}` is {kind_word(entry.value)}, not an "
                                      "operator or graph", e.func_span)
        raise self.error("E0102", f"unknown operator `{e.func}`" + did_you_mean(
            e.func, list(OPS) + [n for n in scope.visible()
                                 if isinstance(scope.lookup(n).value, GraphVal)]), e.func_span)

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
                    self.referenced(entry.value)

    def bind_args(self, e: ast.Call, params: list, what: str) -> dict[str, tuple[Any, Span]]:
        """Match positional and keyword args to params; returns name -> (ast value, span)."""
        out: dict[str, Any] = {}
        names = [p.name for p in params]
        pos = [a for a in e.args if a.name is None]
        kw = [a for a in e.args if a.name is not None]
        seen_kw = False
        for a in e.args:
            if a.name is not None:
                seen_kw = True
            elif seen_kw:
                raise self.error("E0203", "positional argument after keyword arguments", a.span)
        positional = [p for p in params if getattr(p, "kind", None) != "type"
                      and p not in COMMON_PARAMS]
        i = 0
        for p in positional:
            if i >= len(pos):
                break
            if getattr(p, "kind", None) == VARSTREAMS:
                out[p.name] = (tuple(a.value for a in pos[i:]), pos[i].span, pos[i:])
                i = len(pos)
                break
            out[p.name] = (pos[i].value, pos[i].span, None)
            i += 1
        if i < len(pos):
            raise self.error("E0203", f"{what} takes at most {i} positional argument"
                             f"{'s' if i != 1 else ''}, found {len(pos)}", pos[i].span)
        for a in kw:
            if a.name not in names:
                raise self.error("E0202", f"{what} has no parameter `{a.name}`"
                                 + did_you_mean(a.name, names), a.span)
            if a.name in out:
                raise self.error("E0203", f"parameter `{a.name}` is given twice", a.span)
            p = next(p for p in params if p.name == a.name)
            if getattr(p, "kind", None) == VARSTREAMS:
                out[a.name] = ((a.value,), a.span, None)
            else:
                out[a.name] = (a.value, a.span, None)
        return out

    def op_call(self, e: ast.Call, scope: Scope, name_hint: str | None) -> Any:
        spec = OPS[e.func]
        if spec.name == "External":
            raise self.error("E0204", "external streams are declared with "
                                      '`stream NAME : TYPE = external("name")`', e.span)
        args = self.bind_args(e, list(spec.all_params), spec.name)
        attrs: dict[str, Any] = {}
        arg_spans: dict[str, Span] = {}
        stream_inputs: list[tuple[str, int | None, Any, Span]] = []
        failed = False
        for p in spec.all_params:
            if p.name not in args:
                if p.required:
                    self.bag.error("E0201", f"{spec.name} needs `{p.name}=` "
                                   f"({p.doc or _KIND_EXPECT[p.kind]})", e.span)
                    failed = True
                elif not p.is_stream:
                    attrs[p.name] = p.default
                continue
            val_ast, span, items = args[p.name]
            arg_spans[p.name] = span
            try:
                if p.kind == STREAM:
                    v = self.first_output(self.value(val_ast, scope))
                    self.expect_stream(v, spec.name, p.name, span)
                    stream_inputs.append((p.name, None, v, span))
                elif p.kind in (STREAMS, VARSTREAMS):
                    if p.kind == STREAMS:
                        vs = self.value(val_ast, scope)
                        if isinstance(vs, tuple):
                            vs = list(vs)
                        if not isinstance(vs, list):
                            raise self.error("E0204", f"{spec.name} `{p.name}` expects a list "
                                             f"of streams, found {kind_word(vs)}", span)
                        spans = [i.span for i in val_ast.items] \
                            if isinstance(val_ast, ast.ListLit) else [span] * len(vs)
                    else:
                        vs = [self.first_output(self.value(x, scope)) for x in val_ast]
                        spans = [a.span for a in items] if items else [span] * len(vs)
                    for k, (v, sp) in enumerate(zip(vs, spans, strict=True)):
                        if v is None and p.kind == STREAMS:
                            what = f"`{val_ast.name}[{k}]`" if isinstance(val_ast, ast.Name) \
                                else f"element [{k}] of the list"
                            raise self.error("E0108", f"{what} is never assigned (passed to "
                                             f"{spec.name} `{p.name}`)", sp)
                        self.expect_stream(v, spec.name, p.name, sp)
                        stream_inputs.append((p.name, k, v, sp))
                else:
                    attrs[p.name] = self.attr_value(val_ast, p, spec.name, scope, span)
            except _Abort:
                failed = True
        if failed:
            raise _Abort()
        if isinstance(attrs.get("consumers"), int) and attrs["consumers"] > MAX_CONSUMERS:
            raise self.error("E0114", f"{spec.name} with {attrs['consumers']:,} consumers: at "
                             f"most {MAX_CONSUMERS:,} are allowed", arg_spans["consumers"])
        name = name_hint or self.anon_name(spec.name, e.span, scope)
        node = self.new_node(spec.name, name, scope, e.span, e.func_span, attrs,
                             [(pn, k) for pn, k, _, _ in stream_inputs], arg_spans)
        for slot, (_, _, v, sp) in enumerate(stream_inputs):
            self.edges.append((v, node.name, slot, sp))
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
            self.nodes[v[0].node].discarded.update(x.port for x in v[1:])
            return v[0]
        return v

    def expect_stream(self, v: Any, op: str, param: str, span: Span) -> None:
        if not isinstance(v, (StreamVal, Pending)):
            raise self.error("E0204", f"{op} `{param}` expects a stream, found {kind_word(v)}",
                             span)

    def anon_name(self, op: str, span: Span, scope: Scope) -> str:
        base = f"{scope.prefix}{op}@{span.line}"
        name = base + scope.suffix
        if name in self.nodes:
            name = f"{base}:{span.col}{scope.suffix}"
        return name

    def new_node(self, op: str, name: str, scope: Scope, span: Span, name_span: Span,
                 attrs: dict, inputs: list, arg_spans: dict) -> OpNode:
        spec = OPS[op]
        if len(self.nodes) >= MAX_NODES:
            self.error("E0114", f"the program has more than {MAX_NODES:,} operator "
                       "instances", span)
            raise _Fatal()
        while name in self.nodes:
            name += "'"
        node = OpNode(name, op, attrs, inputs, list(spec.outputs(attrs)), span, arg_spans,
                      scope.cluster, array_outputs=op in ARRAY_OUTPUT_OPS)
        self.nodes[name] = node
        self.last_node = node
        return node

    def attr_value(self, e: ast.Expr, p, op: str, scope: Scope, span: Span) -> Any:
        kind = p.kind
        if kind in ("fn", "init"):
            if isinstance(e, ast.Name):
                return FnValue(e.name, (), e.span)
            if isinstance(e, ast.Call):
                return self.fn_value(e, scope)
            raise self.error("E0204", f"{op} `{p.name}` expects {_KIND_EXPECT[kind]}, found "
                             f"{kind_word(self.value(e, scope))}", span)
        if kind == "dtype":
            if isinstance(e, ast.Name) and e.name in DTYPE_BYTES:
                return e.name
            if isinstance(e, ast.Name):
                raise self.error("E0105", f"unknown element type `{e.name}`"
                                 + did_you_mean(e.name, DTYPE_BYTES), e.span)
            raise self.error("E0204", f"{op} `{p.name}` expects {_KIND_EXPECT[kind]}", span)
        v = self.value(e, scope)
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
            raise self.error("E0204", f"{op} `{p.name}` expects {_KIND_EXPECT[kind]}, found "
                             f"{kind_word(v)}", span)
        low = getattr(p, "minimum", None)
        if low is not None and any(i < low for i in (v if isinstance(v, list) else [v])):
            raise self.error("E0204", f"{op} `{p.name}` must be >= {low}, found {v}"
                             + (f" (leave it out to take the hardware's {p.hw})" if p.hw else ""),
                             span)
        return v

    def fn_value(self, e: ast.Call, scope: Scope, allowed=None) -> FnValue:
        kwargs = []
        for a in e.args:
            if a.name is None:
                raise self.error("E0203", f"arguments of `{e.func}` must be named "
                                          f"(`{e.func}(name=value)`)", a.span)
            if allowed is not None and a.name not in allowed:
                raise self.error("E0202", f"`{e.func}` has no parameter `{a.name}`"
                                 + did_you_mean(a.name, allowed), a.span)
            v = self.value(a.value, scope)
            if not isinstance(v, (int, bool, str)):
                raise self.error("E0204", f"argument `{a.name}` of `{e.func}` must be an "
                                          f"integer, boolean or string, found {kind_word(v)}",
                                 a.span)
            kwargs.append((a.name, v))
        return FnValue(e.func, tuple(kwargs), e.span)

    def graph_call(self, e: ast.Call, g: GraphVal, scope: Scope, name_hint: str | None) -> Any:
        d = g.definition
        if d.name in self.graph_stack:
            raise self.error("E0112", f"graph `{d.name}` instantiates itself (through "
                             + " -> ".join(self.graph_stack + [d.name]) + "); recursion is "
                             "not allowed", e.span)
        args = self.bind_args(e, list(d.params), f"graph `{d.name}`")
        inst = name_hint or self.anon_name(d.name, e.span, scope)
        body = Scope(g.scope, inst + ".", "",
                     scope.cluster + (Cluster("graph", inst, f"{d.name} {inst}", d.name),))
        body.has_return = False
        for p in d.params:
            if p.name in args:
                v = self.value(args[p.name][0], scope)
            elif p.default is not None:
                v = self.value(p.default, g.scope)
            else:
                raise self.error("E0201", f"graph `{d.name}` needs argument `{p.name}`", e.span)
            if p.type is not None and isinstance(v, StreamVal) and \
                    not self.mentions_poison(p.type, g.scope):
                # the parameter's annotation is checked on the producing port
                node = self.nodes[v.node]
                node.annotations.setdefault(v.port, []).append(
                    TypeAnnotation(p.type, g.scope.int_env()))
            body.names[p.name] = Entry(v, "param" if isinstance(v, int) else "value", p.span,
                                       used=True)
        self.graph_stack.append(d.name)
        errors = len(self.bag.errors)
        try:
            self.block(d.body, body)
        finally:
            self.graph_stack.pop()
        if body.returned is None and len(self.bag.errors) > errors:
            raise _Abort()  # the body's errors are reported; its result is unusable
        return body.returned

    # ================================================================ integer expressions
    def eval_int(self, e: ast.Expr, scope: Scope) -> int:
        return int(self._eval(e, scope, symbolic=False))

    def eval_sym(self, e: ast.Expr, scope: Scope) -> sympy.Expr:
        return sympy.sympify(self._eval(e, scope, symbolic=True))

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
            raise self.error("E0204", f"expected an integer, but `{name}` is "
                             f"{kind_word(entry.value)}", span)
        try:
            return evaluate(e, resolve, symbolic)
        except ExprError as err:
            msg = err.message
            divisor = self.text_of(err.span)
            if err.code == "E0502" and not divisor.strip().isdigit():
                msg = f"division by zero: `{divisor}` is 0"
            raise self.error(err.code, msg, err.span) from None

    def text_of(self, span: Span) -> str:
        src = self.sources.get(span.file)
        if src is None or span.line != span.end_line:
            return "the divisor"
        return src.line_text(span.line)[span.col - 1: span.end_col - 1]

    # ================================================================ finishing
    def finish_pendings(self) -> None:
        for p in self.pendings:
            if p.bound is None and not p.failed:
                self.bag.error("E0401", f"feedback stream `{p.name}` is declared but never "
                                        "bound to a producer", p.span)

    def build(self) -> Program:
        consumers: dict[tuple[str, int], list[tuple[str, int, Span, bool]]] = {}
        feedback: dict[tuple[str, int], TypeAnnotation] = {}
        poisoned: set[str] = set()
        for v, dst, slot, span in self.edges:
            fb = isinstance(v, Pending)
            if fb:
                if v.bound is None:
                    poisoned.add(dst)  # its error is reported at the declaration
                    continue
                feedback[(v.bound.node, v.bound.port)] = v.annotation
                v = v.bound
            consumers.setdefault((v.node, v.port), []).append((dst, slot, span, fb))
        for p in self.pendings:
            if p.bound is not None:
                feedback[(p.bound.node, p.bound.port)] = p.annotation
        edges: list[Edge] = []
        nodes = dict(self.nodes)
        order = {n: i for i, n in enumerate(self.nodes)}
        fanouts: dict[str, list[OpNode]] = {}  # producer -> its implicit Broadcasts
        fanout_names: set[str] = set()
        for (src, port), cons in sorted(consumers.items(), key=lambda kv: (order[kv[0][0]],
                                                                             kv[0][1])):
            producer = nodes[src]
            producer.discarded.discard(port)
            fb_port = (src, port) in feedback
            if len(cons) == 1:
                dst, slot, span, _ = cons[0]
                edges.append(Edge(src, port, dst, slot, span, fb_port))
                continue
            label = producer.port_label(port)
            bname = f"{label}.bcast"
            while bname in nodes or bname in fanout_names:
                bname += "'"
            attrs = {"consumers": len(cons), "depth": None}
            bc = OpNode(bname, "Broadcast", attrs, [("in", None)],
                        list(OPS["Broadcast"].outputs(attrs)), producer.span, {},
                        producer.cluster, implicit=True, array_outputs=True)
            fanouts.setdefault(src, []).append(bc)
            fanout_names.add(bname)
            edges.append(Edge(src, port, bname, 0, producer.port_spans.get(port, producer.span),
                              False))
            for k, (dst, slot, span, _) in enumerate(cons):
                bc.port_names[k] = label
                edges.append(Edge(bname, k, dst, slot, span, fb_port))
        if fanouts:
            nodes = _with_fanouts(nodes, fanouts)
        prog = Program(self.main.name, nodes, edges, self.tensors, self.params,
                       self.param_spans, self.assumptions, feedback, self.sources,
                       named=self.named, poisoned=poisoned)
        prog.order = {n: i for i, n in enumerate(nodes)}
        return prog


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


def _with_fanouts(nodes: dict[str, OpNode],
                  fanouts: dict[str, list[OpNode]]) -> dict[str, OpNode]:
    """`nodes` with each producer's implicit Broadcasts right after it, the last made first
    (as if each had been inserted right after its producer when it was made)."""
    out: dict[str, OpNode] = {}
    for k, v in nodes.items():
        out[k] = v
        for bc in reversed(fanouts.get(k, ())):
            out[bc.name] = bc
    return out


def elaborate(main: ast.Module, src: SourceFile, overrides: dict[str, int] | None = None,
              loader: Loader | None = None, main_path: str | None = None
              ) -> tuple[Program | None, DiagnosticBag, set[str]]:
    """Elaborate a parsed module. Returns (program, diagnostics, -D names that matched);
    the program is None when a size limit stopped elaboration."""
    el = Elaborator(main, src, overrides or {}, loader or _no_imports, main_path)
    prog = el.run()
    return (None if el.truncated else prog), el.bag, el.used_overrides


def import_path(importer: str | None, path: str) -> str:
    """The file an `import "path"` names: relative to the importing file's directory."""
    base = os.path.dirname(importer) if importer and not importer.startswith("<") else ""
    return os.path.normpath(os.path.join(base, path))


def _no_imports(path: str, span: Span):
    from stepc.diagnostics import Diagnostic, Severity
    raise StepError([Diagnostic("E0002", Severity.ERROR, f"cannot import `{path}` here",
                                span)])


__all__ = ["elaborate", "import_path", "Program"]
