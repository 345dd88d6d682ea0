"""A hand-written recursive-descent parser for step.tx: the fast path of `parse()`.

It follows the grammar's PEG semantics (ordered choice with backtracking, textX's
keyword, ID, STRING and whitespace/comment rules) and builds the same AST, spans
included, as the textX path. It reports no syntax error: on any syntax problem it
declines (returns None), saying from where textX should parse to report it. What it
refuses itself, as the textX path would, it refuses before building more: a chain of
operators or indices nested past MAX_NESTING, and an integer literal too long to read.
"""

from __future__ import annotations

import re

from stepc.grammar import ast
from stepc.grammar.nesting import MAX_CHAIN, MAX_NESTING, too_deep, too_long
from stepc.grammar.scanner import (
    MAX_DIGITS,
    Decline,
    NoMatch,
    Scanner,
    find_word,
    integer_value,
    join,
)
from stepc.source import SourceFile

_INT = re.compile(r"[0-9]+(?![0-9A-Za-z_])")
_BOOL = re.compile(r"(true|false)(?![0-9A-Za-z_])")
_SELECT = re.compile(r"(MultiHot|Index)(?![0-9A-Za-z_])")
_STRING = re.compile(r'("(\\"|[^"])*")|(\'(\\\'|[^\'])*\')')
_CMP_OPS = ("==", "!=", "<=", ">=", "<", ">")
_SUM_OPS = ("+", "-")
_PROD_OPS = ("//", "*", "%", "/")  # in the grammar's order: `//` before `/`


def parse_fast(src: SourceFile) -> ast.Module | None:
    """The AST of `src`, or None when textX should parse it (errors, unusual input)."""
    return parse_or_resume(src)[0]


def parse_or_resume(src: SourceFile) -> tuple[ast.Module | None, int]:
    """The AST of `src`; or None and the offset from which textX needs to parse to report
    the syntax error found: the start of the statement before the first top-level one that
    does not parse (what comes before was parsed, and one statement of context keeps
    textX's message as it would be), or of that one when it is the first. 0 when the
    parser declined for another reason."""
    parser = _Parser(src)
    try:
        return parser.module(), 0
    except NoMatch:
        return None, parser.starts[-2] if len(parser.starts) > 1 else parser.starts[0]
    except (Decline, RecursionError):
        return None, 0


class _Parser(Scanner):
    """The grammar's rules, in step.tx's order."""

    def __init__(self, src: SourceFile):
        super().__init__(src)
        self.starts: list[int] = []  # where each top-level statement tried starts

    # ------------------------------------------------------------ statements
    def module(self) -> ast.Module:
        statements = self.statements()
        if self.skip() != len(self.text):
            raise NoMatch
        return ast.Module(self.src.name, tuple(statements))

    def statements(self) -> list:
        out = []
        while True:
            saved = self.pos
            if not self.depth:
                self.starts.append(self.skip())
            try:
                out.append(self.statement())
            except NoMatch:
                self.pos = saved
                return out

    def statement(self):
        start = self.skip()
        word = self.peek_word()
        rule = _KEYWORD_RULES.get(word)
        if rule is not None:
            saved = self.pos
            try:
                return rule(self, start)
            except NoMatch:
                self.pos = saved
        if word is not None:
            saved = self.pos
            try:
                return self.binding(start)
            except NoMatch:
                self.pos = saved
        call = self.call(start)
        self.eat(";")
        return ast.CallStatement(call, self.span(start))

    def import_(self, start: int):
        self.keyword("import")
        path = self.regex(_STRING)[1:-1].replace('\\"', '"').replace("\\'", "'")
        self.eat(";")
        return ast.Import(path, self.span(start))

    def param(self, start: int):
        self.keyword("param")
        name = self.ident()
        self.expect("=")
        value = self.expr()
        self.eat(";")
        return ast.Param(name, value, self.span(start), self.name_span(start, name))

    def tensor(self, start: int):
        self.keyword("tensor")
        name = self.ident()
        self.expect(":")
        dtype = self.ident()
        self.expect("[")
        dims = self.separated(self.expr_end)
        self.expect("]")
        role = self.ident()
        source = self.attempt(self.assigned)
        self.eat(";")
        text = self.text
        after_colon = start + text[start:].find(":")
        dtype_start = after_colon + 1 + find_word(text[after_colon + 1:], dtype)
        role_start = dims[-1][1] if dims else dtype_start
        rel = find_word(text[role_start:self.pos], role)
        return ast.TensorDecl(name, dtype, tuple(d for d, _ in dims), role, source,
                              self.span(start),
                              self.name_span(start, name),
                              self.span(dtype_start, dtype_start + len(dtype)),
                              self.span(role_start + rel, role_start + rel + len(role)))

    def expr_end(self):
        """An expression and the offset just after it."""
        return self.expr(), self.pos

    def assigned(self):
        """`'=' Expr` (an optional source or default)."""
        self.expect("=")
        return self.expr()

    def stream(self, start: int):
        self.keyword("stream")
        name = self.ident()
        self.expect(":")
        stype = self.stream_type()
        source = self.attempt(self.assigned)
        self.eat(";")
        return ast.StreamDecl(name, stype, source, self.span(start), self.name_span(start, name))

    def assume(self, start: int):
        self.keyword("assume")
        lhs = self.expr()
        at = self.skip()
        op = next((o for o in _CMP_OPS if self.text.startswith(o, at)), None)
        if op is None:
            raise NoMatch
        self.pos = at + len(op)
        rhs = self.expr()
        self.eat(";")
        return ast.Assume(lhs, op, rhs, self.span(start))

    def body(self) -> tuple:
        self.expect("{")
        body = self.nested(self.statements)
        self.expect("}")
        return tuple(body)

    def for_loop(self, start: int):
        self.keyword("for")
        var = self.ident()
        self.keyword("in")
        lo = self.expr()
        self.expect("..")
        hi = self.expr()
        return ast.ForLoop(var, lo, hi, self.body(), self.span(start))

    def graph(self, start: int):
        self.keyword("graph")
        name = self.ident()
        self.expect("(")
        params = self.separated(self.graph_param)
        self.expect(")")
        body = self.body()
        return ast.GraphDef(name, tuple(params), body, self.span(start),
                            self.name_span(start, name))

    def graph_param(self):
        start = self.skip()
        name = self.ident()
        stype = self.attempt(self.typed)
        default = self.attempt(self.assigned)
        return ast.GraphParam(name, stype, default, self.span(start))

    def typed(self):
        """`':' StreamType`."""
        self.expect(":")
        return self.stream_type()

    def return_(self, start: int):
        self.keyword("return")
        values = self.separated(self.expr)
        self.eat(";")
        return ast.Return(tuple(values), self.span(start))

    def binding(self, start: int):
        targets = self.separated(self.target)
        if not targets:
            raise NoMatch
        stype = self.attempt(self.typed)
        self.expect("=")
        self.not_eq()
        value = self.expr()
        self.eat(";")
        return ast.Binding(tuple(targets), stype, value, self.span(start))

    def target(self):
        start = self.skip()
        name = self.ident()
        indices = self.indices(self.span(start))
        return ast.Target(name, tuple(ix for ix, _ in indices), self.span(start))

    def indices(self, base: ast.Span) -> list:
        """`Index*` after `base`: (index expression, span of `[...]`) pairs; refused past
        MAX_NESTING (each index nests the syntax tree a level deeper)."""
        out = []
        while True:
            saved = self.pos
            start = self.skip()
            try:
                self.expect("[")
                value = self.expr()
                self.expect("]")
            except NoMatch:
                self.pos = saved
                return out
            out.append((value, self.span(start)))
            if len(out) > MAX_NESTING:
                raise too_deep(base)

    # ------------------------------------------------------------ expressions
    def expr(self):
        return self.nested(self.sum)

    def sum(self):
        return self.chain(self.product, _SUM_OPS)

    def product(self):
        return self.chain(self.unary, _PROD_OPS)

    def chain(self, operand, ops: tuple[str, ...]):
        """`operand (op operand)*`, left-associative; a trailing operator without its
        operand is left unread (the grammar's repetition stops before it)."""
        out, count = operand(), 0
        while True:
            at = self.skip()
            op = next((o for o in ops if self.text.startswith(o, at)), None)
            if op is None:
                return out
            saved = self.pos
            self.pos = at + len(op)
            try:
                rhs = operand()
            except NoMatch:
                self.pos = saved
                return out
            out, count = ast.BinOp(op, out, rhs, join(out.span, rhs.span)), count + 1
            if count > MAX_CHAIN:  # each operator nests the tree a level deeper
                raise too_long(out.span)

    def unary(self):
        start = self.skip()
        neg = self.eat("-")
        out = self.primary()
        for ix, ix_span in self.indices(out.span):
            out = ast.Index(out, ix, join(out.span, ix_span))
        return ast.Neg(out, self.span(start)) if neg else out

    def primary(self):
        start = self.skip()
        c = self.text[start:start + 1]
        if c == "[":
            self.pos = start + 1
            items = self.separated(self.expr)
            self.expect("]")
            return ast.ListLit(tuple(items), self.span(start))
        if c == "(":
            self.pos = start + 1
            value = self.expr()
            self.expect(")")
            return value
        if c in ('"', "'"):
            value = self.regex(_STRING)[1:-1].replace('\\"', '"').replace("\\'", "'")
            return ast.StrLit(value, self.span(start))
        if "0" <= c <= "9":
            return ast.IntLit(self.integer(), self.span(start))
        saved = self.pos
        try:
            return self.call(start)
        except NoMatch:
            self.pos = saved
        m = _BOOL.match(self.text, start)
        if m:
            self.pos = m.end()
            return ast.BoolLit(m.group() == "true", self.span(start))
        return ast.Name(self.ident(), self.span(start))

    def call(self, start: int):
        func = self.ident()
        self.expect("(")
        args = self.separated(self.arg)
        self.expect(")")
        return ast.Call(func, tuple(args), self.span(start),
                        self.span(start, start + len(func)))

    def arg(self):
        start = self.skip()
        name = self.attempt(self.arg_name)
        return ast.Arg(name, self.expr(), self.span(start))

    def arg_name(self):
        """`name=ID '=' !'='`."""
        name = self.ident()
        self.expect("=")
        self.not_eq()
        return name

    # ------------------------------------------------------------ types
    def stream_type(self):
        start = self.skip()
        self.keyword("Strm")
        self.expect("<")
        elem = self.elem_type()
        rank = self.attempt(self.rank)
        self.expect(">")
        dims = self.attempt(self.dims)
        return ast.StreamTypeAst(elem, rank, dims or None, self.span(start))

    def rank(self) -> int:
        self.expect(",")
        return self.integer()

    def integer(self) -> int:
        """An IntLit's value (one too long to be read is refused, as the textX path does)."""
        start = self.skip()
        digits = self.regex(_INT)
        return int(digits) if len(digits) <= MAX_DIGITS else integer_value(digits,
                                                                           self.span(start))

    def dims(self) -> tuple:
        """`'[' DimExpr*[','] ']'`."""
        self.expect("[")
        dims = self.separated(self.dim)
        self.expect("]")
        return tuple(dims)

    def dim(self):
        start = self.skip()
        if self.text.startswith("?", start):
            self.pos = start + 1
            return ast.UnknownDim(self.span(start))
        return self.expr()

    def elem_type(self):
        return self.nested(self.elem_choice)

    def elem_choice(self):
        start = self.skip()
        for rule in (self.tile_type, self.buffer_type, self.select_type, self.tuple_type):
            saved = self.pos
            try:
                return rule(start)
            except NoMatch:
                self.pos = saved
        return ast.ScalarTypeAst(self.ident(), self.span(start))

    def tile_type(self, start: int):
        self.keyword("Tile")
        self.expect("<")
        dtype = self.ident()
        self.expect(",")
        self.expect("[")
        rows = self.dim()
        self.expect(",")
        cols = self.dim()
        self.expect("]")
        self.expect(">")
        return ast.TileTypeAst(dtype, rows, cols, self.span(start), self.name_span(start, dtype))

    def buffer_type(self, start: int):
        self.keyword("Buffer")
        self.expect("<")
        tile = self.tile_type(self.skip())
        self.expect(",")
        dims = self.dims()
        self.expect(">")
        return ast.BufferTypeAst(tile, dims, self.span(start))

    def select_type(self, start: int):
        kind = self.regex(_SELECT)
        self.expect("<")
        n = self.expr()
        self.expect(">")
        return ast.SelectTypeAst(kind, n, self.span(start))

    def tuple_type(self, start: int):
        self.expect("(")
        elems = self.separated(self.elem_type)
        if not elems:
            raise NoMatch
        self.expect(")")
        return ast.TupleTypeAst(tuple(elems), self.span(start))


_KEYWORD_RULES = {
    "import": _Parser.import_, "param": _Parser.param, "tensor": _Parser.tensor,
    "stream": _Parser.stream, "assume": _Parser.assume, "for": _Parser.for_loop,
    "graph": _Parser.graph, "return": _Parser.return_,
}
