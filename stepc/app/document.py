"""One check of an editor's document: compile it (with the unsaved text of every open file
it imports) and index the result (run in the language server's worker thread); the
inferred shapes its inlay hints show."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from stepc.app.index import Index
from stepc.diagnostics import StepError
from stepc.frontend import Compiled, compile_source, read_source
from stepc.grammar import ast
from stepc.grammar.parse import parse
from stepc.source import SourceFile, Span
from stepc.types import fmt_shape


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
    costs: dict = field(default_factory=dict)  # preset -> (Analysis, config, Roofline), lazily


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


def shape_hints(checked: Checked, path: str, first: int, last: int
                ) -> list[tuple[int, str]]:
    """(line, text) of the inferred shape at the end of each binding of `path` that ends
    on lines `first`..`last`."""
    src = checked.compiled.sources.get(path)
    hints = []
    for d in checked.index.defs:
        if d.kind != "stream" or d.span.file != path or not first <= d.span.line <= last:
            continue
        types = checked.index.stream_types(d)
        if not types or src is None:
            continue
        t = types[0][1]
        label = f"{d.name}: " if len(d.stmt.targets if hasattr(d.stmt, "targets") else ()) > 1 \
            else ""
        hints.append((d.stmt.span.end_line, f"{label}{fmt_shape(t.shape)} of {t.elem}"))
    return hints
