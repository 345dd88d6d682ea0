"""Programs: `check`, `load` and `compile` a .step program into a `Program`."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stepc.api.arguments import path_arg, text_arg
from stepc.api.errors import InputError
from stepc.api.inputs import no_such
from stepc.codes import UNREADABLE_INPUT
from stepc.diagnostics import Diagnostic, StepError, diagnostic_json, shown, span_json
from stepc.schemas import schema
from stepc.types import dim_json

if TYPE_CHECKING:
    import numpy as np

    from stepc.api.results import Cost, Run
    from stepc.frontend import Compiled
    from stepc.hw import HardwareConfig
    from stepc.source import Span

@dataclass(frozen=True)
class Stream:
    """A named stream of a checked program: its inferred type and symbolic shape."""

    name: str
    type: str  # as the language writes it: `Strm<Tile<f32, [32, 64]>, 1>[2, 8]`
    stream_type: Any = field(repr=False)  # the checker's StreamType (elem, shape, rank)
    node: str = ""
    op: str = ""
    span: Span | None = None

    @property
    def shape(self) -> tuple:
        """The symbolic shape: ints and sympy expressions."""
        return tuple(self.stream_type.shape)


@dataclass
class CheckReport:
    """What checking a program found, whether or not it has errors (`stepc check`)."""

    compiled: Compiled = field(repr=False)

    def __repr__(self) -> str:
        bag = self.compiled.diagnostics
        errors, warnings = len(bag.errors), len(bag.warnings)
        verdict = "ok" if self.ok else "has errors"
        return (f"CheckReport({self.name!r}: {verdict}, {errors} error"
                f"{'s' if errors != 1 else ''}, {warnings} warning{'s' if warnings != 1 else ''})")

    @property
    def name(self) -> str:
        return self.compiled.name

    @property
    def ok(self) -> bool:
        return self.compiled.ok

    @property
    def diagnostics(self) -> list[Diagnostic]:
        """Every diagnostic, by position (repeats of one statement collapsed)."""
        return self.compiled.diagnostics.sorted()

    def unknown_params(self) -> list[Diagnostic]:
        """E0106 for each override that names no `param` of the program."""
        result = self.compiled
        if result.typed is None or not result.unknown_overrides:
            return []
        prog = result.typed.program
        params = {p: prog.param_spans.get(p) for p in prog.params}
        return [no_such("params", name, "parameter", params) for name in result.unknown_overrides]

    @property
    def unreadable(self) -> bool:
        """The program file or a file it imports could not be read as a program's text
        (missing, not a regular file, too large, not UTF-8): a usage error, not a program
        with errors."""
        return any(d.code in UNREADABLE_INPUT for d in self.compiled.diagnostics.items)

    def program(self) -> Program:
        """The checked program; raises StepError (with the diagnostics) if it has errors,
        InputError if the file cannot be read or an override names no param."""
        if self.unreadable:
            diags = self.compiled.diagnostics.sorted()
            raise InputError("; ".join(d.message for d in diags), diags, self.compiled.sources)
        unknown = self.unknown_params()
        if unknown:
            raise InputError("; ".join(d.message for d in unknown), unknown,
                             self.compiled.sources)
        if not self.ok:
            raise StepError(self.compiled.diagnostics.sorted(), self.compiled.sources)
        return Program(self.compiled)

    def types_text(self, show_all: bool = False) -> str:
        """The listing of `stepc check --types`: every stream's type, the symbols and the
        facts, loop iterations folded unless `show_all`."""
        from stepc.report.types import types_text
        return types_text(self.compiled, show_all)

    def to_dict(self) -> dict:
        """The document of `stepc check --format json`."""
        result = self.compiled
        diags = self.diagnostics
        out: dict = {
            "schema": schema("check"),
            "program": result.name,
            "diagnostics": [diagnostic_json(d) for d in shown(diags)],
            "summary": {"errors": sum(d.severity.value == "error" for d in diags),
                        "warnings": sum(d.severity.value == "warning" for d in diags)},
            "streams": [],
            "symbols": [],
        }
        typed = result.typed
        if typed is None:
            return out
        for node, port, label, span, t in typed.streams_in_order():
            out["streams"].append({
                "name": label, "node": node.name, "op": node.op, "port": node.outputs[port],
                "type": str(t), "elem": str(t.elem), "rank": t.rank,
                "shape": [dim_json(d) for d in t.shape], "location": span_json(span),
            })
        for info in typed.symbols.infos.values():
            out["symbols"].append({"name": info.name, "kind": info.kind, "origin": info.origin,
                                   "reason": info.reason, "location": span_json(info.span)})
        return out


def check(path: str, **params: int) -> CheckReport:
    """Parse, elaborate and type-check a program file ('-': standard input) with `params`
    overriding its `param`s. Never raises for a bad program: see `CheckReport.ok`."""
    from stepc.frontend import compile_file
    return CheckReport(compile_file(path_arg("path", path), params))


def check_text(text: str | bytes, name: str = "<string>", **params: int) -> CheckReport:
    """`check` for program text held in memory (bytes are read as UTF-8); imports resolve
    beside `name`."""
    from stepc.frontend import compile_text
    name = text_arg("name", name)
    if not isinstance(text, (bytes, bytearray)):
        text_arg("text", text)
    return CheckReport(compile_text(text, name, dict(params)))


def import_graph(path: str, out_dir: str | None = None):
    """`stepc import`: a STeP IR graph file (.pb) read as a `.step` program, compiled once
    (`stepc.interop.Imported`: its text, side files and compiled program; `out_dir`: where
    the side files go). Raises ImportError without protobuf, `InteropError` for a graph
    stepc cannot read or say."""
    from stepc.frontend import import_graph_file
    return import_graph_file(path, out_dir)


def load(path: str | os.PathLike, **params: int) -> Program:
    """A checked program from a .step file, its `param`s overridden by `params`.

    Raises StepError with the diagnostics when the program has errors."""
    return check(path_arg("path", path), **params).program()


def compile(text: str | bytes, name: str = "<string>",  # noqa: A001
            **params: int) -> Program:
    """A checked program from .step text; `name` labels its diagnostics."""
    return check_text(text, name, **params).program()


class Program:
    """A checked STeP program: its params, streams and diagnostics, and the ways to cost,
    simulate and draw it. Made by `stepc.load` or `stepc.compile`."""

    def __init__(self, compiled: Compiled):
        self._compiled = compiled
        self.typed = compiled.typed_program

    @property
    def name(self) -> str:
        return self._compiled.name

    @property
    def params(self) -> dict[str, int]:
        """Every `param` with the value this program was compiled with."""
        return dict(self.typed.program.params)

    @property
    def streams(self) -> dict[str, Stream]:
        """Named streams in source order, by their label (`gate`, `p[0]`, ...)."""
        return {label: Stream(label, str(t), t, node.name, node.op, span)
                for node, _port, label, span, t in self.typed.streams_in_order()}

    @property
    def diagnostics(self) -> list[Diagnostic]:
        """Warnings (a program with errors does not load), by position."""
        return self._compiled.diagnostics.sorted()

    @property
    def symbols(self) -> dict[str, str]:
        """The symbolic dims and where each comes from."""
        return {info.name: info.reason for info in self.typed.symbols.infos.values()}

    @property
    def operators(self) -> int:
        return len(self.typed.program.nodes)

    @property
    def tensor_bytes(self) -> int:
        """Bytes of the program's tensors (a functional run holds them all)."""
        from stepc.api.results import tensor_bytes
        return tensor_bytes(self._compiled)

    @property
    def values_by_default(self) -> bool:
        """Whether `simulate` computes tile values when not told (tensors within 256 MiB)."""
        from stepc.api.results import FUNCTIONAL_LIMIT
        return self.tensor_bytes <= FUNCTIONAL_LIMIT

    def weight_values(self, path: str, prefix: str | None = None,
                      allow_missing: bool = False) -> tuple[dict[str, np.ndarray], list[str]]:
        """The values of this program's tensors from a weights file (safetensors or a
        PyTorch state dict), matched by name under `prefix`, and notes on what was matched;
        a file that does not fit is an InputError."""
        from stepc.api.inputs import weight_values
        return weight_values(self.typed.program.tensors, path_arg("path", path), prefix,
                             allow_missing)

    def report(self) -> CheckReport:
        """The check report (`stepc check --format json` via `.to_dict()`)."""
        return CheckReport(self._compiled)

    def analyze(self, hw: str | HardwareConfig | None = None,
                set: Mapping[str, Any] | Sequence[str] | None = None,  # noqa: A002
                bind: Mapping[str, int] | None = None,
                traces: Mapping[str, Any] | None = None,
                onchip_model: str = "artifact") -> Cost:
        """Off-chip traffic, on-chip memory and FLOPs per operator and in total, symbolic in
        the dims neither `bind` nor `traces` give; with `hw`, the roofline bound too."""
        from stepc.api.results import analyze_program
        return analyze_program(self._compiled, hw, set, bind, traces, onchip_model)

    def simulate(self, hw: str | HardwareConfig | None = None,
                 set: Mapping[str, Any] | Sequence[str] | None = None,  # noqa: A002
                 traces: Mapping[str, Any] | None = None, timing_only: bool | None = None,
                 max_cycles: int | None = None, trace_ops: bool = False,
                 progress=None, values: Mapping[str, np.ndarray] | None = None) -> Run:
        """Simulate cycle by cycle on `hw` (default paper-eval). `timing_only=None` computes
        values unless the tensors exceed 256 MiB; `values` replaces the declared contents of
        the named tensors (weights, inputs). `progress`: a tqdm-like object (its `update`
        gets cycles) or a function of the current cycle. Raises `Deadlock`."""
        from stepc.api.results import simulate_program
        return simulate_program(self._compiled, hw, set, traces, timing_only, max_cycles,
                                trace_ops, progress, values)

    def fifo(self, hw: str | HardwareConfig | None = None,
             set: Mapping[str, Any] | Sequence[str] | None = None,  # noqa: A002
             traces: Mapping[str, Any] | None = None, tolerance: float = 0.01,
             search: bool = True, jobs: int | None = None):
        """FIFO sizing (`stepc fifo`, docs/fifo.md): the static minimum depths, dead loops
        and, with `search`, the depths within `tolerance` of unbounded-FIFO cycles, its
        independent simulations `jobs` at a time (default: the machine's cores); a
        `stepc.api.fifo.FifoReport`."""
        from stepc.api.fifo import size_fifos
        return size_fifos(self._compiled, hw, set, traces, tolerance, search, jobs)

    def inputs(self, values: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """The contents a functional run starts from, by tensor name: every `input`,
        `weight` and `scratch` tensor, from its declared source (`random`, `file`, ...) or
        `values` as `simulate` takes them. With a run's outputs, a reference to check
        them against."""
        from stepc.api.errors import SimulationError
        from stepc.sim.kernel import SimError
        from stepc.sim.run import initial_value
        given = dict(values) if values is not None else None
        try:
            return {name: initial_value(t, given)
                    for name, t in self.typed.program.tensors.items() if t.role != "output"}
        except SimError as e:
            raise SimulationError(str(e), None, e.span, e.code) from None

    def dot(self, collapse: bool = False, annotate: Cost | Run | Mapping | None = None,
            title: str | None = None) -> str:
        """The graph as DOT text; `annotate` shades nodes by a Cost's traffic shares, a
        Run's busy fractions or a {node: Heat} mapping."""
        from stepc.api.results import dot_text
        return dot_text(self._compiled, collapse, annotate, title)

    def _repr_svg_(self) -> str | None:
        """The graph as SVG for Jupyter (large graphs collapsed); None without Graphviz."""
        from stepc.viz.dot import LARGE_GRAPH
        from stepc.viz.render import render_svg
        return render_svg(self.dot(collapse=self.operators > LARGE_GRAPH))

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"<Program {self.name}: {self.operators} operators; {params}>"
