"""Programs: `check`, `load` and `compile` a .step program into a `Program`, and its
inputs (hardware, traces) in the forms a script gives them."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stepc.api.arguments import kind, mapping_arg, path_arg, text_arg
from stepc.api.errors import InputError
from stepc.codes import UNKNOWN_OVERRIDE, UNREADABLE_FILE
from stepc.diagnostics import (
    Diagnostic,
    Note,
    Severity,
    StepError,
    closest,
    diagnostic_json,
    did_you_mean,
    span_json,
)
from stepc.schemas import schema
from stepc.types import dim_json

if TYPE_CHECKING:
    import numpy as np

    from stepc.api.results import Cost, Run
    from stepc.frontend import Compiled
    from stepc.hw import HardwareConfig
    from stepc.source import Span

LARGE_GRAPH = 500  # operators above which an uncollapsed diagram is illegible


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
        return [no_such("-D", name, "parameter", params) for name in result.unknown_overrides]

    @property
    def unreadable(self) -> bool:
        """The program file itself could not be read (missing, a directory, no permission):
        a usage error, not a program with errors."""
        return self.compiled.typed is None and any(
            d.code == UNREADABLE_FILE and d.span is None for d in self.compiled.diagnostics.items)

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

    def to_dict(self) -> dict:
        """The document of `stepc check --format json`."""
        result = self.compiled
        diags = self.diagnostics
        out: dict = {
            "schema": schema("check"),
            "program": result.name,
            "diagnostics": [diagnostic_json(d) for d in diags],
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


def no_such(flag: str, name: str, what: str, options: dict) -> Diagnostic:
    """E0106: a param or symbol the program does not declare, with the likeliest one."""
    notes = tuple(Note(f"`{near}` is declared here", options[near])
                  for near in closest(name, options) if options[near] is not None)
    return Diagnostic(UNKNOWN_OVERRIDE, Severity.ERROR, f"{flag} {name}: the program has no {what} "
                      f"`{name}`{did_you_mean(name, options)}", None, notes)


def check(path: str, **params: int) -> CheckReport:
    """Parse, elaborate and type-check a program file ('-': standard input) with `params`
    overriding its `param`s. Never raises for a bad program: see `CheckReport.ok`."""
    from stepc.frontend import compile_file
    return CheckReport(compile_file(path_arg("path", path), params))


def check_text(text: str | bytes, name: str = "<string>", **params: int) -> CheckReport:
    """`check` for program text held in memory (bytes are read as UTF-8); imports resolve
    beside `name`."""
    from stepc.diagnostics import DiagnosticBag
    from stepc.frontend import Compiled, compile_source
    from stepc.grammar.parse import decode_source
    from stepc.source import SourceFile
    name = text_arg("name", name)
    if isinstance(text, (bytes, bytearray)):
        try:
            source = decode_source(name, bytes(text))
        except StepError as e:  # binary or not UTF-8: a report with that one error
            bag = DiagnosticBag()
            bag.extend(e.diagnostics)
            return CheckReport(Compiled(name, None, bag, {}, []))
    else:
        source = SourceFile(name, text_arg("text", text))
    path = os.path.normpath(name) if not name.startswith("<") else None
    return CheckReport(compile_source(source, params, path))


def load(path: str | os.PathLike, **params: int) -> Program:
    """A checked program from a .step file, its `param`s overridden by `params`.

    Raises StepError with the diagnostics when the program has errors."""
    return check(path_arg("path", path), **params).program()


def compile(text: str | bytes, name: str = "<string>",  # noqa: A001
            **params: int) -> Program:
    """A checked program from .step text; `name` labels its diagnostics."""
    return check_text(text, name, **params).program()


def hardware(hw: str | HardwareConfig | None = None,
             set: Mapping[str, Any] | Sequence[str] | None = None,  # noqa: A002
             roofline: bool = False) -> tuple[HardwareConfig, list[str]]:
    """A hardware configuration (preset name, TOML path or a config) with `set` overrides
    (`{"hbm.model": "fluid"}` or `["hbm.model=fluid"]`), and a warning for each override
    the run will not read (`roofline`: the analyzer's bound is the reader)."""
    from stepc.hw.config import (
        ConfigError,
        HardwareConfig,
        load_config,
        roofline_unused,
        set_warnings,
    )
    sets = settings(set)
    if hw is not None and not isinstance(hw, (str, os.PathLike, HardwareConfig)):
        raise InputError(f"hw: expected a preset name, a TOML path or a HardwareConfig, "
                         f"found {kind(hw)}")
    if isinstance(hw, os.PathLike):
        hw = os.fspath(hw)
    if isinstance(hw, HardwareConfig):
        if sets:
            raise InputError("set= applies to a preset or TOML file, not to a "
                             "HardwareConfig: give hw by name")
        return hw, []
    try:
        config = load_config(hw, sets)
    except ConfigError as e:
        raise InputError(str(e)) from None
    return config, set_warnings(config, sets, roofline_unused(config) if roofline else None)


def settings(values: Mapping[str, Any] | Sequence[str] | None) -> tuple[str, ...]:
    """`--set` items from a mapping or a list of `KEY=VALUE` strings."""
    if values is None:
        return ()
    if isinstance(values, Mapping):
        return tuple(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                     for k, v in values.items())
    if isinstance(values, str):
        return (values,)
    if not isinstance(values, Sequence) or not all(isinstance(v, str) for v in values):
        raise InputError(f"set: expected a mapping {{'hbm.model': 'fluid'}} or a list of "
                         f"'KEY=VALUE' strings, found {kind(values)}")
    return tuple(values)


def trace_arrays(traces: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    """Trace arrays by stream: each value a file path (.npy, .npz, .csv) or an array."""
    from stepc.traces import TraceError, load_array
    out = {}
    for name, value in mapping_arg("traces", traces, "stream names to files or "
                                   "arrays").items():
        if isinstance(value, (str, os.PathLike)):
            try:
                out[name] = load_array(os.fspath(value))
            except TraceError as e:
                raise trace_input_error(e) from None
        else:
            out[name] = numeric_array(f"traces[{name!r}]", value)
    return out


def numeric_array(arg: str, value: Any) -> np.ndarray:
    """`value` as a numpy array of numbers (bools, integers or floats)."""
    import numpy as np
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as e:
        raise InputError(f"{arg}: expected an array of numbers ({e})") from None
    if array.dtype.kind not in "biuf":
        raise InputError(f"{arg}: expected an array of numbers, found {kind(value)} "
                         f"(numpy dtype {array.dtype})")
    return array


def trace_input_error(e, sources: dict | None = None) -> InputError:
    """A trace that does not fit the program: E0404 naming the external stream."""
    notes = (Note("the external stream is declared here", e.span),) if e.span else ()
    d = Diagnostic(e.code, Severity.ERROR, str(e), None, notes)
    return InputError(str(e), [d], sources)


class Program:
    """A checked STeP program: its params, streams and diagnostics, and the ways to cost,
    simulate and draw it. Made by `stepc.load` or `stepc.compile`."""

    def __init__(self, compiled: Compiled):
        self._compiled = compiled
        self.typed = compiled.typed

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
        return analyze_program(self, hw, set, bind, traces, onchip_model)

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
        return simulate_program(self, hw, set, traces, timing_only, max_cycles, trace_ops,
                                progress, values)

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
        return dot_text(self, collapse, annotate, title)

    def _repr_svg_(self) -> str | None:
        """The graph as SVG for Jupyter (large graphs collapsed); None without Graphviz."""
        from stepc.viz.render import render_svg
        return render_svg(self.dot(collapse=self.operators > LARGE_GRAPH))

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"<Program {self.name}: {self.operators} operators; {params}>"
