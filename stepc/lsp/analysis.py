"""One check of an editor's document: compile it (with the unsaved text of every open file
it imports) and index the result. Runs in the server's worker thread."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from stepc.diagnostics import StepError
from stepc.frontend import Compiled, compile_source, read_source
from stepc.grammar import ast
from stepc.grammar.parse import parse
from stepc.lsp.index import Index
from stepc.source import SourceFile, Span


@dataclass
class Settings:
    """What the editor configures: -D overrides, a hardware preset, inlay hints."""

    defines: dict[str, int] = field(default_factory=dict)
    hw: str | None = None
    inlay_hints: bool = False


@dataclass
class Checked:
    """A document's latest check: the compiler's result and its index."""

    path: str
    version: int
    compiled: Compiled
    index: Index
    seconds: float
    costs: dict = field(default_factory=dict)  # hardware name -> (Analysis, config), lazily


def check_document(path: str, text: str, version: int, open_texts: dict[str, str],
                   settings: Settings) -> Checked:
    """Compile `text` as the file `path`; imports come from `open_texts` when the editor
    has them open, else from disk."""
    t0 = time.perf_counter()
    modules: dict[str, ast.Module] = {}

    def load(name: str, span: Span | None):
        src = SourceFile(name, open_texts[name]) if name in open_texts else \
            read_source(name, span)
        module = parse(src)
        modules[name] = module
        return src, module

    src = SourceFile(path, text)
    try:
        modules[path] = parse(src)
    except StepError:  # compile_source reports it
        pass
    compiled = compile_source(src, dict(settings.defines), path, load, modules.get(path))
    index = Index({p: modules[p] for p in modules}, compiled.sources, compiled.typed)
    return Checked(path, version, compiled, index, time.perf_counter() - t0)
