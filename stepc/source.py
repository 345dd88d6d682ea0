"""Source files and spans (where every AST node, graph node and diagnostic points to), and
the one rule by which a program file or an import is read."""

from __future__ import annotations

import bisect
import os
import re
import stat
import sys
from array import array
from dataclasses import dataclass

MAX_SOURCE_BYTES = 16 * 2**20  # far beyond any program; bounds what reading one may cost
_NEWLINE = re.compile("\n")


class UnreadableSource(OSError):
    """A path stepc does not read as a program: missing, a directory, a device, a FIFO,
    too large, or refused by the system; the message says which."""


def read_source_bytes(path: str) -> bytes:
    """The bytes of the program file `path` ('-' is standard input): a regular file of at
    most MAX_SOURCE_BYTES. Anything else raises UnreadableSource, before it is opened when
    it is not a regular file (opening a FIFO waits for a writer; a device never ends)."""
    if path == "-":
        data = sys.stdin.buffer.read(MAX_SOURCE_BYTES + 1)
        if len(data) > MAX_SOURCE_BYTES:
            raise UnreadableSource(_too_large("standard input"))
        return data
    try:
        _check_regular(path, os.stat(path))
        with open(path, "rb", opener=_open_nonblocking) as f:
            _check_regular(path, os.fstat(f.fileno()))  # the file opened is the one checked
            data = f.read(MAX_SOURCE_BYTES + 1)
    except FileNotFoundError:
        raise UnreadableSource(f"no such file: {path}") from None
    except IsADirectoryError:
        raise UnreadableSource(f"{path} is a directory, not a .step file") from None
    except UnreadableSource:
        raise
    except OSError as e:
        raise UnreadableSource(f"cannot read {path}: {e.strerror or e}") from None
    if len(data) > MAX_SOURCE_BYTES:
        raise UnreadableSource(_too_large(path))
    return data


def _open_nonblocking(path: str, flags: int) -> int:
    """Open without waiting: a FIFO put in the file's place after the check opens at once."""
    return os.open(path, flags | getattr(os, "O_NONBLOCK", 0))


def _check_regular(path: str, info: os.stat_result) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError
    if not stat.S_ISREG(info.st_mode):
        raise UnreadableSource(f"{path} is not a regular file (a device, a FIFO or a "
                               "socket), so it is not read as a .step program")
    if info.st_size > MAX_SOURCE_BYTES:
        raise UnreadableSource(_too_large(path))


def _too_large(what: str) -> str:
    return f"{what} is larger than {MAX_SOURCE_BYTES:,} bytes, too large for a .step program"


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
        self._line_starts = array("q", [0])  # 8 bytes a line: a file may be all newlines
        self._line_starts.extend(m.end() for m in _NEWLINE.finditer(self.text))

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

    @property
    def line_count(self) -> int:
        """Lines, counting the empty one after a final newline."""
        return len(self._line_starts)

    def line_length(self, line: int) -> int:
        """Characters of a 1-based line, without its newline."""
        start = self._line_starts[line - 1]
        if line < len(self._line_starts):
            return self._line_starts[line] - 1 - start
        return len(self.text) - start

    def line_text(self, line: int, start: int = 0, stop: int | None = None) -> str:
        """The text of a 1-based line, without its newline (characters [start, stop) of
        it when given)."""
        if line < 1 or line > len(self._line_starts):
            return ""
        first = self._line_starts[line - 1]
        length = self.line_length(line)
        stop = length if stop is None else min(stop, length)
        return self.text[first + start: first + max(start, stop)]
