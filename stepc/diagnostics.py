"""Diagnostics as values: codes, spans, notes, and their text and JSON renderings.

Every problem stepc finds in a program is a `Diagnostic`. Passes append them to a
`DiagnosticBag` and keep going, so one run reports every error it can. Renderers
follow the gcc/clang convention: `file:line:col: error[E0301]: message`, then the
source line with the offending text underlined, then notes.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from enum import Enum

from stepc.source import SourceFile, Span


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"


@dataclass(frozen=True)
class Note:
    """A secondary message, optionally pointing at another place in the source."""

    message: str
    span: Span | None = None


@dataclass(frozen=True)
class Diagnostic:
    """One finding: a stable code, a severity, a location, a message and notes."""

    code: str
    severity: Severity
    message: str
    span: Span | None
    notes: tuple[Note, ...] = ()

    def sort_key(self) -> tuple:
        s = self.span
        return (s.file, s.line, s.col, self.code) if s else ("", 0, 0, self.code)


@dataclass
class DiagnosticBag:
    """An ordered collection of diagnostics, deduplicated."""

    items: list[Diagnostic] = field(default_factory=list)
    seen: set = field(default_factory=set)

    def add(self, d: Diagnostic) -> None:
        if d not in self.seen:
            self.seen.add(d)
            self.items.append(d)

    def error(self, code: str, message: str, span: Span | None, notes=()) -> None:
        self.add(Diagnostic(code, Severity.ERROR, message, span, tuple(notes)))

    def warning(self, code: str, message: str, span: Span | None, notes=()) -> None:
        self.add(Diagnostic(code, Severity.WARNING, message, span, tuple(notes)))

    def extend(self, ds) -> None:
        for d in ds:
            self.add(d)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.items if d.severity is Severity.ERROR]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.items if d.severity is Severity.WARNING]

    def sorted(self) -> list[Diagnostic]:
        """By position; repeats of one statement (loop iterations, graph instances) collapsed."""
        firsts: dict[tuple, Diagnostic] = {}
        counts: dict[tuple, int] = {}
        for d in self.items:
            key = (d.code, d.severity, d.span)
            if d.span is None or key not in firsts:
                firsts.setdefault(key if d.span else (id(d),), d)
            counts[key] = counts.get(key, 0) + 1
        out = []
        for key, d in firsts.items():
            n = counts.get(key, 1)
            if n > 1:
                d = Diagnostic(d.code, d.severity, d.message, d.span, d.notes + (
                    Note(f"reported for {n} instances of this statement (loop iterations or "
                         "graph instances); showing the first"),))
            out.append(d)
        return sorted(out, key=Diagnostic.sort_key)


def closest(name: str, options) -> list[str]:
    """The options most like `name` that are likely misspellings of it: the nearest by
    difflib, else every option one letter away (`TB` and `TI` for `TC`)."""
    options = sorted(set(options))
    near = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    if near or len(name) < 2:
        return near
    return [o for o in options if len(o) == len(name)
            and sum(a != b for a, b in zip(o, name)) == 1][:3]


def did_you_mean(name: str, options) -> str:
    near = closest(name, options)
    return f" (did you mean {' or '.join(f'`{n}`' for n in near)}?)" if near else ""


class StepError(Exception):
    """A program or input stepc cannot use; carries the diagnostics the CLI prints. With
    `sources` (the program's files) it reads like the CLI's report: `file:line:col: ...`."""

    def __init__(self, diagnostics: list[Diagnostic], sources: dict | None = None,
                 message: str | None = None):
        super().__init__(message or "; ".join(d.message for d in diagnostics))
        self.diagnostics = diagnostics
        self.sources = sources

    def __str__(self) -> str:
        if self.sources is not None and self.diagnostics:
            return render_text(self.diagnostics, self.sources).rstrip("\n")
        return super().__str__()


EXCERPT_WIDTH = 120  # characters of a source line quoted under a diagnostic, at most
MESSAGE_WIDTH = 400  # characters of a message or note shown, at most (names can be long)
SHOWN_PER_CODE = 20  # diagnostics of one code a report lists; the others are counted
ELLIPSIS = "…"


def _excerpt(span: Span, sources: dict[str, SourceFile]) -> list[str]:
    """The source line of `span` and a caret line under it: at most EXCERPT_WIDTH
    characters around the span's start, with an ellipsis where the line goes on."""
    src = sources.get(span.file)
    if src is None or not 1 <= span.line <= src.line_count:
        return []
    length = src.line_length(span.line)
    start = 0
    if length > EXCERPT_WIDTH:  # the span's start a third of the way in
        start = max(0, min(span.col - 1 - EXCERPT_WIDTH // 3, length - EXCERPT_WIDTH))
    stop = min(length, start + EXCERPT_WIDTH)
    raw = src.line_text(span.line, start, stop).rstrip("\r")
    end = span.end_col if span.end_line == span.line else length + 1
    col, end = span.col - 1 - start, min(max(end, span.col + 1) - 1 - start, len(raw) + 1)
    # tabs are expanded the same way in the source line and under it
    lead = len(raw[:col].expandtabs(4))
    width = max(1, len(raw[:end].expandtabs(4)) - lead)
    before, after = ELLIPSIS if start else "", ELLIPSIS if stop < length else ""
    gutter = f"{span.line:>5} | "
    caret = " " * (len(gutter) - 2) + "| " + " " * (len(before) + lead) + "^" * width
    return [gutter + before + raw.expandtabs(4) + after, caret]


def bounded(message: str) -> str:
    """A message or note of at most about MESSAGE_WIDTH characters: the middle of a longer
    one (a name thousands of characters long) left out."""
    if len(message) <= MESSAGE_WIDTH:
        return message
    keep = MESSAGE_WIDTH // 2
    return (f"{message[:keep]}{ELLIPSIS} ({len(message) - 2 * keep:,} characters left out) "
            f"{ELLIPSIS}{message[-keep:]}")


def shown(diags: list[Diagnostic]) -> list[Diagnostic]:
    """The diagnostics a report lists: the first SHOWN_PER_CODE of each code, the last of
    them with a note that counts the others (10,000 unused params are not 10,000 lines)."""
    counts: dict[str, int] = {}
    for d in diags:
        counts[d.code] = counts.get(d.code, 0) + 1
    out, seen = [], dict.fromkeys(counts, 0)
    for d in diags:
        seen[d.code] += 1
        n = seen[d.code]
        if n > SHOWN_PER_CODE:
            continue
        if n == SHOWN_PER_CODE and counts[d.code] > n:
            more = counts[d.code] - n
            d = Diagnostic(d.code, d.severity, d.message, d.span, d.notes + (
                Note(f"and {more:,} more {d.code} {d.severity.value}"
                     f"{'s' if more != 1 else ''}, not listed"),))
        out.append(d)
    return out


def render_text(diags: list[Diagnostic], sources: dict[str, SourceFile],
                werror: bool = False) -> str:
    """Render diagnostics the gcc/clang way (`shown`: at most SHOWN_PER_CODE of a code),
    followed by a count line of them all (`werror`: which says that the warnings count as
    errors)."""
    out: list[str] = []
    for d in shown(diags):
        where = f"{d.span}: " if d.span else "stepc: "
        out.append(f"{where}{d.severity.value}[{d.code}]: {bounded(d.message)}")
        if d.span:
            out.extend(_excerpt(d.span, sources))
        for n in d.notes:
            where = f"{n.span}: " if n.span else ""
            out.append(f"{where}note: {bounded(n.message)}")
    n_err = sum(d.severity is Severity.ERROR for d in diags)
    n_warn = sum(d.severity is Severity.WARNING for d in diags)
    if diags:
        out.append(f"{n_err:,} error{'s' if n_err != 1 else ''}, "
                   f"{n_warn:,} warning{'s' if n_warn != 1 else ''}"
                   + (" (--werror: warnings count as errors)" if werror and n_warn else ""))
    return "\n".join(out) + ("\n" if out else "")


def span_json(span: Span | None) -> dict | None:
    """A location in stepc's JSON documents (1-based lines and columns; see
    stepc.schemas)."""
    if span is None:
        return None
    return {"file": span.file, "line": span.line, "column": span.col,
            "end_line": span.end_line, "end_column": span.end_col}


def diagnostic_json(d: Diagnostic) -> dict:
    """The JSON form of a diagnostic: code, severity, message, location and notes."""
    return {"code": d.code, "severity": d.severity.value, "message": bounded(d.message),
            "location": span_json(d.span),
            "notes": [{"message": bounded(n.message), "location": span_json(n.span)}
                      for n in d.notes]}
