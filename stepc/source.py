"""Source files and spans: where every AST node, graph node and diagnostic points to."""

from __future__ import annotations

import bisect
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Span:
    """A 1-based, end-exclusive region of a source file, named as the user named the file."""

    file: str
    line: int
    col: int
    end_line: int
    end_col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass
class SourceFile:
    """The text of one source file and a fast offset -> (line, col) mapping."""

    name: str  # display name: the path as the user typed it, or "<stdin>"
    text: str

    def __post_init__(self) -> None:
        self._line_starts = [0]
        for i, ch in enumerate(self.text):
            if ch == "\n":
                self._line_starts.append(i + 1)

    def linecol(self, offset: int) -> tuple[int, int]:
        """1-based line and column of a character offset."""
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self._line_starts, offset) - 1
        return line + 1, offset - self._line_starts[line] + 1

    def span(self, start: int, end: int) -> Span:
        """The span covering offsets [start, end)."""
        line, col = self.linecol(start)
        end_line, end_col = self.linecol(max(end, start))
        return Span(self.name, line, col, end_line, end_col)

    def line_text(self, line: int) -> str:
        """The text of a 1-based line, without its newline."""
        if line < 1 or line > len(self._line_starts):
            return ""
        start = self._line_starts[line - 1]
        end = self.text.find("\n", start)
        return self.text[start : end if end >= 0 else len(self.text)]
