"""The STeP language server (`stepc lsp`): one `StepServer` (stepc.lsp.session) with the
document lifecycle handlers here and the requests of stepc.lsp.features registered on it,
served over standard input and output."""

from __future__ import annotations

from lsprotocol import types as lsp
from pygls.uris import to_fs_path

from stepc.lsp import features
from stepc.lsp.session import StepServer

server = StepServer()


# ---------------------------------------------------------------- lifecycle
@server.feature(lsp.INITIALIZE)
def initialize(ls: StepServer, params: lsp.InitializeParams) -> None:
    if params.initialization_options:
        ls.update_settings(params.initialization_options)


@server.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)
def did_change_configuration(ls: StepServer, params: lsp.DidChangeConfigurationParams):
    ls.update_settings(params.settings)


@server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: StepServer, params: lsp.DidOpenTextDocumentParams) -> None:
    ls.schedule(params.text_document.uri, 0)


@server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: StepServer, params: lsp.DidChangeTextDocumentParams) -> None:
    uri = params.text_document.uri
    ls.schedule(uri)
    path = to_fs_path(uri)
    for other, checked in list(ls.latest.items()):  # programs that import this file
        if other != uri and path in checked.compiled.sources:
            ls.schedule(other)


@server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: StepServer, params: lsp.DidSaveTextDocumentParams) -> None:
    ls.schedule(params.text_document.uri, 0)


@server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: StepServer, params: lsp.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    ls.generation[uri] = ls.generation.get(uri, 0) + 1
    for name in (ls.latest, ls.good):
        name.pop(uri, None)
    for target in ls.published.pop(uri, set()) | {uri}:
        ls.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(target, []))



features.register(server)


def serve() -> None:
    """Run the server on standard input and output until the editor stops it."""
    import gc

    from stepc.lsp.framing import start_io
    gc.freeze()  # the modules loaded so far live as long as the server: never rescan them
    start_io(server)

