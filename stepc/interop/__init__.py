"""The reference toolchain's STeP IR (`step_perf_ir` ProgramGraph files): reading them as
`.step` programs (`stepc import`)."""

from stepc.interop.reader import GraphFileError, InteropError, InvalidGraphError
from stepc.interop.to_step import Imported, import_graph

__all__ = ["GraphFileError", "Imported", "InteropError", "InvalidGraphError", "import_graph"]
