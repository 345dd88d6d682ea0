"""The use cases of `stepc import` (a STeP IR graph read as a `.step` program) and `stepc
export` (a program written as one), with the files each writes.

Both need protobuf (the `interop` extra): without it they raise `NeedsProtobuf`. A graph
stepc cannot read raises `InputError` when the file or the graph is at fault (E0002,
E0005), `StepError` when stepc cannot say it (E0005); a program the export cannot say is a
`StepError` (E0005) naming the operator."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stepc.api import InputError, StepError
from stepc.codes import UNREADABLE_FILE, UNREADABLE_GRAPH
from stepc.diagnostics import Diagnostic, Severity, diagnostic_json

if TYPE_CHECKING:
    import numpy as np
    from rich.console import Console

SIDE_SUFFIX = ".npy"  # a graph's side files live in GRAPH.npy/ beside GRAPH.pb


class NeedsProtobuf(Exception):
    """Reading or writing STeP IR graphs needs protobuf: pip install 'stepc[interop]'."""


def side_directory(graph: str) -> str:
    """Where the side files of the graph file `graph` go (`g.pb` -> `g.npy`)."""
    return os.path.splitext(graph)[0] + SIDE_SUFFIX


@dataclass
class ImportResult:
    """A graph read as a program: its text, and the file it was written to (None: the
    caller prints it)."""
    graph: str
    text: str
    operators: int
    output: str | None = None

    def to_dict(self) -> dict:
        return {"graph": self.graph, "output": self.output, "operators": self.operators,
                "program": self.text}

    def render(self, console: Console) -> None:
        from stepc.report.interop import render_import
        render_import(console, self.output, self.operators)


@dataclass
class ExportResult:
    """A program written as a graph: what was written, or the program's diagnostics when
    it has errors (nothing written)."""
    file: str
    output: str
    operators: int = 0
    side_files: list[str] = field(default_factory=list)  # their names, in the side directory
    notes: list[str] = field(default_factory=list)  # what the graph fixes that the program
    # left open
    diagnostics: list[Diagnostic] = field(default_factory=list)  # the program's errors
    sources: dict = field(default_factory=dict, repr=False)  # the files they are in

    @property
    def ok(self) -> bool:
        return not self.diagnostics

    def to_dict(self) -> dict:
        return {"file": self.file, "output": self.output, "operators": self.operators,
                "side_directory": side_directory(self.output) if self.side_files else None,
                "side_files": self.side_files, "notes": self.notes,
                "diagnostics": [diagnostic_json(d) for d in self.diagnostics]}

    def render(self, console: Console) -> None:
        from stepc.report.interop import render_export
        render_export(console, self.output, self.operators, side_directory(self.output),
                      self.side_files, self.notes)


def import_graph(graph: str, output: str | None = None) -> ImportResult:
    """`stepc import`: the `.step` program of the graph file `graph`, checked, and written
    to `output` when given (side files are named relative to it)."""
    try:
        from stepc.frontend import import_graph_file
        from stepc.interop.read.reader import GraphFileError, InteropError, InvalidGraphError
    except ImportError:
        raise NeedsProtobuf() from None
    try:
        imported = import_graph_file(graph, os.path.dirname(output) if output else None)
        if imported.refusal is not None:  # what it wrote does not check: nothing is written
            raise imported.refusal
    except GraphFileError as e:  # the file, not its contents: a usage error like a .step's
        raise InputError(str(e), [_error(UNREADABLE_FILE, e)]) from None
    except InvalidGraphError as e:
        raise InputError(str(e), [_error(UNREADABLE_GRAPH, e)]) from None
    except InteropError as e:
        raise StepError([_error(UNREADABLE_GRAPH, e)]) from None
    if output:
        from stepc.sim.report import write_atomic
        write_atomic(output, lambda f: f.write(imported.text.encode("utf-8")))
    return ImportResult(graph, imported.text, imported.operators, output)


def export_graph(file: str, output: str, defines: dict[str, int], hw: str,
                 traces: dict[str, str] | None = None) -> ExportResult:
    """`stepc export`: the program `file` (its params overridden by `defines`) written as
    the graph `output`, with its side files in `side_directory(output)`, on hardware `hw`
    (a preset or TOML file) with the external streams' data from `traces` (NAME -> file)."""
    try:
        from stepc.interop.read.reader import InteropError
        from stepc.interop.write.export import export_program
    except ImportError:
        raise NeedsProtobuf() from None
    from stepc.api import check, hardware, trace_arrays
    report = check(file, **defines)
    try:
        prog = report.program()
    except InputError:
        raise
    except StepError as e:  # the program has errors: the result holds them
        return ExportResult(file, output, diagnostics=e.diagnostics, sources=e.sources or {})
    config, _ = hardware(hw)
    arrays = trace_arrays(traces or {})
    notes: list[str] = []
    try:
        data, files = export_program(prog, output, config, arrays, notes)
    except InteropError as e:
        raise StepError([_error(UNREADABLE_GRAPH, e)]) from None
    _write_side_files(side_directory(output), files)
    with open(output, "wb") as f:
        f.write(data)
    return ExportResult(file, output, prog.operators, list(files), notes)


def _error(code: str, e: Exception) -> Diagnostic:
    """The error `e` of the interop package as a diagnostic of `code`, with no location
    (its message names the file and the operator)."""
    return Diagnostic(code, Severity.ERROR, str(e), None)


def _write_side_files(side: str, files: dict[str, np.ndarray]) -> None:
    import numpy as np
    for name, arr in files.items():
        os.makedirs(side, exist_ok=True)
        np.save(os.path.join(side, name), arr)
