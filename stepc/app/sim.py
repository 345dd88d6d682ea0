"""The use case of `stepc sim`: one program simulated cycle by cycle, and the hardware
configuration it would run on (`--print-config`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stepc.api import InputError
from stepc.app.fifo import fifo_totals
from stepc.app.inputs import checked_program, load_hardware

if TYPE_CHECKING:
    import numpy as np
    from rich.console import Console

    from stepc.api import CheckReport, Program, Run

Tell = Callable[[str], None]  # hears a warning or a note as soon as it is known


class WeightsError(InputError):
    """A weights file that does not fit the program (`path`: the file)."""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path = path


@dataclass
class Simulated:
    """`stepc sim FILE`: the run (also when it deadlocked), or the check report of a
    program with errors."""

    checked: CheckReport
    run: Run | None = None
    deadlock: str | None = None  # the wait-for report, when the run deadlocked
    fifos: dict[str, Any] | None = None  # with `fifo_bytes`
    program: Program | None = None
    values: dict[str, np.ndarray] | None = None  # tensor values from a weights file

    def to_dict(self) -> dict:
        assert self.run is not None  # a program with errors gives its check report
        return {**self.run.to_dict(), **(self.fifos or {})}

    def render(self, console: Console) -> None:
        from stepc.report.fifo import fifo_line
        assert self.run is not None  # a program with errors gives its check report
        self.run.render(console)
        if self.fifos:
            console.print(fifo_line(self.fifos), markup=False, soft_wrap=True)

    def inputs(self) -> dict[str, np.ndarray]:
        """The input, weight and scratch tensors the run started from."""
        assert self.program is not None  # only a checked program runs
        return self.program.inputs(self.values)


def configuration(hw: str | None, sets: Sequence[str] = (), warn: Tell | None = None) -> str:
    """The hardware configuration a run would use, as TOML."""
    config, warnings = load_hardware(hw, sets)
    for warning in warnings:
        _tell(warn, warning)
    return config.to_toml()


def simulate(path: str, defines: Mapping[str, int], hw: str | None = None,
             sets: Sequence[str] = (), traces: Mapping[str, str] | None = None,
             weights: str | None = None, weights_prefix: str | None = None,
             allow_missing_weights: bool = False, timing_only: bool | None = None,
             max_cycles: int | None = None, trace_ops: bool = False, progress=None,
             fifo_bytes: bool = False, warn: Tell | None = None,
             note: Tell | None = None) -> Simulated:
    """`stepc sim`: simulate a program file on `hw` with `sets`, its external streams
    driven by `traces` and its tensors' values from `weights`. `timing_only=None` computes
    values unless the tensors are large (`note` hears so). Raises InputError,
    SimulationError (a deadlock comes back in the result)."""
    from stepc.api import Deadlock
    config, warnings = load_hardware(hw, sets)
    for warning in warnings:
        _tell(warn, warning)
    report = checked_program(path, defines)
    if not report.ok:
        return Simulated(report)
    prog = report.program()
    values = None
    if weights:
        try:
            values, notes = prog.weight_values(weights, weights_prefix, allow_missing_weights)
        except InputError as e:
            raise WeightsError(weights, str(e)) from None
        for text in notes:
            _tell(note, f"--weights: {text}")
    if timing_only is None and not prog.values_by_default:
        timing_only = True
        _tell(note, f"timing-only run: the tensors hold {prog.tensor_bytes / 2**20:,.0f} MiB "
              "(--functional computes values anyway)")
    deadlock = None
    try:
        run = prog.simulate(hw=config, traces=traces, timing_only=bool(timing_only),
                            max_cycles=max_cycles, trace_ops=trace_ops, progress=progress,
                            values=values)
    except Deadlock as e:
        run, deadlock = e.run, e.report
    fifos = fifo_totals(report.compiled, config, run.dims, run.on_chip_bytes) \
        if fifo_bytes else None
    return Simulated(report, run, deadlock, fifos, prog, values)


def simulate_checked(report: CheckReport, hw: str | None = None,
                     sets: Mapping[str, Any] | None = None,
                     traces: Mapping[str, str] | None = None, timing_only: bool = True,
                     max_cycles: int | None = None) -> Simulated:
    """`simulate` of a program already checked (a front end's cached report): its errors
    raise StepError, a bad setting InputError, a failed run SimulationError."""
    from stepc.api import Deadlock
    prog = report.program()
    deadlock = None
    try:
        run = prog.simulate(hw=hw, set=sets, traces=traces, timing_only=timing_only,
                            max_cycles=max_cycles)
    except Deadlock as e:
        run, deadlock = e.run, e.report
    return Simulated(report, run, deadlock, program=prog)


def _tell(listener: Tell | None, text: str) -> None:
    if listener is not None:
        listener(text)
