"""stepc's Python API: load, cost, simulate and draw programs, sweep them, reproduce the
paper's figures. The CLI is built on it. Anything not exported here is private."""

from stepc.api.errors import Deadlock, InputError, SimulationError
from stepc.api.program import CheckReport, Program, Stream, check, compile, load
from stepc.api.results import Cost, Run
from stepc.api.study import SweepResults, reproduce, sweep
from stepc.diagnostics import Diagnostic, Note, Severity, StepError

__all__ = ["CheckReport", "Cost", "Deadlock", "Diagnostic", "InputError", "Note", "Program",
           "Run", "Severity", "SimulationError", "StepError", "Stream", "SweepResults",
           "check", "compile", "load", "reproduce", "sweep"]
