"""Source text -> AST. The textX grammar lives in `step.tx`; textX objects stop here."""

from __future__ import annotations

import functools
from importlib import resources

import textx
from textx import metamodel_from_str

from stepc.diagnostics import Diagnostic, Severity, StepError
from stepc.grammar import ast
from stepc.source import SourceFile


@functools.cache
def metamodel():
    """The textX metamodel of the .step grammar (built once per process)."""
    text = resources.files("stepc.grammar").joinpath("step.tx").read_text(encoding="utf-8")
    return metamodel_from_str(text, autokwd=True, use_regexp_group=False)


def _syntax_error(src: SourceFile, line: int, col: int, message: str) -> Diagnostic:
    text = src.line_text(line)
    end = col + 1
    # underline the offending token, not just its first character
    while end <= len(text) and (text[end - 1].isalnum() or text[end - 1] == "_"):
        end += 1
    span = ast.Span(src.name, line, col, line, max(end, col + 1))
    message = message[0].lower() + message[1:] if message else "syntax error"
    message = message.replace(" at position", "").split(" => ")[0]
    return Diagnostic("E0001", Severity.ERROR, f"syntax error: {message}", span)


def decode_source(name: str, data: bytes) -> SourceFile:
    """Decode raw file bytes; binary or non-UTF-8 input is a located error."""
    if b"\x00" in data:
        raise StepError([Diagnostic("E0003", Severity.ERROR,
                                    "file is not a .step program (it contains NUL bytes)",
                                    ast.Span(name, 1, 1, 1, 1))])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        prefix = data[: e.start].decode("utf-8", errors="replace")
        src = SourceFile(name, prefix)
        line, col = src.linecol(len(prefix))
        raise StepError([Diagnostic("E0003", Severity.ERROR,
                                    f"file is not valid UTF-8 (byte 0x{data[e.start]:02x})",
                                    ast.Span(name, line, col, line, col + 1))]) from None
    return SourceFile(name, text.lstrip("\ufeff"))


def parse(src: SourceFile) -> ast.Module:
    """Parse one source file into an AST; a syntax error raises StepError."""
    try:
        model = metamodel().model_from_str(src.text)
    except textx.TextXSyntaxError as e:
        raise StepError([_syntax_error(src, e.line or 1, e.col or 1, e.message or "")]) from None
    except (textx.TextXError, RecursionError) as e:  # pragma: no cover - defensive
        msg = getattr(e, "message", None) or "input is too deeply nested"
        raise StepError([Diagnostic("E0001", Severity.ERROR, f"syntax error: {msg}",
                                    ast.Span(src.name, 1, 1, 1, 2))]) from None
    return ast.Module(src.name, tuple(_Lower(src).stmt(s) for s in model.statements))


class _Lower:
    """Converts textX model objects to AST dataclasses."""

    def __init__(self, src: SourceFile):
        self.src = src

    def span(self, obj) -> ast.Span:
        return self.src.span(obj._tx_position, obj._tx_position_end)

    def name_span(self, obj, name: str) -> ast.Span:
        """Span of the first occurrence of `name` inside obj's text (for named declarations)."""
        start = obj._tx_position
        text = self.src.text[start: obj._tx_position_end]
        i = _find_word(text, name)
        return self.src.span(start + i, start + i + len(name)) if i >= 0 else self.span(obj)

    # ------------------------------------------------------------ statements
    def stmt(self, s) -> ast.Statement:
        kind = type(s).__name__
        sp = self.span(s)
        if kind == "Import":
            return ast.Import(s.path, sp)
        if kind == "Param":
            return ast.Param(s.name, self.expr(s.value), sp, self.name_span(s, s.name))
        if kind == "TensorDecl":
            after_colon = s._tx_position + self.src.text[s._tx_position:].find(":")
            dtype_start = after_colon + 1 + _find_word(self.src.text[after_colon + 1:], s.dtype)
            role_start = s.dims[-1]._tx_position_end if s.dims else dtype_start
            rel = _find_word(self.src.text[role_start:s._tx_position_end], s.role)
            return ast.TensorDecl(
                s.name, s.dtype, tuple(self.expr(d) for d in s.dims), s.role,
                self.expr(s.source) if s.source is not None else None, sp,
                self.name_span(s, s.name),
                self.src.span(dtype_start, dtype_start + len(s.dtype)),
                self.src.span(role_start + rel, role_start + rel + len(s.role)))
        if kind == "StreamDecl":
            return ast.StreamDecl(s.name, self.stype(s.type),
                                  self.expr(s.source) if s.source is not None else None, sp,
                                  self.name_span(s, s.name))
        if kind == "Assume":
            return ast.Assume(self.expr(s.lhs), s.op, self.expr(s.rhs), sp)
        if kind == "ForLoop":
            return ast.ForLoop(s.var, self.expr(s.start), self.expr(s.end),
                               tuple(self.stmt(b) for b in s.body), sp)
        if kind == "GraphDef":
            params = tuple(
                ast.GraphParam(p.name, self.stype(p.type) if p.type else None,
                               self.expr(p.default) if p.default is not None else None,
                               self.span(p))
                for p in s.params)
            return ast.GraphDef(s.name, params, tuple(self.stmt(b) for b in s.body), sp,
                                self.name_span(s, s.name))
        if kind == "Return":
            return ast.Return(tuple(self.expr(v) for v in s.values), sp)
        if kind == "Binding":
            targets = tuple(ast.Target(t.name, tuple(self.expr(i.value) for i in t.indices),
                                       self.span(t)) for t in s.targets)
            return ast.Binding(targets, self.stype(s.type) if s.type else None,
                               self.expr(s.value), sp)
        if kind == "CallStatement":
            return ast.CallStatement(self.expr(s.call), sp)
        raise AssertionError(f"unknown statement {kind}")  # pragma: no cover

    # ------------------------------------------------------------ expressions
    def expr(self, e) -> ast.Expr:
        kind = type(e).__name__
        sp = self.span(e)
        if kind == "Sum" or kind == "Product":
            out = self.expr(e.first)
            for tail in e.rest:
                rhs = self.expr(tail.operand)
                out = ast.BinOp(tail.op, out, rhs, _join(out.span, rhs.span))
            return out
        if kind == "Unary":
            v = self.expr(e.value)
            return ast.Neg(v, sp) if e.neg else v
        if kind == "Postfix":
            out = self.expr(e.base)
            for ix in e.indices:
                out = ast.Index(out, self.expr(ix.value), _join(out.span, self.span(ix)))
            return out
        if kind == "Call":
            args = tuple(ast.Arg(a.name or None, self.expr(a.value), self.span(a))
                         for a in e.args)
            return ast.Call(e.func, args, sp, self.src.span(e._tx_position,
                                                            e._tx_position + len(e.func)))
        if kind == "ListLit":
            return ast.ListLit(tuple(self.expr(i) for i in e.items), sp)
        if kind == "Paren":
            return self.expr(e.value)
        if kind == "IntLit":
            return ast.IntLit(int(e.value), sp)
        if kind == "StrLit":
            return ast.StrLit(e.value, sp)
        if kind == "BoolLit":
            return ast.BoolLit(e.value == "true", sp)
        if kind == "Name":
            return ast.Name(e.name, sp)
        raise AssertionError(f"unknown expression {kind}")  # pragma: no cover

    # ------------------------------------------------------------ types
    def dim(self, d) -> ast.Dim:
        if d.unknown:
            return ast.UnknownDim(self.span(d))
        return self.expr(d.value)

    def stype(self, t) -> ast.StreamTypeAst:
        dims = tuple(self.dim(d) for d in t.dims) if t.dims else None
        rank = int(t.rank.value) if t.rank is not None else None
        return ast.StreamTypeAst(self.etype(t.elem), rank, dims, self.span(t))

    def etype(self, t) -> ast.ElemTypeAst:
        kind = type(t).__name__
        sp = self.span(t)
        if kind == "TileType":
            return ast.TileTypeAst(t.dtype, self.dim(t.rows), self.dim(t.cols), sp)
        if kind == "BufferType":
            return ast.BufferTypeAst(self.etype(t.tile), tuple(self.dim(d) for d in t.dims), sp)
        if kind == "SelectType":
            return ast.SelectTypeAst(t.kind, self.expr(t.n), sp)
        if kind == "TupleType":
            return ast.TupleTypeAst(tuple(self.etype(x) for x in t.elems), sp)
        return ast.ScalarTypeAst(t.dtype, sp)


def _find_word(text: str, word: str) -> int:
    """Index of `word` as a whole identifier in text, or -1."""
    start = 0
    while True:
        i = text.find(word, start)
        if i < 0:
            return -1
        before = text[i - 1] if i > 0 else " "
        after = text[i + len(word)] if i + len(word) < len(text) else " "
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return i
        start = i + 1


def _join(a: ast.Span, b: ast.Span) -> ast.Span:
    return ast.Span(a.file, a.line, a.col, b.end_line, b.end_col)
