"""The `stepc` command line: one module per command family (program, sim, sweep, tune,
torch, interop, editor) over the shared helpers of `common`; each renders what the Python
API (`stepc.api`) returns. `run` is the console entry point."""

from stepc.cli.group import main, run

__all__ = ["main", "run"]
