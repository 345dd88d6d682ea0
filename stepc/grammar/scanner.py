"""The token level of the fast parser (descent.py): textX's whitespace, comment, ID and
keyword rules, PEG backtracking helpers, and the span helpers both parse paths share."""

from __future__ import annotations

import re

from stepc.codes import SYNTAX_ERROR
from stepc.diagnostics import Diagnostic, Severity, StepError
from stepc.grammar import ast
from stepc.grammar.nesting import MAX_NESTING
from stepc.source import SourceFile

_SKIP = re.compile(r"[\t\n\r ]*(?:#[^\n]*[\t\n\r ]*)*")  # Arpeggio's ws, then Comment
_ID = re.compile(r"[^\d\W]\w*")
# parse() refuses brackets past MAX_NESTING before a parser runs (nesting.py); a rule nests
# at most a few levels more than its brackets, so only text parse() refuses goes past this
_MAX_DEPTH = MAX_NESTING + 4
MAX_DIGITS = 30  # digits of an integer literal, at most


class NoMatch(Exception):
    """A grammar alternative does not match here (the caller backtracks)."""


class Decline(Exception):
    """The fast parser leaves this input to textX."""


def find_word(text: str, word: str) -> int:
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


def integer_value(digits: str, span: ast.Span) -> int:
    """An integer literal's value; one of more than MAX_DIGITS digits is a syntax error
    (both parse paths: Python would not even read one of 5,000)."""
    if len(digits) > MAX_DIGITS:
        raise StepError([Diagnostic(SYNTAX_ERROR, Severity.ERROR, "syntax error: integer "
                                    f"literal of {len(digits):,} digits is too large", span)])
    return int(digits)


def join(a: ast.Span, b: ast.Span) -> ast.Span:
    """The span from the start of `a` to the end of `b`."""
    return ast.Span(a.file, a.line, a.col, b.end_line, b.end_col)


class Scanner:
    """Matches tokens at `pos`, always just after the last token consumed (whitespace and
    comments are skipped before each token, as Arpeggio does)."""

    def __init__(self, src: SourceFile):
        self.src = src
        self.text = src.text
        self.end = len(src.text)
        self.pos = 0
        self.depth = 0

    # ------------------------------------------------------------ tokens
    def skip(self) -> int:
        """Skip whitespace and comments; the offset of the next token."""
        pos = self.pos
        if pos < self.end and self.text[pos] in " \t\n\r#":
            pos = _SKIP.match(self.text, pos).end()
        return pos

    def eat(self, literal: str) -> bool:
        start = self.skip()
        if self.text.startswith(literal, start):
            self.pos = start + len(literal)
            return True
        return False

    def expect(self, literal: str) -> None:
        if not self.eat(literal):
            raise NoMatch

    def regex(self, pattern: re.Pattern) -> str:
        m = pattern.match(self.text, self.skip())
        if m is None:
            raise NoMatch
        self.pos = m.end()
        return m.group()

    def ident(self) -> str:
        return self.regex(_ID)

    def peek_word(self) -> str | None:
        m = _ID.match(self.text, self.skip())
        return m.group() if m else None

    def keyword(self, word: str) -> None:
        """`word` as a whole word (textX's autokwd), like `word\\b`."""
        if self.peek_word() != word:
            raise NoMatch
        self.pos = self.skip() + len(word)

    def not_eq(self) -> None:
        """The grammar's `!'='`."""
        if self.text.startswith("=", self.skip()):
            raise NoMatch

    def span(self, start: int, end: int | None = None) -> ast.Span:
        return self.src.span(start, self.pos if end is None else end)

    def name_span(self, start: int, name: str) -> ast.Span:
        """Span of the first whole-word `name` in [start, pos) (as the textX path finds it)."""
        i = find_word(self.text[start:self.pos], name)
        return self.span(start + i, start + i + len(name)) if i >= 0 else self.span(start)

    def nested(self, rule, *args):
        """Run `rule`, declining when brackets and bodies nest too deeply."""
        self.depth += 1
        try:
            if self.depth > _MAX_DEPTH:
                raise Decline
            return rule(*args)
        finally:
            self.depth -= 1

    def attempt(self, rule, *args):
        """PEG `rule?`: its result, or None with the position restored."""
        saved = self.pos
        try:
            return rule(*args)
        except NoMatch:
            self.pos = saved
            return None

    def separated(self, rule) -> list:
        """PEG `rule*[',']`."""
        saved = self.pos
        try:
            items = [rule()]
        except NoMatch:
            self.pos = saved
            return []
        while True:
            saved = self.pos
            try:
                self.expect(",")
                items.append(rule())
            except NoMatch:
                self.pos = saved
                return items
