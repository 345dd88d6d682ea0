"""A script's inputs to a run in the forms it gives them (hardware by name or config, `set`
overrides, trace arrays by file or value), checked into what the toolchain takes."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from stepc.api.arguments import kind, mapping_arg
from stepc.api.errors import InputError
from stepc.codes import UNKNOWN_OVERRIDE
from stepc.diagnostics import Diagnostic, Note, Severity, closest, did_you_mean
from stepc.spelling import given

if TYPE_CHECKING:
    import numpy as np

    from stepc.graph.program import Tensor
    from stepc.hw import HardwareConfig


def no_such(arg: str, name: str, what: str, options: dict) -> Diagnostic:
    """E0106: a param or symbol the program does not declare, with the likeliest one; the
    entry is named as the user gave it (`--bind D_0` / `bind['D_0']`, stepc.spelling)."""
    notes = tuple(Note(f"`{near}` is declared here", options[near])
                  for near in closest(name, options) if options[near] is not None)
    return Diagnostic(UNKNOWN_OVERRIDE, Severity.ERROR, f"{given(arg, name)}: the program has "
                      f"no {what} `{name}`{did_you_mean(name, options)}", None, notes)


def hardware(hw: str | HardwareConfig | None = None,
             set: Mapping[str, Any] | Sequence[str] | None = None,  # noqa: A002
             roofline: bool = False, may_read: Callable[[str], None] | None = None
             ) -> tuple[HardwareConfig, list[str]]:
    """A hardware configuration (preset name, TOML path or a config) with `set` overrides
    (`{"hbm.model": "fluid"}` or `["hbm.model=fluid"]`), and a warning for each override
    the run will not read (`roofline`: the analyzer's bound is the reader). `may_read` is
    asked before each file is read (a hardware or part file; it raises to refuse)."""
    from stepc.hw.config import ConfigError, HardwareConfig, configured
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
        return configured(hw, sets, roofline, may_read)
    except ConfigError as e:
        raise InputError(str(e)) from None


def figure_names() -> list[str]:
    """The figures `reproduce` knows, in the paper's order."""
    from stepc.reproduction.figures import available_figures
    return available_figures()


def hardware_presets() -> list[str]:
    """The names of the bundled hardware presets."""
    from stepc.hw.config import preset_names
    return preset_names()


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
    from stepc.traces import TraceError, integer_trace, load_array
    out = {}
    for name, value in mapping_arg("traces", traces, "stream names to files or "
                                   "arrays").items():
        if isinstance(value, (str, os.PathLike)):
            try:
                out[name] = load_array(os.fspath(value))
            except TraceError as e:
                raise trace_input_error(e) from None
        else:
            where = f"traces[{name!r}]"
            try:
                out[name] = integer_trace(numeric_array(where, value), where)
            except TraceError as e:
                raise InputError(str(e)) from None
    return out


def weight_values(tensors: Mapping[str, Tensor], path: str, prefix: str | None = None,
                  allow_missing: bool = False) -> tuple[dict[str, np.ndarray], list[str]]:
    """The values of a checked program's `tensors` from a weights file (safetensors or a PyTorch
    state dict), matched by name under `prefix`, and notes on what was matched; a file that
    does not fit is an InputError."""
    from stepc.weights import WeightsError, load_weights, match_weights
    try:
        return match_weights(tensors, load_weights(path),
                             prefix, allow_missing)
    except WeightsError as e:
        raise InputError(str(e)) from None


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
