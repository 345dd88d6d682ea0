"""How a message names an argument the user gave: as a flag on the command line (`--hw
paper_eval`, `--trace routing`), as a keyword in the Python API and the MCP tools, whose
arguments have the API's names (`hw='paper_eval'`, `traces['routing']`). The command line
sets its spelling for the command it runs; everything else gets the keywords."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

# API keyword -> command-line flag
FLAGS = {"hw": "--hw", "out": "--out", "traces": "--trace", "set": "--set", "bind": "--bind",
         "grid": "--grid", "params": "-D", "resume": "--resume", "sampler": "--sampler"}
# mappings, of which a message names one entry (`values` is the API's alone)
ENTRIES = frozenset({"traces", "set", "bind", "grid", "params", "values"})

_ON_COMMAND_LINE = contextvars.ContextVar("stepc_on_command_line", default=False)


@contextlib.contextmanager
def command_line() -> Iterator[None]:
    """Name arguments as flags while a command runs."""
    token = _ON_COMMAND_LINE.set(True)
    try:
        yield
    finally:
        _ON_COMMAND_LINE.reset(token)


def given(arg: str, text: str | None = None) -> str:
    """Argument `arg` (an API keyword), or the value or entry `text` of it: `--hw
    paper_eval` / `hw='paper_eval'`, `--trace routing` / `traces['routing']`."""
    if _ON_COMMAND_LINE.get() and arg in FLAGS:
        return FLAGS[arg] if text is None else f"{FLAGS[arg]} {text}"
    if text is None:
        return f"{arg}="
    if arg == "set":  # the API's `set` maps a key to its value; the flag takes KEY=VALUE
        text = text.partition("=")[0].strip()
    return f"{arg}[{text!r}]" if arg in ENTRIES else f"{arg}={text!r}"


def label(arg: str) -> str:
    """The argument's name alone, to head a message about its value: `--out` / `out`."""
    return FLAGS[arg] if _ON_COMMAND_LINE.get() and arg in FLAGS else arg


def switch(arg: str) -> str:
    """How to turn on a boolean argument: `--resume` / `resume=True`."""
    return FLAGS[arg] if _ON_COMMAND_LINE.get() and arg in FLAGS else f"{arg}=True"
