"""What the language server knows about one checked program: the definitions and
references of every name, the inferred types by binding, operator calls and the outline.

Built off the editor's thread after each check, from the ASTs of the program and its
imports and the checker's result; queries by position are then cheap. Nothing here
imports pygls: positions are 1-based `Span`s, as everywhere in stepc.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stepc.grammar import ast
from stepc.graph.declarations import import_path
from stepc.source import SourceFile, Span
from stepc.typecheck.checker import TypedProgram
from stepc.types import StreamType

FILE = ("file",)  # the program's top-level scope (imports share it)


@dataclass(frozen=True)
class Def:
    """A name's definition: a param, tensor, stream, graph, graph parameter, loop variable."""

    name: str
    kind: str
    span: Span  # the name itself
    scope: tuple
    stmt: ast.Statement | ast.GraphParam  # the AST statement (or graph parameter) defining it


@dataclass(frozen=True)
class Ref:
    """A use of a name (or an operator, graph or function call)."""

    name: str
    span: Span
    scope: tuple
    call: ast.Call | None = None


@dataclass
class Outline:
    """One entry of the document outline."""

    name: str
    kind: str  # param | tensor | stream | graph | loop | binding | import
    detail: str
    span: Span
    selection: Span
    children: list[Outline] = field(default_factory=list)


def name_span(span: Span, name: str) -> Span:
    """The span of `name` at the start of `span`."""
    return Span(span.file, span.line, span.col, span.line, span.col + len(name))


def contains(span: Span, line: int, col: int) -> bool:
    """Whether 1-based (line, col) lies in the span (its end included, for a cursor just
    after a name)."""
    return (span.line, span.col) <= (line, col) <= (span.end_line, span.end_col)


class Index:
    """Definitions, references, types and outline of a program and its imports."""

    def __init__(self, modules: dict[str, ast.Module], sources: dict[str, SourceFile],
                 typed: TypedProgram | None):
        self.sources = sources
        self.typed = typed
        self.defs: list[Def] = []
        self.refs: list[Ref] = []
        self.imports: list[tuple[Span, str]] = []  # the import's string, the file it names
        self.outlines: dict[str, list[Outline]] = {}
        for file, module in modules.items():
            self.outlines[file] = self._statements(module.statements, FILE, file)
        self.by_key: dict[tuple, list[Def]] = {}
        for d in self.defs:
            self.by_key.setdefault((d.scope, d.name), []).append(d)
        self.types: dict[tuple, list[tuple[str, StreamType]]] = {}
        self.calls: dict[tuple, list[str]] = {}  # call position -> operator instances
        if typed is not None:
            for _node, _port, label, span, t in typed.streams_in_order():
                self.types.setdefault(_key(span), []).append((label, t))
            for name, node in typed.program.nodes.items():
                if not node.implicit:
                    self.calls.setdefault(_key(node.span), []).append(name)

    # ------------------------------------------------------------ building
    def _define(self, name: str, kind: str, span: Span, scope: tuple,
                stmt: ast.Statement | ast.GraphParam) -> None:
        self.defs.append(Def(name, kind, span, scope, stmt))

    def _statements(self, statements, scope: tuple, file: str) -> list[Outline]:
        out: list[Outline] = []
        for s in statements:
            entry = self._statement(s, scope, file)
            if entry is not None:
                out.append(entry)
        return out

    def _statement(self, s, scope: tuple, file: str) -> Outline | None:
        if isinstance(s, ast.Import):
            target = import_path(file, s.path)
            quoted = Span(s.span.file, s.span.line, s.span.col + len("import "),
                          s.span.end_line, s.span.end_col)
            self.imports.append((quoted, target))
            return Outline(s.path, "import", "", s.span, quoted)
        if isinstance(s, ast.Param):
            self._define(s.name, "param", s.name_span, scope, s)
            self._expr(s.value, scope)
            return Outline(s.name, "param", _text(self.sources, s.value.span), s.span,
                           s.name_span)
        if isinstance(s, ast.TensorDecl):
            self._define(s.name, "tensor", s.name_span, scope, s)
            for e in (*s.dims, s.source):
                self._expr(e, scope)
            return Outline(s.name, "tensor", f"{s.dtype}[...] {s.role}", s.span, s.name_span)
        if isinstance(s, ast.StreamDecl):
            self._define(s.name, "stream", s.name_span, scope, s)
            self._type(s.type, scope)
            self._expr(s.source, scope)
            return Outline(s.name, "stream", _text(self.sources, s.type.span), s.span,
                           s.name_span)
        if isinstance(s, ast.Assume):
            self._expr(s.lhs, scope)
            self._expr(s.rhs, scope)
            return None
        if isinstance(s, ast.ForLoop):
            var = self._loop_var_span(s)
            self._define(s.var, "loopvar", var, scope, s)
            self._expr(s.start, scope)
            self._expr(s.end, scope)
            label = f"for {s.var} in {_text(self.sources, s.start.span)}.." \
                    f"{_text(self.sources, s.end.span)}"
            return Outline(label, "loop", "", s.span, var,
                           self._statements(s.body, scope, file))
        if isinstance(s, ast.GraphDef):
            self._define(s.name, "graph", s.name_span, FILE, s)
            inner = ("graph", file, s.name)
            for p in s.params:
                self._define(p.name, "graphparam", name_span(p.span, p.name), inner, p)
                self._type(p.type, inner)
                self._expr(p.default, inner)
            params = ", ".join(p.name for p in s.params)
            return Outline(s.name, "graph", f"({params})", s.span, s.name_span,
                           self._statements(s.body, inner, file))
        if isinstance(s, ast.Return):
            for v in s.values:
                self._expr(v, scope)
            return None
        if isinstance(s, ast.Binding):
            spans = []
            for t in s.targets:
                span = name_span(t.span, t.name)
                spans.append(span)
                if t.name != "_":
                    self._define(t.name, "stream", span, scope, s)
                for i in t.indices:
                    self._expr(i, scope)
            self._type(s.type, scope)
            self._expr(s.value, scope)
            names = ", ".join(t.name for t in s.targets if t.name != "_") or "_"
            detail = s.value.func if isinstance(s.value, ast.Call) else ""
            return Outline(names, "binding", detail, s.span, spans[0])
        if isinstance(s, ast.CallStatement):
            self._expr(s.call, scope)
        return None

    def _loop_var_span(self, s: ast.ForLoop) -> Span:
        src = self.sources.get(s.span.file)
        line = src.line_text(s.span.line) if src else ""
        at = line.find(s.var, s.span.col - 1 + len("for"))
        col = at + 1 if at >= 0 else s.span.col
        return Span(s.span.file, s.span.line, col, s.span.line, col + len(s.var))

    def _expr(self, e, scope: tuple) -> None:
        if e is None:
            return
        if isinstance(e, ast.Name):
            self.refs.append(Ref(e.name, e.span, scope))
        elif isinstance(e, ast.Call):
            self.refs.append(Ref(e.func, e.func_span, scope, e))
            for a in e.args:
                self._expr(a.value, scope)
        elif isinstance(e, ast.ListLit):
            for i in e.items:
                self._expr(i, scope)
        elif isinstance(e, ast.Index):
            self._expr(e.base, scope)
            self._expr(e.index, scope)
        elif isinstance(e, ast.Neg):
            self._expr(e.value, scope)
        elif isinstance(e, ast.BinOp):
            self._expr(e.lhs, scope)
            self._expr(e.rhs, scope)

    def _type(self, t, scope: tuple) -> None:
        """Names inside a written stream type (`Strm<Tile<f32, [?, D]>, 0>[N]`)."""
        if t is None:
            return
        for v in vars(t).values():
            if isinstance(v, tuple):
                for x in v:
                    self._type_part(x, scope)
            else:
                self._type_part(v, scope)

    def _type_part(self, x, scope: tuple) -> None:
        if isinstance(x, (ast.Name, ast.Call, ast.ListLit, ast.Index, ast.Neg, ast.BinOp)):
            self._expr(x, scope)
        elif hasattr(x, "__dataclass_fields__") and not isinstance(x, Span):
            self._type(x, scope)

    # ------------------------------------------------------------ queries
    def at(self, file: str, line: int, col: int) -> Def | Ref | None:
        """The definition or reference under a 1-based position."""
        items: tuple[Def | Ref, ...] = (*self.defs, *self.refs)
        for item in items:
            if item.span.file == file and contains(item.span, line, col):
                return item
        return None

    def import_at(self, file: str, line: int, col: int) -> str | None:
        """The file an import statement under the position names."""
        return next((target for span, target in self.imports
                     if span.file == file and contains(span, line, col)), None)

    def resolve(self, item: Def | Ref) -> list[Def]:
        """The definitions a name refers to: in its graph, else at the top level; of
        several (a name bound again), the last one before the use in its file."""
        if isinstance(item, Def):
            return [item]
        found = self.by_key.get((item.scope, item.name)) or \
            self.by_key.get((FILE, item.name)) or []
        before = [d for d in found if d.span.file == item.span.file and
                  (d.span.line, d.span.col) <= (item.span.line, item.span.col)]
        return [before[-1]] if before else found

    def references(self, item: Def | Ref, include_defs: bool = True) -> list[Span]:
        """Every use of the name under a position (and its definitions)."""
        targets = set(self.resolve(item))
        if not targets:
            return []
        keys = {(d.scope, d.name) for d in targets}
        defs = [d for d in self.defs if (d.scope, d.name) in keys]
        spans = [r.span for r in self.refs if (r.scope, r.name) in keys or
                 (r.scope != FILE and (FILE, r.name) in keys and
                  (r.scope, r.name) not in self.by_key)]
        if include_defs:
            spans = [d.span for d in defs] + spans
        return sorted(set(spans))

    def stream_types(self, d: Def) -> list[tuple[str, StreamType]]:
        """The inferred types of every instance of a stream definition (one per loop
        iteration or graph instance)."""
        return self.types.get(_key(d.span), [])

    def call_nodes(self, call: ast.Call) -> list[str]:
        """The operator instances one call made."""
        return self.calls.get(_key(call.span), [])

    def in_scope(self, file: str, line: int) -> list[Def]:
        """Names visible at a line: the enclosing graph's, then the program's."""
        inner = next((d for d in self.defs if d.kind == "graph" and d.span.file == file
                      and d.stmt.span.line <= line <= d.stmt.span.end_line), None)
        scope = ("graph", file, inner.name) if inner is not None else None
        seen: dict[str, Def] = {}
        for d in self.defs:
            if d.scope == FILE:
                seen.setdefault(d.name, d)
            elif d.scope == scope:  # a graph's own names hide the program's
                seen[d.name] = d
        return list(seen.values())


def _key(span: Span) -> tuple:
    return (span.file, span.line, span.col)


def _text(sources: dict[str, SourceFile], span: Span) -> str:
    """The source text of a one-line span."""
    src = sources.get(span.file)
    if src is None or span.end_line != span.line:
        return ""
    return src.line_text(span.line)[span.col - 1:span.end_col - 1]
