"""The language server's requests: hover, definition, references, completion, signature
help, document symbols, formatting and inlay hints, registered on a server by `register`."""

from __future__ import annotations

import asyncio

from lsprotocol import types as lsp
from pygls.uris import from_fs_path

from stepc.app import completion
from stepc.app.document import shape_hints
from stepc.app.editor import FormatError, format_text
from stepc.app.hover import hover_text, needs_analysis
from stepc.app.index import Outline
from stepc.diagnostics import StepError
from stepc.lsp.session import StepServer, location, to_range, to_utf16

SYMBOL_KIND = {"param": lsp.SymbolKind.Constant, "tensor": lsp.SymbolKind.Array,
               "stream": lsp.SymbolKind.Variable, "graph": lsp.SymbolKind.Function,
               "loop": lsp.SymbolKind.Namespace, "binding": lsp.SymbolKind.Variable,
               "import": lsp.SymbolKind.Module}
ITEM_KIND = {"operator": lsp.CompletionItemKind.Function,
             "function": lsp.CompletionItemKind.Function,
             "attribute": lsp.CompletionItemKind.Property,
             "value": lsp.CompletionItemKind.Value, "name": lsp.CompletionItemKind.Variable,
             "keyword": lsp.CompletionItemKind.Keyword,
             "preset": lsp.CompletionItemKind.Constant}


HANDLERS: list[tuple[str, object, object]] = []  # (LSP method, its options, handler)


def feature(method: str, options=None):
    """Mark a function as the handler of an LSP `method`, for `register`."""
    def mark(handler):
        HANDLERS.append((method, options, handler))
        return handler
    return mark


def register(server: StepServer) -> None:
    """Register every request handler of this module on `server`."""
    for method, options, handler in HANDLERS:
        server.feature(method, options)(handler)


@feature(lsp.TEXT_DOCUMENT_HOVER)
async def hover(ls: StepServer, params: lsp.HoverParams) -> lsp.Hover | None:
    await ls.current(params.text_document.uri)
    checked, path, line, col = ls.lookup(params.text_document.uri, params.position)
    if checked is None:
        return None
    item = checked.index.at(path, line, col)
    if item is None:
        return None
    settings = ls.settings
    if needs_analysis(item, settings):
        # the roofline numbers need a cost analysis: made off the editor's thread
        text = await asyncio.get_running_loop().run_in_executor(
            ls.costs, hover_text, checked, item, settings)
    else:
        text = hover_text(checked, item, settings)
    if text is None:
        return None
    return lsp.Hover(lsp.MarkupContent(lsp.MarkupKind.Markdown, text),
                     to_range(item.span, checked.compiled.sources))


@feature(lsp.TEXT_DOCUMENT_DEFINITION)
async def definition(ls: StepServer, params: lsp.DefinitionParams) -> list[lsp.Location] | None:
    await ls.current(params.text_document.uri)
    checked, path, line, col = ls.lookup(params.text_document.uri, params.position)
    if checked is None:
        return None
    target = checked.index.import_at(path, line, col)
    if target is not None:
        origin = lsp.Range(lsp.Position(0, 0), lsp.Position(0, 0))
        return [lsp.Location(from_fs_path(target), origin)]
    item = checked.index.at(path, line, col)
    if item is None:
        return None
    return [location(d.span, checked.compiled.sources) for d in checked.index.resolve(item)]


@feature(lsp.TEXT_DOCUMENT_REFERENCES)
async def references(ls: StepServer, params: lsp.ReferenceParams) -> list[lsp.Location] | None:
    await ls.current(params.text_document.uri)
    checked, path, line, col = ls.lookup(params.text_document.uri, params.position)
    if checked is None:
        return None
    item = checked.index.at(path, line, col)
    if item is None:
        return None
    spans = checked.index.references(item, params.context.include_declaration)
    return [location(s, checked.compiled.sources) for s in spans]


@feature(lsp.TEXT_DOCUMENT_COMPLETION,
                lsp.CompletionOptions(trigger_characters=["=", "(", ",", " "]))
def complete(ls: StepServer, params: lsp.CompletionParams) -> lsp.CompletionList:
    checked, path, line, _ = ls.lookup(params.text_document.uri, params.position)
    before = ls.text_before(params.text_document.uri, params.position)
    items = completion.complete(before, checked.index if checked else None, path, line)
    return lsp.CompletionList(False, [
        lsp.CompletionItem(i.label, kind=ITEM_KIND[i.kind], detail=i.detail or None,
                           documentation=lsp.MarkupContent(lsp.MarkupKind.Markdown, i.doc)
                           if i.doc else None, insert_text=i.insert)
        for i in items])


@feature(lsp.TEXT_DOCUMENT_SIGNATURE_HELP,
                lsp.SignatureHelpOptions(trigger_characters=["(", ","],
                                         retrigger_characters=["="]))
def signature_help(ls: StepServer, params: lsp.SignatureHelpParams) -> lsp.SignatureHelp | None:
    checked, _, _, _ = ls.lookup(params.text_document.uri, params.position)
    ctx = completion.call_context(ls.text_before(params.text_document.uri, params.position))
    sig = completion.signature(ctx, checked.index if checked else None) if ctx else None
    if sig is None:
        return None
    label, params_, active, doc = sig
    info = lsp.SignatureInformation(
        label, lsp.MarkupContent(lsp.MarkupKind.Markdown, doc),
        [lsp.ParameterInformation(p, d or None) for p, d in params_])
    return lsp.SignatureHelp([info], active_signature=0, active_parameter=active)


@feature(lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
async def document_symbols(ls: StepServer,
                     params: lsp.DocumentSymbolParams) -> list[lsp.DocumentSymbol] | None:
    await ls.current(params.text_document.uri)
    checked, path, _, _ = ls.lookup(params.text_document.uri, lsp.Position(0, 0))
    if checked is None:
        return None
    sources = checked.compiled.sources

    def symbol(o: Outline) -> lsp.DocumentSymbol:
        return lsp.DocumentSymbol(o.name, SYMBOL_KIND[o.kind], to_range(o.span, sources),
                                  to_range(o.selection, sources), detail=o.detail or None,
                                  children=[symbol(c) for c in o.children] or None)
    return [symbol(o) for o in checked.index.outlines.get(path, [])]


@feature(lsp.TEXT_DOCUMENT_FORMATTING)
async def formatting(ls: StepServer,
                     params: lsp.DocumentFormattingParams) -> list[lsp.TextEdit]:
    """The whole document as `stepc fmt` lays it out (nothing when it has a syntax
    error: the error is already shown as a diagnostic). Formatted in the checks' worker
    thread: the parser serves one thread at a time."""
    doc = ls.document(params.text_document.uri)
    text = doc.source
    try:
        new = await asyncio.get_running_loop().run_in_executor(
            ls.checker, format_text, text, doc.path or doc.uri)
    except (StepError, FormatError) as e:
        ls.window_show_message(lsp.ShowMessageParams(
            lsp.MessageType.Warning, f"stepc fmt: not formatted: {e}"))
        return []
    if new == text:
        return []
    end = lsp.Position(len(text.splitlines(True)), 0)
    return [lsp.TextEdit(lsp.Range(lsp.Position(0, 0), end), new)]


@feature(lsp.TEXT_DOCUMENT_INLAY_HINT)
async def inlay_hints(ls: StepServer, params: lsp.InlayHintParams) -> list[lsp.InlayHint]:
    """Each binding's inferred shape at the end of its line (setting stepc.inlayHints)."""
    if not ls.settings.inlay_hints:
        return []
    await ls.current(params.text_document.uri)
    checked, path, _, _ = ls.lookup(params.text_document.uri, lsp.Position(0, 0))
    if checked is None:
        return []
    src = checked.compiled.sources.get(path)
    first, last = params.range.start.line + 1, params.range.end.line + 1
    hints = []
    for end_line, label in shape_hints(checked, path, first, last):
        text = src.line_text(end_line)
        hints.append(lsp.InlayHint(lsp.Position(end_line - 1, to_utf16(text, len(text))),
                                   label, kind=lsp.InlayHintKind.Type, padding_left=True))
    return hints
