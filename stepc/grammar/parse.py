"""Source text -> AST. The textX grammar lives in `step.tx`; textX objects stop here."""

from __future__ import annotations

import functools
import re
import threading
from collections import OrderedDict
from importlib import resources

from stepc.codes import NOT_TEXT, SYNTAX_ERROR
from stepc.diagnostics import Diagnostic, Note, Severity, StepError
from stepc.grammar import ast
from stepc.grammar.descent import parse_or_resume
from stepc.grammar.nesting import check_brackets, check_levels
from stepc.grammar.scanner import find_word, integer_value, join
from stepc.source import SourceFile


@functools.cache
def metamodel():
    """The textX metamodel of the .step grammar (built once per process; textX loads only
    when the fast parser declines a text)."""
    from textx import metamodel_from_str
    text = resources.files("stepc.grammar").joinpath("step.tx").read_text(encoding="utf-8")
    return metamodel_from_str(text, autokwd=True, use_regexp_group=False)


_FRIENDLY = {
    "'\\+|-'": "'+'", "'[0-9]+(?![0-9A-Za-z_])'": "a number", "STRING": "a string",
    "'(true|false)(?![0-9A-Za-z_])'": "true/false", "ID": "a name",
    "'(MultiHot|Index)(?![0-9A-Za-z_])'": "MultiHot/Index", "'-'": "'-'",
}
_CLOSERS = {"(": ")", "[": "]", "{": "}", "<": ">"}
# a comment; a string to its closing quote, or unterminated at a line's end (an escape
# skips the character after it); a bracket
_SCANNED = re.compile(r"""\#[^\n]*|(?P<quote>["'])(?:\\.|(?!(?P=quote))[^\\\n])*+"""
                      r"""(?P<closed>(?P=quote))?|[(\[{)\]}]""", re.DOTALL)


def _expected(message: str) -> str:
    """textX's "Expected A or B at position ..." with grammar internals made readable."""
    body = message.split(" at position")[0].split(" => ")[0]
    body = body.removeprefix("Expected ").removeprefix("expected ")
    seen: list[str] = []
    for alt in body.split(" or "):
        alt = _FRIENDLY.get(alt.strip(), alt.strip())
        if alt not in seen:
            seen.append(alt)
    if "a number" in seen and "a name" in seen:  # any operand would do
        seen = [a for a in seen if a not in ("a number", "a name", "a string", "true/false",
                                             "'-'", "'['", "'('")] + ["an expression"]
    if len(seen) > 6:  # long lists of operators say nothing; keep the structural ones
        keep = [a for a in seen if a in ("')'", "']'", "'}'", "'>'", "','", "'='", "a name")]
        seen = keep or seen[:6]
    return " or ".join(seen)


def _scan(text: str, stop: int):
    """Open brackets before `stop` (outside strings and comments), and any unterminated
    string: returns (stack of (char, offset), offset of an unterminated quote or None)."""
    stack: list[tuple[str, int]] = []
    for m in _SCANNED.finditer(text):
        i, token = m.start(), m.group()
        if i >= stop:
            break
        if m.group("quote") and not m.group("closed"):
            return stack, i
        if token in "([{":
            stack.append((token, i))
        elif token in ")]}" and stack:
            stack.pop()
    return stack, None


def _syntax_error(src: SourceFile, line: int, col: int, message: str) -> Diagnostic:
    offset = src._line_starts[min(line, len(src._line_starts)) - 1] + col - 1
    text = src.text
    stack, quote = _scan(text, len(text))
    if quote is not None:
        qline, qcol = src.linecol(quote)
        return Diagnostic(SYNTAX_ERROR, Severity.ERROR, "syntax error: unterminated string",
                          ast.Span(src.name, qline, qcol, qline, qcol + 1))
    expected = _expected(message)
    stack, _ = _scan(text, offset)
    if stack and src.linecol(stack[-1][1])[0] < line:
        ch, pos = stack[-1]
        bline, bcol = src.linecol(pos)
        return Diagnostic(SYNTAX_ERROR, Severity.ERROR,
                          f"syntax error: `{ch}` is never closed (expected "
                          f"`{_CLOSERS[ch]}`)", ast.Span(src.name, bline, bcol, bline, bcol + 1),
                          (Note(f"expected `{_CLOSERS[ch]}` before this",
                                ast.Span(src.name, line, col, line, col + 1)),))
    before = text[src._line_starts[line - 1]:offset] if line <= len(src._line_starts) else ""
    if not before.strip():  # the error is at the start of a line: blame the previous token
        end = offset
        while end > 0 and text[end - 1].isspace():
            end -= 1
        while True:  # skip back over comment lines
            ls = text.rfind("\n", 0, end) + 1
            hash_at = _comment_start(text[ls:end])
            if hash_at is None:
                break
            end = ls + hash_at
            while end > 0 and text[end - 1].isspace():
                end -= 1
        if end > 0:
            start = end
            while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_\"')]"):
                start -= 1
            token = text[start:end] or text[end - 1]
            pline, pcol = src.linecol(start if start < end else end - 1)
            return Diagnostic(SYNTAX_ERROR, Severity.ERROR, f"syntax error after `{token}`: "
                              f"expected {expected}",
                              ast.Span(src.name, pline, pcol, pline, pcol + max(1, len(token))))
    line_text = src.line_text(line)
    end_col = col + 1
    while end_col <= len(line_text) and (line_text[end_col - 1].isalnum()
                                         or line_text[end_col - 1] == "_"):
        end_col += 1
    return Diagnostic(SYNTAX_ERROR, Severity.ERROR, f"syntax error: expected {expected}",
                      ast.Span(src.name, line, col, line, max(end_col, col + 1)))


def _comment_start(line: str) -> int | None:
    """Offset of a `#` comment in a line (outside strings), or None."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "#":
            return i
    return None


def decode_source(name: str, data: bytes) -> SourceFile:
    """Decode raw file bytes; binary or non-UTF-8 input is a located error."""
    if b"\x00" in data:
        prefix = data[: data.index(b"\x00")].decode("utf-8", errors="replace")
        line, col = SourceFile(name, prefix).linecol(len(prefix))
        raise StepError([Diagnostic(NOT_TEXT, Severity.ERROR,
                                    "file is not a .step program (it contains NUL bytes)",
                                    ast.Span(name, line, col, line, col + 1))])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        prefix = data[: e.start].decode("utf-8", errors="replace")
        src = SourceFile(name, prefix)
        line, col = src.linecol(len(prefix))
        raise StepError([Diagnostic(NOT_TEXT, Severity.ERROR,
                                    f"file is not valid UTF-8 (byte 0x{data[e.start]:02x})",
                                    ast.Span(name, line, col, line, col + 1))]) from None
    return SourceFile(name, text.lstrip("\ufeff"))


PARSED_FILES = 64  # syntax trees kept, by file name and text (a tree is immutable)
_PARSED: OrderedDict[tuple[str, str], ast.Module] = OrderedDict()
# The language server parses on several threads: the cache is shared, and textX builds its
# metamodel with module-level state (two threads building it at once break each other).
_PARSED_LOCK = threading.Lock()
_TEXTX_LOCK = threading.Lock()


def parse(src: SourceFile) -> ast.Module:
    """Parse one source file into an AST; a syntax error, or nesting beyond the limit of
    stepc.grammar.nesting, raises StepError. A file parsed before with the same name and
    text is not parsed again (the test suite, the language server and a sweep compile the
    same files many times)."""
    key = (src.name, src.text)
    with _PARSED_LOCK:
        module = _PARSED.get(key)
        if module is not None:
            _PARSED.move_to_end(key)
            return module
    check_brackets(src)
    module = _parse(src)
    check_levels(module, src)
    with _PARSED_LOCK:
        _PARSED[key] = module
        if len(_PARSED) > PARSED_FILES:
            _PARSED.popitem(last=False)
    return module


def _parse(src: SourceFile) -> ast.Module:
    """The fast hand-written parser answers first; whatever it declines, textX parses and
    reports, from the statement the fast parser says (textX takes ~100 times as long and as
    much memory: a syntax error at the end of 16 MiB of statements would cost minutes)."""
    module, resume = parse_or_resume(src)
    if module is not None:
        return module
    if resume:
        _textx_model(src, resume)  # raises the syntax error the fast parser met
    return _parse_textx(src)  # (all of it, should textX find no error after all)


def _parse_textx(src: SourceFile) -> ast.Module:
    """Parse with the textX grammar itself (the language's definition and its diagnostics)."""
    model = _textx_model(src)
    statements = getattr(model, "statements", None) or []  # an empty file parses to ""
    return ast.Module(src.name, tuple(_Lower(src).stmt(s) for s in statements))


def _textx_model(src: SourceFile, start: int = 0):
    """textX's model of the text from offset `start` (where a statement starts) on; a
    syntax error raises StepError, located in the whole text."""
    import textx
    try:
        with _TEXTX_LOCK:
            return metamodel().model_from_str(src.text[start:])
    except textx.TextXSyntaxError as e:
        line, col = e.line or 1, e.col or 1
        if start:  # the line and column of the whole text
            first_line, first_col = src.linecol(start)
            line, col = line + first_line - 1, col + (first_col - 1 if line == 1 else 0)
        raise StepError([_syntax_error(src, line, col, e.message or "")]) from None
    except (textx.TextXError, RecursionError) as e:  # pragma: no cover - defensive
        msg = getattr(e, "message", None) or "input is too deeply nested"
        raise StepError([Diagnostic(SYNTAX_ERROR, Severity.ERROR, f"syntax error: {msg}",
                                    ast.Span(src.name, 1, 1, 1, 2))]) from None


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
        i = find_word(text, name)
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
            dtype_start = after_colon + 1 + find_word(self.src.text[after_colon + 1:], s.dtype)
            role_start = s.dims[-1]._tx_position_end if s.dims else dtype_start
            rel = find_word(self.src.text[role_start:s._tx_position_end], s.role)
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
                out = ast.BinOp(tail.op, out, rhs, join(out.span, rhs.span))
            return out
        if kind == "Unary":
            v = self.expr(e.value)
            return ast.Neg(v, sp) if e.neg else v
        if kind == "Postfix":
            out = self.expr(e.base)
            for ix in e.indices:
                out = ast.Index(out, self.expr(ix.value), join(out.span, self.span(ix)))
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
            return ast.IntLit(integer_value(e.value, sp), sp)
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
        rank = integer_value(t.rank.value, self.span(t.rank)) if t.rank is not None else None
        return ast.StreamTypeAst(self.etype(t.elem), rank, dims, self.span(t))

    def etype(self, t) -> ast.ElemTypeAst:
        kind = type(t).__name__
        sp = self.span(t)
        if kind == "TileType":
            return ast.TileTypeAst(t.dtype, self.dim(t.rows), self.dim(t.cols), sp,
                                   self.name_span(t, t.dtype))
        if kind == "BufferType":
            return ast.BufferTypeAst(self.etype(t.tile), tuple(self.dim(d) for d in t.dims), sp)
        if kind == "SelectType":
            return ast.SelectTypeAst(t.kind, self.expr(t.n), sp)
        if kind == "TupleType":
            return ast.TupleTypeAst(tuple(self.etype(x) for x in t.elems), sp)
        return ast.ScalarTypeAst(t.dtype, sp)
