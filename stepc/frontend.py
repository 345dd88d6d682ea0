"""Source file -> checked program: reading, parsing, elaborating and checking in one call."""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable
from dataclasses import dataclass

from stepc.codes import UNREADABLE_FILE, UNREADABLE_GRAPH
from stepc.diagnostics import Diagnostic, DiagnosticBag, Note, Severity, StepError
from stepc.grammar import ast
from stepc.grammar.parse import decode_source, parse
from stepc.graph.declarations import import_path
from stepc.graph.elaborate import elaborate
from stepc.source import SourceFile, Span, UnreadableSource, read_source_bytes
from stepc.typecheck.checker import TypedProgram, check


@dataclass
class Compiled:
    """Everything the front end produced for one program, even when it has errors."""

    name: str
    typed: TypedProgram | None
    diagnostics: DiagnosticBag
    sources: dict[str, SourceFile]
    unknown_overrides: list[str]

    @property
    def ok(self) -> bool:
        return self.typed is not None and not self.diagnostics.errors

    @property
    def typed_program(self) -> TypedProgram:
        """The checked program, for code that reads it once compilation went through."""
        if self.typed is None:
            raise ValueError(f"{self.name}: the program did not check")
        return self.typed


def read_source(path: str, span: Span | None = None) -> SourceFile:
    """Read a program file ('-' is standard input) by the one rule of
    `stepc.source.read_source_bytes`; problems become diagnostics located at `span` (the
    import that names the file), a file that is not UTF-8 text at its first bad byte."""
    try:
        data = read_source_bytes(path)
    except UnreadableSource as e:
        raise StepError([Diagnostic(UNREADABLE_FILE, Severity.ERROR, str(e), span)]) from None
    name = "<stdin>" if path == "-" else path
    try:
        return decode_source(name, data)
    except StepError as e:
        if span is not None:
            e.diagnostics = [Diagnostic(d.code, d.severity, d.message, d.span,
                                        d.notes + (Note(f"{name} is imported here", span),))
                             for d in e.diagnostics]
        raise


GRAPH_SUFFIX = ".pb"  # the reference toolchain's ProgramGraph files


def import_graph_file(path: str, out_dir: str | None = None):
    """The program `stepc import` writes for a graph file (`Imported`, of
    stepc.interop.read.to_step), compiled under the name `GRAPH.pb (imported)`. Raises
    ImportError without protobuf and `InteropError` for a graph stepc cannot read or say."""
    from stepc.interop.read.to_step import import_graph  # protobuf is needed only here

    name = f"{path} (imported)"
    where = os.path.normpath(path)
    return import_graph(path, lambda text: compile_source(SourceFile(name, text), {}, where),
                        out_dir)


def _compile_graph(path: str, overrides: dict[str, int]) -> Compiled:
    """A `.pb` graph imported and compiled once (again only to apply overrides)."""
    try:
        from stepc.interop.read.reader import GraphFileError, InteropError
    except ImportError:
        raise StepError([Diagnostic(UNREADABLE_GRAPH,
                                    Severity.ERROR, f"{path}: reading STeP IR graphs "
                                    "needs protobuf: pip install 'stepc[interop]'", None)]) \
            from None
    try:
        imported = import_graph_file(path)
    except GraphFileError as e:  # the file, not its contents: a usage error like a .step's
        raise StepError([Diagnostic(UNREADABLE_FILE, Severity.ERROR, str(e), None)]) from None
    except InteropError as e:
        raise StepError([Diagnostic(UNREADABLE_GRAPH, Severity.ERROR, str(e), None)]) from None
    if not overrides:
        return imported.compiled
    src = SourceFile(f"{path} (imported)", imported.text)
    return compile_source(src, overrides, os.path.normpath(path))


def _load_import(path: str, span: Span):
    src = read_source(path, span)
    return src, parse(src)


def guarded_loader(may_read: Callable[[str], None] | None):
    """The loader of imports that calls `may_read(path)` before reading a file (it raises
    to refuse one); the plain loader when `may_read` is None."""
    if may_read is None:
        return _load_import

    def load(path: str, span: Span):
        may_read(path)
        return _load_import(path, span)
    return load


def program_files(path: str) -> dict[str, bytes]:
    """The bytes of a program file and of every file it imports, transitively, keyed by the
    paths the elaborator asks for. A file that is missing or does not parse ends the walk
    there (compiling reports it)."""
    files: dict[str, bytes] = {}

    def load_file(name: str, span: Span | None):
        files[name] = read_source_bytes(name)
        src = decode_source(name, files[name])
        return src, parse(src)

    try:
        _, module = load_file(os.path.normpath(path), None)
    except (OSError, StepError):
        return files
    ImportWalk(load_file, os.path.normpath(path), module)
    return files


class ImportWalk:
    """The one walk over a program's imports (they are top-level statements): every file the
    program imports, transitively, loaded once by `load_file(name, span) -> (source, syntax
    tree)` before elaboration. `load` answers the elaborator; a file that could not be
    loaded is loaded again there, so that its error is located at the import."""

    def __init__(self, load_file, path: str | None, module: ast.Module):
        self.load_file = load_file
        self.found: dict[str, tuple[SourceFile, ast.Module] | None] = {}
        todo = _imports(path, module)
        while todo:
            name = todo.pop()
            if name in self.found:
                continue
            try:
                loaded = load_file(name, None)
            except (OSError, StepError):
                self.found[name] = None
                continue
            self.found[name] = loaded
            todo += _imports(name, loaded[1])

    def load(self, name: str, span: Span):
        found = self.found.get(name)
        return found if found is not None else self.load_file(name, span)


def _imports(path: str | None, module: ast.Module) -> list[str]:
    return [import_path(path, s.path) for s in module.statements if isinstance(s, ast.Import)]


def compile_files(files: dict[str, bytes], path: str,
                  overrides: dict[str, int] | None = None,
                  parsed: dict | None = None) -> Compiled:
    """Compile a program from contents read earlier (`program_files`), not from disk.
    `parsed` ((file name, contents) -> (source, syntax tree)), when given, keeps each
    file's parse for later compiles: a syntax tree does not depend on the overrides."""
    def load(name: str, span: Span | None):
        if name not in files:
            raise StepError([Diagnostic(UNREADABLE_FILE, Severity.ERROR, f"no such file: {name}",
                                        span)])
        key = (name, files[name])
        if parsed is not None and key in parsed:
            return parsed[key]
        src = decode_source(name, files[name])
        out = src, parse(src)
        if parsed is not None:
            parsed[key] = out
        return out

    files = {os.path.normpath(name): data for name, data in files.items()}
    path = os.path.normpath(path)
    try:
        src, module = load(path, None)
    except StepError as e:
        bag = DiagnosticBag()
        bag.extend(e.diagnostics)
        return Compiled(path, None, bag, {}, [])
    return compile_source(src, overrides, path, load, module)


@contextlib.contextmanager
def _collector_paused():
    """Cyclic garbage collection held off while a program compiles: the front end builds
    hundreds of thousands of objects that live as long as the program, and the collector's
    repeated passes over them cost ~15% of a 128-expert compile. Collection resumes after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def compile_source(src: SourceFile, overrides: dict[str, int] | None = None,
                   path: str | None = None, loader=_load_import,
                   module: ast.Module | None = None) -> Compiled:
    """Parse, elaborate and check one source file (imports are loaded by `loader`, through
    the `ImportWalk`; `module` is the file already parsed, when the caller has it)."""
    with _collector_paused():
        return _compile(src, overrides, path, loader, module)


def _compile(src: SourceFile, overrides: dict[str, int] | None, path: str | None, loader,
             module: ast.Module | None) -> Compiled:
    bag = DiagnosticBag()
    sources = {src.name: src}
    overrides = overrides or {}
    try:
        module = parse(src) if module is None else module
    except StepError as e:
        bag.extend(e.diagnostics)
        return Compiled(src.name, None, bag, sources, [])
    walk = ImportWalk(loader, path or module.name, module)
    prog, ebag, used = elaborate(module, src, overrides, walk.load, path)
    bag.extend(ebag.items)
    if prog is None:  # too large to check
        return Compiled(src.name, None, bag, sources, sorted(set(overrides) - used))
    sources.update(prog.sources)
    typed = check(prog, bag)
    unknown = sorted(set(overrides) - used)
    return Compiled(src.name, typed, bag, sources, unknown)


def compile_file(path: str, overrides: dict[str, int] | None = None,
                 may_read: Callable[[str], None] | None = None) -> Compiled:
    """Read and compile a program file ('-' for standard input; a `.pb` STeP IR graph is
    imported first); `may_read` vets each imported file (`guarded_loader`)."""
    try:
        if path.endswith(GRAPH_SUFFIX):
            return _compile_graph(path, overrides or {})
        src = read_source(path)
    except StepError as e:
        bag = DiagnosticBag()
        bag.extend(e.diagnostics)
        name = "<stdin>" if path == "-" else path
        return Compiled(name, None, bag, {}, [])
    return compile_source(src, overrides, None if path == "-" else os.path.normpath(path),
                          guarded_loader(may_read))


def compile_text(text: str | bytes, name: str, overrides: dict[str, int] | None = None,
                 may_read: Callable[[str], None] | None = None) -> Compiled:
    """Compile program text held in memory (bytes are read as UTF-8) named `name`; imports
    resolve beside it, each vetted by `may_read` (`guarded_loader`)."""
    if isinstance(text, (bytes, bytearray)):
        try:
            src = decode_source(name, bytes(text))
        except StepError as e:  # binary or not UTF-8: that one error
            bag = DiagnosticBag()
            bag.extend(e.diagnostics)
            return Compiled(name, None, bag, {}, [])
    else:
        src = SourceFile(name, text)
    path = os.path.normpath(name) if not name.startswith("<") else None
    return compile_source(src, overrides, path, guarded_loader(may_read))

