"""Checking a lowered program against its module, before anyone reads it: the program must
pass `stepc check`, and its functional simulation on seeded inputs must compute what the
module's forward computes on the same inputs and weights, within float rounding (in f32,
max |program - module| <= 1e-5 * max |module|, plus a tiny absolute floor). A program that
differs is refused with the largest error and the first differing element; the header of
one that does not records what was compared (inputs, seed, largest error), or why nothing
was (`verify=False`, a module too large to run on the CPU, one on the meta device).

Verification runs the module on the CPU and simulates the program element by element, so
it is bounded: at most `MAX_PARAMETERS` parameter elements, about `MAX_WORK`
multiply-adds (rows times parameters) and `MAX_INPUT_ELEMENTS` input elements. A program
whose one input folds its leading dims into the `B` rows is verified at fewer rows when the
given ones would exceed that (the same text with `B` overridden, as `stepc sim -D B=...`
runs it), and the header says so.
"""

from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass, replace

import numpy as np
import torch

from stepc.diagnostics import render_text
from stepc.frontend import compile_source
from stepc.hw import load_config
from stepc.sim.run import simulate
from stepc.source import SourceFile
from stepc.torch.capture import LoweringError, forward_tensors, quiet

# the largest |program - module| accepted, as a fraction of max |module| (the output's
# scale), by the least precise float dtype among the module's weights and inputs
TOLERANCE = {"f32": 1e-5, "f16": 1e-2, "bf16": 3e-2}
ABSOLUTE_FLOOR = 1e-6  # an output that is all zeros still has this much room
MAX_PARAMETERS = 64 * 10**6  # parameter elements verification builds on the CPU (256 MB in f32)
MAX_WORK = 2**28  # rows x parameter elements simulated (about a second)
MAX_INPUT_ELEMENTS = 2**24  # elements of the forward arguments (64 MB in f32)
_DTYPE = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_NOTE_WIDTH = 86


class VerificationError(LoweringError):
    """The lowered program does not compute the module's forward (or does not run)."""


@dataclass(frozen=True)
class Verification:
    """What was compared (`verified`, the largest error and the output's scale), or why
    nothing was, in `summary`; `note` is the header comment it put in the program."""

    verified: bool
    summary: str
    max_error: float = math.nan
    scale: float = math.nan
    seed: int | None = None
    note: tuple[str, ...] = ()


def check_program(text: str):
    """The typed program of `text`; LoweringError listing its errors when `stepc check`
    rejects it (a lowering bug: what from-torch writes must check)."""
    r = compile_source(SourceFile("lowered.step", text))
    if r.ok:
        return r.typed
    raise LoweringError(f"the lowered program fails `stepc check` (a bug in from-torch, "
                        f"please report it with the module):\n"
                        f"{render_text(r.diagnostics.errors, r.sources).rstrip()}")


def parameter_count(module: torch.nn.Module) -> int:
    return sum(t.numel() for t in (*module.parameters(), *module.buffers()))


def too_large(module: torch.nn.Module) -> str:
    """Why verification cannot build `module` on the CPU ("" when it can)."""
    n = parameter_count(module)
    if n <= MAX_PARAMETERS:
        return ""
    return (f"the module holds {_count(n)} parameter elements, more than the "
            f"{_count(MAX_PARAMETERS)} verification builds on the CPU (lower it at smaller dims "
            "to verify the lowering)")


def unverified(prog, reason: str):
    """`prog` with a header saying it was not verified, and why."""
    return _noted(prog, Verification(False, f"Not verified against the module: {reason}."))


def verify(prog, seed: int = 0):
    """`prog` checked against its module on inputs seeded by `seed` (see the module
    docstring): a copy whose header and `verification` record the comparison, or say why
    none was made. Raises VerificationError when they differ."""
    module, example = prog.module, prog.example
    typed = check_program(prog.text)
    if any(t.is_meta for t in (*module.parameters(), *module.buffers())):
        return unverified(prog, "the module is on the meta device (no weights to run); "
                          "verify it on a copy with weights: `prog.on_module(m).verify()`")
    reason = too_large(module)
    if reason:
        return unverified(prog, reason)
    at, rows, weights = "", _rows(example), max(parameter_count(module), 1)
    elements = _elements(example)
    if rows * weights > MAX_WORK or elements > MAX_INPUT_ELEMENTS:
        rows_max = min(MAX_WORK // weights, MAX_INPUT_ELEMENTS * rows // max(elements, 1))
        reduced = _reduced(prog, example, rows_max)
        at_fewer = compile_source(SourceFile("lowered.step", prog.text), reduced[1]) \
            if reduced else None
        if at_fewer is None or not at_fewer.ok:
            return unverified(prog, f"simulating it at these dims ({_count(rows * weights)} "
                              f"multiply-adds, {_count(elements)} input elements) is more than "
                              f"verification runs ({_count(MAX_WORK)}, "
                              f"{_count(MAX_INPUT_ELEMENTS)}), and the program takes no fewer "
                              "rows")
        example, typed = reduced[0], at_fewer.typed
        at = f" (reduced rows: B = {reduced[1]['B']} of the program's {rows})"
    inputs = prog.seeded_inputs(example, seed)
    values, traces = prog.values(*inputs), prog.traces(*inputs)  # before a forward appends
    expected = _expected(prog, inputs)
    got = _simulated(typed, traces, values)
    tol = TOLERANCE[_least_precise(module, inputs)]
    worst, scale = 0.0, 0.0
    for name, want in expected.items():
        err, ref_scale = _compare(name, got.get(name), want, tol, seed, _describe(prog, inputs))
        worst, scale = max(worst, err), max(scale, ref_scale)
    summary = (f"Verified on seeded inputs (seed {seed}; {_describe(prog, inputs)}){at}: the "
               f"functional simulation equals the module's forward, max |error| {worst:.2g} "
               f"of max |output| {scale:.3g} (tolerance {tol:g} of it).")
    return _noted(prog, Verification(True, summary, worst, scale, seed))


def _noted(prog, v: Verification):
    """`prog` with `v`'s summary as the last paragraph of its header comment (in place of
    an earlier one)."""
    note = ("#", *(f"# {line}" for line in textwrap.wrap(v.summary, _NOTE_WIDTH)))
    lines = prog.text.split("\n")
    old = prog.verification.note if prog.verification is not None else ()
    if old:
        i = next(i for i in range(len(lines)) if tuple(lines[i:i + len(old)]) == old)
        del lines[i:i + len(old)]
    end = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    lines[end:end] = note
    return replace(prog, text="\n".join(lines), verification=replace(v, note=note))


def _expected(prog, inputs: tuple) -> dict[str, np.ndarray]:
    try:
        with torch.no_grad(), quiet(False):
            return prog.expected(*inputs)
    except LoweringError:
        raise
    except Exception as e:  # the user's forward may raise anything
        raise VerificationError(f"running the module on seeded inputs failed: "
                                f"{type(e).__name__}: {str(e).strip().splitlines()[0]}") from None


def _simulated(typed, traces: dict, values: dict) -> dict[str, np.ndarray]:
    try:
        with np.errstate(all="ignore"):  # the module's own NaNs, if any, are compared
            run = simulate(typed, load_config(None, ()), traces, values=values)
    except Exception as e:  # a program that does not run is one that fails verification
        raise VerificationError(f"the lowered program does not run on the module's values: "
                                f"{type(e).__name__}: {e}") from None
    if run.deadlock is not None:
        raise VerificationError("the lowered program deadlocks on the module's values")
    return run.outputs


def _compare(name: str, got, want: np.ndarray, tol: float, seed: int,
             inputs: str) -> tuple[float, float]:
    """(max |got - want|, max |want|) of one output; VerificationError naming the first
    element out of tolerance."""
    if got is None or got.shape != want.shape:
        have = "nothing" if got is None else list(got.shape)
        raise VerificationError(f"the lowered program's output {name} is {have}, the module's "
                                f"is {list(want.shape)}")
    got = got.astype(np.float64)
    want = want.astype(np.float64)
    finite = np.isfinite(want)
    scale = float(np.abs(want[finite]).max()) if finite.any() else 0.0
    err = np.where(finite, np.abs(got - want), np.where(
        (np.isnan(got) & np.isnan(want)) | (got == want), 0.0, np.inf))
    err = np.nan_to_num(err, nan=np.inf)
    limit = tol * scale + ABSOLUTE_FLOOR
    bad = np.argwhere(err > limit)
    if len(bad):
        at = tuple(int(i) for i in bad[0])
        where = f"{name}[{', '.join(map(str, at))}]"
        raise VerificationError(
            f"the lowered program does not compute the module: {name} differs from the "
            f"module's output by up to {float(err.max()):.3g} (max |output| {scale:.3g}, "
            f"tolerance {limit:.3g}) on seeded inputs (seed {seed}; {inputs}); first at "
            f"{where}: {got[at]:.6g}, where the module gives {want[at]:.6g}")
    return float(err.max()) if err.size else 0.0, scale


def _least_precise(module: torch.nn.Module, inputs: tuple) -> str:
    kinds = {_DTYPE.get(t.dtype) for t in (*module.parameters(), *forward_tensors(inputs))
             if t.is_floating_point()}
    kinds.discard(None)
    return max(kinds or {"f32"}, key=lambda k: TOLERANCE[k])


def _reduced(prog, example: tuple, rows_max: int):
    """(the example with fewer rows, {"B": rows}) for a program whose one input folds its
    leading dims into the program's B rows (a multiple of TB); None for another program, or
    when no fewer rows fit."""
    if prog.io is not None or prog.layout is not None or len(example) != 1:
        return None
    x = example[0]
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        return None
    rows, inner = _rows(example), math.prod(x.shape[1:-1])
    if _param(prog.text, "B") != rows:
        return None
    unit = math.lcm(inner, _param(prog.text, "TB") or 1)
    keep = rows_max // unit * unit
    if not 0 < keep < rows or rows % unit:
        return None
    shape = (keep // inner, *x.shape[1:])
    return (torch.empty(shape, dtype=x.dtype, device="meta"),), {"B": keep}


def _param(text: str, name: str) -> int | None:
    m = re.search(rf"^param {name} = (\d+)\b", text, re.M)
    return int(m.group(1)) if m else None


def _rows(example: tuple) -> int:
    """The rows of the first input (its leading dims folded)."""
    first = next(forward_tensors(example), None)
    if first is None or first.dim() == 0:
        return 1
    return first.numel() // max(first.shape[-1], 1)


def _elements(example) -> int:
    return sum(t.numel() for t in forward_tensors(example))


def _describe(prog, inputs: tuple) -> str:
    """`x f32[16, 256]`, one entry per forward argument."""
    names = prog.arg_names()
    parts = []
    for i, a in enumerate(inputs):
        name = names[i] if i < len(names) else f"input {i}"
        ts = list(forward_tensors(a))
        shapes = ", ".join(f"{_DTYPE.get(t.dtype, str(t.dtype).replace('torch.', ''))}"
                           f"{list(t.shape)}" for t in ts[:2])
        parts.append(f"{name} {shapes}" + (" ..." if len(ts) > 2 else ""))
    return ", ".join(parts)


def _count(n: int) -> str:
    for unit, size in (("G", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return str(n)
