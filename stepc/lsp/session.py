"""The language server's state (`StepServer`: documents, settings, the latest checks) and
the conversions of positions and diagnostics to LSP's.

Each edit schedules a check of the document after a short pause (DEBOUNCE seconds); checks
run one at a time in a worker thread, and a check whose document changed again meanwhile
is dropped. Hover, definition, references, the outline and inlay hints of a document not
yet checked wait for its first check (at most CHECK_WAIT seconds), so a hover sent right
after opening a file is answered from that file; after that, every query answers at once
from the last check that produced a typed program, so the editor never waits for a check.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path, to_fs_path
from pygls.workspace import TextDocument

from stepc import __version__
from stepc.app.document import Checked, Settings, check_document
from stepc.codes import UNKNOWN_OVERRIDE
from stepc.diagnostics import Diagnostic, Severity, StepError, did_you_mean
from stepc.source import SourceFile, Span

DEBOUNCE = 0.3  # seconds of quiet after an edit before the document is checked
CHECK_WAIT = 5.0  # seconds a query waits for the first check of a document just opened
# The `stepc` settings an editor may send (`command` is the editor's own: how to start us).
SETTINGS = ("defines", "hw", "inlayHints", "command")
SEVERITY = {Severity.ERROR: lsp.DiagnosticSeverity.Error,
            Severity.WARNING: lsp.DiagnosticSeverity.Warning,
            Severity.NOTE: lsp.DiagnosticSeverity.Information}


class RequestFailed(JsonRpcException):
    """LSP's RequestFailed: a request understood but about something that is not there."""

    CODE = -32803


class StepServer(LanguageServer):
    """Documents, settings and the latest checks."""

    def __init__(self):
        super().__init__("stepc", __version__,
                         text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental)
        self.settings = Settings()
        self.latest: dict[str, Checked] = {}  # uri -> the latest check
        self.good: dict[str, Checked] = {}  # uri -> the latest check with a typed program
        self.generation: dict[str, int] = {}
        self.pending: dict[str, asyncio.Task] = {}
        self.published: dict[str, set[str]] = {}  # document uri -> uris given diagnostics
        # checks and formatting, one at a time: the parser serves one thread at a time
        self.checker = ThreadPoolExecutor(1, thread_name_prefix="stepc-check")
        self.costs = ThreadPoolExecutor(1, thread_name_prefix="stepc-roofline")

    # ------------------------------------------------------------ checking
    def schedule(self, uri: str, delay: float = DEBOUNCE) -> None:
        """Check `uri` after `delay` seconds unless it changes again first."""
        self.generation[uri] = gen = self.generation.get(uri, 0) + 1
        task = self.pending.pop(uri, None)
        if task is not None:
            task.cancel()
        self.pending[uri] = asyncio.ensure_future(self._check(uri, gen, delay))

    async def _check(self, uri: str, gen: int, delay: float) -> None:
        await asyncio.sleep(delay)
        if self.generation.get(uri) != gen or uri not in self.workspace.text_documents:
            return  # edited again, or closed
        doc = self.workspace.text_documents[uri]
        path = to_fs_path(uri) or uri
        text, version = doc.source, doc.version or 0
        open_texts, settings = self._snapshot()
        loop = asyncio.get_running_loop()

        def job():
            if self.generation.get(uri) != gen:  # edited again while queued
                return None
            loop.call_soon_threadsafe(self.log, f"checking {path} (version {version})")
            return check_document(path, text, version, open_texts, settings)

        try:
            checked = await loop.run_in_executor(self.checker, job)
        except Exception as e:  # pragma: no cover - a bug in stepc
            self.window_log_message(lsp.LogMessageParams(
                lsp.MessageType.Error, f"stepc: internal error while checking {path}: {e!r}"))
            return
        if checked is None or self.generation.get(uri) != gen:
            return
        self.latest[uri] = checked
        if checked.compiled.typed is not None:
            self.good[uri] = checked
        self.publish(uri, checked)
        self.log(f"checked {path} (version {version}) in {checked.seconds:.3f} s")

    def _snapshot(self) -> tuple[dict[str, str], Settings]:
        """The texts of the open documents by path, and a copy of the settings, for a
        check in the worker thread."""
        open_texts = {to_fs_path(d.uri) or d.uri: d.source
                      for d in self.workspace.text_documents.values()}
        return open_texts, Settings(dict(self.settings.defines), self.settings.hw,
                                    self.settings.inlay_hints)

    async def _check_unopened(self, uri: str) -> None:
        """Check a document the editor has not opened, from the file on disk (again when
        the file changed since), without publishing diagnostics for it."""
        doc = self.document(uri)
        path = to_fs_path(uri)
        try:
            stamp = os.stat(path).st_mtime_ns
        except OSError:
            stamp = 0
        last = self.latest.get(uri)
        if last is not None and last.version == stamp:
            return
        open_texts, settings = self._snapshot()
        checked = await asyncio.get_running_loop().run_in_executor(
            self.checker, check_document, path, doc.source, stamp, open_texts, settings)
        self.latest[uri] = checked
        if checked.compiled.typed is not None:
            self.good[uri] = checked

    def document(self, uri: str) -> TextDocument:
        """The editor's text of `uri`, or the file on disk when the editor has not opened
        it; a request about neither is refused naming the URI."""
        doc = self.workspace.text_documents.get(uri)
        if doc is not None:
            return doc
        path = to_fs_path(uri)
        if path is None:
            raise RequestFailed(f"{uri} is not open in the editor and is not a file: URI")
        try:
            with open(path, encoding="utf-8") as f:
                return TextDocument(uri, f.read())
        except OSError as e:
            raise RequestFailed(f"{uri} is not open in the editor and cannot be read: "
                                f"{e.strerror or 'no such file'}") from None
        except UnicodeDecodeError:
            raise RequestFailed(f"{uri} is not open in the editor and is not UTF-8 "
                                f"text") from None
        except ValueError:  # a NUL in the path
            raise RequestFailed(f"{uri!r} is not open in the editor and is not a file "
                                f"name") from None

    def log(self, message: str, kind: lsp.MessageType = lsp.MessageType.Log) -> None:
        """A line in the editor's log of the server (window/logMessage)."""
        self.window_log_message(lsp.LogMessageParams(kind, f"stepc: {message}"))

    def publish(self, uri: str, checked: Checked) -> None:
        """Diagnostics of the program and of every file it imports, as `stepc check`
        reports them."""
        by_file: dict[str, list[lsp.Diagnostic]] = {}
        sources = checked.compiled.sources
        for d in checked.compiled.diagnostics.sorted():
            file = d.span.file if d.span is not None else checked.path
            by_file.setdefault(file, []).append(to_lsp_diagnostic(d, sources))
        for name in checked.compiled.unknown_overrides:
            params = checked.compiled.typed.program.params if checked.compiled.typed else {}
            by_file.setdefault(checked.path, []).append(lsp.Diagnostic(
                lsp.Range(lsp.Position(0, 0), lsp.Position(0, 0)),
                f"stepc.defines {name}: the program has no parameter `{name}`"
                f"{did_you_mean(name, params)}", lsp.DiagnosticSeverity.Warning,
                code=UNKNOWN_OVERRIDE, source="stepc"))
        for span, target in checked.index.imports:
            n = sum(1 for d in by_file.get(target, ()) if d.severity == 1)
            if n and span.file == checked.path:
                by_file.setdefault(checked.path, []).append(lsp.Diagnostic(
                    to_range(span, sources), f"{n} error{'s' if n > 1 else ''} in the "
                    f"imported file {os.path.basename(target)}", lsp.DiagnosticSeverity.Error,
                    source="stepc"))
        uris = {from_fs_path(f) if os.path.isabs(f) else f: diags
                for f, diags in by_file.items()}
        uris.setdefault(uri, [])
        for stale in self.published.get(uri, set()) - set(uris):
            uris[stale] = []
        for target, diags in uris.items():
            version = checked.version if target == uri else None
            self.text_document_publish_diagnostics(
                lsp.PublishDiagnosticsParams(target, diags, version=version))
        self.published[uri] = {u for u, diags in uris.items() if diags}

    # ------------------------------------------------------------ queries
    async def current(self, uri: str) -> None:
        """Until the document has been checked once, wait for that check (at most
        CHECK_WAIT seconds); later queries answer at once from the last check, so an edit
        never makes the editor wait. A document the editor has not opened is checked from
        disk."""
        if uri not in self.workspace.text_documents:
            await self._check_unopened(uri)
            return
        deadline = asyncio.get_running_loop().time() + CHECK_WAIT
        while uri not in self.latest:
            task = self.pending.get(uri)
            left = deadline - asyncio.get_running_loop().time()
            if task is None or task.done() or left <= 0:
                return
            await asyncio.wait({task}, timeout=left)  # a newer edit may replace the task

    def lookup(self, uri: str, pos: lsp.Position):
        """(checked, file path, 1-based line, col) for a position, from the last good
        check of the document."""
        checked = self.good.get(uri) or self.latest.get(uri)
        doc = self.document(uri)
        line = doc.lines[pos.line] if pos.line < len(doc.lines) else ""
        return checked, to_fs_path(uri) or uri, pos.line + 1, from_utf16(line, pos.character) + 1

    def text_before(self, uri: str, pos: lsp.Position) -> str:
        doc = self.document(uri)
        lines = doc.lines[:pos.line]
        current = doc.lines[pos.line] if pos.line < len(doc.lines) else ""
        return "".join(lines) + current[:from_utf16(current, pos.character)]

    def update_settings(self, options) -> None:
        """Apply the `stepc` settings; refuse bad values with a message."""
        if not isinstance(options, dict):
            return
        options = options.get("stepc", options)
        problems = [f"stepc.{key}: no such setting{did_you_mean(key, SETTINGS)}"
                    for key in options if key not in SETTINGS]
        defines: dict[str, int] = {}
        raw = options.get("defines") or {}
        if isinstance(raw, list):  # ["TB=32", ...], as on the command line
            raw = dict(item.partition("=")[::2] for item in raw if isinstance(item, str))
        if not isinstance(raw, dict):
            problems.append("stepc.defines: expected {\"NAME\": value} or [\"NAME=VALUE\"]")
            raw = {}
        for name, value in raw.items():
            try:
                defines[str(name).strip()] = int(str(value).strip(), 0)
            except ValueError:
                problems.append(f"stepc.defines {name}: expected an integer, found {value!r}")
        hw = options.get("hw") or None
        if hw is not None:
            from stepc.app.inputs import load_hardware
            try:
                load_hardware(str(hw))
            except StepError as e:  # an InputError: the configuration does not load
                problems.append(f"stepc.hw: {e}")
                hw = None
        self.settings = Settings(defines, hw, bool(options.get("inlayHints", False)))
        for p in problems:
            self.window_show_message(lsp.ShowMessageParams(lsp.MessageType.Error, p))
        for uri in list(self.workspace.text_documents):
            self.schedule(uri, 0)




# ---------------------------------------------------------------- positions
def to_utf16(line: str, col0: int) -> int:
    """A 0-based code-point column as UTF-16 code units (what LSP clients count)."""
    return len(line[:col0].encode("utf-16-le")) // 2


def from_utf16(line: str, units: int) -> int:
    """A column in UTF-16 code units as a 0-based code-point column."""
    count = 0
    for i, ch in enumerate(line):
        if count >= units:
            return i
        count += 2 if ord(ch) > 0xFFFF else 1
    return len(line)


def to_range(span: Span, sources: dict[str, SourceFile]) -> lsp.Range:
    src = sources.get(span.file)

    def pos(line: int, col: int) -> lsp.Position:
        text = src.line_text(line) if src is not None else ""
        return lsp.Position(max(line - 1, 0), to_utf16(text, max(col - 1, 0)))
    return lsp.Range(pos(span.line, span.col), pos(span.end_line, span.end_col))


def location(span: Span, sources: dict[str, SourceFile]) -> lsp.Location:
    return lsp.Location(from_fs_path(span.file), to_range(span, sources))


def to_lsp_diagnostic(d: Diagnostic, sources: dict[str, SourceFile]) -> lsp.Diagnostic:
    """A stepc diagnostic with its code, range and notes (located notes as related
    information, the others appended to the message)."""
    message = d.message + "".join(f"\nnote: {n.message}" for n in d.notes if n.span is None)
    related = [lsp.DiagnosticRelatedInformation(location(n.span, sources), n.message)
               for n in d.notes if n.span is not None]
    rng = to_range(d.span, sources) if d.span is not None else \
        lsp.Range(lsp.Position(0, 0), lsp.Position(0, 0))
    return lsp.Diagnostic(rng, message, SEVERITY[d.severity], code=d.code, source="stepc",
                          related_information=related or None)

