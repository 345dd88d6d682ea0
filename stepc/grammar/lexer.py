"""A small lexer for .step source: the tokens the formatter lays out and the editor reads.

The textX grammar (step.tx) decides what a program means; this lexer only splits the text
into names, numbers, strings, operators and comments with their positions, keeping every
character accounted for (whitespace excepted), so that tools can rewrite layout without
touching content. Names follow the grammar's ID rule (Unicode letters and digits, as
Python identifiers), so the lexer and the parser agree on where a name ends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KEYWORDS = frozenset({"import", "param", "tensor", "stream", "assume", "for", "in", "graph",
                      "return"})
# Names whose `<` opens a type's angle brackets (`Strm<...>`, `Tile<...>`, `MultiHot<E>`).
ANGLE_TYPES = frozenset({"Strm", "Tile", "Buffer", "MultiHot", "Index"})

_TOKEN = re.compile(r"""
    (?P<space>[ \t\f\r]+)
  | (?P<newline>\n)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')
  | (?P<name>[^\W\d]\w*)
  | (?P<number>[0-9]+)
  | (?P<op>==|!=|<=|>=|//|\.\.|[-+*/%=<>:;,.?(){}\[\]])
""", re.VERBOSE | re.DOTALL)


@dataclass(frozen=True)
class Token:
    """One token: its kind (name, number, string, op, comment, other), text and 0-based
    offset, with its 1-based line and column."""

    kind: str
    text: str
    offset: int
    line: int
    col: int

    @property
    def end_line(self) -> int:
        return self.line + self.text.count("\n")


def tokenize(text: str) -> list[Token]:
    """Every token of `text` except whitespace and newlines, in order. A character the
    lexer does not know becomes an `other` token (the parser reports it)."""
    out: list[Token] = []
    line, line_start, i = 1, 0, 0
    while i < len(text):
        m = _TOKEN.match(text, i)
        if m is None:
            out.append(Token("other", text[i], i, line, i - line_start + 1))
            i += 1
            continue
        kind = m.lastgroup
        if kind == "newline":
            line, line_start = line + 1, m.end()
        elif kind != "space":
            out.append(Token(kind, m.group(), i, line, i - line_start + 1))
            newlines = m.group().count("\n")  # a string may span lines
            if newlines:
                line += newlines
                line_start = i + m.group().rindex("\n") + 1
        i = m.end()
    return out
