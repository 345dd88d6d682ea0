"""The use cases of FIFO sizing: `stepc fifo` (the depths each FIFO needs, written into the
program with `--apply`) and the FIFO bytes of `--fifo-bytes` (`stepc analyze`, `stepc sim`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stepc.api import InputError, apply_depths
from stepc.app.inputs import hardware

if TYPE_CHECKING:
    from rich.console import Console

    from stepc.api import CheckReport
    from stepc.frontend import Compiled
    from stepc.hw import HardwareConfig
    from stepc.report.fifo import FifoReport


@dataclass
class FifoSizing:
    """`stepc fifo FILE`: the checked program and, when it compiled without errors, its
    FIFO report and (with `apply`) the depths written or why they could not be."""

    checked: CheckReport
    report: FifoReport | None = None
    applied: tuple[int, list[str]] | None = None  # the calls edited, the files written
    apply_error: InputError | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of `stepc fifo --format json`."""
        return self._sized().to_dict()

    def render(self, console: Console, show_all: bool = False) -> None:
        """The text report: the notable FIFOs (all with `show_all`) and the totals."""
        self._sized().render(console, show_all)

    def _sized(self) -> FifoReport:
        if self.report is None:
            raise ValueError(f"{self.checked.name}: the program has errors: no FIFO report")
        return self.report


def size_fifos(path: str, defines: Mapping[str, int] | None = None, hw: str | None = None,
               sets: Sequence[str] = (), traces: Mapping[str, str] | None = None,
               tolerance: float = 0.01, search: bool = True, apply: bool = False,
               warn: Callable[[str], None] | None = None,
               jobs: int | None = None) -> FifoSizing:
    """Size the FIFOs of the program at `path` (`defines` override its params) on the
    hardware `hw` with `sets`, its external streams driven by `traces` (name -> file):
    the static minima and, with `search`, the depths within `tolerance` (a fraction) of
    unbounded-FIFO cycles; with `apply`, those depths written into its files unless it
    deadlocks. `warn` hears each setting the run will not read, before any compiling;
    `jobs`: the search's independent simulations run at once (default: the cores).
    Raises InputError and SimulationError."""
    from stepc.app.inputs import checked_program
    config = hardware(hw, sets, warn)
    checked = checked_program(path, dict(defines or {}))
    if not checked.ok:
        return FifoSizing(checked)
    report = checked.program().fifo(config, traces=dict(traces or {}), tolerance=tolerance,
                                    search=search, jobs=jobs)
    sizing = FifoSizing(checked, report)
    if apply and report.deadlock_free:
        try:
            sizing.applied = apply_depths(checked.compiled, report)
        except InputError as e:  # the report stands; the front end says what was not written
            sizing.apply_error = e
    return sizing


def fifo_totals(compiled: Compiled, hw: HardwareConfig | None,
                bindings: Mapping[str, Any] | None, on_chip_bytes: Any) -> dict[str, Any]:
    """`--fifo-bytes` of `stepc analyze` and `stepc sim`: the bytes of every FIFO at its
    depth on `hw` (default: the default preset) and the operators' on-chip bytes with them,
    as JSON values (ints, or expressions as stepc prints them)."""
    import sympy

    from stepc.fifo.capacity import fifo_bytes
    from stepc.hw.config import load_config
    from stepc.types import dim_json

    if compiled.typed is None:
        raise ValueError(f"{compiled.name}: the program has errors: no FIFOs to count")
    fifos = fifo_bytes(compiled.typed, hw or load_config(), dict(bindings or {}))
    return {"fifo_bytes": dim_json(fifos),
            "on_chip_bytes_with_fifos": dim_json(fifos + sympy.sympify(on_chip_bytes))}
