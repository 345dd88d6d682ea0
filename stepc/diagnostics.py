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


def _excerpt(span: Span, sources: dict[str, SourceFile]) -> list[str]:
    src = sources.get(span.file)
    if src is None:
        return []
    raw = src.line_text(span.line).rstrip("\r")
    if not raw and span.line > len(src.text.splitlines()) + 1:
        return []
    gutter = f"{span.line:>5} | "
    end = span.end_col if span.end_line == span.line else len(raw) + 1
    # tabs are expanded the same way in the source line and under it
    lead = len(raw[: span.col - 1].expandtabs(4))
    width = max(1, len(raw[: max(end, span.col + 1) - 1].expandtabs(4)) - lead)
    caret = " " * (len(gutter) - 2) + "| " + " " * lead + "^" * width
    return [gutter + raw.expandtabs(4), caret]


def render_text(diags: list[Diagnostic], sources: dict[str, SourceFile],
                werror: bool = False) -> str:
    """Render diagnostics the gcc/clang way, followed by a count line (`werror`: which says
    that the warnings count as errors)."""
    out: list[str] = []
    for d in diags:
        where = f"{d.span}: " if d.span else "stepc: "
        out.append(f"{where}{d.severity.value}[{d.code}]: {d.message}")
        if d.span:
            out.extend(_excerpt(d.span, sources))
        for n in d.notes:
            where = f"{n.span}: " if n.span else ""
            out.append(f"{where}note: {n.message}")
    n_err = sum(d.severity is Severity.ERROR for d in diags)
    n_warn = sum(d.severity is Severity.WARNING for d in diags)
    if diags:
        out.append(f"{n_err} error{'s' if n_err != 1 else ''}, "
                   f"{n_warn} warning{'s' if n_warn != 1 else ''}"
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
    return {"code": d.code, "severity": d.severity.value, "message": d.message,
            "location": span_json(d.span),
            "notes": [{"message": n.message, "location": span_json(n.span)} for n in d.notes]}
