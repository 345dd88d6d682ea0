"""The editor's use case `stepc fmt` (and the language server's formatting): a .step file's
text in canonical layout. Light: loads the parser, not the checker."""

from __future__ import annotations

from stepc.diagnostics import StepError
from stepc.grammar.format import FormatError, format_source
from stepc.grammar.parse import decode_source

__all__ = ["FormatError", "format_bytes", "format_text"]


def format_text(text: str, name: str) -> str:
    """`text` in canonical layout; raises StepError (a syntax error) or FormatError (the
    layout would change the program)."""
    return format_source(text, name)


def format_bytes(name: str, data: bytes) -> tuple[str, str]:
    """(the text, the text in canonical layout) of a file's bytes. Raises StepError (binary,
    not UTF-8, a syntax error) whose `sources` hold the file once it decodes; FormatError
    when the formatter would change the program."""
    sources = {}
    try:
        sources[name] = decode_source(name, data)
        text = data.decode("utf-8")
        return text, format_source(text, name)
    except StepError as e:
        e.sources = sources
        raise
