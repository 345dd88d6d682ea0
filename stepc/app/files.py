"""Files the front ends write: diagrams (DOT text, or SVG/PNG/PDF through Graphviz, never
over a file stepc did not write), a run's Perfetto trace and arrays, each written whole or
not at all."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepc.viz.render import RenderError as DrawingError

if TYPE_CHECKING:
    import numpy as np

    from stepc.api import Run

__all__ = ["DrawingError", "check_drawing", "heat", "write_array", "write_drawing",
           "write_text", "write_trace"]


def check_drawing(out: str, force: bool = False) -> None:
    """Raise DrawingError now if `out` has no drawing format or holds a file stepc did not
    write (unless `force`)."""
    from stepc.viz.render import check_target
    check_target(out, force)


def write_drawing(dot_text: str, out: str, force: bool = False) -> None:
    """DOT text to `out` as DOT, or rendered by Graphviz by its extension."""
    from stepc.viz.render import write_output
    write_output(dot_text, out, force)


def heat(fraction: float, note: str = ""):
    """A node's shade for `Program.dot(annotate={node: heat(...)})`: 0..1 and a note."""
    from stepc.viz.dot import Heat
    return Heat(fraction, note)


def write_trace(path: str, run: Run) -> None:
    """A run's operators, FIFOs, power and energy as Chrome trace-event JSON
    (ui.perfetto.dev)."""
    from stepc.energy import clock_hz
    from stepc.sim.report import Power, perfetto_trace, write_json
    m = run.measurement
    report = m.energy
    static = m["energy_static_j"] / report.seconds if report.seconds else 0.0
    joules = {o.node: o.total for o in report.ops if isinstance(o.total, float)}
    write_json(path, perfetto_trace(run.result, Power(joules, static, clock_hz(m.hw))))


def write_array(path: str, array: np.ndarray) -> None:
    """One array as a .npy file."""
    import numpy as np

    from stepc.sim.report import write_atomic
    write_atomic(path, lambda f: np.save(f, array))


def write_text(path: str, text: str) -> None:
    """A text file (a program), written whole or not at all."""
    from stepc.sim.report import write_atomic
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))
