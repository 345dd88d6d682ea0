"""stepc's use cases: what each front end (the CLI, the MCP server, the language server)
asks of the toolchain, one module per command family.

A use case takes plain values (paths or source text, `-D` defines, a hardware preset or
file with `--set` strings, `--bind` values, trace paths) and returns one result object with
`to_dict()` (its JSON document) and `render(console)` (its text report, drawn by
`stepc.report`). Bad input raises the coded errors of `stepc.api` (`InputError` with its
diagnostics, `SimulationError`, `Deadlock`) or `stepc.diagnostics.StepError`; a program
with errors comes back as a result holding its diagnostics. What stays in a front end is
its own concern: parsing arguments, exit codes, output paths, the protocol."""

from stepc.api import Deadlock, InputError, SimulationError
from stepc.diagnostics import StepError

# the coded errors a use case raises, for the front ends to map to exit codes
__all__ = ["Deadlock", "InputError", "SimulationError", "StepError"]
