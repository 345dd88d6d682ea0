"""Elaboration's size limits, and the two ways it stops: `Abort` one statement (its error
already recorded) or `Fatal` for the whole program (a limit was passed)."""

MAX_NODES = 50_000  # operator instances of one program
MAX_CONSUMERS = 65_536  # outputs of one Partition, Parallelize or Broadcast
MAX_LOOP = 100_000  # iterations of one `for` loop
MAX_INDEX = MAX_LOOP  # elements of an array built by indexed assignments `a[i] = ...`


class Abort(Exception):
    """Aborts evaluating one statement after its diagnostic was recorded."""


class Fatal(Exception):
    """Stops elaboration altogether (a size limit was passed)."""
